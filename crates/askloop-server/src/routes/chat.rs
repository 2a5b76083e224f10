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
//! chunk, and nothing changes). The run is driven by the server's run hub, apart from the
//! connection.
//!
//! The response is SSE, `data: <UI message chunk JSON>` per event and `data: [DONE]` last,
//! with the header `x-vercel-ai-ui-message-stream: v1`. [`UiStream`] turns askloop's wire
//! chunks ([`askloop_core::wire`]) into UI message chunks:
//!
//! | askloop chunk | UI message chunks |
//! |---|---|
//! | first chunk of a stream | `start` (`messageMetadata: {runId, threadId, agentId}`; a new run's also `messageId`) |
//! | `step-start` | `start-step` |
//! | `text-delta` | `text-start` (once per text part), `text-delta` |
//! | `reasoning-delta` | `reasoning-start` (once), `reasoning-delta` |
//! | `tool-call` | `tool-input-available` (not again for a call the request already holds) |
//! | `tool-result` | `tool-output-available`, or `tool-output-error` when `isError` |
//! | `tool-call-suspended` | `data-askloop-question` (id: the tool call id; `data`: the call as a [`PendingCall`]) |
//! | `tool-call-approval` | `tool-approval-request` (`approvalId` = tool call id) and `data-askloop-question` |
//! | `step-finish` | `finish-step` |
//! | `finish` | `finish` with its `finishReason` |
//! | `error` | `error` (`errorText`) |
//! | end of a suspended stream | `finish` (`finishReason: "tool-calls"`) |
//!
//! Text parts are closed (`text-end`, `reasoning-end`) before any other part and at the end.
//!
//! A resumed stream ([`get_stream`]) goes through the same [`UiStream`], fed the turn's wire
//! chunks from its start; its `start` always carries
//! `messageId: "msg-<runId>"`, the id of the run's assistant message in the messages route, so
//! the client (which resets the message on a replay's first `start`) rebuilds that message
//! instead of adding one.

use std::collections::HashSet;
use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;

use askloop_core::PendingKind;
use askloop_core::model::{AssistantPart, Message};
use askloop_core::store::{RunFilter, RunState, running_run_of};
use askloop_core::wire::PendingCall;
use askloop_core::{
    AgentId, CallResponse, ResumeError, RunKey, RunOptions, RunStatus, ThreadId, ThreadKey,
    ToolCallId, error_chain_text,
};
use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::HeaderValue;
use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures::{Stream, StreamExt};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::access::agent_for_caller;
use crate::checks::{check_answer, check_text};
use crate::error::ApiError;
use crate::extract::{Body, PathParam};
use crate::keys::Caller;
use crate::metrics::StreamKind;
use crate::replay::{self, Follow};
use crate::state::AppState;
use crate::ui_stream::STREAM_HEADER;

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
    crate::checks::check_id("the chat id", chat_id)?;
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
                axum::http::StatusCode::NOT_FOUND,
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
        (status = 400, description = "bad_request (also a tool call id over 4096 bytes), invalid_answer (an approval-responded part whose approval has no boolean `approved`: nothing is recorded)", body = crate::error::ErrorBody),
        (status = 401, description = "No or bad API key", body = crate::error::ErrorBody),
        (status = 403, description = "The key may not use this agent", body = crate::error::ErrorBody),
        (status = 404, description = "agent_not_found", body = crate::error::ErrorBody),
        (status = 409, description = "not_suspended: the chat waits for no answer; thread_busy: a new message while the chat's turn runs (details: threadId, runningRunId; nothing was stored)", body = crate::error::ErrorBody),
        (status = 413, description = "Body, message or answer too large", body = crate::error::ErrorBody),
    ))]
pub(crate) async fn post_chat(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    PathParam(agent_id): PathParam<String>,
    Body(request): Body<ChatRequest>,
) -> Result<Response, ApiError> {
    let started = std::time::Instant::now();
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
    let mut meta = json!({"threadId": thread.thread_id.as_str(), "agentId": agent_id.as_str()});

    if last.role == "user" {
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
        check_text("the message", &text, state.limits.message_bytes)?;
        let mut options = RunOptions::new().thread(thread.thread_id.clone());
        if let Some(resource) = &thread.resource_id {
            options = options.resource(resource.clone());
        }
        if let Some(by) = caller.by() {
            options = options.by(by);
        }
        let stream = agent.stream_with(text, options);
        let run_id = stream.run_id().clone();
        meta["runId"] = json!(run_id.as_str());
        // Answered once the run holds the thread's turn (or refused: 409, nothing stored).
        let chunks = state
            .hub
            .start(stream, &agent_id, StreamKind::Cycle(started))
            .await?;
        let ui = UiStream::new(
            meta,
            Some(format!("msg-{}", run_id.as_str())),
            HashSet::new(),
        );
        return Ok(ui_response(ui.convert(chunks), state.closing.grace_over()));
    }

    // The assistant's message last: answers to the waiting run's calls (the thread's newest
    // suspended run, the one state loaded).
    let newest_suspended = RunFilter::in_thread(&thread)
        .status(RunStatus::Suspended)
        .limit(1);
    let listed = state.store.list_runs(&newest_suspended).await?;
    let waiting = match listed.runs.first() {
        Some(listed) => Some(state.store.load_run(&listed.key()).await?.state),
        None => None,
    };
    let Some(waiting) = waiting else {
        return Err(ApiError::new(
            axum::http::StatusCode::CONFLICT,
            "not_suspended",
            "the chat waits for no answer: send a new message",
        ));
    };
    let run_id = waiting.run_id().clone();
    meta["runId"] = json!(run_id.as_str());
    let pending = waiting.pending_tool_calls();
    let known: HashSet<String> = last
        .parts
        .iter()
        .filter_map(|part| part.get("toolCallId").and_then(Value::as_str))
        .map(str::to_owned)
        .collect();
    let mut respond = agent.respond(waiting.key());
    if let Some(by) = caller.by() {
        respond = respond.by(by);
    }
    let mut answered = 0;
    for part in &last.parts {
        let Some(id) = part.get("toolCallId").and_then(Value::as_str) else {
            continue;
        };
        crate::checks::check_tool_call_id(id)?;
        if !pending.iter().any(|call| call.tool_call_id.as_str() == id) {
            continue;
        }
        let tool_call_id = ToolCallId::from(id);
        match part.get("state").and_then(Value::as_str) {
            Some("output-available") => {
                let output = part.get("output").cloned().unwrap_or(Value::Null);
                check_answer(&state, &output)?;
                // An approval also accepts `{"approved": bool, "reason"?}` as its answer.
                respond = respond.answer(&tool_call_id, output);
                answered += 1;
            }
            Some("approval-responded") => {
                let decision = approval_decision(id, part.get("approval"))?;
                if let CallResponse::Decline {
                    reason: Some(reason),
                } = &decision
                {
                    check_text("reason", reason, state.limits.answer_bytes)?;
                }
                respond = respond.response(&tool_call_id, decision);
                answered += 1;
            }
            _ => {}
        }
    }
    if answered == 0 {
        let ui = UiStream::new(meta, None, known);
        return Ok(ui_response(
            ui.rejected(
                "no pending question of the chat has an answer in this message",
                Map::new(),
            ),
            state.closing.grace_over(),
        ));
    }
    match respond.stream().await {
        Ok(stream) => {
            let chunks = state.hub.spawn(
                stream,
                &agent_id,
                StreamKind::Resume(started),
                Some(waiting),
            );
            let ui = UiStream::new(meta, None, known);
            Ok(ui_response(ui.convert(chunks), state.closing.grace_over()))
        }
        Err(error) => {
            let mut problems = Map::new();
            let message = rejection_text(&error);
            if let ResumeError::InvalidAnswer { tool_call_id, .. }
            | ResumeError::Expired { tool_call_id, .. } = &error
            {
                problems.insert(tool_call_id.as_str().to_owned(), json!(message));
            }
            tracing::info!(run_id = %run_id, error = %error_chain_text(&error), "chat answer refused");
            let ui = UiStream::new(meta, None, known);
            Ok(ui_response(
                ui.rejected(&message, problems),
                state.closing.grace_over(),
            ))
        }
    }
}

/// The decision of an `approval-responded` part's `approval` (`{id, approved, reason?}`, the
/// AI SDK's shape), read by core's one reading of approvals: only a boolean `approved` decides;
/// anything else is 400 `invalid_answer` and nothing is recorded (never a decline the person
/// did not make).
fn approval_decision(
    tool_call_id: &str,
    approval: Option<&Value>,
) -> Result<CallResponse, ApiError> {
    let mut decision = Map::new();
    for field in ["approved", "reason"] {
        if let Some(value) = approval.and_then(|approval| approval.get(field)) {
            decision.insert(field.to_owned(), value.clone());
        }
    }
    CallResponse::from_approval(&Value::Object(decision)).map_err(|rejection| {
        ApiError::new(
            axum::http::StatusCode::BAD_REQUEST,
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
        other => other.to_string(),
    }
}

/// The SSE response of UI message chunks, with the protocol's header, ending with `[DONE]`.
fn ui_response(
    chunks: impl Stream<Item = Value> + Send + 'static,
    until: impl Future<Output = ()> + Send + 'static,
) -> Response {
    let events = chunks
        .map(|chunk| Event::default().data(chunk.to_string()))
        .chain(futures::stream::once(async {
            Event::default().data("[DONE]")
        }))
        .map(Ok::<_, Infallible>);
    let mut response = crate::sse::events_response(events, until);
    response
        .headers_mut()
        .insert(STREAM_HEADER.0, HeaderValue::from_static(STREAM_HEADER.1));
    response
}

/// `GET /api/agents/{agentId}/chat/{chatId}/messages`: `{"messages": UIMessage[]}`, the
/// thread as the AI SDK's UI messages. A pending question is a tool part in state
/// `input-available` (with its `data-askloop-question` part), an approval one in
/// `approval-requested`: a reloaded page shows them again.
#[utoipa::path(get, path = "/api/agents/{agentId}/chat/{chatId}/messages", tag = "chat",
    params(("agentId" = String, Path, description = "The agent's id"),
           ("chatId" = String, Path, description = "The chat's id (its thread id)")),
    responses(
        (status = 200, description = "The chat's UI messages", body = ChatMessages),
        (status = 400, description = "bad_request", body = crate::error::ErrorBody),
        (status = 401, description = "No or bad API key", body = crate::error::ErrorBody),
        (status = 403, description = "The key may not use this agent", body = crate::error::ErrorBody),
        (status = 404, description = "agent_not_found, chat_not_found", body = crate::error::ErrorBody),
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
        messages.extend(ui_messages(run));
    }
    Ok(Json(json!({"messages": messages})).into_response())
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
        (status = 400, description = "bad_request (a blank, control-character or over-long chat id)", body = crate::error::ErrorBody),
        (status = 401, description = "No or bad API key", body = crate::error::ErrorBody),
        (status = 403, description = "The key may not use this agent", body = crate::error::ErrorBody),
        (status = 404, description = "agent_not_found", body = crate::error::ErrorBody),
    ))]
pub(crate) async fn get_stream(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    PathParam((agent_id, chat_id)): PathParam<(String, String)>,
) -> Result<Response, ApiError> {
    let agent_id = AgentId::from(agent_id);
    agent_for_caller(&state, &caller, &agent_id).await?;
    let thread = chat_thread(&caller, &chat_id)?;
    let no_turn = || axum::http::StatusCode::NO_CONTENT.into_response();
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

/// The UI messages of one run: the person's message, then one assistant message with every
/// step (a `step-start` part, text, reasoning and tool parts), its results, and its pending
/// calls.
pub(crate) fn ui_messages(run: &RunState) -> Vec<Value> {
    let run_id = run.run_id().as_str();
    let mut out = Vec::new();
    let mut parts: Vec<Value> = Vec::new();
    for message in run.messages() {
        match message {
            Message::User { text } => out.push(json!({
                "id": format!("user-{run_id}"),
                "role": "user",
                "parts": [{"type": "text", "text": text}],
            })),
            Message::Assistant { parts: assistant } => {
                parts.push(json!({"type": "step-start"}));
                for part in assistant {
                    match part {
                        AssistantPart::Text { text } => {
                            parts.push(json!({"type": "text", "text": text, "state": "done"}));
                        }
                        AssistantPart::Reasoning { text, .. } => {
                            parts.push(json!({"type": "reasoning", "text": text, "state": "done"}));
                        }
                        AssistantPart::ToolCall(call) => parts.push(json!({
                            "type": format!("tool-{}", call.name),
                            "toolCallId": call.id.as_str(),
                            "state": "input-available",
                            "input": call.args.to_value(),
                        })),
                        _ => {}
                    }
                }
            }
            Message::Tool { results } => {
                for result in results {
                    let Some(part) = parts.iter_mut().rev().find(|part| {
                        part.get("toolCallId").and_then(Value::as_str)
                            == Some(result.tool_call_id.as_str())
                    }) else {
                        continue;
                    };
                    if result.is_error {
                        part["state"] = json!("output-error");
                        part["errorText"] = json!(error_text(&result.result));
                    } else {
                        part["state"] = json!("output-available");
                        part["output"] = result.result.clone();
                    }
                }
            }
        }
    }
    for pending in run.pending_tool_calls() {
        let id = pending.tool_call_id.as_str();
        if pending.kind == PendingKind::Approval
            && let Some(part) = parts
                .iter_mut()
                .rev()
                .find(|part| part.get("toolCallId").and_then(Value::as_str) == Some(id))
        {
            part["state"] = json!("approval-requested");
            part["approval"] = json!({"id": id});
        }
        let question = PendingCall::of(run.run_id(), &pending);
        parts.push(json!({"type": "data-askloop-question", "id": id, "data": question}));
    }
    if !parts.is_empty() {
        out.push(json!({
            "id": format!("msg-{run_id}"),
            "role": "assistant",
            "metadata": {
                "runId": run_id,
                "threadId": run.thread_id().as_str(),
                "agentId": run.agent_id().as_str(),
            },
            "parts": parts,
        }));
    }
    out
}

/// The text of a failed tool result (its `error` or `message` field, else its JSON).
fn error_text(result: &Value) -> String {
    ["error", "message", "content"]
        .iter()
        .find_map(|key| result.get(key).and_then(Value::as_str))
        .map_or_else(|| result.to_string(), str::to_owned)
}

/// Turns one askloop stream (wire chunks) into UI message chunks (see the module's table).
#[derive(Debug)]
pub(crate) struct UiStream {
    metadata: Value,
    message_id: Option<String>,
    /// Tool call ids the client already has (a re-announced call is not announced again).
    known: HashSet<String>,
    started: bool,
    text: Option<String>,
    reasoning: Option<String>,
    parts: u32,
    finished: bool,
}

impl UiStream {
    /// A converter for a stream whose message carries `metadata`; `message_id` for a new
    /// assistant message (none: the stream continues the client's last one).
    pub(crate) fn new(metadata: Value, message_id: Option<String>, known: HashSet<String>) -> Self {
        Self {
            metadata,
            message_id,
            known,
            started: false,
            text: None,
            reasoning: None,
            parts: 0,
            finished: false,
        }
    }

    /// The UI message stream of `chunks` (wire chunk JSON texts).
    pub(crate) fn convert(
        mut self,
        chunks: impl Stream<Item = Arc<str>> + Send + 'static,
    ) -> impl Stream<Item = Value> + Send + 'static {
        async_stream::stream! {
            futures::pin_mut!(chunks);
            while let Some(text) = chunks.next().await {
                let chunk = serde_json::from_str::<Value>(&text).unwrap_or(Value::Null);
                for out in self.push(&chunk) {
                    yield out;
                }
            }
            for out in self.end() {
                yield out;
            }
        }
    }

    /// The stream of a refused answer: `start`, a transient `data-askloop-rejection` part
    /// (`{message, problems: {toolCallId: text}}`), an `error` chunk; nothing else.
    pub(crate) fn rejected(
        mut self,
        message: &str,
        problems: Map<String, Value>,
    ) -> impl Stream<Item = Value> + Send + 'static {
        let mut out = self.start();
        out.push(json!({
            "type": "data-askloop-rejection",
            "data": {"message": message, "problems": problems},
            "transient": true,
        }));
        out.push(json!({"type": "error", "errorText": message}));
        futures::stream::iter(out)
    }

    fn start(&mut self) -> Vec<Value> {
        if self.started {
            return Vec::new();
        }
        self.started = true;
        let mut start = json!({"type": "start", "messageMetadata": self.metadata});
        if let Some(id) = &self.message_id {
            start["messageId"] = json!(id);
        }
        vec![start]
    }

    fn close_text(&mut self, out: &mut Vec<Value>) {
        if let Some(id) = self.text.take() {
            out.push(json!({"type": "text-end", "id": id}));
        }
        if let Some(id) = self.reasoning.take() {
            out.push(json!({"type": "reasoning-end", "id": id}));
        }
    }

    fn next_id(&mut self, prefix: &str) -> String {
        self.parts += 1;
        format!("{prefix}-{}", self.parts)
    }

    /// The UI chunks of one wire chunk.
    pub(crate) fn push(&mut self, chunk: &Value) -> Vec<Value> {
        let mut out = self.start();
        let payload = chunk.get("payload").cloned().unwrap_or(Value::Null);
        let str_of = |key: &str| {
            payload
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        match chunk
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default()
        {
            "step-start" => {
                self.close_text(&mut out);
                out.push(json!({"type": "start-step"}));
            }
            "text-delta" => {
                if let Some(id) = self.reasoning.take() {
                    out.push(json!({"type": "reasoning-end", "id": id}));
                }
                let id = match &self.text {
                    Some(id) => id.clone(),
                    None => {
                        let id = self.next_id("text");
                        out.push(json!({"type": "text-start", "id": id}));
                        self.text = Some(id.clone());
                        id
                    }
                };
                out.push(json!({"type": "text-delta", "id": id, "delta": str_of("text")}));
            }
            "reasoning-delta" => {
                if let Some(id) = self.text.take() {
                    out.push(json!({"type": "text-end", "id": id}));
                }
                let id = match &self.reasoning {
                    Some(id) => id.clone(),
                    None => {
                        let id = self.next_id("reasoning");
                        out.push(json!({"type": "reasoning-start", "id": id}));
                        self.reasoning = Some(id.clone());
                        id
                    }
                };
                out.push(json!({"type": "reasoning-delta", "id": id, "delta": str_of("text")}));
            }
            "tool-call" => {
                self.close_text(&mut out);
                self.announce(&payload, &mut out);
            }
            "tool-result" => {
                self.close_text(&mut out);
                self.announce(&payload, &mut out);
                let id = str_of("toolCallId");
                let result = payload.get("result").cloned().unwrap_or(Value::Null);
                if payload.get("isError").and_then(Value::as_bool) == Some(true) {
                    out.push(json!({"type": "tool-output-error", "toolCallId": id, "errorText": error_text(&result)}));
                } else {
                    out.push(json!({"type": "tool-output-available", "toolCallId": id, "output": result}));
                }
            }
            kind @ ("tool-call-suspended" | "tool-call-approval") => {
                self.close_text(&mut out);
                self.announce(&payload, &mut out);
                let id = str_of("toolCallId");
                let approval = kind == "tool-call-approval";
                if approval {
                    out.push(json!({"type": "tool-approval-request", "approvalId": id, "toolCallId": id}));
                }
                if let Some(question) = PendingCall::of_chunk(chunk) {
                    out.push(json!({"type": "data-askloop-question", "id": id, "data": question}));
                }
            }
            "step-finish" => {
                self.close_text(&mut out);
                out.push(json!({"type": "finish-step"}));
            }
            "finish" => {
                self.close_text(&mut out);
                let reason = payload
                    .pointer("/stepResult/reason")
                    .and_then(Value::as_str)
                    .unwrap_or("stop");
                let reason = match reason {
                    "stop" | "length" | "content-filter" | "tool-calls" | "error" | "other" => {
                        reason
                    }
                    "max-steps" => "length",
                    _ => "other",
                };
                out.push(json!({"type": "finish", "finishReason": reason, "messageMetadata": self.metadata}));
                self.finished = true;
            }
            "error" => {
                self.close_text(&mut out);
                let message = payload
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or("the run failed");
                // A run cancelled while it ran (a Stop, `askloop runs cancel`, another
                // instance) ends as the AI SDK's own `abort`, not as a failure.
                if payload.pointer("/error/code").and_then(Value::as_str) == Some("cancelled") {
                    out.push(json!({"type": "abort", "reason": message}));
                } else {
                    out.push(json!({"type": "error", "errorText": message}));
                }
                self.finished = true;
            }
            _ => {}
        }
        out
    }

    /// A `tool-input-available` for a call the client does not hold yet.
    fn announce(&mut self, payload: &Value, out: &mut Vec<Value>) {
        let Some(id) = payload.get("toolCallId").and_then(Value::as_str) else {
            return;
        };
        if !self.known.insert(id.to_owned()) {
            return;
        }
        out.push(json!({
            "type": "tool-input-available",
            "toolCallId": id,
            "toolName": payload.get("toolName").and_then(Value::as_str).unwrap_or_default(),
            "input": payload.get("args").cloned().unwrap_or(Value::Null),
        }));
    }

    /// The chunks that close the stream: open text parts, and `finish` for a stream that
    /// ended suspended.
    pub(crate) fn end(&mut self) -> Vec<Value> {
        let mut out = self.start();
        self.close_text(&mut out);
        if !self.finished {
            out.push(json!({"type": "finish", "finishReason": "tool-calls", "messageMetadata": self.metadata}));
            self.finished = true;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire(kind: &str, payload: Value) -> Value {
        json!({"type": kind, "runId": "R", "from": "AGENT", "payload": payload})
    }

    fn types(chunks: &[Value]) -> Vec<String> {
        chunks
            .iter()
            .map(|chunk| chunk["type"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    #[test]
    fn a_suspending_stream_becomes_a_tool_part_awaiting_output() {
        let mut ui = UiStream::new(json!({"runId": "R"}), Some("msg-R".into()), HashSet::new());
        let args = json!({"question": "Which repo?", "options": [{"label": "main"}]});
        let mut out = Vec::new();
        out.extend(ui.push(&wire("start", json!({"id": "assistant"}))));
        out.extend(ui.push(&wire("step-start", json!({"stepNumber": 1}))));
        out.extend(ui.push(&wire("text-delta", json!({"text": "Let me ask."}))));
        out.extend(ui.push(&wire(
            "tool-call",
            json!({"toolCallId": "c1", "toolName": "ask_user", "args": args}),
        )));
        out.extend(ui.push(&wire("tool-call-suspended", json!({
            "toolCallId": "c1", "toolName": "ask_user", "args": args,
            "suspendPayload": {"question": "Which repo?", "options": [{"label": "main"}], "selectionMode": "single_select"},
            "resumeSchema": "{\"type\":\"string\",\"enum\":[\"main\"]}",
        }))));
        out.extend(ui.end());
        assert_eq!(
            types(&out),
            [
                "start",
                "start-step",
                "text-start",
                "text-delta",
                "text-end",
                "tool-input-available",
                "data-askloop-question",
                "finish"
            ]
        );
        assert_eq!(out[0]["messageId"], "msg-R");
        assert_eq!(out[5]["input"], args);
        let question = &out[6]["data"];
        assert_eq!(question["kind"], "answer");
        assert_eq!(question["form"]["kind"], "select");
        assert_eq!(question["form"]["choices"][0]["label"], "main");
        // The one pending call shape (askloop_core::wire::PendingCall).
        assert_eq!(question["runId"], "R");
        assert_eq!(question["payload"]["question"], "Which repo?");
        assert!(question.get("suspendPayload").is_none(), "{question}");
        assert!(question.get("expiresAt").is_none(), "{question}");
        assert_eq!(out[7]["finishReason"], "tool-calls");
    }

    #[test]
    fn a_resume_does_not_re_announce_a_held_call_and_finishes() {
        let known = HashSet::from(["c1".to_owned()]);
        let mut ui = UiStream::new(json!({"runId": "R"}), None, known);
        let call = json!({"toolCallId": "c1", "toolName": "ask_user", "args": {}});
        let mut out = Vec::new();
        out.extend(ui.push(&wire("tool-call", call.clone())));
        let mut result = call.clone();
        result["result"] = json!({"content": "User answered: main", "isError": false});
        result["isError"] = json!(false);
        out.extend(ui.push(&wire("tool-result", result)));
        out.extend(ui.push(&wire("step-finish", json!({}))));
        out.extend(ui.push(&wire("step-start", json!({"stepNumber": 2}))));
        out.extend(ui.push(&wire("text-delta", json!({"text": "Done."}))));
        out.extend(ui.push(&wire("finish", json!({"stepResult": {"reason": "stop"}}))));
        out.extend(ui.end());
        assert_eq!(
            types(&out),
            [
                "start",
                "tool-output-available",
                "finish-step",
                "start-step",
                "text-start",
                "text-delta",
                "text-end",
                "finish"
            ]
        );
        assert!(out[0].get("messageId").is_none());
        assert_eq!(out[7]["finishReason"], "stop");
    }

    #[test]
    fn an_approval_is_an_approval_request() {
        let mut ui = UiStream::new(json!({"runId": "R"}), None, HashSet::new());
        let out = ui.push(&wire(
            "tool-call-approval",
            json!({
                "toolCallId": "c2", "toolName": "delete", "args": {"path": "/tmp/x"},
                "resumeSchema": "{\"type\":\"object\"}",
            }),
        ));
        assert_eq!(
            types(&out),
            [
                "start",
                "tool-input-available",
                "tool-approval-request",
                "data-askloop-question"
            ]
        );
        assert_eq!(out[2]["approvalId"], "c2");
        assert_eq!(out[3]["data"]["kind"], "approval");
        assert_eq!(out[3]["data"]["payload"]["args"]["path"], "/tmp/x");
    }

    #[test]
    fn an_error_chunk_ends_the_stream_without_finish() {
        let mut ui = UiStream::new(json!({}), None, HashSet::new());
        let mut out = ui.push(&wire(
            "error",
            json!({"error": {"message": "boom", "code": "model_error"}}),
        ));
        out.extend(ui.end());
        assert_eq!(types(&out), ["start", "error"]);
        assert_eq!(out[1]["errorText"], "boom");
    }

    #[test]
    fn a_cancelled_run_ends_with_abort() {
        let mut ui = UiStream::new(json!({}), None, HashSet::new());
        let mut out = ui.push(&wire(
            "error",
            json!({"error": {"message": "run r was cancelled while it ran; it ended as cancelled", "code": "cancelled"}}),
        ));
        out.extend(ui.end());
        assert_eq!(types(&out), ["start", "abort"]);
        assert_eq!(
            out[1]["reason"],
            "run r was cancelled while it ran; it ended as cancelled"
        );
    }
}
