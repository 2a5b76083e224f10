//! The AI SDK's UI message stream (npm `ai` 7.x, what `useChat` and its `DefaultChatTransport`
//! speak) over askloop runs: `POST /api/agents/{agentId}/chat`,
//! `GET /api/agents/{agentId}/chat/{chatId}/messages` and the stream resumption
//! `GET /api/agents/{agentId}/chat/{chatId}/stream` ([`get_stream`]: 204 while no turn of the
//! chat runs, else the running turn's stream from its start, then live).
//!
//! A chat id is an askloop thread id, of the caller's resource (the API key's; none on a server
//! without keys): two tenants using one chat id have two chats. A request whose last message is
//! the person's starts a run in the thread (409 `thread_busy` while the thread has a turn
//! running); one whose last message is the assistant's, with tool parts that got an
//! `output` (`addToolOutput`) or an approval response (`addToolApprovalResponse`), answers
//! exactly those calls of the thread's waiting run, all in one batch (validated like any
//! answer: an invalid one streams a transient `data-askloop-rejection` part and an `error`
//! chunk, and nothing changes: the claim checks the batch whole). An approval response may
//! carry askloop's `args` beside `approved: true` in the part's `approval` (`{id, approved,
//! reason?, args?}`; the AI SDK has no field for edited input): edit, then approve — edited
//! arguments that do not fit the tool are refused the same way, their problems in the
//! rejection. Parts of other calls are
//! ignored, so a client resending its whole history cannot answer twice. The run is driven by
//! the server's run hub, apart from the connection.
//!
//! The response is the AI SDK's UI message stream, translated from askloop's wire chunks by
//! [`UiStream`] (see [`crate::ui_stream`] for the table). The messages route rebuilds the UI
//! messages from the thread's stored runs ([`crate::ui_messages`]), so state lives only in the
//! store.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use askloop_core::store::{ResourceFilter, RunFilter, RunState, running_run_of};
use askloop_core::{
    Agent, AgentId, CallResponse, Respond, ResumeError, RunId, RunKey, RunOptions, RunStatus,
    ThreadId, ThreadKey, ToolCallId, error_chain_text, nested_call_id,
};
use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::access::agent_for_caller;
use crate::checks::{check_answer, check_edited_args, check_id, check_text, check_tool_call_id};
use crate::error::{ApiError, ErrorBody};
use crate::extract::{Body, PathParam};
use crate::keys::Caller;
use crate::listing::all_runs;
use crate::metrics::StreamKind;
use crate::replay::{self, Follow};
use crate::state::AppState;
use crate::ui_messages::{subagent_part, ui_messages};
use crate::ui_stream::{UiStream, ui_response};

/// The chat routes.
pub(crate) fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/agents/{agent_id}/chat", post(post_chat))
        .route(
            "/api/agents/{agent_id}/chat/{chat_id}/messages",
            get(get_messages),
        )
        .route(
            "/api/agents/{agent_id}/chat/{chat_id}/stream",
            get(get_stream),
        )
}

/// The body `DefaultChatTransport` sends: `{id, messages, trigger, messageId?, ...body}`
/// (the AI SDK's `ai` package, `HttpChatTransport`). Unknown fields are ignored.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ChatRequest {
    /// The chat id: askloop's thread id (an id as every other: not blank, no control characters).
    id: String,
    /// The whole chat, as the client has it; only the last message is read.
    messages: Vec<UiMessage>,
    /// `submit-message` or `regenerate-message` (only the former is supported).
    #[serde(default)]
    trigger: Option<String>,
}

/// A UI message of the request; parts are read loosely (only text and tool parts matter).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub(crate) struct UiMessage {
    /// `user` (a new message: a new run) or `assistant` (answers to the waiting run's calls).
    role: String,
    /// The AI SDK's UI message parts: `{type: "text", text}`; tool parts
    /// `{type: "tool-<name>", toolCallId, state: "output-available", output}` or
    /// `{…, state: "approval-responded", approval: {approved, reason?}}`.
    #[serde(default)]
    #[schema(value_type = Vec<Object>)]
    parts: Vec<Value>,
}

/// `GET …/chat/{chatId}/messages`: the thread as UI messages.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)] // Only described: the body is built as JSON by `ui_messages`.
pub(crate) struct ChatMessages {
    /// The AI SDK's UI messages (`{id, role, parts}`), oldest first.
    #[schema(value_type = Vec<Object>)]
    messages: Vec<Value>,
}

/// The thread of a chat id, in the caller's resource: checked as every id of a request is
/// (not blank, no control characters, bounded).
fn chat_thread(caller: &Caller, chat_id: &str) -> Result<ThreadKey, ApiError> {
    check_id("the chat id", chat_id)?;
    Ok(ThreadKey::new(
        caller.resource().cloned(),
        ThreadId::from(chat_id),
    ))
}

/// The runs of a thread of the caller's resource, oldest first, refusing a thread any run of
/// which the caller may not see (a key restricted to some agents: "not found").
async fn thread_runs(
    state: &AppState,
    caller: &Caller,
    thread: &ThreadKey,
) -> Result<Vec<RunState>, ApiError> {
    let page = state.store.list_runs(&RunFilter::in_thread(thread)).await?;
    let mut runs = Vec::new();
    for listed in page.runs.iter().rev() {
        let stored = state.store.load_run(&listed.key()).await?;
        if !caller.may_see(stored.state.resource_id(), stored.state.agent_id()) {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "chat_not_found",
                format!("no chat {}", thread.thread_id.as_str()),
            ));
        }
        runs.push(stored.state);
    }
    Ok(runs)
}

/// `POST /api/agents/{agentId}/chat`: a UI message stream.
#[utoipa::path(post, path = "/api/agents/{agentId}/chat", tag = "chat",
    params(("agentId" = String, Path, description = "The agent's id")),
    request_body = ChatRequest,
    responses(
        (status = 200, description = "SSE: the AI SDK's UI message stream v1 (`data: <UI message chunk JSON>` per chunk, then `data: [DONE]`; header `x-vercel-ai-ui-message-stream: v1`); a refused answer is an `error` chunk", content_type = "text/event-stream", body = inline(crate::sse::SseEvent)),
        (status = 400, description = "bad_request (also a tool call id over 4096 bytes), invalid_answer (an approval-responded part whose approval has no boolean `approved`, or has `args` beside a decline: nothing is recorded)", body = ErrorBody),
        (status = 401, description = "No or bad API key", body = ErrorBody),
        (status = 403, description = "The key may not use this agent; not_permitted: the call's approver policy refuses the caller (details: toolCallId, toolName, reason = missing_role | self_approval | already_approved | unidentified | args_differ, actor, requiredRoles?); nothing changed, the call still waits", body = ErrorBody),
        (status = 404, description = "agent_not_found", body = ErrorBody),
        (status = 409, description = "not_suspended: the chat waits for no answer; thread_busy: a new message while the chat's turn runs (details: threadId, runningRunId; nothing was stored)", body = ErrorBody),
        (status = 413, description = "Body, message or answer too large", body = ErrorBody),
    ))]
pub(crate) async fn post_chat(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    PathParam(agent_id): PathParam<String>,
    Body(request): Body<ChatRequest>,
) -> Result<Response, ApiError> {
    let started = Instant::now();
    let agent_id = AgentId::from(agent_id);
    let agent = agent_for_caller(&state, &caller, &agent_id).await?;
    let thread = chat_thread(&caller, &request.id)?;
    if request.trigger.as_deref() == Some("regenerate-message") {
        return Err(ApiError::bad_request(
            "regenerating a message is not supported: send a new message",
        ));
    }
    let Some(last) = request.messages.last() else {
        return Err(ApiError::bad_request("the chat has no message"));
    };
    let chat = Chat {
        state: &state,
        caller: &caller,
        agent: &agent,
        agent_id: &agent_id,
        thread: &thread,
        started,
    };
    if last.role == "user" {
        chat.new_message(last).await
    } else {
        // The assistant's message last: answers to the waiting run's calls.
        chat.answer(last).await
    }
}

/// One `POST …/chat` request: who sends it, to which agent and chat, and when it came.
struct Chat<'request> {
    state: &'request AppState,
    caller: &'request Caller,
    agent: &'request Agent,
    agent_id: &'request AgentId,
    thread: &'request ThreadKey,
    /// When the request reached the handler (the stream's duration starts here).
    started: Instant,
}

impl Chat<'_> {
    /// The `messageMetadata` of the stream of run `run_id`.
    fn metadata(&self, run_id: &RunId) -> Value {
        json!({
            "threadId": self.thread.thread_id.as_str(),
            "agentId": self.agent_id.as_str(),
            "runId": run_id.as_str(),
        })
    }

    /// The person's message `last` starts a run in the chat's thread.
    async fn new_message(&self, last: &UiMessage) -> Result<Response, ApiError> {
        let text: String = last
            .parts
            .iter()
            .filter(|part| part.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|part| part.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n");
        if askloop_core::is_blank(&text) {
            return Err(ApiError::bad_request("the last message has no text"));
        }
        check_text("the message", &text, self.state.limits.message_bytes)?;
        let mut options = RunOptions::new().thread(self.thread.thread_id.clone());
        if let Some(resource) = &self.thread.resource_id {
            options = options.resource(resource.clone());
        }
        options = options.actor(self.caller.actor("POST /api/agents/{agentId}/chat"));
        let stream = self.agent.stream_with(text, options);
        let run_id = stream.run_id().clone();
        // Answered once the run holds the thread's turn (or refused: 409, nothing stored).
        let chunks = self
            .state
            .hub
            .start(stream, self.agent_id, StreamKind::Cycle(self.started))
            .await?;
        let ui = UiStream::new(
            self.metadata(&run_id),
            Some(format!("msg-{}", run_id.as_str())),
            HashSet::new(),
        );
        Ok(ui_response(
            ui.convert(chunks),
            self.state.closing.grace_over(),
        ))
    }

    /// The assistant's message `last` answers the calls of the thread's waiting run whose
    /// parts carry an output or an approval response, in one batch; a batch that answers
    /// nothing, or that the claim refuses, streams the rejection.
    async fn answer(&self, last: &UiMessage) -> Result<Response, ApiError> {
        let waiting = self.waiting_run().await?;
        let run_id = waiting.run_id().clone();
        let known: HashSet<String> = last
            .parts
            .iter()
            .filter_map(|part| part.get("toolCallId").and_then(Value::as_str))
            .map(str::to_owned)
            .collect();
        let ui = UiStream::new(self.metadata(&run_id), None, known).with_subagents(&last.parts);
        let respond = self
            .agent
            .respond(waiting.key())
            .actor(self.caller.actor("POST /api/agents/{agentId}/chat"));
        let (respond, answered) = self.responses(respond, &waiting, last)?;
        let until = self.state.closing.grace_over();
        if answered == 0 {
            let message = "no pending question of the chat has an answer in this message";
            return Ok(ui_response(ui.rejected(message, Map::new()), until));
        }
        match respond.stream().await {
            Ok(stream) => {
                let chunks = self.state.hub.spawn(
                    stream,
                    self.agent_id,
                    StreamKind::Resume(self.started),
                    Some(waiting),
                );
                Ok(ui_response(ui.convert(chunks), until))
            }
            Err(error) => {
                let mut problems = Map::new();
                let message = rejection_text(&error);
                if let ResumeError::InvalidAnswer { tool_call_id, .. }
                | ResumeError::InvalidArgs { tool_call_id, .. }
                | ResumeError::Expired { tool_call_id, .. } = &error
                {
                    problems.insert(tool_call_id.as_str().to_owned(), json!(message));
                }
                tracing::info!(run_id = %run_id, error = %error_chain_text(&error), "chat answer refused");
                Ok(ui_response(ui.rejected(&message, problems), until))
            }
        }
    }

    /// The chat's waiting run: the thread's newest suspended run (409 `not_suspended` when
    /// none waits).
    async fn waiting_run(&self) -> Result<RunState, ApiError> {
        let newest_suspended = RunFilter::in_thread(self.thread)
            .status(RunStatus::Suspended)
            .limit(1);
        let listed = self.state.store.list_runs(&newest_suspended).await?;
        match listed.runs.first() {
            Some(listed) => Ok(self.state.store.load_run(&listed.key()).await?.state),
            None => Err(ApiError::new(
                StatusCode::CONFLICT,
                "not_suspended",
                "the chat waits for no answer: send a new message",
            )),
        }
    }

    /// `respond` with the responses the parts of `last` give to `waiting`'s pending calls (an
    /// output: an answer; an approval response: an approval or a decline), and how many.
    fn responses<'agent>(
        &self,
        mut respond: Respond<'agent>,
        waiting: &RunState,
        last: &UiMessage,
    ) -> Result<(Respond<'agent>, usize), ApiError> {
        let pending = waiting.pending_tool_calls();
        let mut answered = 0;
        for part in &last.parts {
            let Some(id) = part.get("toolCallId").and_then(Value::as_str) else {
                continue;
            };
            check_tool_call_id(id)?;
            if !pending.iter().any(|call| call.tool_call_id.as_str() == id) {
                continue;
            }
            let tool_call_id = ToolCallId::from(id);
            match part.get("state").and_then(Value::as_str) {
                Some("output-available") => {
                    let output = part.get("output").cloned().unwrap_or(Value::Null);
                    check_answer(self.state, &output)?;
                    // An approval also accepts `{"approved": bool, "reason"?}` as its answer.
                    respond = respond.answer(&tool_call_id, output);
                    answered += 1;
                }
                Some("approval-responded") => {
                    let decision = approval_decision(id, part.get("approval"))?;
                    match &decision {
                        CallResponse::Decline {
                            reason: Some(reason),
                        } => check_text("reason", reason, self.state.limits.answer_bytes)?,
                        CallResponse::ApproveWith { args } => {
                            check_edited_args(self.state, args)?;
                        }
                        _ => {}
                    }
                    respond = respond.response(&tool_call_id, decision);
                    answered += 1;
                }
                _ => {}
            }
        }
        Ok((respond, answered))
    }
}

/// The decision of an `approval-responded` part's `approval` (`{id, approved, reason?}`, the
/// AI SDK's shape, plus askloop's `args`: the arguments a person edited, for an approval — the
/// AI SDK's `addToolApprovalResponse` has no field for them, so a client sends the part itself),
/// read by core's one reading of approvals: only a boolean `approved` decides; anything else
/// (also `args` beside a decline) is 400 `invalid_answer` and nothing is recorded (never a
/// decline the person did not make). Whether `args` fit the tool is the claim's to say.
fn approval_decision(
    tool_call_id: &str,
    approval: Option<&Value>,
) -> Result<CallResponse, ApiError> {
    let mut decision = Map::new();
    for field in ["approved", "reason", "args"] {
        if let Some(value) = approval.and_then(|approval| approval.get(field)) {
            decision.insert(field.to_owned(), value.clone());
        }
    }
    CallResponse::from_approval(&Value::Object(decision)).map_err(|rejection| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_answer",
            format!(
                "the approval of tool call {tool_call_id} decides nothing: expected {}",
                rejection.expected
            ),
        )
        .with_details(json!({"expected": rejection.expected, "problems": rejection.problems}))
    })
}

/// What a refused answer says to the person.
fn rejection_text(error: &ResumeError) -> String {
    match error {
        ResumeError::InvalidAnswer { rejection, .. } => {
            let mut text = format!("Expected {}", rejection.expected);
            if !rejection.problems.is_empty() {
                text.push_str(": ");
                text.push_str(&rejection.problems.join("; "));
            }
            text
        }
        ResumeError::InvalidArgs { problems, .. } => {
            format!(
                "The edited arguments do not fit the tool: {}",
                problems.join("; ")
            )
        }
        other => other.to_string(),
    }
}

/// `GET /api/agents/{agentId}/chat/{chatId}/messages`: `{"messages": UIMessage[]}`, the
/// thread as the AI SDK's UI messages (each run's sub-agents' work as its
/// `data-askloop-subagent` parts). A pending question is a tool part in state
/// `input-available` (with its `data-askloop-question` part), an approval one in
/// `approval-requested`: a reloaded page shows them again.
#[utoipa::path(get, path = "/api/agents/{agentId}/chat/{chatId}/messages", tag = "chat",
    params(("agentId" = String, Path, description = "The agent's id"),
           ("chatId" = String, Path, description = "The chat's id (its thread id)")),
    responses(
        (status = 200, description = "The chat's UI messages", body = ChatMessages),
        (status = 400, description = "bad_request", body = ErrorBody),
        (status = 401, description = "No or bad API key", body = ErrorBody),
        (status = 403, description = "The key may not use this agent", body = ErrorBody),
        (status = 404, description = "agent_not_found, chat_not_found", body = ErrorBody),
    ))]
pub(crate) async fn get_messages(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    PathParam((agent_id, chat_id)): PathParam<(String, String)>,
) -> Result<Response, ApiError> {
    let agent_id = AgentId::from(agent_id);
    agent_for_caller(&state, &caller, &agent_id).await?;
    let thread = chat_thread(&caller, &chat_id)?;
    let runs = thread_runs(&state, &caller, &thread).await?;
    let mut messages = Vec::new();
    for run in &runs {
        let subagents = subagent_parts(&state, run).await?;
        messages.extend(ui_messages(run, subagents));
    }
    Ok(Json(json!({"messages": messages})).into_response())
}

/// At most this many levels of child runs are read under a run (a bound, beyond any tree the
/// loop allows).
const MAX_SUBAGENT_LEVELS: usize = 16;

/// The `data-askloop-subagent` parts of the child runs under `run`, level by level (children,
/// then grandchildren), each level oldest first: what the chat stream showed of its
/// sub-agents' work, so a reloaded page shows it again.
async fn subagent_parts(state: &AppState, run: &RunState) -> Result<Vec<Value>, ApiError> {
    let mut parts = Vec::new();
    let mut level = vec![(run.run_id().clone(), None::<String>, Vec::<String>::new())];
    for _ in 0..MAX_SUBAGENT_LEVELS {
        let mut next = Vec::new();
        for (parent, prefix, path) in level {
            // A child is in its parent's resource.
            let filter = RunFilter::new()
                .children_of(parent.clone())
                .resource_filter(ResourceFilter::exactly(run.resource_id().cloned()));
            let mut children = all_runs(state, filter).await?;
            children.reverse();
            for summary in children {
                let child = state.store.load_run(&summary.key()).await?.state;
                let Some(link) = child.parent().filter(|link| link.run_id == parent) else {
                    continue;
                };
                let started_by = match &prefix {
                    Some(prefix) => nested_call_id(prefix, link.tool_call_id.as_str()),
                    None => link.tool_call_id.to_string(),
                };
                let mut path = path.clone();
                path.push(child.agent_id().to_string());
                parts.push(subagent_part(&child, parent.as_str(), &started_by, &path));
                next.push((child.run_id().clone(), Some(started_by), path));
            }
        }
        if next.is_empty() {
            break;
        }
        level = next;
    }
    Ok(parts)
}

/// `GET /api/agents/{agentId}/chat/{chatId}/stream`: the AI SDK's stream resumption
/// (`DefaultChatTransport.reconnectToStream`, what `useChat({resume: true})` and
/// `Chat.resumeStream()` call). 204 when no turn of the chat runs: none, a suspended one (its
/// question is in the messages), a run whose driver stopped (the sweep continues it), another
/// tenant's (existence does not leak). Otherwise the running turn's UI message stream from
/// its start — `start` with `messageId: "msg-<runId>"`, the id the messages route gives the
/// run's assistant message, so the client replaces that message — then live until it ends.
///
/// The turn's wire chunks go through [`UiStream`] as the `/chat` response's do: a turn this
/// server drives is [`replay::live_turn`] (the turn before its current stream told from the
/// state its claim started from, then the stream from its start, then live); one another
/// server on the store drives (a live lease) is [`replay::follow_elsewhere`] with
/// [`Follow::Steps`]: its committed steps, each new one as the store gets it, then its end
/// (that server's live chunks never leave it, so the text comes a step at a time).
#[utoipa::path(get, path = "/api/agents/{agentId}/chat/{chatId}/stream", tag = "chat",
    params(("agentId" = String, Path, description = "The agent's id"),
           ("chatId" = String, Path, description = "The chat's id (its thread id)")),
    responses(
        (status = 200, description = "SSE: the running turn's UI message stream v1 from its start, then live (header `x-vercel-ai-ui-message-stream: v1`; `data: [DONE]` last); a turn driven by another server on the store: its committed steps, then each step as the store gets it", content_type = "text/event-stream", body = inline(crate::sse::SseEvent)),
        (status = 204, description = "No turn of the chat runs (none, a suspended one, another tenant's chat)"),
        (status = 400, description = "bad_request (a blank, control-character or over-long chat id)", body = ErrorBody),
        (status = 401, description = "No or bad API key", body = ErrorBody),
        (status = 403, description = "The key may not use this agent", body = ErrorBody),
        (status = 404, description = "agent_not_found", body = ErrorBody),
    ))]
pub(crate) async fn get_stream(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    PathParam((agent_id, chat_id)): PathParam<(String, String)>,
) -> Result<Response, ApiError> {
    let agent_id = AgentId::from(agent_id);
    agent_for_caller(&state, &caller, &agent_id).await?;
    let thread = chat_thread(&caller, &chat_id)?;
    let no_turn = || StatusCode::NO_CONTENT.into_response();
    let Some(run_id) = running_run_of(state.store.as_ref(), &thread).await? else {
        return Ok(no_turn());
    };
    let key = RunKey::new(thread.resource_id.clone(), run_id);
    let stored = match state.store.load_run(&key).await {
        Ok(stored) => stored,
        // It ended and went (or was never readable) between the listing and the load.
        Err(askloop_core::StoreError::NotFound { .. }) => return Ok(no_turn()),
        Err(error) => return Err(error.into()),
    };
    if !caller.may_see(stored.state.resource_id(), stored.state.agent_id()) {
        return Ok(no_turn());
    }
    let meta = json!({
        "threadId": thread.thread_id.as_str(),
        "agentId": stored.state.agent_id().as_str(),
        "runId": key.run_id.as_str(),
    });
    let ui = UiStream::new(
        meta,
        Some(format!("msg-{}", key.run_id.as_str())),
        HashSet::new(),
    );
    if let Some(turn) = replay::live_turn(&state, &key) {
        return Ok(ui_response(ui.convert(turn), state.closing.grace_over()));
    }
    if !replay::driven_elsewhere(&stored) {
        // Not running, or its driver stopped (the sweep continues it).
        return Ok(no_turn());
    }
    // Nothing of this server's own is relayed: it ends at once at shutdown (the client
    // resumes through another instance).
    let turn = replay::follow_elsewhere(state.clone(), key, stored, Follow::Steps);
    Ok(ui_response(ui.convert(turn), state.closing.begun()))
}
