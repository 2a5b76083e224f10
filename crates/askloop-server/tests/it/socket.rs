//! One test over a real socket: `Server::serve` on port 0, driven by reqwest, and its graceful
//! shutdown with an endless stream open.

use askloop_server::Server;
use futures::StreamExt;
use serde_json::json;

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_socket_streams_sse_and_shuts_down() {
    let place = Place::new(Backend::Sqlite).await;
    let store = place.open().await;
    let hold = Hold::default();
    let server = Server::builder(std::sync::Arc::new(agents(&store, &hold)), store.clone()).build();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server.serve(listener, async {
        let _ = stopped.await;
    }));
    let client = reqwest::Client::new();
    let base = format!("http://{address}");
    let response = client
        .post(format!("{base}/api/agents/assistant/stream"))
        .json(&json!({"messages": "Summarize my project"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut body = response.bytes_stream();
    let mut text = String::new();
    while let Some(bytes) = body.next().await {
        text.push_str(std::str::from_utf8(&bytes.unwrap()).unwrap());
    }
    let chunks = frames(&text);
    assert_eq!(types(&chunks).last(), Some(&"tool-call-suspended"));
    let run_id = chunks[0]["runId"].as_str().unwrap();
    let resumed = client
        .post(format!("{base}/api/agents/assistant/resume-stream"))
        .json(&json!({"runId": run_id, "resumeData": "main"}))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(types(&frames(&resumed)).last(), Some(&"finish"));
    let health = client
        .get(format!("{base}/healthz"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(health, "ok");

    // An open page listens to the inbox's events, an endless stream: the shutdown ends it
    // instead of waiting for it (SIGTERM used to wait until the page went away).
    let events = client
        .get(format!("{base}/api/inbox/events"))
        .send()
        .await
        .unwrap();
    assert_eq!(events.status(), 200);
    let listening = tokio::spawn(async move {
        let mut body = events.bytes_stream();
        while let Some(bytes) = body.next().await {
            if bytes.is_err() {
                break;
            }
        }
    });
    stop.send(()).unwrap();
    let started = std::time::Instant::now();
    tokio::time::timeout(std::time::Duration::from_secs(5), serving)
        .await
        .expect("the shutdown waited for an open event stream")
        .unwrap()
        .unwrap();
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    tokio::time::timeout(std::time::Duration::from_secs(5), listening)
        .await
        .expect("the event stream did not end")
        .unwrap();
}
