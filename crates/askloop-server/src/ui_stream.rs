//! The AI SDK's UI message stream (npm `ai` 7.x, what `useChat` and its `DefaultChatTransport`
//! speak), translated from askloop's wire chunks ([`askloop_core::wire`]): [`UiStream`] turns
//! one askloop stream into UI message chunks, [`ui_response`] sends them. (A run's stored
//! messages as UI messages are [`crate::ui_messages`].)
//!
//! The response is SSE, `data: <UI message chunk JSON>` per event and `data: [DONE]` last,
//! with the header `x-vercel-ai-ui-message-stream: v1` ([`STREAM_HEADER`]). The translation:
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
//! | `subagent-chunk` | `data-askloop-subagent` per child run (below); a child's `tool-result` of a call announced here also `tool-output-available` / `tool-output-error` under the call's composite id |
//! | end of a suspended stream | `finish` (`finishReason: "tool-calls"`) |
//!
//! A sub-agent's work never joins the root's text: each child run (a grandchild's too) is one
//! `data-askloop-subagent` part, `id` = the child run's id, sent again (the AI SDK replaces a
//! data part of the same type and id) as it changes: `data: {runId, agentId, parentRunId,
//! toolCallId, path, text, status}` — `toolCallId` is the call that started it as the root
//! names it (`c1`, a grandchild's `c1~c5`), `path` the sub-agents from the root's down to it,
//! `text` the child's text so far (its steps' texts, a line break between two), `status` `running`, `suspended` (the stream ended while it
//! waits), `completed`, `failed` or `cancelled`. A child's waiting calls come as the root's own
//! (`tool-call-suspended` with the composite id `PARENT_CALL~CHILD_CALL` and its `subagent`
//! origin): a tool part of that id and its `data-askloop-question`, answered like any other; the
//! resumed stream's child `tool-result` of that call completes that tool part. A request's
//! `data-askloop-subagent` parts seed the converter ([`UiStream::with_subagents`]), so a resumed
//! child's text goes on from what the client shows.
//!
//! Text parts are closed (`text-end`, `reasoning-end`) before any other part and at the end.
//!
//! A resumed stream (the chat's stream resumption route) goes through the same [`UiStream`],
//! fed the turn's wire chunks from its start; its `start` always carries
//! `messageId: "msg-<runId>"`, the id of the run's assistant message in the messages route, so
//! the client (which resets the message on a replay's first `start`) rebuilds that message
//! instead of adding one.

use std::collections::{BTreeMap, HashSet};
use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;

use askloop_core::wire::PendingCall;
use askloop_core::{SUBAGENT_CALL_SEPARATOR, nested_call_id};
use axum::http::HeaderValue;
use axum::response::Response;
use axum::response::sse::Event;
use futures::{Stream, StreamExt};
use serde_json::{Map, Value, json};

use crate::sse;

/// The header that marks a UI message stream response, and its value.
pub(crate) const STREAM_HEADER: (&str, &str) = ("x-vercel-ai-ui-message-stream", "v1");

/// The SSE response of UI message chunks, with the protocol's header, ending with `[DONE]`.
pub(crate) fn ui_response(
    chunks: impl Stream<Item = Value> + Send + 'static,
    until: impl Future<Output = ()> + Send + 'static,
) -> Response {
    let events = chunks
        .map(|chunk| Event::default().data(chunk.to_string()))
        .chain(futures::stream::once(async {
            Event::default().data("[DONE]")
        }))
        .map(Ok::<_, Infallible>);
    let mut response = sse::events_response(events, until);
    response
        .headers_mut()
        .insert(STREAM_HEADER.0, HeaderValue::from_static(STREAM_HEADER.1));
    response
}

/// The text of a failed tool result (its `error` or `message` field, else its JSON).
pub(crate) fn error_text(result: &Value) -> String {
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
    /// The child runs seen so far (`data-askloop-subagent`), by run id.
    subagents: BTreeMap<String, Value>,
    /// The child runs whose next text starts a new step's: a line break goes before it.
    step_breaks: HashSet<String>,
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
            subagents: BTreeMap::new(),
            step_breaks: HashSet::new(),
        }
    }

    /// Seeds the child runs the client shows (`data-askloop-subagent` parts of the request's
    /// message): a resumed child's text goes on from there.
    pub(crate) fn with_subagents<'part>(
        mut self,
        parts: impl IntoIterator<Item = &'part Value>,
    ) -> Self {
        for part in parts {
            if part.get("type").and_then(Value::as_str) != Some("data-askloop-subagent") {
                continue;
            }
            if let (Some(id), Some(data)) =
                (part.get("id").and_then(Value::as_str), part.get("data"))
                && data.is_object()
            {
                self.subagents.insert(id.to_owned(), data.clone());
            }
        }
        self
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
        match chunk
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default()
        {
            "step-start" => {
                self.close_text(&mut out);
                out.push(json!({"type": "start-step"}));
            }
            "text-delta" => self.text_delta(str_field(&payload, "text"), &mut out),
            "reasoning-delta" => self.reasoning_delta(str_field(&payload, "text"), &mut out),
            "tool-call" => {
                self.close_text(&mut out);
                self.announce(&payload, &mut out);
            }
            "tool-result" => self.tool_result(&payload, &mut out),
            kind @ ("tool-call-suspended" | "tool-call-approval") => {
                self.waiting_call(chunk, &payload, kind == "tool-call-approval", &mut out);
            }
            "step-finish" => {
                self.close_text(&mut out);
                out.push(json!({"type": "finish-step"}));
            }
            "finish" => self.finish(&payload, &mut out),
            "error" => self.failed(&payload, &mut out),
            "subagent-chunk" => self.subagent(chunk, &mut out),
            _ => {}
        }
        out
    }

    /// A `subagent-chunk` (nested once per level): the child run's `data-askloop-subagent`
    /// part when its text or status changes; a child's result of a call announced here (by its
    /// composite id) completes that call's tool part.
    fn subagent(&mut self, chunk: &Value, out: &mut Vec<Value>) {
        let mut parent_run = str_field(chunk, "runId");
        let mut calls: Vec<String> = Vec::new();
        let mut path: Vec<Value> = Vec::new();
        let mut current = chunk;
        while current.get("type").and_then(Value::as_str) == Some("subagent-chunk") {
            let Some(payload) = current.get("payload") else {
                return;
            };
            let child = str_field(payload, "runId");
            calls.push(str_field(payload, "toolCallId"));
            path.push(json!(str_field(payload, "agentId")));
            let Some(inner) = payload.get("chunk") else {
                return;
            };
            if inner.get("type").and_then(Value::as_str) != Some("subagent-chunk") {
                let started_by = calls.join(&SUBAGENT_CALL_SEPARATOR.to_string());
                self.child_chunk(&child, &parent_run, &started_by, &path, inner, out);
                return;
            }
            parent_run = child;
            current = inner;
        }
    }

    /// One chunk `inner` of child run `run_id`, started by the call the root names `started_by`.
    fn child_chunk(
        &mut self,
        run_id: &str,
        parent_run: &str,
        started_by: &str,
        path: &[Value],
        inner: &Value,
        out: &mut Vec<Value>,
    ) {
        let payload = inner.get("payload").cloned().unwrap_or(Value::Null);
        let agent_id = path.last().cloned().unwrap_or(Value::Null);
        let entry = self.subagents.entry(run_id.to_owned()).or_insert_with(|| {
            json!({
                "runId": run_id, "agentId": agent_id, "parentRunId": parent_run,
                "toolCallId": started_by, "path": path, "text": "", "status": "running",
            })
        });
        let changed = match inner
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default()
        {
            "start" => set_status(entry, "running"),
            "step-start" => {
                if !str_field(entry, "text").is_empty() {
                    self.step_breaks.insert(run_id.to_owned());
                }
                set_status(entry, "running")
            }
            "text-delta" => {
                let delta = str_field(&payload, "text");
                let mut text = str_field(entry, "text");
                if !delta.is_empty() && self.step_breaks.remove(run_id) {
                    text.push('\n');
                }
                let text = format!("{text}{delta}");
                entry["text"] = json!(text);
                entry["status"] = json!("running");
                !delta.is_empty()
            }
            "finish" => set_status(entry, "completed"),
            "error" => {
                let cancelled =
                    payload.pointer("/error/code").and_then(Value::as_str) == Some("cancelled");
                set_status(entry, if cancelled { "cancelled" } else { "failed" })
            }
            "tool-result" => {
                let composite = nested_call_id(started_by, &str_field(&payload, "toolCallId"));
                if self.known.contains(&composite) {
                    let mut result = payload.clone();
                    result["toolCallId"] = json!(composite);
                    self.tool_result(&result, out);
                }
                false
            }
            _ => false,
        };
        if changed && let Some(data) = self.subagents.get(run_id) {
            out.push(json!({"type": "data-askloop-subagent", "id": run_id, "data": data}));
        }
    }

    /// A `text-delta`: ends an open reasoning part, starts a text part unless one is open.
    fn text_delta(&mut self, delta: String, out: &mut Vec<Value>) {
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
        out.push(json!({"type": "text-delta", "id": id, "delta": delta}));
    }

    /// A `reasoning-delta`: ends an open text part, starts a reasoning part unless one is open.
    fn reasoning_delta(&mut self, delta: String, out: &mut Vec<Value>) {
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
        out.push(json!({"type": "reasoning-delta", "id": id, "delta": delta}));
    }

    /// A `tool-result`: its call announced if new, then its output or error.
    fn tool_result(&mut self, payload: &Value, out: &mut Vec<Value>) {
        self.close_text(out);
        self.announce(payload, out);
        let id = str_field(payload, "toolCallId");
        let result = payload.get("result").cloned().unwrap_or(Value::Null);
        if payload.get("isError").and_then(Value::as_bool) == Some(true) {
            out.push(json!({"type": "tool-output-error", "toolCallId": id, "errorText": error_text(&result)}));
        } else {
            out.push(json!({"type": "tool-output-available", "toolCallId": id, "output": result}));
        }
    }

    /// A `tool-call-suspended` or (`approval`) `tool-call-approval`: its call announced if new,
    /// an approval's `tool-approval-request`, then the `data-askloop-question` part.
    fn waiting_call(
        &mut self,
        chunk: &Value,
        payload: &Value,
        approval: bool,
        out: &mut Vec<Value>,
    ) {
        self.close_text(out);
        self.announce(payload, out);
        let id = str_field(payload, "toolCallId");
        if approval {
            out.push(json!({"type": "tool-approval-request", "approvalId": id, "toolCallId": id}));
        }
        if let Some(question) = PendingCall::of_chunk(chunk) {
            out.push(json!({"type": "data-askloop-question", "id": id, "data": question}));
        }
    }

    /// A `finish`: the UI `finish`, its reason one the AI SDK knows.
    fn finish(&mut self, payload: &Value, out: &mut Vec<Value>) {
        self.close_text(out);
        let reason = payload
            .pointer("/stepResult/reason")
            .and_then(Value::as_str)
            .unwrap_or("stop");
        let reason = match reason {
            "stop" | "length" | "content-filter" | "tool-calls" | "error" | "other" => reason,
            "max-steps" => "length",
            _ => "other",
        };
        out.push(
            json!({"type": "finish", "finishReason": reason, "messageMetadata": self.metadata}),
        );
        self.finished = true;
    }

    /// An `error`: the UI `error`, or `abort` for a run cancelled while it ran.
    fn failed(&mut self, payload: &Value, out: &mut Vec<Value>) {
        self.close_text(out);
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
            // Ended suspended: a child still running waits (for a person, or for its own child).
            for (id, data) in &mut self.subagents {
                if set_status(data, "suspended") {
                    out.push(json!({"type": "data-askloop-subagent", "id": id, "data": data}));
                }
            }
            out.push(json!({"type": "finish", "finishReason": "tool-calls", "messageMetadata": self.metadata}));
            self.finished = true;
        }
        out
    }
}

/// Sets a child's `status` from `running` to `status` (a finished child's status stays);
/// whether it changed.
fn set_status(data: &mut Value, status: &str) -> bool {
    let now = data
        .get("status")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let settled = matches!(now, "completed" | "failed" | "cancelled");
    if now == status || (settled && status != "running") {
        return false;
    }
    data["status"] = json!(status);
    true
}

/// The text of a payload's field `key` (empty when absent or not a text).
fn str_field(payload: &Value, key: &str) -> String {
    payload
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
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

    /// A sub-agent's chunks (a grandchild's too) become one data part per child run, never the
    /// root's text; a child's result of a nested call announced here completes its tool part.
    #[test]
    fn issue35_subagent_chunks_become_data_parts_per_child_run() {
        let nested = |child: &str, agent: &str, call: &str, chunk: Value| {
            json!({"type": "subagent-chunk", "runId": "R", "from": "AGENT", "payload": {
                "runId": child, "agentId": agent, "toolCallId": call, "chunk": chunk,
            }})
        };
        let child_chunk = |kind: &str, run: &str, payload: Value| json!({"type": kind, "runId": run, "from": "AGENT", "payload": payload});
        let mut ui = UiStream::new(
            json!({"runId": "R"}),
            None,
            HashSet::from(["s1~r1".to_owned()]),
        );
        let mut out = Vec::new();
        out.extend(ui.push(&nested(
            "C",
            "researcher",
            "s1",
            child_chunk("text-delta", "C", json!({"text": "Hel"})),
        )));
        out.extend(ui.push(&nested(
            "C",
            "researcher",
            "s1",
            child_chunk("text-delta", "C", json!({"text": "lo"})),
        )));
        out.extend(ui.push(&nested(
            "C",
            "researcher",
            "s1",
            child_chunk("tool-result", "C", json!({"toolCallId": "r1", "toolName": "ask_user", "args": {}, "result": {"content": "User answered: arxiv"}, "isError": false})),
        )));
        // A grandchild G, started by C's call c5.
        out.extend(ui.push(&nested(
            "C",
            "researcher",
            "s1",
            nested(
                "G",
                "reader",
                "c5",
                child_chunk("text-delta", "G", json!({"text": "Deep"})),
            ),
        )));
        out.extend(ui.push(&nested(
            "C",
            "researcher",
            "s1",
            child_chunk("finish", "C", json!({})),
        )));
        out.extend(ui.end());
        assert_eq!(
            types(&out),
            [
                "start",
                "data-askloop-subagent",
                "data-askloop-subagent",
                "tool-output-available",
                "data-askloop-subagent",
                "data-askloop-subagent",
                "data-askloop-subagent",
                "finish"
            ]
        );
        assert_eq!(out[2]["id"], "C");
        assert_eq!(
            out[2]["data"],
            json!({"runId": "C", "agentId": "researcher", "parentRunId": "R", "toolCallId": "s1",
                   "path": ["researcher"], "text": "Hello", "status": "running"})
        );
        assert_eq!(out[3]["toolCallId"], "s1~r1");
        assert_eq!(out[4]["id"], "G");
        assert_eq!(out[4]["data"]["parentRunId"], "C");
        assert_eq!(out[4]["data"]["toolCallId"], "s1~c5");
        assert_eq!(out[4]["data"]["path"], json!(["researcher", "reader"]));
        assert_eq!(out[5]["data"]["status"], "completed");
        // The stream ended suspended: the grandchild still running waits.
        assert_eq!(out[6]["id"], "G");
        assert_eq!(out[6]["data"]["status"], "suspended");
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
