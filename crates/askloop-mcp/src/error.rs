//! [`McpError`]: why talking to an MCP server failed.

/// Why connecting to an MCP server, or calling one of its tools, failed. Every variant names the
/// server (its name in askloop.toml, e.g. `fs`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// The server did not start: its program could not be spawned, it exited (or closed its
    /// output) before the handshake, or nothing answers at its URL. `detail` holds the cause and,
    /// for a stdio server, the last lines it wrote to stderr.
    #[error("MCP server {server} failed to start: {detail}")]
    Start {
        /// The server's name.
        server: String,
        /// What went wrong, in words.
        detail: String,
    },
    /// The server started but the `initialize` handshake failed (a protocol error, a version
    /// the SDK does not speak, or no answer within the startup timeout).
    #[error("MCP server {server}: handshake failed: {detail}")]
    Handshake {
        /// The server's name.
        server: String,
        /// What went wrong, in words.
        detail: String,
    },
    /// The connection closed while a request was in flight. A tool call cut off this way is not
    /// retried (it may have run); the next call reconnects.
    #[error("MCP server {server}: the connection closed")]
    TransportClosed {
        /// The server's name.
        server: String,
    },
    /// The server has no tool by this name (any more).
    #[error("MCP server {server} has no tool {tool:?}")]
    ToolNotFound {
        /// The server's name.
        server: String,
        /// The name asked for.
        tool: String,
    },
    /// A request failed at the protocol level (`tools/list`, or `tools/call` answered with a
    /// JSON-RPC error rather than a result).
    #[error("MCP server {server}: {operation} failed")]
    Call {
        /// The server's name.
        server: String,
        /// What was asked, e.g. `tools/call write_file`.
        operation: String,
        /// The SDK's error.
        #[source]
        source: rmcp::ServiceError,
    },
    /// The tool ran and reported an error (`isError: true`); `message` is its text content.
    #[error("MCP tool {tool} of server {server} reported an error: {message}")]
    ToolFailed {
        /// The server's name.
        server: String,
        /// The tool's name.
        tool: String,
        /// The text the tool returned.
        message: String,
    },
    /// The arguments were not a JSON object (MCP tool arguments always are).
    #[error("MCP tool {tool} of server {server} takes a JSON object, got {got}")]
    ArgumentsNotObject {
        /// The server's name.
        server: String,
        /// The tool's name.
        tool: String,
        /// The JSON type given.
        got: &'static str,
    },
    /// The tool asked a person something (an MCP elicitation) where nobody can answer: a call
    /// outside an agent run. The server got a JSON-RPC error, not an answer.
    #[error(
        "MCP tool {tool} of server {server} asks a person, and nobody can answer here: {question}"
    )]
    NobodyToAsk {
        /// The server's name.
        server: String,
        /// The tool's name.
        tool: String,
        /// The server's message.
        question: String,
    },
    /// A suspended elicitation's stored payload or the answer to it could not be read back on
    /// resume (a damaged or foreign payload).
    #[error("MCP tool {tool} of server {server}: the stored question or its answer is unreadable")]
    ElicitationState {
        /// The server's name.
        server: String,
        /// The tool's name.
        tool: String,
        /// The deserializer's error.
        #[source]
        source: serde_json::Error,
    },
    /// `require_approval` lists tools the server does not have: a typo there would let the
    /// real tool run without approval, so connecting refuses it.
    #[error(
        "MCP server {server}: `require_approval` names tools it does not have: {}; its tools: {}",
        unknown.join(", "),
        available.join(", ")
    )]
    UnknownApprovalTools {
        /// The server's name.
        server: String,
        /// The names listed but not found.
        unknown: Vec<String>,
        /// The server's tools.
        available: Vec<String>,
    },
    /// Two servers of one agent offer a tool of the same name (tools keep the server's own
    /// names, so the model could not tell them apart).
    #[error("MCP servers {first} and {second} both offer a tool named {tool:?}")]
    DuplicateTool {
        /// The tool's name.
        tool: String,
        /// The server listed first.
        first: String,
        /// The other server.
        second: String,
    },
}

impl McpError {
    /// A stable, machine-readable code, e.g. `mcp_start_failed`.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Start { .. } => "mcp_start_failed",
            Self::Handshake { .. } => "mcp_handshake_failed",
            Self::TransportClosed { .. } => "mcp_transport_closed",
            Self::ToolNotFound { .. } => "mcp_tool_not_found",
            Self::Call { .. } => "mcp_call_failed",
            Self::ToolFailed { .. } => "mcp_tool_failed",
            Self::ArgumentsNotObject { .. } => "mcp_invalid_arguments",
            Self::NobodyToAsk { .. } => "mcp_nobody_to_ask",
            Self::ElicitationState { .. } => "mcp_elicitation_state",
            Self::UnknownApprovalTools { .. } => "mcp_unknown_approval_tools",
            Self::DuplicateTool { .. } => "mcp_duplicate_tool",
        }
    }
}
