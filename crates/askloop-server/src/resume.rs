//! What every route that answers a waiting run shares: the claim of the run a route checked
//! ([`claim`]), its stream as the response ([`stream_claim`], [`run_response`]), a refused
//! resume as an `ApiError` ([`resume_refused`]), and the one rule for repeats ([`repeat_note`]):
//! the answer a call already has, given again (as it was, by a label's number or in another
//! case: [`askloop_core::answer::repeats_recorded_answer`], the CLI's rule too), is a harmless
//! 200 with a note and resumes nothing; a different answer stays 409 `already_answered`.

use std::time::Instant;

use askloop_core::answer::repeats_recorded_answer;
use askloop_core::store::StoredRun;
use askloop_core::{Agent, AgentStream, Respond, ResumeError, ToolCallId};
use axum::Json;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::api::RepeatNote;
use crate::error::ApiError;
use crate::keys::Caller;
use crate::metrics::StreamKind;
use crate::sse;
use crate::state::AppState;

/// The responses of `caller` to the calls of `stored`, through `route` (its template, e.g.
/// `POST /api/agents/{agentId}/approve-tool-call`): the claim names the exact run and starts
/// from the copy the route just checked (one store read per resume, not two); the caller acts
/// as its [`Caller::actor`], which the claim checks against the call's approver policy and the
/// audit records.
pub(crate) fn claim<'agent>(
    agent: &'agent Agent,
    stored: &StoredRun,
    caller: &Caller,
    route: &str,
) -> Respond<'agent> {
    agent
        .respond(stored.state.key())
        .loaded(stored.clone())
        .actor(caller.actor(route))
}

/// The note of a harmless repeat: when every one of `answers` (a call and the answer given to
/// it; at least one) goes to a call of `stored` that is no longer pending and already has that
/// answer ([`repeats_recorded_answer`]). `None` otherwise: the claim then applies the answers or
/// refuses them.
pub(crate) fn repeat_note(
    stored: &StoredRun,
    answers: &[(ToolCallId, &Value)],
) -> Option<Response> {
    let state = &stored.state;
    let pending = state.pending_tool_calls();
    let repeats = !answers.is_empty()
        && answers.iter().all(|(id, answer)| {
            !pending.iter().any(|call| &call.tool_call_id == id)
                && repeats_recorded_answer(state, id, answer)
        });
    repeats.then(|| note_response(stored, answers.iter().map(|(id, _)| id.clone()).collect()))
}

/// The 200 of a harmless repeat of calls `ids` of `stored` ([`RepeatNote`]).
fn note_response(stored: &StoredRun, ids: Vec<ToolCallId>) -> Response {
    let run_id = stored.state.run_id().as_str();
    let named: Vec<&str> = ids.iter().map(ToolCallId::as_str).collect();
    let note = format!(
        "tool call {} of run {run_id} was already answered with this answer; nothing changed",
        named.join(", ")
    );
    tracing::info!(run_id = %run_id, calls = %named.join(","), "a repeated answer: nothing changed");
    Json(RepeatNote {
        note,
        run_id: run_id.to_owned(),
        tool_call_ids: named.iter().map(|id| (*id).to_owned()).collect(),
        status: stored.state.status().to_string(),
    })
    .into_response()
}

/// Sends the responses of [`claim`]: the run from the answered calls on (SSE, driven by the
/// run hub; its duration measured from `started`), or the refusal ([`resume_refused`]). When
/// the claim is `lone_answer` (one answer, no approval) and is refused because that very answer
/// is being applied already (another request's, not recorded yet), it is the harmless repeat's
/// 200 too.
pub(crate) async fn stream_claim(
    state: &AppState,
    respond: Respond<'_>,
    stored: StoredRun,
    started: Instant,
    lone_answer: bool,
) -> Result<Response, ApiError> {
    let run = match respond.stream().await {
        Ok(run) => run,
        Err(ResumeError::AlreadyAnswered {
            tool_call_id,
            same_answer: true,
            ..
        }) if lone_answer => return Ok(note_response(&stored, vec![tool_call_id])),
        Err(error) => return Err(resume_refused(error, &stored)),
    };
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

/// Refuses a route that would answer, approve, decline, continue or fork a sub-agent's child
/// run directly: 409 `child_run`, naming the root run (`details.rootRunId`), through which the
/// child's waiting calls are answered (as `PARENT_CALL~CHILD_CALL`) and the tree is continued.
/// Checked before the run's agent is looked up, so the answer is the same on a server that does
/// not define the sub-agent; core's claim refuses the same.
pub(crate) fn refuse_child_run(stored: &StoredRun) -> Result<(), ApiError> {
    match stored.state.parent() {
        Some(parent) => Err(ResumeError::ChildRun {
            run_id: stored.state.run_id().clone(),
            root_run_id: parent.root_run_id.clone(),
        }
        .into()),
        None => Ok(()),
    }
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
