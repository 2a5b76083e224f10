//! Issue 31, connections over a real socket: slow request heads and bodies are cut off, idle
//! keep-alive connections are closed, a long SSE stream is not, connections beyond the cap
//! wait; the Host rule knows the address a connection came in on; duplicate keys stop `serve`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use askloop_core::RunStore;
use askloop_server::{ApiKey, KeyError, Limits, Server, ServerError};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::*;

/// A server serving on a real socket until dropped.
struct Served {
    address: SocketAddr,
    hold: Hold,
    store: Arc<dyn RunStore>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    serving: Option<tokio::task::JoinHandle<Result<(), ServerError>>>,
    _place: Place,
}

impl Served {
    /// `Server::serve` on `bind` (port 0) with these limits.
    async fn start(limits: Limits, bind: &str) -> Self {
        let place = Place::new(Backend::Sqlite).await;
        let store = place.open().await;
        let hold = Hold::default();
        let server = Server::builder(Arc::new(agents(&store, &hold)), store.clone())
            .limits(limits)
            .build();
        let listener = tokio::net::TcpListener::bind(bind).await.unwrap();
        let address = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(server.serve(listener, async {
            let _ = stopped.await;
        }));
        Self {
            address,
            hold,
            store,
            stop: Some(stop),
            serving: Some(serving),
            _place: place,
        }
    }

    fn base(&self) -> String {
        format!("http://{}", self.address)
    }

    async fn connect(&self) -> TcpStream {
        TcpStream::connect(self.address).await.unwrap()
    }

    /// Stops the server and waits for its graceful shutdown.
    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(serving) = self.serving.take() {
            tokio::time::timeout(Duration::from_secs(15), serving)
                .await
                .expect("the shutdown took too long")
                .unwrap()
                .unwrap();
        }
    }
}

/// Reads until the peer closes the connection, at most `within`; what was read, or `None` if
/// it was still open then.
async fn read_to_close(stream: &mut TcpStream, within: Duration) -> Option<Vec<u8>> {
    let mut read = Vec::new();
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let mut buf = [0u8; 4096];
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(read),
            Ok(Ok(count)) => read.extend_from_slice(&buf[..count]),
        }
    }
}

/// Reads one response whose body is `Content-Length` long, at most `within`.
async fn read_response(stream: &mut TcpStream, within: Duration) -> Option<String> {
    let mut read = Vec::new();
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let text = String::from_utf8_lossy(&read).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|line| {
                    let (name, value) = line.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if read.len() >= end + 4 + length {
                return Some(text);
            }
        }
        let mut buf = [0u8; 4096];
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) | Ok(Ok(0)) | Ok(Err(_)) => return None,
            Ok(Ok(count)) => read.extend_from_slice(&buf[..count]),
        }
    }
}

const HEALTHZ: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue31_a_slow_request_head_is_cut_off() {
    let limits = Limits::default()
        .header_read_timeout(Duration::from_millis(300))
        .idle_timeout(Duration::from_secs(60));
    let served = Served::start(limits, "127.0.0.1:0").await;
    // Half a head, then nothing: closed once the header timeout has passed.
    let mut slow = served.connect().await;
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n")
        .await
        .unwrap();
    let started = Instant::now();
    let read = read_to_close(&mut slow, Duration::from_secs(5)).await;
    assert_eq!(
        read.as_deref(),
        Some(&b""[..]),
        "the slow head was waited for"
    );
    assert!(started.elapsed() >= Duration::from_millis(200));
    // A connection that sends nothing at all: the same.
    let mut silent = served.connect().await;
    assert!(
        read_to_close(&mut silent, Duration::from_secs(5))
            .await
            .is_some(),
        "a silent connection was held"
    );
    // A head that arrives in time is answered.
    let mut quick = served.connect().await;
    quick.write_all(HEALTHZ).await.unwrap();
    let response = read_response(&mut quick, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue31_a_stalled_request_body_is_answered_408() {
    let limits = Limits::default().body_read_timeout(Duration::from_millis(300));
    let served = Served::start(limits, "127.0.0.1:0").await;
    // A streaming route (no request timeout): its body stalls after a few bytes.
    for path in ["/api/agents/assistant/stream", "/api/agents/assistant/chat"] {
        let mut stalled = served.connect().await;
        stalled
            .write_all(
                format!(
                    "POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
                     Content-Length: 100\r\n\r\n{{\"messages\":"
                )
                .as_bytes(),
            )
            .await
            .unwrap();
        let started = Instant::now();
        let read = read_to_close(&mut stalled, Duration::from_secs(5))
            .await
            .unwrap_or_else(|| panic!("{path}: the stalled body was waited for"));
        let text = String::from_utf8(read).unwrap();
        assert!(text.starts_with("HTTP/1.1 408"), "{path}: {text}");
        let body: Value = serde_json::from_str(text.split("\r\n\r\n").nth(1).unwrap()).unwrap();
        assert_eq!(body["code"], "timeout", "{body}");
        assert!(started.elapsed() >= Duration::from_millis(200));
    }
    let runs = served
        .store
        .list_runs(&askloop_core::store::RunFilter::new())
        .await
        .unwrap();
    assert!(runs.runs.is_empty(), "a cut request started a run");
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue31_an_idle_connection_is_closed_but_a_long_stream_is_not() {
    let limits = Limits::default()
        .header_read_timeout(Duration::from_millis(300))
        .idle_timeout(Duration::from_millis(300))
        .body_read_timeout(Duration::from_millis(300));
    let served = Served::start(limits, "127.0.0.1:0").await;
    // Keep-alive: answered, then closed once idle for the idle timeout.
    let mut idle = served.connect().await;
    idle.write_all(HEALTHZ).await.unwrap();
    let response = read_response(&mut idle, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(
        read_to_close(&mut idle, Duration::from_secs(5))
            .await
            .is_some(),
        "an idle keep-alive connection was held"
    );

    // A run's SSE stream that stays open for many times every timeout is not cut.
    let client = reqwest::Client::new();
    let response = client
        .post(format!("{}/api/agents/waiter/stream", served.base()))
        .json(&json!({"messages": "hold the line"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.bytes_stream();
    let reading = tokio::spawn(async move {
        let mut text = String::new();
        while let Some(bytes) = body.next().await {
            text.push_str(std::str::from_utf8(&bytes.unwrap()).unwrap());
        }
        text
    });
    tokio::time::sleep(Duration::from_millis(2000)).await;
    assert!(!reading.is_finished(), "the stream ended early");
    served.hold.release.notify_one();
    let text = tokio::time::timeout(Duration::from_secs(10), reading)
        .await
        .expect("the released stream did not end")
        .unwrap();
    assert_eq!(types(&frames(&text)).last(), Some(&"finish"), "{text}");
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue31_connections_beyond_the_cap_wait_for_one_to_close() {
    let limits = Limits::default()
        .max_connections(2)
        .header_read_timeout(Duration::from_secs(30))
        .idle_timeout(Duration::from_secs(30));
    let served = Served::start(limits, "127.0.0.1:0").await;
    let first = served.connect().await;
    let mut second = served.connect().await;
    // The second is served (the cap is two)...
    second.write_all(HEALTHZ).await.unwrap();
    let response = read_response(&mut second, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    // ... a third waits while both stay open ...
    let mut third = served.connect().await;
    third.write_all(HEALTHZ).await.unwrap();
    assert_eq!(
        read_response(&mut third, Duration::from_millis(700)).await,
        None,
        "a connection beyond the cap was served"
    );
    // ... and is served once one closes.
    drop(first);
    let response = read_response(&mut third, Duration::from_secs(5))
        .await
        .expect("the waiting connection was not served after one closed");
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    drop(second);
    drop(third);
    // The open connections gauge comes back down (the scrape's own connection left).
    let client = reqwest::Client::new();
    eventually("askloop_http_connections back to 1", || async {
        let text = client
            .get(format!("{}/metrics", served.base()))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        text.lines()
            .any(|line| line == "askloop_http_connections 1")
    })
    .await;
    drop(client);
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue31_the_address_a_connection_came_in_on_is_an_allowed_host() {
    // 127.0.0.2 is loopback but not one of the loopback names: it is allowed as the address
    // this connection reached, as a LAN address would be for a server bound to 0.0.0.0.
    let served = Served::start(Limits::default(), "127.0.0.2:0").await;
    let client = reqwest::Client::new();
    let response = client
        .get(format!("{}/api/agents", served.base()))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    for host in ["127.0.0.3", "evil.example", "127.0.0.2.nip.io"] {
        let mut stream = served.connect().await;
        stream
            .write_all(format!("GET /api/agents HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let response = read_response(&mut stream, Duration::from_secs(5))
            .await
            .unwrap();
        assert!(response.starts_with("HTTP/1.1 421"), "{host}: {response}");
        assert!(response.contains("host_not_allowed"), "{response}");
    }
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue31_serve_refuses_one_secret_for_two_tenants() {
    let place = Place::new(Backend::Sqlite).await;
    let store = place.open().await;
    let hold = Hold::default();
    let secret = ApiKey::new_secret();
    let server = Server::builder(Arc::new(agents(&store, &hold)), store.clone())
        .keys(vec![
            ApiKey::from_secret(&secret, "alice".into()),
            ApiKey::from_secret(&secret, "bob".into()),
        ])
        .build();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let error = tokio::time::timeout(
        Duration::from_secs(5),
        server.serve(listener, std::future::pending()),
    )
    .await
    .expect("serve served with one secret for two tenants")
    .unwrap_err();
    match error {
        ServerError::Keys(KeyError::DuplicateSecret {
            first,
            second,
            first_resource,
            second_resource,
        }) => {
            assert_eq!((first, second), (0, 1));
            assert_eq!(
                (first_resource.as_str(), second_resource.as_str()),
                ("alice", "bob")
            );
        }
        other => panic!("{other:?}"),
    }
}
