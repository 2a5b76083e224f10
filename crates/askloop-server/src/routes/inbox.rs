//! `GET /api/inbox/events`: the inbox's live events (questions raised and resolved, from
//! [`crate::inbox`]) as SSE, filtered to what the caller may see.

use std::convert::Infallible;

use askloop_core::store::ResourceFilter;
use axum::response::Response;
use axum::response::sse::Event;
use futures::StreamExt;

use crate::error::{ApiError, ErrorBody};
use crate::inbox::resync_json;
use crate::keys::Caller;
use crate::sse;
use crate::state::State;

/// `GET /api/inbox/events`: SSE of questions raised and resolved, for the caller's runs, across
/// every server on the store. A listener that falls more than `inbox::BUFFER` events behind
/// gets `{"type":"resync"}` and then the questions pending now as `question-raised` events
/// (never a silent gap).
#[utoipa::path(get, path = "/api/inbox/events", tag = "runs",
    responses(
        (status = 200, description = "SSE: `data: {\"type\":\"question-raised\"|\"question-resolved\", runId, toolCallId, agentId, …}`; first the questions pending now, as raised. A listener that fell behind (more than 1,024 events unread) gets `data: {\"type\":\"resync\"}`: it forgets every question it shows, and the questions pending now follow as raised", content_type = "text/event-stream", body = inline(crate::sse::SseEvent)),
        (status = 401, description = "No or bad API key", body = ErrorBody),
    ))]
pub(crate) async fn inbox_events(state: State, caller: Caller) -> Result<Response, ApiError> {
    let mut receiver = state.inbox.subscribe().await;
    // A keyed caller reads only its resource's questions.
    let resource = match caller.resource() {
        Some(resource) => ResourceFilter::Is(resource.clone()),
        None => ResourceFilter::Any,
    };
    let app = state.clone();
    let events = async_stream::stream! {
        loop {
            // The questions pending now, read after the receiver was taken (see
            // `Inbox::subscribe`).
            let now = app.inbox.pending_now(resource.clone());
            futures::pin_mut!(now);
            while let Some(event) = now.next().await {
                if caller.may_see(event.resource_id.as_ref(), &event.agent_id) {
                    yield event.to_json();
                }
            }
            loop {
                match receiver.recv().await {
                    Ok(event) => {
                        if caller.may_see(event.resource_id.as_ref(), &event.agent_id) {
                            yield event.to_json();
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(skipped)) => {
                        // Never a silent gap: start again from the questions pending now.
                        tracing::info!(skipped, "inbox listener lagged; resync");
                        receiver = app.inbox.resubscribe();
                        yield resync_json();
                        break;
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                }
            }
        }
    }
    .map(|event| Ok::<_, Infallible>(Event::default().data(event.to_string())));
    Ok(sse::events_response(events, state.closing.begun()))
}
