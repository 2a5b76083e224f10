//! MCP elicitation: a server's question to a person during a tool call ([`Elicitation`]), the
//! person's answer ([`ElicitationAnswer`]), the suspension that carries the question to them,
//! and the client handler that routes a server's `elicitation/create` to the tool call it
//! belongs to.
//!
//! # The path of a question
//! 1. A tool call runs (`tools/call`); the server sends `elicitation/create`. The handler gives
//!    it to the one tool call in flight on that connection (calls are serialized per
//!    connection, so there is never a doubt whose question it is).
//! 2. If the person already answered exactly this question for this call (same mode, message
//!    and schema or URL; each stored answer used once), the handler sends that answer.
//! 3. Otherwise the call is abandoned: `tools/call` is cancelled (`notifications/cancelled`),
//!    then the elicitation gets a JSON-RPC error ([`WITHDRAWN`]) saying so — never an accept,
//!    decline or cancel the person did not give — and the askloop tool call suspends with the
//!    question ([`ElicitationPayload`]) and a resume schema ([`resume_schema`]).
//! 4. On resume (in any process), the tool is called again with the same arguments, carrying
//!    every answer the person gave for this call; step 2 answers the server's questions from
//!    them, and a question not yet answered suspends again.
//!
//! A live request is deliberately not held open while the person decides: servers time their
//! requests out (the TypeScript SDK after 60 s), and a held call would block the server's other
//! calls. So only what a tool does *before* its first question runs twice (logged for
//! side-effecting tools): nothing, for tools that ask before they act. Outside a run
//! ([`crate::McpTool::call`]) a server's question is refused with the same error ([`WITHDRAWN`]).

use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use rmcp::model::{
    ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction,
    ElicitationCapability, ErrorCode, ErrorData, FormElicitationCapability, Implementation,
    UrlElicitationCapability,
};
use rmcp::service::{RequestContext, RoleClient};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::{Notify, oneshot};

/// The marker of an elicitation suspension's payload (`"kind": "mcp-elicitation"`).
pub const PAYLOAD_KIND: &str = "mcp-elicitation";

/// The JSON-RPC error code an abandoned or refused elicitation is answered with: the JSON-RPC
/// implementations' "request cancelled" (-32800). It is a protocol error, not an answer: the
/// server learns that nobody accepted, declined or cancelled.
pub const WITHDRAWN: ErrorCode = ErrorCode(-32800);

/// How long the handler waits for the tool call to be cancelled before it answers an
/// abandoned elicitation with [`WITHDRAWN`] (so the server sees the cancellation first).
const CANCEL_FIRST_WAIT: Duration = Duration::from_secs(5);

/// A question an MCP server asked during a tool call, as askloop shows and stores it.
///
/// JSON (inside an [`ElicitationPayload`]): `{"server", "tool", "message", "mode": "form",
/// "requestedSchema": {…}}` or `{"server", "tool", "message", "mode": "url", "url",
/// "elicitationId"?}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Elicitation {
    /// The server's name (its key in askloop.toml).
    pub server: String,
    /// The tool whose call asked.
    pub tool: String,
    /// The server's message to the person.
    pub message: String,
    /// What is asked: a form, or a link to open.
    #[serde(flatten)]
    pub request: ElicitationRequest,
}

/// What an [`Elicitation`] asks for (the MCP elicitation modes).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "camelCase")]
#[non_exhaustive]
pub enum ElicitationRequest {
    /// Form mode: content matching `requested_schema` (a flat JSON Schema object).
    #[serde(rename_all = "camelCase")]
    Form {
        /// The JSON Schema of the content, as the server sent it.
        requested_schema: Value,
    },
    /// URL mode: the person opens `url` and finishes something there (a sign-in, a payment);
    /// nothing they enter there passes through askloop.
    #[serde(rename_all = "camelCase")]
    Url {
        /// The link to open.
        url: String,
        /// The server's id of this elicitation (empty when it sent none).
        #[serde(default, skip_serializing_if = "String::is_empty")]
        elicitation_id: String,
    },
}

impl Elicitation {
    /// The elicitation of `params`, asked by `server` during a call of `tool`; `None` for a
    /// mode this crate does not know.
    fn from_params(server: &str, tool: &str, params: ElicitRequestParams) -> Option<Self> {
        let (message, request) = match params {
            ElicitRequestParams::FormElicitationParams {
                message,
                requested_schema,
                ..
            } => {
                let mut schema = serde_json::to_value(&requested_schema).ok()?;
                // The schema is nested in the resume schema, where a `$schema` is out of place.
                if let Some(object) = schema.as_object_mut() {
                    object.remove("$schema");
                }
                (
                    message,
                    ElicitationRequest::Form {
                        requested_schema: schema,
                    },
                )
            }
            ElicitRequestParams::UrlElicitationParams {
                message,
                url,
                elicitation_id,
                ..
            } => (
                message,
                ElicitationRequest::Url {
                    url,
                    elicitation_id,
                },
            ),
            _ => return None,
        };
        Some(Self {
            server: server.to_owned(),
            tool: tool.to_owned(),
            message,
            request,
        })
    }

    /// Whether `other` asks the very same thing: same server, tool, message, mode and schema
    /// (form) or URL (the server's elicitation id may differ between two calls).
    pub fn same_question(&self, other: &Self) -> bool {
        let same_request = match (&self.request, &other.request) {
            (
                ElicitationRequest::Form { requested_schema },
                ElicitationRequest::Form {
                    requested_schema: other,
                },
            ) => requested_schema == other,
            (ElicitationRequest::Url { url, .. }, ElicitationRequest::Url { url: other, .. }) => {
                url == other
            }
            _ => false,
        };
        same_request
            && self.server == other.server
            && self.tool == other.tool
            && self.message == other.message
    }

    /// The question in words, for every front end: `"MCP server S asks: MESSAGE"`, or for a
    /// link `"MCP server S asks: MESSAGE Open this link, then answer: URL"` (the link last, so
    /// nothing sticks to it).
    pub fn question(&self) -> String {
        match &self.request {
            ElicitationRequest::Form { .. } => {
                format!("MCP server {} asks: {}", self.server, self.message)
            }
            ElicitationRequest::Url { url, .. } => format!(
                "MCP server {} asks: {} Open this link, then answer: {url}",
                self.server, self.message
            ),
        }
    }

    fn mode(&self) -> &'static str {
        match &self.request {
            ElicitationRequest::Form { .. } => "form",
            ElicitationRequest::Url { .. } => "url",
        }
    }
}

/// What the person did with an elicitation: MCP's three actions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ElicitationDecision {
    /// Gave the content asked for (form), or finished at the link (URL).
    Accept,
    /// Refused explicitly.
    Decline,
    /// Dismissed the question without deciding.
    Cancel,
}

/// The person's answer to an elicitation, which is the resume value of its suspension and the
/// MCP `ElicitResult` the server receives: `{"action": "accept", "content": {…}}` (form),
/// `{"action": "accept"}` (URL), `{"action": "decline"}`, `{"action": "cancel"}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ElicitationAnswer {
    /// What the person did.
    pub action: ElicitationDecision,
    /// The content, for an accepted form (matching its requested schema).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Value>,
}

impl ElicitationAnswer {
    fn to_result(&self) -> ElicitResult {
        let action = match self.action {
            ElicitationDecision::Accept => ElicitationAction::Accept,
            ElicitationDecision::Decline => ElicitationAction::Decline,
            ElicitationDecision::Cancel => ElicitationAction::Cancel,
        };
        let result = ElicitResult::new(action);
        match (&self.action, &self.content) {
            (ElicitationDecision::Accept, Some(content)) => result.with_content(content.clone()),
            _ => result,
        }
    }
}

/// One question of a call and the person's answer to it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Answered {
    /// The question.
    pub elicitation: Elicitation,
    /// The person's answer.
    pub answer: ElicitationAnswer,
}

/// The payload of a suspension for an elicitation (what front ends show, and what the tool
/// reads back on resume):
///
/// ```json
/// {"kind": "mcp-elicitation",
///  "question": "MCP server shop asks: Which size?",
///  "url": "https://…",
///  "elicitation": {"server": "shop", "tool": "order", "message": "Which size?",
///                  "mode": "form", "requestedSchema": {…}},
///  "answered": [{"elicitation": {…}, "answer": {"action": "accept", "content": {…}}}]}
/// ```
///
/// `url` is there for URL mode only; `answered` holds the answers the person already gave to
/// earlier questions of the same call, in the order the server asked them (empty: left out).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ElicitationPayload {
    /// Always [`PAYLOAD_KIND`].
    pub kind: String,
    /// [`Elicitation::question`].
    pub question: String,
    /// The link to open, in URL mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The question.
    pub elicitation: Elicitation,
    /// Earlier questions of this call and their answers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub answered: Vec<Answered>,
}

impl ElicitationPayload {
    /// The payload asking `elicitation`, after `answered`.
    pub fn new(elicitation: Elicitation, answered: Vec<Answered>) -> Self {
        Self {
            kind: PAYLOAD_KIND.to_owned(),
            question: elicitation.question(),
            url: match &elicitation.request {
                ElicitationRequest::Url { url, .. } => Some(url.clone()),
                ElicitationRequest::Form { .. } => None,
            },
            elicitation,
            answered,
        }
    }

    /// The payload in `value`, if it is one (its `kind` is [`PAYLOAD_KIND`]).
    ///
    /// # Errors
    /// The deserializer's error when `value` says it is one but is damaged.
    pub fn from_value(value: &Value) -> Result<Option<Self>, serde_json::Error> {
        if value.get("kind").and_then(Value::as_str) != Some(PAYLOAD_KIND) {
            return Ok(None);
        }
        Self::deserialize(value).map(Some)
    }
}

/// The resume schema of a question: an object with `action` (`accept`, `decline`, `cancel`)
/// and, for an accepted form, `content` matching the requested schema (required then, refused
/// otherwise); a URL question takes the action alone.
pub fn resume_schema(request: &ElicitationRequest) -> Value {
    match request {
        ElicitationRequest::Form { requested_schema } => {
            let mut content = requested_schema.clone();
            if let Some(object) = content.as_object_mut()
                && !object.contains_key("description")
            {
                object.insert(
                    "description".to_owned(),
                    json!("the information asked for; give it when you accept"),
                );
            }
            json!({
                "type": "object",
                "properties": {
                    "action": {
                        "description": "accept, decline or cancel",
                        "oneOf": [
                            {"const": "accept", "description": "give the information asked for"},
                            {"const": "decline", "description": "refuse to give it"},
                            {"const": "cancel", "description": "dismiss the question without deciding"}
                        ]
                    },
                    "content": content
                },
                "required": ["action"],
                "additionalProperties": false,
                "if": {"properties": {"action": {"const": "accept"}}},
                "then": {"required": ["content"]},
                "else": {"not": {"required": ["content"]}}
            })
        }
        ElicitationRequest::Url { .. } => json!({
            "type": "object",
            "properties": {
                "action": {
                    "description": "accept once you finished at the link, else decline or cancel",
                    "oneOf": [
                        {"const": "accept", "description": "I opened the link and finished there"},
                        {"const": "decline", "description": "I will not open it"},
                        {"const": "cancel", "description": "dismiss the question without deciding"}
                    ]
                }
            },
            "required": ["action"],
            "additionalProperties": false
        }),
    }
}

/// The capabilities askloop's MCP client advertises in the `initialize` handshake: form and
/// URL elicitation, nothing else (no sampling, no roots, no tasks).
pub(crate) fn client_config() -> ClientConfig {
    let mut capabilities = ClientCapabilities::default();
    capabilities.elicitation = Some(
        ElicitationCapability::new()
            .with_form(FormElicitationCapability::new())
            .with_url(UrlElicitationCapability::new()),
    );
    ClientConfig::new(
        capabilities,
        Implementation::new("askloop", env!("CARGO_PKG_VERSION")),
    )
}

/// The tool call in flight on one connection, as the elicitation handler sees it.
pub(crate) struct ActiveCall {
    tool: String,
    script: Vec<Scripted>,
    /// Where a question nobody answered yet goes (`None` once sent, or when nobody can be
    /// asked: a call outside an agent run).
    asker: Option<oneshot::Sender<Elicitation>>,
    can_ask: bool,
    /// Notified once the call was cancelled after a question.
    abandoned: Arc<Notify>,
}

struct Scripted {
    answered: Answered,
    /// The position in which the server asked it during this call, once it did.
    used_at: Option<usize>,
}

impl ActiveCall {
    /// A call of `tool` that answers from `answered`, and sends a new question to `asker`.
    pub(crate) fn new(
        tool: &str,
        answered: Vec<Answered>,
        asker: Option<oneshot::Sender<Elicitation>>,
        abandoned: Arc<Notify>,
    ) -> Self {
        Self {
            tool: tool.to_owned(),
            script: answered
                .into_iter()
                .map(|answered| Scripted {
                    answered,
                    used_at: None,
                })
                .collect(),
            can_ask: asker.is_some(),
            asker,
            abandoned,
        }
    }

    /// Whether a question of this call went to the person (it is being withdrawn).
    pub(crate) fn asked(&self) -> bool {
        self.can_ask && self.asker.is_none()
    }

    /// The stored answers the server asked for during this call, in the order it asked.
    pub(crate) fn used_answers(self) -> Vec<Answered> {
        let mut used: Vec<(usize, Answered)> = self
            .script
            .into_iter()
            .filter_map(|scripted| scripted.used_at.map(|at| (at, scripted.answered)))
            .collect();
        used.sort_by_key(|(at, _)| *at);
        used.into_iter().map(|(_, answered)| answered).collect()
    }

    /// The person's stored answer to `elicitation`, the first unused one, marked used.
    fn stored_answer(&mut self, elicitation: &Elicitation) -> Option<ElicitationAnswer> {
        let position = self
            .script
            .iter()
            .filter(|scripted| scripted.used_at.is_some())
            .count();
        let scripted = self.script.iter_mut().find(|scripted| {
            scripted.used_at.is_none() && scripted.answered.elicitation.same_question(elicitation)
        })?;
        scripted.used_at = Some(position);
        Some(scripted.answered.answer.clone())
    }
}

/// The slot of a connection's call in flight (shared by the handler of every connection the
/// server opens).
pub(crate) type CallSlot = StdMutex<Option<ActiveCall>>;

/// askloop's MCP client handler: the capabilities of [`client_config`], and
/// `elicitation/create` routed to the call in flight (see the module's docs).
#[derive(Clone)]
pub(crate) struct ElicitationHandler {
    server: String,
    calls: Arc<CallSlot>,
    info: ClientConfig,
}

impl ElicitationHandler {
    /// The handler of server `server`'s connections, routing to `calls`.
    pub(crate) fn new(server: &str, calls: Arc<CallSlot>) -> Self {
        Self {
            server: server.to_owned(),
            calls,
            info: client_config(),
        }
    }
}

/// What the handler does with one elicitation.
enum Handling {
    Answer(ElicitResult),
    Ask {
        asker: oneshot::Sender<Elicitation>,
        elicitation: Elicitation,
        abandoned: Arc<Notify>,
    },
    Refuse(String),
}

impl ElicitationHandler {
    fn handling(&self, params: ElicitRequestParams) -> Handling {
        let Ok(mut slot) = self.calls.lock() else {
            return Handling::Refuse("askloop's MCP client failed internally".to_owned());
        };
        let Some(call) = slot.as_mut() else {
            return Handling::Refuse(
                "askloop answers elicitations only during one of its tool calls".to_owned(),
            );
        };
        let Some(elicitation) = Elicitation::from_params(&self.server, &call.tool, params) else {
            return Handling::Refuse("askloop does not know this elicitation mode".to_owned());
        };
        if let Some(answer) = call.stored_answer(&elicitation) {
            tracing::info!(
                server = %self.server,
                tool = %call.tool,
                mode = elicitation.mode(),
                action = ?answer.action,
                "MCP elicitation answered with the person's answer to the same question"
            );
            return Handling::Answer(answer.to_result());
        }
        match call.asker.take() {
            Some(asker) => Handling::Ask {
                asker,
                elicitation,
                abandoned: Arc::clone(&call.abandoned),
            },
            None if call.can_ask => Handling::Refuse(
                "askloop asks its person one question of a tool call at a time".to_owned(),
            ),
            None => Handling::Refuse(
                "no person can answer: the tool was called outside an askloop run".to_owned(),
            ),
        }
    }
}

impl rmcp::ClientHandler for ElicitationHandler {
    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        match self.handling(request) {
            Handling::Answer(result) => Ok(result),
            Handling::Ask {
                asker,
                elicitation,
                abandoned,
            } => {
                tracing::info!(
                    server = %self.server,
                    tool = %elicitation.tool,
                    mode = elicitation.mode(),
                    "MCP server asks a person: cancelling the tool call and suspending it"
                );
                if asker.send(elicitation).is_ok() {
                    // The call is cancelled first, so the server never takes the error below
                    // for the end of the question and goes on.
                    tokio::select! {
                        () = abandoned.notified() => {}
                        () = context.ct.cancelled() => {}
                        () = tokio::time::sleep(CANCEL_FIRST_WAIT) => {}
                    }
                }
                Err(ErrorData::new(
                    WITHDRAWN,
                    "askloop cancelled this tool call to ask its person; it calls the tool again with their answer",
                    None,
                ))
            }
            Handling::Refuse(reason) => {
                tracing::warn!(server = %self.server, %reason, "MCP elicitation refused");
                Err(ErrorData::new(WITHDRAWN, reason, None))
            }
        }
    }

    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }
}

#[cfg(test)]
mod tests;
