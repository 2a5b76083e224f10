//! Conversation messages as askloop stores them and hands them to models.
//!
//! These are askloop's own provider-neutral types. Provider adapters translate them to and from
//! their wire formats at the edge; they are never a provider's types. Each tool result carries its call's audit trail
//! ([`AuditRecord`]: who answered, approved or declined, when). They are part of the stored
//! run format (see `crate::run`): change them only with a format bump, except by an optional field
//! that older builds may ignore (as [`ToolResult::suspension`]).
//!
//! Audit: every person's action on a call ([`AuditRecord`]: answer, approve, decline, expire,
//! cancel, message; by whom — the actor's id, resource, roles — from which route; when; for an
//! approval that edited the arguments, both versions; each vote of a quorum) is
//! kept on the call's pending slot while it waits and copied into the call's
//! [`ToolResult::audit`] when it completes, so it lives in the append-only messages, not in the
//! run's head. Results carry no audit on the wire; `askloop runs show` lists it. The model reads
//! one thing of it: that a person edited the call's arguments, and to what
//! ([`ToolResult::content_text`]); the model's call itself stays as the model wrote it, so every
//! provider accepts the history.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::actor::Actor;
use crate::ids::{ResourceId, ToolCallId};
use crate::time::now_ms;

/// One message of a conversation.
///
/// A conversation alternates `User` → `Assistant` → (`Tool` → `Assistant`)* for every step that
/// called tools. Every [`ToolCall`] of an `Assistant` message is answered by exactly one
/// [`ToolResult`] with the same id in the `Tool` message that follows it, in the order of the calls.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum Message {
    /// Text from the person (or the program) that started the run.
    User {
        /// The text.
        text: String,
    },
    /// One model response: text, reasoning and tool calls, in the order the model produced them.
    Assistant {
        /// The response's parts.
        parts: Vec<AssistantPart>,
    },
    /// The results of every tool call of the preceding assistant message, in call order.
    Tool {
        /// One result per tool call.
        results: Vec<ToolResult>,
    },
}

impl Message {
    /// A user message.
    pub fn user(text: impl Into<String>) -> Self {
        Self::User { text: text.into() }
    }

    /// Whether this is an assistant message.
    pub fn is_assistant(&self) -> bool {
        matches!(self, Self::Assistant { .. })
    }
}

/// One part of an assistant message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
#[non_exhaustive]
pub enum AssistantPart {
    /// Visible text.
    Text {
        /// The text.
        text: String,
    },
    /// Reasoning ("thinking") the provider returned. Providers that require it back (Anthropic
    /// thinking blocks) need the opaque `signature` echoed unchanged, so it is persisted as-is.
    Reasoning {
        /// The reasoning text (may be empty for redacted reasoning).
        text: String,
        /// Opaque provider signature, echoed back verbatim.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
    },
    /// A call of one tool.
    ToolCall(ToolCall),
}

/// A model's request to run one tool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCall {
    /// The id the model gave this call; its result must carry the same id.
    pub id: ToolCallId,
    /// The tool's name (its id in the agent's tool set).
    pub name: String,
    /// The arguments as the model produced them.
    pub args: ToolArgs,
}

/// Tool-call arguments: parsed JSON, or the raw text when the model produced text that is not JSON.
///
/// Malformed arguments are kept verbatim so the history sent back to the provider is exactly what
/// it produced, and so the error result can quote them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ToolArgs {
    /// Arguments that parsed as JSON (not necessarily valid for the tool's schema).
    Json(Value),
    /// Raw text that did not parse as JSON.
    Malformed(String),
}

impl ToolArgs {
    /// Parses raw argument text: JSON if it parses (empty text counts as `{}`), otherwise
    /// [`ToolArgs::Malformed`].
    pub fn parse(raw: &str) -> Self {
        if raw.trim().is_empty() {
            return Self::Json(Value::Object(Default::default()));
        }
        match serde_json::from_str(raw) {
            Ok(value) => Self::Json(value),
            Err(_) => Self::Malformed(raw.to_owned()),
        }
    }

    /// The arguments as a JSON value: the parsed value, or the raw text as a JSON string.
    pub fn to_value(&self) -> Value {
        match self {
            Self::Json(value) => value.clone(),
            Self::Malformed(raw) => Value::String(raw.clone()),
        }
    }

    /// The arguments as JSON text, as OpenAI-style providers expect them back.
    pub fn to_json_text(&self) -> String {
        match self {
            Self::Json(value) => value.to_string(),
            Self::Malformed(raw) => raw.clone(),
        }
    }
}

/// The outcome of one tool call, as the model will see it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolResult {
    /// The id of the call this answers.
    pub tool_call_id: ToolCallId,
    /// The tool's name.
    pub tool_name: String,
    /// The tool's output (or an error object), sent to the model as JSON.
    pub result: Value,
    /// Whether the call failed (bad arguments, unknown tool, the tool's own error).
    pub is_error: bool,
    /// The answer a resume gave the call, for a call that suspended (kept with the result so
    /// that a repeated answer can be recognized, and shown by `runs show`); not sent to the
    /// model. Absent (`None`) for calls that completed without suspending.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<Value>,
    /// Who answered, approved, declined, expired or cancelled the call, and when (empty for a
    /// call no person touched); not sent to the model, except the note of an approval that
    /// edited the arguments ([`ToolResult::content_text`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub audit: Vec<AuditRecord>,
    /// The question the call asked before it got this result (what it showed, the answers it
    /// accepted, its deadline), for a call that suspended and was then answered, expired,
    /// cancelled or superseded: kept so that a person can fork the run at this question with
    /// another answer ([`crate::Agent::fork`]); not sent to the model. `None` for calls that
    /// never suspended, and for results recorded before askloop kept it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspension: Option<Box<Suspension>>,
}

impl ToolResult {
    /// An error result in the reference framework's shape: `{"content": message, "isError": true}`.
    pub fn error(call: &ToolCall, message: impl Into<String>) -> Self {
        Self {
            tool_call_id: call.id.clone(),
            tool_name: call.name.clone(),
            result: serde_json::json!({ "content": message.into(), "isError": true }),
            is_error: true,
            answer: None,
            audit: Vec::new(),
            suspension: None,
        }
    }

    /// A successful result `{"content": text, "isError": false}` (the reference framework's
    /// shape for a text result).
    pub fn text(call: &ToolCall, text: impl Into<String>) -> Self {
        Self {
            tool_call_id: call.id.clone(),
            tool_name: call.name.clone(),
            result: serde_json::json!({ "content": text.into(), "isError": false }),
            is_error: false,
            answer: None,
            audit: Vec::new(),
            suspension: None,
        }
    }

    /// The result as the text a provider puts in its tool-result message: a JSON string result
    /// as its bare text, anything else as compact JSON. When a person approved the call with
    /// edited arguments ([`ToolResult::args_edit`]), the text starts with a note saying so and
    /// giving both versions (compact JSON), then `Result: ` and the result:
    ///
    /// `Note: the person who approved this call changed its arguments from {"path":"/"} to
    /// {"path":"/tmp"}; the tool ran with the changed arguments. Result: …`
    pub fn content_text(&self) -> String {
        let text = match &self.result {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        };
        match self.args_edit() {
            Some(edit) => format!(
                "Note: the person who approved this call changed its arguments from {} to {}; \
                 the tool ran with the changed arguments. Result: {text}",
                edit.original, edit.edited
            ),
            None => text,
        }
    }

    /// The arguments a person edited when approving the call, if they did: the last approval
    /// of its audit that carries an edit.
    pub fn args_edit(&self) -> Option<&ArgsEdit> {
        args_edit_of(&self.audit)
    }
}

/// A suspended tool call's request: the payload shown to whoever answers, and the JSON Schema
/// answers must match.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Suspension {
    /// What the tool wants to ask or show (for `ask_user`: `{question, options?, selectionMode?}`).
    pub payload: Value,
    /// JSON Schema of the answers this suspension accepts; `None` accepts any JSON value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_schema: Option<Value>,
    /// When the question expires unanswered, in ms since the Unix epoch (`None`: never). A
    /// sweep ([`crate::Agent::expire_due`], `askloop runs sweep`) then resolves the call with
    /// a result telling the model that no answer came in time. Tools that set it also put it
    /// in the payload as `expiresAt` (RFC 3339) for people and clients.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<u64>,
}

impl Suspension {
    /// A suspension with this payload, no schema of its own and no deadline.
    pub fn new(payload: Value) -> Self {
        Self {
            payload,
            resume_schema: None,
            expires_at_ms: None,
        }
    }
}

/// Token counts of one model call or of a whole run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
}

impl Usage {
    /// Input plus output tokens.
    pub fn total_tokens(&self) -> u64 {
        self.input_tokens + self.output_tokens
    }

    /// Adds another usage to this one.
    pub fn add(&mut self, other: Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
    }
}

/// Why a model step, or a whole run, ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum FinishReason {
    /// The model finished its answer.
    Stop,
    /// The model called tools; the loop continues.
    ToolCalls,
    /// The output token limit was reached.
    Length,
    /// The provider filtered the output.
    ContentFilter,
    /// The agent's step limit was reached while the model still called tools.
    MaxSteps,
    /// Anything else the provider reported.
    Other,
    /// The run was waiting for answers when the person wrote a new message to its thread: its
    /// waiting calls got results saying so, and a new run went on from the message.
    Superseded,
}

impl FinishReason {
    /// The reason's wire name (`"stop"`, `"tool-calls"`, …), as in the reference framework.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stop => "stop",
            Self::ToolCalls => "tool-calls",
            Self::Length => "length",
            Self::ContentFilter => "content-filter",
            Self::MaxSteps => "max-steps",
            Self::Other => "other",
            Self::Superseded => "superseded",
        }
    }
}

/// What a person (or the program acting for one) did to a waiting call or a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum AuditAction {
    /// Answered a suspended call.
    Answer,
    /// Approved a call that required approval.
    Approve,
    /// Declined a call that required approval (its tool never ran).
    Decline,
    /// The call's deadline passed without an answer or a decision (applied by a sweep).
    Expire,
    /// The run was cancelled while the call waited.
    Cancel,
    /// The person wrote a new message instead of answering.
    Message,
}

impl AuditAction {
    /// The action's name (`"answer"`, `"approve"`, `"decline"`, `"expire"`, `"cancel"`,
    /// `"message"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Answer => "answer",
            Self::Approve => "approve",
            Self::Decline => "decline",
            Self::Expire => "expire",
            Self::Cancel => "cancel",
            Self::Message => "message",
        }
    }
}

/// One entry of a call's audit trail: what was done, by whom, when. Kept with the call's
/// result ([`ToolResult::audit`]) and shown by `askloop runs show`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct AuditRecord {
    /// What was done.
    pub action: AuditAction,
    /// Who did it: the acting [`crate::Actor`]'s id (an API key's label, `cli:USER`, `web`, a
    /// resource id, `sweep` for an expiry; for an answer link its issuer's, or `link:<id>`
    /// when unknown); `None` when the caller did not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// The resource the actor acted for, if it said (stored as `resource`; absent otherwise, and
    /// in records written before askloop kept it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<ResourceId>,
    /// The roles the actor held (stored as `roles`; absent when none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<String>,
    /// The entry point the action came through (`POST /api/agents/{agentId}/approve-tool-call`,
    /// `cli approve`, `link`, …), if the front end said (stored as `route`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,
    /// When, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// For an approval that replaced the model's arguments
    /// ([`crate::CallResponse::ApproveWith`]): both versions. Stored as `argsEdit`, absent
    /// otherwise (an additive field of format 2: older records read as no edit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args_edit: Option<ArgsEdit>,
}

impl AuditRecord {
    /// A record of `action` by `by`, now.
    pub fn now(action: AuditAction, by: Option<String>) -> Self {
        Self {
            action,
            by,
            resource: None,
            roles: Vec::new(),
            route: None,
            at_ms: now_ms(),
            args_edit: None,
        }
    }

    /// A record of `action` by `actor` (its id, resource, roles and route), now.
    pub fn by_actor(action: AuditAction, actor: Option<&Actor>) -> Self {
        let mut record = Self::now(action, actor.map(|actor| actor.id.clone()));
        if let Some(actor) = actor {
            record.resource.clone_from(&actor.resource);
            record.roles.clone_from(&actor.roles);
            record.route.clone_from(&actor.route);
        }
        record
    }

    /// This record, with the arguments a person edited.
    #[must_use]
    pub fn with_args_edit(mut self, edit: ArgsEdit) -> Self {
        self.args_edit = Some(edit);
        self
    }
}

/// The arguments of a call before and after a person edited them when approving it
/// ([`AuditRecord::args_edit`]): `{"original": …, "edited": …}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ArgsEdit {
    /// The arguments as the model wrote them (they stay in the model's call).
    pub original: Value,
    /// The arguments the person approved and the tool ran with.
    pub edited: Value,
}

impl ArgsEdit {
    /// The edit of `original` into `edited`.
    pub fn new(original: Value, edited: Value) -> Self {
        Self { original, edited }
    }
}

/// The edit of the last approval in `audit` that carries one.
pub(crate) fn args_edit_of(audit: &[AuditRecord]) -> Option<&ArgsEdit> {
    audit
        .iter()
        .rev()
        .find(|record| record.action == AuditAction::Approve)
        .and_then(|record| record.args_edit.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_arguments_are_kept_verbatim() {
        assert_eq!(
            ToolArgs::parse("{\"a\":"),
            ToolArgs::Malformed("{\"a\":".into())
        );
        assert_eq!(ToolArgs::parse(""), ToolArgs::Json(serde_json::json!({})));
        assert_eq!(ToolArgs::parse("{\"a\":1}").to_json_text(), "{\"a\":1}");
    }

    #[test]
    fn messages_round_trip_through_json() {
        let message = Message::Assistant {
            parts: vec![
                AssistantPart::Reasoning {
                    text: "hm".into(),
                    signature: Some("sig".into()),
                },
                AssistantPart::ToolCall(ToolCall {
                    id: "c1".into(),
                    name: "ask_user".into(),
                    args: ToolArgs::Json(serde_json::json!({"question": "Which?"})),
                }),
            ],
        };
        let text = serde_json::to_string(&message).unwrap();
        let back: Message = serde_json::from_str(&text).unwrap();
        assert_eq!(back, message);
    }
}
