//! askloop's own routes of runs (`/api/runs…`).

use askloop_core::store::{ListedRun, ResourceFilter, RunCursor, RunFilter, StoredRun};
use askloop_core::{AgentId, RunStatus, ToolCallId};
use axum::Json;
use axum::response::Response;

use crate::access::{agent_of_run, listing_scope, may_use_agent, visible_run};
use crate::api::{
    CancelledBody, ForkRequest, ResponsesRequest, RunDetail, RunList, RunQuery, RunSummaryBody,
    RunsQuery,
};
use crate::checks::{check_answer, check_edited_args, check_id, check_text, check_tool_call_id};
use crate::error::{ApiError, ErrorBody};
use crate::extract::{Body, Params, PathParam};
use crate::keys::Caller;
use crate::listing::all_runs;
use crate::metrics::StreamKind;
use crate::replay::{self, Follow};
use crate::resume::{
    claim, refuse_child_run, repeat_note, resume_refused, run_response, stream_claim,
};
use crate::sse;
use crate::state::State;

/// Default and largest page of `GET /api/runs`.
const DEFAULT_LIMIT: u32 = 50;
const MAX_LIMIT: u32 = 200;

/// `GET /api/runs`: runs newest first, cursor-paginated; with `status=suspended`, the inbox of
/// pending questions. Only top-level runs (what a person started, whose waiting calls include
/// their sub-agents' as `PARENT_CALL~CHILD_CALL`), unless `parentRunId` asks for a run's child
/// runs.
#[utoipa::path(get, path = "/api/runs", tag = "runs",
    params(RunsQuery),
    responses(
        (status = 200, description = "A page of runs", body = RunList),
        (status = 400, description = "bad_request (status, cursor, limit)", body = ErrorBody),
        (status = 401, description = "No or bad API key", body = ErrorBody),
        (status = 403, description = "The key may not use this agent", body = ErrorBody),
    ))]
pub(crate) async fn list_runs(
    state: State,
    caller: Caller,
    Params(query): Params<RunsQuery>,
) -> Result<Json<RunList>, ApiError> {
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
    if limit == 0 || limit > MAX_LIMIT {
        return Err(ApiError::bad_request(format!(
            "limit must be 1 to {MAX_LIMIT}"
        )));
    }
    let mut filter = RunFilter::new().limit(limit as usize);
    if let Some(status) = &query.status {
        let status: RunStatus =
            status
                .parse()
                .map_err(|error: askloop_core::UnknownRunStatus| {
                    ApiError::bad_request(error.to_string())
                })?;
        filter = filter.status(status);
    }
    if let Some(agent) = &query.agent_id {
        check_id("agentId", agent)?;
        let agent = AgentId::new(agent.as_str());
        may_use_agent(&caller, &agent)?;
        filter = filter.agent(agent);
    }
    if let Some(thread) = &query.thread_id {
        check_id("threadId", thread)?;
        filter = filter.thread(thread.as_str());
    }
    if let Some(original) = &query.forked_from {
        check_id("forkedFrom", original)?;
        filter = filter.forked_from(original.as_str());
    }
    // A sub-agent's child run shows under its parent; by default only what a person started.
    filter = match &query.parent_run_id {
        Some(parent) => {
            check_id("parentRunId", parent)?;
            filter.children_of(parent.as_str())
        }
        None => filter.top_level(),
    };
    let Some(mut filter) = listing_scope(filter, &caller, query.resource_id.as_deref())? else {
        return Ok(Json(RunList {
            runs: Vec::new(),
            next_cursor: None,
        }));
    };
    if let Some(cursor) = &query.cursor {
        let cursor: RunCursor =
            cursor
                .parse()
                .map_err(|error: askloop_core::store::InvalidCursor| {
                    ApiError::bad_request(error.to_string())
                })?;
        filter = filter.after(cursor);
    }
    let page = state.store.list_runs(&filter).await?;
    let runs = page
        .runs
        .iter()
        .filter_map(ListedRun::summary)
        .filter(|summary| caller.may_see(summary.resource_id.as_ref(), &summary.agent_id))
        .map(RunSummaryBody::of)
        .collect();
    Ok(Json(RunList {
        runs,
        next_cursor: page.next_cursor.map(|cursor| cursor.to_string()),
    }))
}

/// `GET /api/runs/{runId}`: a run's summary, pending calls and messages, and the child runs its
/// sub-agents started (`children`; a child run's own `parentRunId`, `parentToolCallId` and
/// `rootRunId` name where it sits in its tree).
#[utoipa::path(get, path = "/api/runs/{runId}", tag = "runs",
    params(("runId" = String, Path, description = "The run"), RunQuery),
    responses(
        (status = 200, description = "The run", body = RunDetail),
        (status = 400, description = "bad_request (resourceId)", body = ErrorBody),
        (status = 401, description = "No or bad API key", body = ErrorBody),
        (status = 404, description = "run_not_found (also another tenant's run)", body = ErrorBody),
        (status = 409, description = "ambiguous_run: without keys, several resources use the run id (details: resources); give resourceId", body = ErrorBody),
    ))]
pub(crate) async fn get_run(
    state: State,
    caller: Caller,
    PathParam(run_id): PathParam<String>,
    Params(query): Params<RunQuery>,
) -> Result<Json<RunDetail>, ApiError> {
    let stored = visible_run(&state, &caller, &run_id, query.resource_id.as_deref()).await?;
    // A child is in its parent's resource.
    let children = RunFilter::new()
        .children_of(stored.state.run_id().clone())
        .resource_filter(ResourceFilter::exactly(stored.state.resource_id().cloned()));
    let mut children = all_runs(&state, children).await?;
    children.reverse();
    Ok(Json(RunDetail::of(&stored.state, &children)?))
}

/// `POST /api/runs/{runId}/cancel`: cancels a run — a running one too, whichever server or
/// process drives it: that driver stops within a moment (its stream ends with an `error`
/// chunk of code `cancelled`) — and every call of its step without a result gets a cancelled
/// result.
#[utoipa::path(post, path = "/api/runs/{runId}/cancel", tag = "runs",
    params(("runId" = String, Path, description = "The run"), RunQuery),
    responses(
        (status = 200, description = "The run is cancelled (a running run's driver stops: its stream ends with an error chunk of code cancelled)", body = CancelledBody),
        (status = 400, description = "bad_request (resourceId)", body = ErrorBody),
        (status = 401, description = "No or bad API key", body = ErrorBody),
        (status = 404, description = "run_not_found", body = ErrorBody),
        (status = 409, description = "not_cancellable (completed or already cancelled), conflict, ambiguous_run", body = ErrorBody),
    ))]
pub(crate) async fn cancel_run(
    state: State,
    caller: Caller,
    PathParam(run_id): PathParam<String>,
    Params(query): Params<RunQuery>,
) -> Result<Json<CancelledBody>, ApiError> {
    let stored = visible_run(&state, &caller, &run_id, query.resource_id.as_deref()).await?;
    // Cancelling needs no tool or model: a server that does not define the run's agent stops
    // it too (its driver, in whatever process, learns from the store).
    askloop_core::cancel_run_in(state.store.as_ref(), stored.state.key(), Some(caller.by()))
        .await
        .map_err(|error| resume_refused(error, &stored))?;
    Ok(Json(CancelledBody {
        run_id,
        status: RunStatus::Cancelled.to_string(),
    }))
}

/// `POST /api/runs/{runId}/continue`: continues a failed (or abandoned running) run.
#[utoipa::path(post, path = "/api/runs/{runId}/continue", tag = "runs",
    params(("runId" = String, Path, description = "The run"), RunQuery),
    responses(
        (status = 200, description = "SSE of the continued run", content_type = "text/event-stream", body = inline(crate::sse::SseEvent)),
        (status = 400, description = "bad_request (resourceId)", body = ErrorBody),
        (status = 401, description = "No or bad API key", body = ErrorBody),
        (status = 404, description = "run_not_found", body = ErrorBody),
        (status = 409, description = "child_run (a sub-agent's child run: continue its root run, details.rootRunId), not_continuable, thread_moved_on (a failed run whose thread has a newer run), in_progress, conflict, thread_busy (another turn of the thread runs), ambiguous_run", body = ErrorBody),
    ))]
pub(crate) async fn continue_run(
    state: State,
    caller: Caller,
    PathParam(run_id): PathParam<String>,
    Params(query): Params<RunQuery>,
) -> Result<Response, ApiError> {
    let stored = visible_run(&state, &caller, &run_id, query.resource_id.as_deref()).await?;
    refuse_child_run(&stored)?;
    let agent = agent_of_run(&state, &stored).await?;
    let run = agent
        .continue_stream(stored.state.key())
        .await
        .map_err(|error| resume_refused(error, &stored))?;
    Ok(run_response(&state, run, stored, StreamKind::Other))
}

/// `POST /api/runs/{runId}/responses`: answers, approvals (with edited `args` or not) and
/// declines of several waiting calls in one commit (all or none).
#[utoipa::path(post, path = "/api/runs/{runId}/responses", tag = "runs",
    params(("runId" = String, Path, description = "The run"), RunQuery),
    request_body = ResponsesRequest,
    responses(
        (status = 200, description = "SSE of the run from the answered calls on; or, when every response is an answer its call already has (the same answer, or the same label by its number or in another case), the harmless repeat's note as JSON: nothing changed, the run is not resumed again", content(
            (inline(crate::sse::SseEvent) = "text/event-stream"),
            (crate::api::RepeatNote = "application/json"),
        )),
        (status = 400, description = "invalid_answer, invalid_args (an approval's edited `args` do not fit the tool's input schema; details: toolCallId, toolName, problems; nothing changed), bad_request (also `args` without `approved: true`), duplicate_tool_call, empty_batch", body = ErrorBody),
        (status = 401, description = "No or bad API key", body = ErrorBody),
        (status = 403, description = "not_permitted: the call's approver policy refuses the caller (details: toolCallId, toolName, reason = missing_role | self_approval | already_approved | unidentified | args_differ, actor, requiredRoles?); nothing changed, the call still waits", body = ErrorBody),
        (status = 404, description = "run_not_found, unknown_tool_call", body = ErrorBody),
        (status = 409, description = "child_run (a sub-agent's child run: answer its calls through its root run, details.rootRunId), not_suspended, conflict, already_answered (a different answer, or an approval, to a call that has its answer), in_progress, thread_busy (a newer turn of the thread runs), ambiguous_run", body = ErrorBody),
        (status = 410, description = "expired: the call's deadline passed (details: toolCallId, expiredAt)", body = ErrorBody),
        (status = 413, description = "too_large", body = ErrorBody),
    ))]
pub(crate) async fn respond(
    state: State,
    caller: Caller,
    PathParam(run_id): PathParam<String>,
    Params(query): Params<RunQuery>,
    Body(request): Body<ResponsesRequest>,
) -> Result<Response, ApiError> {
    let started = std::time::Instant::now();
    let stored = visible_run(&state, &caller, &run_id, query.resource_id.as_deref()).await?;
    refuse_child_run(&stored)?;
    if request.responses.is_empty() {
        return Err(ApiError::bad_request("responses is empty"));
    }
    if let Some(note) = repeat_of(&stored, &request)? {
        return Ok(note);
    }
    let lone_answer =
        matches!(request.responses.as_slice(), [response] if response.approved.is_none());
    let agent = agent_of_run(&state, &stored).await?;
    let mut respond = claim(&agent, &stored, &caller, "POST /api/runs/{runId}/responses");
    for response in request.responses {
        check_tool_call_id(&response.tool_call_id)?;
        let id = ToolCallId::new(response.tool_call_id.as_str());
        if response.args.is_some() && response.approved != Some(true) {
            return Err(ApiError::bad_request(format!(
                "the response for {id} has args: they go with approved: true only"
            )));
        }
        respond = match (response.answer, response.approved) {
            (Some(answer), None) => {
                check_answer(&state, &answer)?;
                respond.answer(&id, answer)
            }
            (None, Some(true)) => match response.args {
                Some(args) => {
                    check_edited_args(&state, &args)?;
                    respond.approve_with(&id, args)
                }
                None => respond.approve(&id),
            },
            (None, Some(false)) => {
                if let Some(reason) = &response.reason {
                    check_text("reason", reason, state.limits.answer_bytes)?;
                }
                respond.decline(&id, response.reason)
            }
            _ => {
                return Err(ApiError::bad_request(format!(
                    "the response for {id} needs exactly one of answer or approved"
                )));
            }
        };
    }
    stream_claim(&state, respond, stored, started, lone_answer).await
}

/// `POST /api/runs/{runId}/fork`: forks the run at a question with another answer. The fork
/// is a new run (new id, new thread) of the same resource and agent whose conversation is the
/// original's up to that question, continued with the new answer; the original is not
/// changed. The answer is checked before anything is stored: a refused fork creates nothing.
/// The response is the fork's stream (every chunk names the fork's `runId`); the fork's
/// `forkedFrom` names the original and the question.
#[utoipa::path(post, path = "/api/runs/{runId}/fork", tag = "runs",
    params(("runId" = String, Path, description = "The run to fork"), RunQuery),
    request_body = ForkRequest,
    responses(
        (status = 200, description = "SSE of the fork (a new run: its chunks carry its runId) from the question's new answer on", content_type = "text/event-stream", body = inline(crate::sse::SseEvent)),
        (status = 400, description = "invalid_answer, not_a_question (no call of the run has this id, or it never asked a question), bad_request", body = ErrorBody),
        (status = 401, description = "No or bad API key", body = ErrorBody),
        (status = 403, description = "not_permitted: the call's approver policy refuses the caller (details: toolCallId, toolName, reason = missing_role | self_approval | already_approved | unidentified | args_differ, actor, requiredRoles?); nothing changed, the call still waits", body = ErrorBody),
        (status = 404, description = "run_not_found (also another tenant's run)", body = ErrorBody),
        (status = 409, description = "child_run (a sub-agent's child run, details.rootRunId), in_progress or interrupted (another call of the question's step is still running in the original), ambiguous_run", body = ErrorBody),
        (status = 413, description = "too_large", body = ErrorBody),
    ))]
pub(crate) async fn fork_run(
    state: State,
    caller: Caller,
    PathParam(run_id): PathParam<String>,
    Params(query): Params<RunQuery>,
    Body(request): Body<ForkRequest>,
) -> Result<Response, ApiError> {
    let started = std::time::Instant::now();
    let stored = visible_run(&state, &caller, &run_id, query.resource_id.as_deref()).await?;
    refuse_child_run(&stored)?;
    check_tool_call_id(&request.tool_call_id)?;
    check_answer(&state, &request.resume_data)?;
    let agent = agent_of_run(&state, &stored).await?;
    let id = ToolCallId::new(request.tool_call_id.as_str());
    let fork = agent
        .fork(stored.state.key(), &id, request.resume_data)
        .actor(caller.actor("POST /api/runs/{runId}/fork"))
        .stream()
        .await
        .map_err(|error| resume_refused(error, &stored))?;
    let agent_id = stored.state.agent_id().clone();
    Ok(sse::chunks_response(
        state
            .hub
            .spawn(fork, &agent_id, StreamKind::Resume(started), None),
        state.closing.grace_over(),
    ))
}

/// The harmless repeat's 200 when every response of `request` is an answer its call already
/// has ([`repeat_note`]); `None` when one is not (an approval, a decline, a new answer).
fn repeat_of(stored: &StoredRun, request: &ResponsesRequest) -> Result<Option<Response>, ApiError> {
    let mut answers = Vec::with_capacity(request.responses.len());
    for response in &request.responses {
        let (Some(answer), None) = (&response.answer, response.approved) else {
            return Ok(None);
        };
        check_tool_call_id(&response.tool_call_id)?;
        answers.push((ToolCallId::new(response.tool_call_id.as_str()), answer));
    }
    Ok(repeat_note(stored, &answers))
}

/// `GET /api/runs/{runId}/stream`: re-attaches to a run's stream.
///
/// - A run this server drives: its chunks so far, then the live ones.
/// - A run another process drives (running, with a live lease): the response starts at once
///   and sends only `: keep-alive` comments while it waits (the other process's live chunks
///   are not seen here: they never leave it); it follows the store (its change notifications
///   where it has them, else polling every 100 ms) until the run stops running, then sends
///   what a client re-attaching then would get: a suspended run's pending calls re-announced,
///   a finished run's `finish` or `error`, or `interrupted` when the driver's lease ran out. If
///   meanwhile this server takes the run over (a resume through it), the live chunks from then.
/// - Any other run: where it stands, as above.
///
/// Ends at the server's shutdown ([`crate::closing`]): at once while it waits for a run another
/// process drives, else as every run stream.
#[utoipa::path(get, path = "/api/runs/{runId}/stream", tag = "runs",
    params(("runId" = String, Path, description = "The run"), RunQuery),
    responses(
        (status = 200, description = "SSE: a live run's chunks so far then the live ones; a run another process drives: keep-alives until it stops running (its live chunks are not relayed), then as for a settled run; a suspended run's pending calls re-announced; a finished run's `finish` (or `error`); then `data: [DONE]`", content_type = "text/event-stream", body = inline(crate::sse::SseEvent)),
        (status = 400, description = "bad_request (resourceId)", body = ErrorBody),
        (status = 401, description = "No or bad API key", body = ErrorBody),
        (status = 404, description = "run_not_found", body = ErrorBody),
        (status = 409, description = "ambiguous_run", body = ErrorBody),
    ))]
pub(crate) async fn reattach(
    state: State,
    caller: Caller,
    PathParam(run_id): PathParam<String>,
    Params(query): Params<RunQuery>,
) -> Result<Response, ApiError> {
    let stored = visible_run(&state, &caller, &run_id, query.resource_id.as_deref()).await?;
    let id = stored.state.key();
    if let Some(live) = state.hub.subscribe(&id) {
        return Ok(sse::chunks_response(live, state.closing.grace_over()));
    }
    if replay::driven_elsewhere(&stored) {
        // Nothing of this server's own is relayed while it waits: it ends at once at shutdown
        // (the client re-attaches through another instance).
        let chunks = replay::follow_elsewhere(state.0.clone(), id, stored, Follow::Outcome);
        return Ok(sse::chunks_response(chunks, state.closing.begun()));
    }
    Ok(sse::chunks_response(
        futures::stream::iter(replay::texts(replay::settled_chunks(&stored))),
        state.closing.grace_over(),
    ))
}
