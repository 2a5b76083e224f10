//! Retries are announced to a person in one line each (issue 7, fault 10): one WARN event of
//! target `askloop::retry` per retry, and nothing else at WARN or above.
//!
//! A test binary of its own, one test, one thread: `tracing`'s per-callsite interest cache races
//! with a thread-scoped subscriber (`set_default`) when another test thread registers the same
//! callsite at that moment (the callsite is then cached as uninteresting to every subscriber, and
//! the warning is never seen). Alone in its process, nothing registers callsites concurrently.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fmt::Debug;
use std::sync::{Arc, Mutex};

use askloop_core::model::ModelSettings;
use askloop_providers::RETRY_TARGET;
use tracing::field::{Field, Visit};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt};

#[path = "it/support.rs"]
#[allow(dead_code)]
mod support;

use support::{OPENAI, collect, request, text_of};

/// One event: level, target, message.
type Seen = (tracing::Level, String, String);

/// A layer that keeps every event.
struct Collect(Arc<Mutex<Vec<Seen>>>);

impl<S: tracing::Subscriber> Layer<S> for Collect {
    fn on_event(&self, event: &tracing::Event<'_>, _context: Context<'_, S>) {
        struct Message(String);
        impl Visit for Message {
            fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
                if field.name() == "message" {
                    self.0 = format!("{value:?}");
                }
            }
        }
        let mut message = Message(String::new());
        event.record(&mut message);
        let metadata = event.metadata();
        self.0
            .lock()
            .unwrap()
            .push((*metadata.level(), metadata.target().to_owned(), message.0));
    }
}

#[tokio::test]
async fn issue7_fault10_a_retry_is_one_human_warning() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let subscriber = tracing_subscriber::registry().with(Collect(seen.clone()));
    let _guard = tracing::subscriber::set_default(subscriber);

    let wire = &OPENAI;
    let (status, body) = wire.fixtures.error_retryable;
    let server = wire
        .server(vec![
            wire.error(status, body)
                .insert_header("retry-after", "1e20"),
            wire.ok(wire.fixtures.text),
        ])
        .await;
    let model = wire.model(&server).await;
    let (events, error) = collect(model.as_ref(), request(ModelSettings::default())).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(text_of(&events), "Hello! How can I help you today?");

    let seen = seen.lock().unwrap();
    let warnings: Vec<&Seen> = seen
        .iter()
        .filter(|(level, target, _)| *level <= tracing::Level::WARN && !target.starts_with("genai"))
        .collect();
    assert_eq!(warnings.len(), 1, "{seen:#?}");
    let (level, target, message) = warnings[0];
    assert_eq!(
        (*level, target.as_str()),
        (tracing::Level::WARN, RETRY_TARGET)
    );
    // The fast test policy caps every wait (here the server's `1e20` seconds) at 5 ms.
    assert_eq!(
        message,
        "model openai:gpt-4o-mini: rate limited (HTTP 429); retrying in 5 ms (attempt 2 of 3)"
    );
}
