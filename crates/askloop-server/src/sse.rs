//! SSE responses: one `data: <chunk JSON>` event per chunk, then `data: [DONE]`, with
//! `: keep-alive` comments every 15 s. Each ends early when its `until` future completes (the
//! server's shutdown, see [`crate::closing`]).

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt};

/// One server-sent event, as the OpenAPI document describes a `text/event-stream` body (an
/// event per item, the way schemathesis and OpenAPI 3.2's `itemSchema` read it): `data` holds
/// one chunk's JSON (docs/wire-format.md) or `[DONE]`.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)] // Only described, never built: the events are written by `Event::data`.
pub(crate) struct SseEvent {
    /// The chunk JSON, on one line, or `[DONE]`.
    data: String,
}

/// How often an idle SSE stream sends a keep-alive comment.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The SSE response of a chunk stream, ending with `[DONE]` (or when `until` completes).
pub(crate) fn chunks_response(
    chunks: impl Stream<Item = Arc<str>> + Send + 'static,
    until: impl Future<Output = ()> + Send + 'static,
) -> Response {
    let events = chunks
        .map(|chunk| Event::default().data(&*chunk))
        .chain(futures::stream::once(async {
            Event::default().data("[DONE]")
        }))
        .map(Ok::<_, Infallible>);
    events_response(events, until)
}

/// The SSE response of events, with keep-alive comments, ending when `events` or `until` does.
pub(crate) fn events_response(
    events: impl Stream<Item = Result<Event, Infallible>> + Send + 'static,
    until: impl Future<Output = ()> + Send + 'static,
) -> Response {
    Sse::new(events.take_until(until))
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE).text("keep-alive"))
        .into_response()
}
