//! askloop-mcp: the tools of [Model Context Protocol](https://modelcontextprotocol.io) servers
//! as askloop tools.
//!
//! An agent configured with MCP servers (`[agents.ID.mcp.NAME]` in askloop.toml, see
//! [`McpServerConfig`]) gets every tool those servers list, under the servers' own tool names.
//! askloop is the MCP *client*, through the official Rust SDK (`rmcp`): a stdio server is started
//! as a child process (`command = [...]`), a streamable HTTP server is reached at its `url`.
//!
//! - [`McpServer`] — one connection: handshake, `tools/list`, `tools/call`; reconnects when the
//!   transport closed; [`McpServer::close`] ends a stdio server's process group and reaps it.
//! - [`McpTool`] — one server tool as a [`askloop_core::DynTool`]: definition from the MCP tool,
//!   execution by `tools/call`, `isError` results as tool errors the model sees.
//! - [`McpToolset`] — all servers of one agent, connected and checked (no tool name twice, no
//!   unknown name in `require_approval`).
//! - [`McpError`] — typed failures: start, handshake, transport closed, tool not found, call
//!   failed, tool reported an error.
//! - [`elicitation`] — a server's question to the person during a tool call (MCP elicitation,
//!   form and URL mode) as a suspension of that call, answered with the person's
//!   accept/decline/cancel on resume, in any process; the only client capability advertised.
//!
//! `require_approval` is parsed and kept ([`McpTool::requires_approval`]); the agent loop does
//! not enforce approvals yet.
//!
//! Nothing about the servers is stored with a run: a run records its agent's id, and whoever
//! resumes it (the CLI, in any process) rebuilds that agent from the same configuration,
//! connecting to the same servers again.
//!
//! Feature `test-support`: [`testing`], real MCP servers from npm for tests (also the CLI's).
//!
//! This crate depends on `askloop-core` only (never on the store, providers or CLI), and the core
//! never depends on `rmcp`; `.ci/run` checks both.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use askloop_mcp::{McpServerConfig, McpToolset};
//! use std::collections::BTreeMap;
//!
//! let servers = BTreeMap::from([(
//!     "fs".to_owned(),
//!     McpServerConfig::command(
//!         "npx",
//!         ["-y", "@modelcontextprotocol/server-filesystem", "/srv/notes"].map(String::from),
//!     ),
//! )]);
//! let toolset = McpToolset::connect(&servers).await?;
//! let mut builder = askloop_core::Agent::builder("files");
//! for tool in toolset.dyn_tools() {
//!     builder = builder.shared_tool(tool);
//! }
//! // … model, store, build, run …
//! toolset.close().await;
//! # Ok(()) }
//! ```

mod config;
pub mod elicitation;
mod error;
mod server;
#[cfg(feature = "test-support")]
pub mod testing;
mod tool;

pub use config::{McpConfigError, McpServerConfig, McpTransport, RequireApproval};
pub use error::McpError;
pub use server::{DEFAULT_STARTUP_TIMEOUT, McpServer};
pub use tool::{McpTool, McpToolset};

/// The MCP SDK this crate speaks through, for callers that need its types (e.g. the `Tool`s of
/// [`McpServer::list_tools`]).
pub use rmcp;
