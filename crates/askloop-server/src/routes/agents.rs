//! The reference framework's agent routes (`/api/agents/…`), as its JavaScript client
//! `@mastra/client-js` 1.47 calls them.

use std::collections::BTreeMap;

use askloop_core::store::RunFilter;
use askloop_core::{AgentId, RunOptions, RunStatus, ToolCallId};
use axum::Json;
use axum::response::Response;

use crate::access::{agent_for_caller, agent_of_run, listing_scope, resource_of, run_of_agent};
use crate::api::{
    AgentDetails, ApprovalRequest, ResumeRequest, StreamRequest, SuspendedRun, SuspendedRunList,
    SuspendedRunsQuery,
};
use crate::checks::{check_answer, check_edited_args, check_id, check_text, check_tool_call_id};
use crate::error::{ApiError, ErrorBody};
use crate::extract::{Body, Params, PathParam};
use crate::keys::Caller;
use crate::listing::all_runs;
use crate::metrics::StreamKind;
use crate::resume::{claim, refuse_child_run, repeat_note, stream_claim};
use crate::sse;
use crate::state::State;

/// `GET /api/agents`: the agents the caller may use, keyed by id.
#[utoipa::path(get, path = "/api/agents", tag = "agents",
    responses(
        (status = 200, description = "The agents, keyed by id", body = BTreeMap<String, AgentDetails>),
        (status = 401, description = "No or bad API key", body = ErrorBody),
    ))]
pub(crate) async fn list_agents(
    state: State,
    caller: Caller,
) -> Result<Json<BTreeMap<String, AgentDetails>>, ApiError> {
    let mut agents = BTreeMap::new();
    for agent_id in state.agents.agent_ids() {
        if !caller.may_use(&agent_id) {
            continue;
        }
        let agent = state.agents.agent(&agent_id).await?;
        agents.insert(agent_id.to_string(), AgentDetails::of(&agent));
    }
    Ok(Json(agents))
}

/// `GET /api/agents/{agentId}`: one agent.
#[utoipa::path(get, path = "/api/agents/{agentId}", tag = "agents",
    params(("agentId" = String, Path, description = "The agent's id")),
    responses(
        (status = 200, description = "The agent", body = AgentDetails),
        (status = 401, description = "No or bad API key", body = ErrorBody),
        (status = 403, description = "The key may not use this agent", body = ErrorBody),
        (status = 404, description = "agent_not_found", body = ErrorBody),
    ))]
pub(crate) async fn get_agent(
    state: State,
    caller: Caller,
    PathParam(agent_id): PathParam<String>,
) -> Result<Json<AgentDetails>, ApiError> {
    let agent = agent_for_caller(&state, &caller, &AgentId::new(agent_id)).await?;
    Ok(Json(AgentDetails::of(&agent)))
}

/// `POST /api/agents/{agentId}/stream`: starts a run and streams its chunks (SSE).
#[utoipa::path(post, path = "/api/agents/{agentId}/stream", tag = "agents",
    params(("agentId" = String, Path, description = "The agent's id")),
    request_body = StreamRequest,
    responses(
        (status = 200, description = "SSE: `data: <chunk JSON>` per chunk, then `data: [DONE]`", content_type = "text/event-stream", body = inline(crate::sse::SseEvent)),
        (status = 400, description = "bad_request", body = ErrorBody),
        (status = 401, description = "No or bad API key", body = ErrorBody),
        (status = 403, description = "Another agent or resource than the key's", body = ErrorBody),
        (status = 404, description = "agent_not_found", body = ErrorBody),
        (status = 409, description = "thread_busy: the thread has a turn running (details: threadId, runningRunId; nothing was stored); conflict: the caller's resource already has a run with this id (another resource's run with the same id is another run)", body = ErrorBody),
        (status = 413, description = "too_large", body = ErrorBody),
    ))]
pub(crate) async fn stream(
    state: State,
    caller: Caller,
    PathParam(agent_id): PathParam<String>,
    Body(request): Body<StreamRequest>,
) -> Result<Response, ApiError> {
    let started = std::time::Instant::now();
    let agent_id = AgentId::new(agent_id);
    let agent = agent_for_caller(&state, &caller, &agent_id).await?;
    let input = request
        .messages
        .input()
        .filter(|text| !askloop_core::is_blank(text))
        .ok_or_else(|| ApiError::bad_request("messages holds no user message with text"))?;
    check_text("the message", &input, state.limits.message_bytes)?;
    // The run and its thread live in the caller's resource: the same run id or thread id of
    // another resource is another run or thread, so nothing here can reach another tenant's.
    let mut options = RunOptions::new();
    if let Some(resource) = resource_of(&caller, request.resource())? {
        options = options.resource(resource);
    }
    if let Some(thread) = request.thread() {
        check_id("threadId", thread)?;
        options = options.thread(thread);
    }
    options = options.actor(caller.actor("POST /api/agents/{agentId}/stream"));
    if let Some(run_id) = &request.run_id {
        check_id("runId", run_id)?;
        options = options.run_id(run_id.as_str());
    }
    // Answered once the run holds its thread's turn (or was refused: 409, nothing stored).
    let chunks = state
        .hub
        .start(
            agent.stream_with(input, options),
            &agent_id,
            StreamKind::Cycle(started),
        )
        .await?;
    Ok(sse::chunks_response(chunks, state.closing.grace_over()))
}

/// `POST /api/agents/{agentId}/resume-stream`: answers a suspended call and streams the run on.
#[utoipa::path(post, path = "/api/agents/{agentId}/resume-stream", tag = "agents",
    params(("agentId" = String, Path, description = "The agent's id")),
    request_body = ResumeRequest,
    responses(
        (status = 200, description = "SSE: the re-announced call, its result, the rest of the run, then `data: [DONE]`; or, when the named call already has this answer (the same answer, or the same label by its number or in another case), the harmless repeat's note as JSON: nothing changed, the run is not resumed again", content(
            (inline(crate::sse::SseEvent) = "text/event-stream"),
            (crate::api::RepeatNote = "application/json"),
        )),
        (status = 400, description = "invalid_answer (details: expected, problems, allowed labels), bad_request, ambiguous_tool_call", body = ErrorBody),
        (status = 401, description = "No or bad API key", body = ErrorBody),
        (status = 403, description = "The key may not use this agent; not_permitted: the call's approver policy refuses the caller (details: toolCallId, toolName, reason = missing_role | self_approval | already_approved | unidentified | args_differ, actor, requiredRoles?); nothing changed, the call still waits", body = ErrorBody),
        (status = 404, description = "run_not_found, agent_not_found, unknown_tool_call", body = ErrorBody),
        (status = 409, description = "child_run (a sub-agent's child run: answer its calls through its root run, as PARENT_CALL~CHILD_CALL; details.rootRunId), not_suspended, conflict, already_answered (a different answer to a call that has its answer), in_progress, thread_busy (a newer turn of the thread runs), ambiguous_run (a server without keys: the run id is used by several resources; give resourceId)", body = ErrorBody),
        (status = 410, description = "expired: the call's deadline passed (details: toolCallId, expiredAt)", body = ErrorBody),
        (status = 413, description = "too_large", body = ErrorBody),
    ))]
pub(crate) async fn resume_stream(
    state: State,
    caller: Caller,
    PathParam(agent_id): PathParam<String>,
    Body(request): Body<ResumeRequest>,
) -> Result<Response, ApiError> {
    let started = std::time::Instant::now();
    let agent_id = AgentId::new(agent_id);
    let stored = run_of_agent(
        &state,
        &caller,
        &agent_id,
        &request.run_id,
        request.resource_id.as_deref(),
    )
    .await?;
    refuse_child_run(&stored)?;
    check_answer(&state, &request.resume_data)?;
    if let Some(id) = &request.tool_call_id {
        check_tool_call_id(id)?;
    }
    if let Some(id) = &request.tool_call_id
        && let Some(note) = repeat_note(
            &stored,
            &[(ToolCallId::new(id.as_str()), &request.resume_data)],
        )
    {
        return Ok(note);
    }
    let agent = agent_of_run(&state, &stored).await?;
    let respond = claim(
        &agent,
        &stored,
        &caller,
        "POST /api/agents/{agentId}/resume-stream",
    );
    let respond = match &request.tool_call_id {
        Some(id) => respond.answer(&ToolCallId::new(id.as_str()), request.resume_data),
        None => respond.answer_pending_call(request.resume_data),
    };
    stream_claim(&state, respond, stored, started, true).await
}

/// Approves (`approved`, with the request's edited `args` if it has them) or declines the call a
/// request names; the run streams on.
async fn approval(
    state: State,
    caller: Caller,
    agent_id: String,
    request: ApprovalRequest,
    approved: bool,
) -> Result<Response, ApiError> {
    let started = std::time::Instant::now();
    let agent_id = AgentId::new(agent_id);
    let stored = run_of_agent(
        &state,
        &caller,
        &agent_id,
        &request.run_id,
        request.resource_id.as_deref(),
    )
    .await?;
    refuse_child_run(&stored)?;
    check_tool_call_id(&request.tool_call_id)?;
    if let Some(reason) = &request.reason {
        check_text("reason", reason, state.limits.answer_bytes)?;
    }
    if let Some(args) = &request.args {
        if !approved {
            return Err(ApiError::bad_request(
                "a decline takes no args: the declined tool does not run",
            ));
        }
        check_edited_args(&state, args)?;
    }
    let agent = agent_of_run(&state, &stored).await?;
    let tool_call_id = ToolCallId::new(request.tool_call_id.as_str());
    let route = if approved {
        "POST /api/agents/{agentId}/approve-tool-call"
    } else {
        "POST /api/agents/{agentId}/decline-tool-call"
    };
    let respond = claim(&agent, &stored, &caller, route);
    let respond = match (approved, request.args) {
        (true, Some(args)) => respond.approve_with(&tool_call_id, args),
        (true, None) => respond.approve(&tool_call_id),
        (false, _) => respond.decline(&tool_call_id, request.reason.clone()),
    };
    stream_claim(&state, respond, stored, started, false).await
}

/// `POST /api/agents/{agentId}/approve-tool-call`: approves a call; its tool runs, with the
/// request's `args` instead of the model's when it has them (edit, then approve).
#[utoipa::path(post, path = "/api/agents/{agentId}/approve-tool-call", tag = "agents",
    params(("agentId" = String, Path, description = "The agent's id")),
    request_body = ApprovalRequest,
    responses(
        (status = 200, description = "SSE of the run from the approved call on (with `args`: the tool ran with them, and its result tells the model the person changed the arguments); for a call that needs several approvers (a quorum) and is still short of them after this one, the approval is recorded and the stream is the waiting calls' `tool-call-approval` chunks, whose `approvals` list it (`quorum`: how many are needed), and ends: the run stays suspended", content_type = "text/event-stream", body = inline(crate::sse::SseEvent)),
        (status = 400, description = "bad_request, invalid_answer (the call asks a question), invalid_args (`args` do not fit the tool's input schema; details: toolCallId, toolName, problems — every one; nothing changed)", body = ErrorBody),
        (status = 401, description = "No or bad API key", body = ErrorBody),
        (status = 403, description = "The key may not use this agent; not_permitted: the call's approver policy refuses the caller (details: toolCallId, toolName, reason = missing_role | self_approval | already_approved | unidentified | args_differ, actor, requiredRoles?); nothing changed, the call still waits", body = ErrorBody),
        (status = 404, description = "run_not_found, unknown_tool_call", body = ErrorBody),
        (status = 409, description = "child_run (a sub-agent's child run: answer its calls through its root run, as PARENT_CALL~CHILD_CALL; details.rootRunId), not_suspended, conflict, already_answered, in_progress, thread_busy (a newer turn of the thread runs), ambiguous_run (a server without keys: the run id is used by several resources; give resourceId)", body = ErrorBody),
        (status = 410, description = "expired: the call's deadline passed (details: toolCallId, expiredAt)", body = ErrorBody),
        (status = 413, description = "too_large", body = ErrorBody),
    ))]
pub(crate) async fn approve_tool_call(
    state: State,
    caller: Caller,
    PathParam(agent_id): PathParam<String>,
    Body(request): Body<ApprovalRequest>,
) -> Result<Response, ApiError> {
    approval(state, caller, agent_id, request, true).await
}

/// `POST /api/agents/{agentId}/decline-tool-call`: declines a call; the model is told why.
#[utoipa::path(post, path = "/api/agents/{agentId}/decline-tool-call", tag = "agents",
    params(("agentId" = String, Path, description = "The agent's id")),
    request_body = ApprovalRequest,
    responses(
        (status = 200, description = "SSE of the run from the declined call on", content_type = "text/event-stream", body = inline(crate::sse::SseEvent)),
        (status = 400, description = "bad_request (also `args` beside a decline), invalid_answer (the call asks a question)", body = ErrorBody),
        (status = 401, description = "No or bad API key", body = ErrorBody),
        (status = 403, description = "The key may not use this agent; not_permitted: the call's approver policy refuses the caller (details: toolCallId, toolName, reason = missing_role | self_approval | already_approved | unidentified | args_differ, actor, requiredRoles?); nothing changed, the call still waits", body = ErrorBody),
        (status = 404, description = "run_not_found, unknown_tool_call", body = ErrorBody),
        (status = 409, description = "child_run (a sub-agent's child run: answer its calls through its root run, as PARENT_CALL~CHILD_CALL; details.rootRunId), not_suspended, conflict, already_answered, in_progress, thread_busy (a newer turn of the thread runs), ambiguous_run (a server without keys: the run id is used by several resources; give resourceId)", body = ErrorBody),
        (status = 410, description = "expired: the call's deadline passed (details: toolCallId, expiredAt)", body = ErrorBody),
        (status = 413, description = "too_large", body = ErrorBody),
    ))]
pub(crate) async fn decline_tool_call(
    state: State,
    caller: Caller,
    PathParam(agent_id): PathParam<String>,
    Body(request): Body<ApprovalRequest>,
) -> Result<Response, ApiError> {
    approval(state, caller, agent_id, request, false).await
}

/// Largest page of the suspended-runs route.
const MAX_PER_PAGE: u32 = 200;
/// Largest page number accepted.
const MAX_PAGE: u32 = 1_000_000;

/// `GET /api/agents/{agentId}/suspended-runs`: the agent's suspended runs, page by page
/// (newest first; `page` from 0). Top-level runs only: a run whose sub-agent waits lists the
/// child's calls as its own (`PARENT_CALL~CHILD_CALL`, with their `subagent` origin).
#[utoipa::path(get, path = "/api/agents/{agentId}/suspended-runs", tag = "agents",
    params(("agentId" = String, Path, description = "The agent's id"), SuspendedRunsQuery),
    responses(
        (status = 200, description = "The page and the total", body = SuspendedRunList),
        (status = 400, description = "bad_request", body = ErrorBody),
        (status = 401, description = "No or bad API key", body = ErrorBody),
        (status = 403, description = "The key may not use this agent", body = ErrorBody),
        (status = 404, description = "agent_not_found", body = ErrorBody),
    ))]
pub(crate) async fn suspended_runs(
    state: State,
    caller: Caller,
    PathParam(agent_id): PathParam<String>,
    Params(query): Params<SuspendedRunsQuery>,
) -> Result<Json<SuspendedRunList>, ApiError> {
    let agent_id = AgentId::new(agent_id);
    agent_for_caller(&state, &caller, &agent_id).await?;
    let per_page = query.per_page.unwrap_or(20);
    let page = query.page.unwrap_or(0);
    if per_page == 0 || per_page > MAX_PER_PAGE || page > MAX_PAGE {
        return Err(ApiError::bad_request(format!(
            "perPage must be 1 to {MAX_PER_PAGE} and page 0 to {MAX_PAGE}"
        )));
    }
    // A sub-agent's child run is never listed: its waiting calls are its root's.
    let mut filter = RunFilter::new()
        .status(RunStatus::Suspended)
        .agent(agent_id.clone())
        .top_level();
    if let Some(thread) = &query.thread_id {
        check_id("threadId", thread)?;
        filter = filter.thread(thread.as_str());
    }
    let Some(filter) = listing_scope(filter, &caller, query.resource_id.as_deref())? else {
        return Ok(Json(SuspendedRunList {
            runs: Vec::new(),
            total: 0,
        }));
    };
    let summaries = all_runs(&state, filter).await?;
    let total = summaries.len() as u64;
    let start = (page as usize).saturating_mul(per_page as usize);
    let runs = summaries
        .iter()
        .skip(start)
        .take(per_page as usize)
        .map(SuspendedRun::of)
        .collect();
    Ok(Json(SuspendedRunList { runs, total }))
}
