//! A webhook receiver for `askloop-bench http --webhooks`: an axum server on a loopback port
//! that answers 204 to every POST and counts deliveries by their `webhook-id` (Standard
//! Webhooks' header; signatures are the tests' business, not the benchmark's).

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use serde_json::{Map, Value, json};
use tokio::sync::Mutex;

/// The endpoint's secret (Standard Webhooks' `whsec_` + base64 of 24 bytes).
pub(crate) const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// How long the report waits for the cycles' events after the cycles ended.
const DRAIN_LIMIT: Duration = Duration::from_secs(120);

/// What the receiver saw.
#[derive(Default)]
struct Seen {
    received: AtomicUsize,
    duplicates: AtomicUsize,
    ids: Mutex<HashSet<String>>,
}

/// A running receiver.
pub(crate) struct Receiver {
    /// Its URL (`http://127.0.0.1:PORT/hook`).
    pub(crate) url: String,
    seen: Arc<Seen>,
}

impl Receiver {
    /// Starts the receiver on a free loopback port, served on this runtime.
    pub(crate) async fn start() -> anyhow::Result<Self> {
        let seen = Arc::new(Seen::default());
        let app = Router::new()
            .route("/hook", post(receive))
            .with_state(Arc::clone(&seen));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .context("cannot bind the webhook receiver")?;
        let url = format!("http://{}/hook", listener.local_addr()?);
        tokio::spawn(async move {
            if let Err(error) = axum::serve(listener, app).await {
                eprintln!("webhook receiver stopped: {error}");
            }
        });
        Ok(Self { url, seen })
    }

    /// Deliveries received so far (each distinct `webhook-id` once).
    pub(crate) fn received(&self) -> usize {
        self.seen.received.load(Ordering::Relaxed)
    }

    /// The report's fields: deliveries received since `before` over `seconds`, then waits (at
    /// most two minutes) until `expected` events in all have arrived.
    pub(crate) async fn report(
        &self,
        before: usize,
        seconds: f64,
        expected: usize,
    ) -> Map<String, Value> {
        let during = self.received().saturating_sub(before);
        let ended = Instant::now();
        let mut drain = None;
        while ended.elapsed() < DRAIN_LIMIT {
            if self.received() >= expected {
                drain = Some(crate::round(ended.elapsed().as_secs_f64(), 2));
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let fields = json!({
            "webhook_deliveries": during,
            "webhook_deliveries_per_s": crate::round(during as f64 / seconds, 2),
            "webhook_events": expected,
            "webhook_received_total": self.received(),
            "webhook_drain_s": drain,
            "webhook_duplicates": self.seen.duplicates.load(Ordering::Relaxed),
        });
        match fields {
            Value::Object(map) => map,
            _ => Map::new(),
        }
    }
}

/// One delivery: counted once per `webhook-id`, answered 204.
async fn receive(State(seen): State<Arc<Seen>>, headers: HeaderMap) -> StatusCode {
    let id = headers
        .get("webhook-id")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    if seen.ids.lock().await.insert(id) {
        seen.received.fetch_add(1, Ordering::Relaxed);
    } else {
        seen.duplicates.fetch_add(1, Ordering::Relaxed);
    }
    StatusCode::NO_CONTENT
}
