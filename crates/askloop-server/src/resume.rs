//! What every route that answers a waiting run shares: the claim of the run a route checked
//! ([`claim`]), its stream as the response ([`stream_claim`], [`run_response`]), and a refused
//! resume as an `ApiError` ([`resume_refused`]).

use std::time::Instant;

use askloop_core::store::StoredRun;
use askloop_core::{Agent, AgentStream, Respond, ResumeError};
use axum::response::Response;
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::keys::Caller;
use crate::metrics::StreamKind;
use crate::sse;
use crate::state::AppState;

/// The responses of `caller` to the calls of `stored`: the claim names the exact run and
/// starts from the copy the route just checked (one store read per resume, not two); the audit
/// records the caller.
pub(crate) fn claim<'agent>(
    agent: &'agent Agent,
    stored: &StoredRun,
    caller: &Caller,
) -> Respond<'agent> {
    agent
        .respond(stored.state.key())
        .loaded(stored.clone())
        .by(caller.by())
}

/// Sends the responses of [`claim`]: the run from the answered calls on (SSE, driven by the
/// run hub; its duration measured from `started`), or the refusal ([`resume_refused`]).
pub(crate) async fn stream_claim(
    state: &AppState,
    respond: Respond<'_>,
    stored: StoredRun,
    started: Instant,
) -> Result<Response, ApiError> {
    let run = respond
        .stream()
        .await
        .map_err(|error| resume_refused(error, &stored))?;
    Ok(run_response(
        state,
        run,
        stored,
        StreamKind::Resume(started),
    ))
}

/// The SSE response of a claimed run's stream, driven by the run hub, which keeps the state
/// `stored` the claim started from (a client re-attaching is told the whole turn).
pub(crate) fn run_response(
    state: &AppState,
    run: AgentStream,
    stored: StoredRun,
    kind: StreamKind,
) -> Response {
    let agent_id = stored.state.agent_id().clone();
    sse::chunks_response(
        state.hub.spawn(run, &agent_id, kind, Some(stored.state)),
        state.closing.grace_over(),
    )
}

/// A refused resume as an `ApiError`; an invalid answer's details also list the question's
/// allowed labels when it has options.
pub(crate) fn resume_refused(error: ResumeError, stored: &StoredRun) -> ApiError {
    let labels = match &error {
        ResumeError::InvalidAnswer { tool_call_id, .. } => {
            allowed_labels(stored, tool_call_id.as_str())
        }
        _ => None,
    };
    let api: ApiError = error.into();
    match labels {
        Some(labels) => api.add_detail("allowed", json!(labels)),
        None => api,
    }
}

/// The labels of the options of the pending call `tool_call_id` asks, if it has any.
fn allowed_labels(stored: &StoredRun, tool_call_id: &str) -> Option<Vec<String>> {
    let pending = stored.state.pending_tool_calls();
    let call = pending
        .iter()
        .find(|call| call.tool_call_id.as_str() == tool_call_id)?;
    let options = call.suspend_payload.get("options")?.as_array()?;
    let labels: Vec<String> = options
        .iter()
        .filter_map(|option| option.get("label").and_then(Value::as_str))
        .map(str::to_owned)
        .collect();
    (!labels.is_empty()).then_some(labels)
}
