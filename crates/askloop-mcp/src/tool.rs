//! [`McpTool`]: one tool of an MCP server as an askloop [`DynTool`], and [`McpToolset`]: the
//! tools of every MCP server an agent uses.

use std::collections::BTreeMap;
use std::sync::Arc;

use askloop_core::model::ToolDefinition;
use askloop_core::schema::SchemaValidator;
use askloop_core::{DynTool, Execution, ResumeRejection, Suspension, ToolContext, ToolError};
use async_trait::async_trait;
use rmcp::model::CallToolResult;
use serde::Deserialize;
use serde_json::Value;

use crate::config::McpServerConfig;
use crate::elicitation::{Answered, ElicitationAnswer, ElicitationPayload, resume_schema};
use crate::error::McpError;
use crate::server::{CallOutcome, McpServer};

/// One tool of an MCP server, offered to the model under the server's own name.
///
/// - Definition: the MCP tool's `name`, `description` (else its `title`, else empty) and
///   `inputSchema`, unchanged.
/// - Execution: `tools/call` with the arguments (already checked against the input schema by
///   the agent loop). The output is the result's `structuredContent` when present; otherwise
///   the text of a single text block, as a JSON string; otherwise the content blocks as MCP
///   JSON (`[{"type": "image", …}, …]`); no content at all is `null`.
/// - A result with `isError: true` becomes a tool error the model sees:
///   `tool NAME failed: MCP tool NAME of server S reported an error: TEXT`. Transport and
///   protocol failures become tool errors the same way ([`McpError`] as the source).
/// - MCP tools are side-effecting unless the server annotates them `readOnlyHint` or
///   `idempotentHint` ([`McpTool::read_only`], [`McpTool::idempotent`]); annotations are hints
///   from the server, not guarantees.
/// - Elicitation: when the server asks the person something during the call
///   (`elicitation/create`, form or URL mode), the call suspends with the question
///   ([`crate::elicitation::ElicitationPayload`], its resume schema from
///   [`crate::elicitation::resume_schema`]); the `tools/call` is cancelled. The answer is the
///   MCP result itself: `{"action": "accept", "content": {…}}`, `{"action": "accept"}` (a
///   link), `{"action": "decline"}` or `{"action": "cancel"}`. On resume the tool is called
///   again with the same arguments and the server's questions are answered from the person's
///   answers to exactly those questions; a new question suspends again. The first call was
///   cancelled at its question, so only what the tool did *before* asking runs twice — for a
///   tool that asks before it acts, nothing.
#[derive(Clone, Debug)]
pub struct McpTool {
    server: McpServer,
    definition: ToolDefinition,
    read_only: bool,
    idempotent: bool,
    requires_approval: bool,
}

impl McpTool {
    /// The tool `tool` of `server`, as listed by `tools/list`.
    pub fn new(server: McpServer, tool: &rmcp::model::Tool) -> Self {
        let annotations = tool.annotations.as_ref();
        let name = tool.name.to_string();
        Self {
            requires_approval: server.config().require_approval.applies_to(&name),
            definition: ToolDefinition {
                name,
                description: tool
                    .description
                    .as_deref()
                    .map(str::to_owned)
                    .or_else(|| tool.title.clone())
                    .unwrap_or_default(),
                input_schema: Value::Object((*tool.input_schema).clone()),
            },
            read_only: annotations
                .and_then(|annotations| annotations.read_only_hint)
                .unwrap_or(false),
            idempotent: annotations
                .and_then(|annotations| annotations.idempotent_hint)
                .unwrap_or(false),
            server,
        }
    }

    /// The server this tool belongs to.
    pub fn server(&self) -> &McpServer {
        &self.server
    }

    /// Whether the server says the tool does not change its environment (`readOnlyHint`).
    pub fn read_only(&self) -> bool {
        self.read_only
    }

    /// Whether the server says calling the tool twice with the same arguments has no further
    /// effect (`idempotentHint`), or it is read-only.
    pub fn idempotent(&self) -> bool {
        self.read_only || self.idempotent
    }

    /// Whether the server's `require_approval` covers this tool: then every call waits for a
    /// person's approval (`tool-call-approval`) before it runs.
    pub fn requires_approval(&self) -> bool {
        self.requires_approval
    }

    /// Calls the tool and maps the result (see the type's docs).
    ///
    /// # Errors
    /// [`McpError::ToolFailed`] for `isError: true`; the errors of
    /// [`McpServer::call_tool_raw`].
    pub async fn call(&self, arguments: Value) -> Result<Value, McpError> {
        let result = self
            .server
            .call_tool_raw(&self.definition.name, arguments)
            .await?;
        match self.failure(&result) {
            Some(error) => Err(error),
            None => Ok(output(result)),
        }
    }

    /// The answers the person gave to this call's questions so far: on resume, the earlier
    /// ones stored in the suspension and the one it is resumed with; else none.
    ///
    /// # Errors
    /// The deserializer's error for a damaged payload or answer.
    fn answered(context: &ToolContext) -> Result<Vec<Answered>, serde_json::Error> {
        let (Some(suspension), Some(answer)) = (context.suspension(), context.resume_data()) else {
            return Ok(Vec::new());
        };
        let Some(payload) = ElicitationPayload::from_value(&suspension.payload)? else {
            return Ok(Vec::new());
        };
        let answer = ElicitationAnswer::deserialize(answer)?;
        let mut answered = payload.answered;
        answered.push(Answered {
            elicitation: payload.elicitation,
            answer,
        });
        Ok(answered)
    }

    /// [`McpError::ToolFailed`] for a result with `isError: true`.
    fn failure(&self, result: &CallToolResult) -> Option<McpError> {
        (result.is_error == Some(true)).then(|| McpError::ToolFailed {
            server: self.server.name().to_owned(),
            tool: self.definition.name.clone(),
            message: error_message(result),
        })
    }
}

/// The JSON output of a successful call.
fn output(result: CallToolResult) -> Value {
    if let Some(structured) = result.structured_content {
        return structured;
    }
    match result.content.as_slice() {
        [] => Value::Null,
        [single] => match single.as_text() {
            Some(text) => Value::String(text.text.clone()),
            None => serde_json::to_value(&result.content).unwrap_or(Value::Null),
        },
        _ => serde_json::to_value(&result.content).unwrap_or(Value::Null),
    }
}

/// The text of an error result: its text blocks joined by newlines, else its content as JSON.
fn error_message(result: &CallToolResult) -> String {
    let texts: Vec<&str> = result
        .content
        .iter()
        .filter_map(|content| content.as_text().map(|text| text.text.as_str()))
        .collect();
    if !texts.is_empty() {
        return texts.join("\n");
    }
    match (&result.structured_content, result.content.is_empty()) {
        (Some(structured), _) => structured.to_string(),
        (None, false) => serde_json::to_string(&result.content).unwrap_or_default(),
        (None, true) => "(no message)".to_owned(),
    }
}

#[async_trait]
impl DynTool for McpTool {
    fn name(&self) -> &str {
        &self.definition.name
    }

    fn definition(&self) -> ToolDefinition {
        self.definition.clone()
    }

    fn suspend_schema(&self) -> Option<Value> {
        None
    }

    fn resume_schema(&self) -> Option<Value> {
        None
    }

    // The server's read-only / idempotent hints: such a call may run again after a crash.
    fn idempotent(&self) -> bool {
        McpTool::idempotent(self)
    }

    fn asks_user(&self) -> bool {
        false
    }

    fn requires_approval(&self, _args: &Value) -> bool {
        self.requires_approval
    }

    // An answer to a question of the server: checked against the question's resume schema.
    fn validate_resume(
        &self,
        suspension: &Suspension,
        resume_data: &Value,
    ) -> Result<(), ResumeRejection> {
        let payload = match ElicitationPayload::from_value(&suspension.payload) {
            Ok(Some(payload)) => payload,
            Ok(None) | Err(_) => {
                return Err(ResumeRejection {
                    expected: format!(
                        "no answer: this call of MCP tool {} does not wait for one",
                        self.definition.name
                    ),
                    problems: Vec::new(),
                });
            }
        };
        let schema = suspension
            .resume_schema
            .clone()
            .unwrap_or_else(|| resume_schema(&payload.elicitation.request));
        let problems = match SchemaValidator::new(&schema) {
            Ok(validator) => validator.problems(resume_data),
            Err(error) => vec![format!("the question's schema is invalid: {error}")],
        };
        if problems.is_empty() {
            return Ok(());
        }
        Err(ResumeRejection {
            expected: format!(
                "an answer to MCP server {}: {{\"action\": \"accept\"{}}}, {{\"action\": \"decline\"}} or {{\"action\": \"cancel\"}}",
                payload.elicitation.server,
                match payload.url {
                    Some(_) => "",
                    None => ", \"content\": {…}",
                }
            ),
            problems,
        })
    }

    async fn execute_json(
        &self,
        args: Value,
        context: &ToolContext,
    ) -> Result<Execution<Value>, ToolError> {
        let failed = |error: McpError| ToolError::Failed {
            tool: self.definition.name.clone(),
            source: Box::new(error),
        };
        let answered = Self::answered(context).map_err(|source| {
            failed(McpError::ElicitationState {
                server: self.server.name().to_owned(),
                tool: self.definition.name.clone(),
                source,
            })
        })?;
        if !answered.is_empty() && !self.idempotent() {
            // Safe: the first call was cancelled at its question; only what the tool did before
            // asking runs again (see the type's docs).
            tracing::info!(
                server = %self.server.name(),
                tool = %self.definition.name,
                "calling the side-effecting MCP tool again with the person's answers"
            );
        }
        let outcome = self
            .server
            .call_tool_asking(&self.definition.name, args, answered, context.can_suspend())
            .await
            .map_err(failed)?;
        match outcome {
            CallOutcome::Complete(result) => match self.failure(&result) {
                Some(error) => Err(failed(error)),
                None => Ok(Execution::Complete(output(result))),
            },
            CallOutcome::Asked {
                elicitation,
                answered,
            } => {
                let schema = resume_schema(&elicitation.request);
                let payload = ElicitationPayload::new(elicitation, answered);
                let payload = serde_json::to_value(&payload).map_err(|source| {
                    failed(McpError::ElicitationState {
                        server: self.server.name().to_owned(),
                        tool: self.definition.name.clone(),
                        source,
                    })
                })?;
                Ok(context.suspend_with_schema(payload, schema))
            }
        }
    }
}

/// The MCP servers of one agent, connected, and their tools.
///
/// Built from the agent's `[agents.ID.mcp.NAME]` tables by [`McpToolset::connect`]. Each tool
/// keeps its server's own name; two servers offering the same name is an error. Close it with
/// [`McpToolset::close`] before the process exits.
#[derive(Clone, Debug, Default)]
pub struct McpToolset {
    servers: Vec<McpServer>,
    tools: Vec<McpTool>,
}

impl McpToolset {
    /// Connects to every server (in name order), lists their tools and checks them.
    ///
    /// On any error the servers already started are closed again.
    ///
    /// # Errors
    /// A server's connect or `tools/list` errors; [`McpError::UnknownApprovalTools`] when a
    /// `require_approval` list names a tool its server does not have;
    /// [`McpError::DuplicateTool`].
    pub async fn connect(servers: &BTreeMap<String, McpServerConfig>) -> Result<Self, McpError> {
        let mut set = Self::default();
        for (name, config) in servers {
            if let Err(error) = set.add(name, config.clone()).await {
                set.close().await;
                return Err(error);
            }
        }
        Ok(set)
    }

    async fn add(&mut self, name: &str, config: McpServerConfig) -> Result<(), McpError> {
        let server = McpServer::connect(name, config).await?;
        self.servers.push(server.clone());
        let listed = server.list_tools().await?;
        let names: Vec<&str> = listed.iter().map(|tool| tool.name.as_ref()).collect();
        let unknown = server.config().require_approval.unknown_names(&names);
        if !unknown.is_empty() {
            return Err(McpError::UnknownApprovalTools {
                server: name.to_owned(),
                unknown: unknown.into_iter().map(str::to_owned).collect(),
                available: names.iter().map(|name| (*name).to_owned()).collect(),
            });
        }
        for tool in &listed {
            if let Some(existing) = self.tools.iter().find(|known| known.name() == tool.name) {
                return Err(McpError::DuplicateTool {
                    tool: tool.name.to_string(),
                    first: existing.server().name().to_owned(),
                    second: name.to_owned(),
                });
            }
            self.tools.push(McpTool::new(server.clone(), tool));
        }
        Ok(())
    }

    /// The servers, in name order.
    pub fn servers(&self) -> &[McpServer] {
        &self.servers
    }

    /// Every tool of every server.
    pub fn tools(&self) -> &[McpTool] {
        &self.tools
    }

    /// The tools, erased, ready for [`askloop_core::AgentBuilder::shared_tool`].
    pub fn dyn_tools(&self) -> Vec<Arc<dyn DynTool>> {
        self.tools
            .iter()
            .map(|tool| Arc::new(tool.clone()) as Arc<dyn DynTool>)
            .collect()
    }

    /// Whether the tool `name` needs approval by its server's `require_approval` (`None` when
    /// no server offers it).
    pub fn requires_approval(&self, name: &str) -> Option<bool> {
        self.tools
            .iter()
            .find(|tool| tool.name() == name)
            .map(McpTool::requires_approval)
    }

    /// Closes every server (see [`McpServer::close`]).
    pub async fn close(&self) {
        for server in &self.servers {
            server.close().await;
        }
    }
}
