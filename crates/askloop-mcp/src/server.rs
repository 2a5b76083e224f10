//! [`McpServer`]: one connection to one MCP server, opened again on demand when it closed, and
//! closed cleanly (a stdio server's process group is ended and reaped).

use std::collections::VecDeque;
use std::fmt;
use std::process::Stdio;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{ClientInitializeError, RunningService};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceError, ServiceExt};
use serde_json::{Map, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::{Mutex, Notify, oneshot};
use tokio::task::JoinHandle;

use crate::config::{McpServerConfig, McpTransport};
use crate::elicitation::{ActiveCall, Answered, CallSlot, Elicitation, ElicitationHandler};
use crate::error::McpError;

/// How long a server may take from start to the end of its handshake, by default.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

/// How many of a stdio server's last stderr lines are kept to explain a failed start.
const STDERR_TAIL_LINES: usize = 20;

/// How long a failed start waits for the server's last stderr lines.
const STDERR_DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// A handle to one MCP server: cheap to clone (clones share one connection).
///
/// The connection opens in [`McpServer::connect`]. Before each request the handle checks it: if
/// the transport closed (the server exited, the HTTP session ended), the next request opens a
/// new one first. A request cut off by a closing connection fails with
/// [`McpError::TransportClosed`] and is never repeated, since a tool may have run.
///
/// `tools/call`s on one handle run one at a time: a server's `elicitation/create` then always
/// belongs to the one call in flight (the protocol does not say which call a request comes
/// from), so a question is never shown to the person of another run. A call that asks a person
/// is cancelled at its question and releases the connection at once (see [`crate::McpTool`]).
///
/// [`McpServer::close`] ends the connection and waits for a stdio server to exit: its stdin is
/// closed, then after 3 s its process group gets SIGTERM, then SIGKILL, and it is reaped (no
/// zombie). Dropping the last handle does the same in the background on the Tokio runtime;
/// call `close` when the process is about to exit.
#[derive(Clone)]
pub struct McpServer {
    inner: Arc<Inner>,
}

struct Inner {
    name: String,
    config: McpServerConfig,
    startup_timeout: Duration,
    connection: Mutex<Option<Connection>>,
    /// Held for the whole of each `tools/call`: one call in flight at a time.
    call_gate: Mutex<()>,
    /// The call in flight, for the elicitation handler of every connection.
    active_call: Arc<CallSlot>,
}

/// What came of a `tools/call` that may ask a person.
pub(crate) enum CallOutcome {
    /// The server answered the call.
    Complete(CallToolResult),
    /// The server asked a question nobody answered yet: the call was cancelled.
    Asked {
        /// The question.
        elicitation: Elicitation,
        /// The stored answers the server asked for before it, in the order it asked.
        answered: Vec<Answered>,
    },
}

/// One open connection.
struct Connection {
    service: RunningService<RoleClient, ElicitationHandler>,
    pid: Option<u32>,
    stderr: Option<JoinHandle<()>>,
}

impl Connection {
    fn is_closed(&self) -> bool {
        self.service.is_closed() || self.service.peer().is_transport_closed()
    }

    async fn shut_down(mut self, server: &str) {
        if let Err(error) = self.service.close().await {
            tracing::warn!(server, %error, "MCP connection task failed while closing");
        }
        if let Some(stderr) = self.stderr.take() {
            // The process has exited: its stderr is at its end, or will be shortly.
            if tokio::time::timeout(STDERR_DRAIN_TIMEOUT, stderr)
                .await
                .is_err()
            {
                tracing::debug!(server, "MCP server stderr still open after close");
            }
        }
    }
}

impl fmt::Debug for McpServer {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("McpServer")
            .field("name", &self.inner.name)
            .field("transport", &self.inner.config.transport)
            .finish_non_exhaustive()
    }
}

impl McpServer {
    /// Starts (or reaches) the server `name` described by `config` and completes the MCP
    /// handshake, within [`DEFAULT_STARTUP_TIMEOUT`].
    ///
    /// # Errors
    /// [`McpError::Start`] when the program cannot run, exits before the handshake, or nothing
    /// answers at the URL; [`McpError::Handshake`] when the handshake fails or times out.
    pub async fn connect(
        name: impl Into<String>,
        config: McpServerConfig,
    ) -> Result<Self, McpError> {
        Self::connect_with_timeout(name, config, DEFAULT_STARTUP_TIMEOUT).await
    }

    /// [`McpServer::connect`] with another startup timeout (from start to the end of the
    /// handshake; also used when reconnecting).
    ///
    /// # Errors
    /// As [`McpServer::connect`].
    pub async fn connect_with_timeout(
        name: impl Into<String>,
        config: McpServerConfig,
        startup_timeout: Duration,
    ) -> Result<Self, McpError> {
        let server = Self {
            inner: Arc::new(Inner {
                name: name.into(),
                config,
                startup_timeout,
                connection: Mutex::new(None),
                call_gate: Mutex::new(()),
                active_call: Arc::new(CallSlot::default()),
            }),
        };
        server.peer().await?;
        Ok(server)
    }

    /// The server's name (its key in askloop.toml).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// How it was configured.
    pub fn config(&self) -> &McpServerConfig {
        &self.inner.config
    }

    /// The process id of a stdio server's current process (the leader of its process group),
    /// `None` for HTTP or when no connection is open.
    pub async fn process_id(&self) -> Option<u32> {
        self.inner
            .connection
            .lock()
            .await
            .as_ref()
            .and_then(|connection| connection.pid)
    }

    /// Whether a connection is open now (false after [`McpServer::close`], or once the server
    /// went away; the next request reconnects).
    pub async fn is_connected(&self) -> bool {
        self.inner
            .connection
            .lock()
            .await
            .as_ref()
            .is_some_and(|connection| !connection.is_closed())
    }

    /// Every tool the server offers (all pages of `tools/list`), as the SDK describes them.
    ///
    /// # Errors
    /// [`McpError::Start`] or [`McpError::Handshake`] when reconnecting fails;
    /// [`McpError::TransportClosed`], [`McpError::Call`].
    pub async fn list_tools(&self) -> Result<Vec<rmcp::model::Tool>, McpError> {
        let peer = self.peer().await?;
        peer.list_all_tools()
            .await
            .map_err(|source| self.request_error("tools/list", source))
    }

    /// Calls the tool `tool` with `arguments` (a JSON object) and returns the server's result as
    /// it came, `isError` included. No person can be asked here: an elicitation of the server
    /// is refused with a JSON-RPC error (never declined in anyone's name).
    ///
    /// # Errors
    /// [`McpError::ArgumentsNotObject`]; reconnect errors; [`McpError::TransportClosed`];
    /// [`McpError::ToolNotFound`] when the server says it has no such tool (as a JSON-RPC
    /// "invalid params" error, or the TypeScript SDK's error result saying so);
    /// [`McpError::Call`] for other protocol errors.
    pub async fn call_tool_raw(
        &self,
        tool: &str,
        arguments: Value,
    ) -> Result<CallToolResult, McpError> {
        match self
            .call_tool_asking(tool, arguments, Vec::new(), false)
            .await?
        {
            CallOutcome::Complete(result) => Ok(result),
            // Only a call that can ask hears of questions; should one come anyway, it stays
            // unanswered and says so.
            CallOutcome::Asked { elicitation, .. } => Err(McpError::NobodyToAsk {
                server: self.inner.name.clone(),
                tool: tool.to_owned(),
                question: elicitation.message,
            }),
        }
    }

    /// Calls the tool `tool` with `arguments`, answering the server's elicitations from
    /// `answered` (the person's answers to the same questions, each used once). A question not
    /// among them, when `can_ask`, cancels the call (`notifications/cancelled`) and comes back
    /// as [`CallOutcome::Asked`]; otherwise it is refused with a JSON-RPC error.
    ///
    /// # Errors
    /// As [`McpServer::call_tool_raw`].
    pub(crate) async fn call_tool_asking(
        &self,
        tool: &str,
        arguments: Value,
        answered: Vec<Answered>,
        can_ask: bool,
    ) -> Result<CallOutcome, McpError> {
        let arguments =
            arguments_object(arguments).map_err(|other| McpError::ArgumentsNotObject {
                server: self.inner.name.clone(),
                tool: tool.to_owned(),
                got: json_type(&other),
            })?;
        let _gate = self.inner.call_gate.lock().await;
        let peer = self.peer().await?;
        let mut params = CallToolRequestParams::new(tool.to_owned());
        params.arguments = Some(arguments);
        let (asker, asked) = oneshot::channel();
        let abandoned = Arc::new(Notify::new());
        let active = ActiveCall::new(
            tool,
            answered,
            can_ask.then_some(asker),
            Arc::clone(&abandoned),
        );
        let slot = ActiveSlot::install(&self.inner.active_call, active);
        tracing::debug!(server = %self.inner.name, tool, "MCP tools/call");
        let mut call = Box::pin(peer.call_tool(params));
        let question = async move {
            match asked.await {
                Ok(elicitation) => elicitation,
                // Nobody can be asked: the handler refuses questions itself.
                Err(_) => std::future::pending().await,
            }
        };
        let result = tokio::select! {
            result = &mut call => result,
            elicitation = question => {
                // Dropping the request sends `notifications/cancelled`; then the handler may
                // answer the elicitation with its error.
                drop(call);
                abandoned.notify_one();
                return Ok(CallOutcome::Asked {
                    elicitation,
                    answered: slot.take().map(ActiveCall::used_answers).unwrap_or_default(),
                });
            }
        };
        // A server that asked and then answered the call without waiting for the answer: its
        // question is withdrawn (the handler stops waiting), and said so.
        if slot.take().is_some_and(|call| call.asked()) {
            tracing::warn!(
                server = %self.inner.name,
                tool,
                "the MCP server answered the call while its question to the person was open; the question was withdrawn"
            );
        }
        abandoned.notify_one();
        drop(slot);
        let result = result.map_err(|source| self.call_error(tool, source))?;
        if is_unknown_tool_result(tool, &result) {
            return Err(McpError::ToolNotFound {
                server: self.inner.name.clone(),
                tool: tool.to_owned(),
            });
        }
        Ok(CallOutcome::Complete(result))
    }

    /// The error for a `tools/call` of `tool` that failed: an unknown tool (a JSON-RPC
    /// "invalid params" error saying so) is [`McpError::ToolNotFound`].
    fn call_error(&self, tool: &str, source: ServiceError) -> McpError {
        if let ServiceError::McpError(data) = &source
            && data.code == rmcp::model::ErrorCode::INVALID_PARAMS
            && data.message.contains("not found")
        {
            return McpError::ToolNotFound {
                server: self.inner.name.clone(),
                tool: tool.to_owned(),
            };
        }
        self.request_error(&format!("tools/call {tool}"), source)
    }

    /// Ends the connection, if one is open, and waits for a stdio server's processes to exit
    /// and be reaped. The handle stays usable: the next request connects again.
    pub async fn close(&self) {
        let connection = self.inner.connection.lock().await.take();
        if let Some(connection) = connection {
            tracing::debug!(server = %self.inner.name, "closing MCP connection");
            connection.shut_down(&self.inner.name).await;
        }
    }

    /// The open connection's peer, connecting first when there is none or it closed.
    async fn peer(&self) -> Result<rmcp::Peer<RoleClient>, McpError> {
        let mut slot = self.inner.connection.lock().await;
        if let Some(connection) = slot.as_ref() {
            if !connection.is_closed() {
                return Ok(connection.service.peer().clone());
            }
            tracing::info!(server = %self.inner.name, "MCP connection closed; reconnecting");
        }
        if let Some(old) = slot.take() {
            old.shut_down(&self.inner.name).await;
        }
        let connection = self.inner.open().await?;
        let peer = connection.service.peer().clone();
        *slot = Some(connection);
        Ok(peer)
    }

    fn request_error(&self, operation: &str, source: ServiceError) -> McpError {
        match source {
            ServiceError::TransportClosed | ServiceError::TransportSend(_) => {
                McpError::TransportClosed {
                    server: self.inner.name.clone(),
                }
            }
            source => McpError::Call {
                server: self.inner.name.clone(),
                operation: operation.to_owned(),
                source,
            },
        }
    }
}

impl Inner {
    /// Opens one connection: spawns or reaches the server, then the handshake.
    async fn open(&self) -> Result<Connection, McpError> {
        match &self.config.transport {
            McpTransport::Stdio {
                program,
                args,
                env,
                working_dir,
            } => {
                let mut command = tokio::process::Command::new(program);
                command.args(args).envs(env);
                if let Some(dir) = working_dir {
                    command.current_dir(dir);
                }
                #[cfg_attr(not(unix), allow(unused_mut))]
                let mut wrapped = process_wrap::tokio::CommandWrap::from(command);
                // The server and whatever it starts (`npx` starts node) form one group, ended
                // together.
                #[cfg(unix)]
                wrapped.wrap(process_wrap::tokio::ProcessGroup::leader());
                let (process, stderr) = TokioChildProcess::builder(wrapped)
                    .stderr(Stdio::piped())
                    .spawn()
                    .map_err(|error| McpError::Start {
                        server: self.name.clone(),
                        detail: format!("cannot run {program:?}: {error}"),
                    })?;
                let pid = process.id();
                let tail = Arc::new(StdMutex::new(VecDeque::new()));
                let stderr = stderr.map(|stderr| {
                    tokio::spawn(read_stderr(self.name.clone(), stderr, tail.clone()))
                });
                tracing::debug!(server = %self.name, ?pid, program, "started MCP server");
                match self.handshake(process).await {
                    Ok(service) => Ok(Connection {
                        service,
                        pid,
                        stderr,
                    }),
                    Err(error) => {
                        if let Some(stderr) = stderr {
                            // Exited: its last words are at hand. Still running: do not wait.
                            let _ = tokio::time::timeout(STDERR_DRAIN_TIMEOUT, stderr).await;
                        }
                        Err(self.start_error(error, &tail))
                    }
                }
            }
            McpTransport::Http { url } => {
                let transport = StreamableHttpClientTransport::from_uri(url.as_str());
                match self.handshake(transport).await {
                    Ok(service) => Ok(Connection {
                        service,
                        pid: None,
                        stderr: None,
                    }),
                    Err(error) => Err(self.start_error(error, &StdMutex::default())),
                }
            }
        }
    }

    async fn handshake<T, E, A>(
        &self,
        transport: T,
    ) -> Result<RunningService<RoleClient, ElicitationHandler>, HandshakeFailure>
    where
        T: rmcp::transport::IntoTransport<RoleClient, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        let client = ElicitationHandler::new(&self.name, Arc::clone(&self.active_call));
        match tokio::time::timeout(self.startup_timeout, client.serve(transport)).await {
            Ok(Ok(service)) => Ok(service),
            Ok(Err(error)) => Err(HandshakeFailure::Init(Box::new(error))),
            Err(_) => Err(HandshakeFailure::Timeout(self.startup_timeout)),
        }
    }

    fn start_error(
        &self,
        failure: HandshakeFailure,
        tail: &StdMutex<VecDeque<String>>,
    ) -> McpError {
        let stderr = tail
            .lock()
            .map(|lines| lines.iter().cloned().collect::<Vec<_>>().join("\n"))
            .unwrap_or_default();
        let with_stderr = |detail: String| {
            if stderr.trim().is_empty() {
                detail
            } else {
                format!("{detail}; its stderr ends with:\n{stderr}")
            }
        };
        let server = self.name.clone();
        match failure {
            HandshakeFailure::Timeout(limit) => McpError::Handshake {
                server,
                detail: with_stderr(format!("no answer within {} s", limit.as_secs())),
            },
            HandshakeFailure::Init(error) => match *error {
                ClientInitializeError::ConnectionClosed(_) => McpError::Start {
                    server,
                    detail: with_stderr(
                        "it exited (or closed its output) before the MCP handshake".to_owned(),
                    ),
                },
                ClientInitializeError::TransportError { error, .. } => McpError::Start {
                    server,
                    detail: with_stderr(askloop_core::error_chain_text(&error)),
                },
                other => McpError::Handshake {
                    server,
                    detail: with_stderr(askloop_core::error_chain_text(&other)),
                },
            },
        }
    }
}

/// The call in flight, installed in its connection's slot for as long as this value lives
/// (also when the call's future is dropped, e.g. a cancelled run).
struct ActiveSlot<'a> {
    slot: &'a CallSlot,
}

impl<'a> ActiveSlot<'a> {
    fn install(slot: &'a CallSlot, call: ActiveCall) -> Self {
        if let Ok(mut current) = slot.lock() {
            *current = Some(call);
        }
        Self { slot }
    }

    /// The call, taken out of the slot.
    fn take(&self) -> Option<ActiveCall> {
        self.slot.lock().ok().and_then(|mut current| current.take())
    }
}

impl Drop for ActiveSlot<'_> {
    fn drop(&mut self) {
        self.take();
    }
}

enum HandshakeFailure {
    Init(Box<ClientInitializeError>),
    Timeout(Duration),
}

/// Sends a stdio server's stderr to `tracing` and keeps its last lines.
async fn read_stderr(
    server: String,
    stderr: tokio::process::ChildStderr,
    tail: Arc<StdMutex<VecDeque<String>>>,
) {
    let mut lines = BufReader::new(stderr).lines();
    loop {
        match lines.next_line().await {
            Ok(Some(line)) => {
                tracing::debug!(target: "askloop_mcp::server", server, "{line}");
                if let Ok(mut tail) = tail.lock() {
                    if tail.len() == STDERR_TAIL_LINES {
                        tail.pop_front();
                    }
                    tail.push_back(line);
                }
            }
            Ok(None) => break,
            Err(error) => {
                tracing::debug!(server, %error, "cannot read MCP server stderr");
                break;
            }
        }
    }
}

/// The arguments of a call as a JSON object (`null` is an empty one); another value back as
/// the error.
fn arguments_object(arguments: Value) -> Result<Map<String, Value>, Value> {
    match arguments {
        Value::Object(map) => Ok(map),
        Value::Null => Ok(Map::new()),
        other => Err(other),
    }
}

/// Whether `result` is the TypeScript SDK's answer to an unknown tool: an error *result* whose
/// text is the JSON-RPC error it used to send ("MCP error -32602: Tool NAME not found").
fn is_unknown_tool_result(tool: &str, result: &CallToolResult) -> bool {
    let unknown = format!("Tool {tool} not found");
    result.is_error == Some(true)
        && result
            .content
            .iter()
            .filter_map(|content| content.as_text())
            .any(|text| text.text.contains("-32602") && text.text.contains(&unknown))
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
