//! askloop's HTTP server: agents over HTTP with SSE, driven unmodified by the reference
//! framework's JavaScript client (`@mastra/client-js` 1.47), a pending-questions inbox, and
//! per-tenant API keys; any number of servers may share one store.
//!
//! This crate depends on `askloop-core` only: it is handed a [`askloop_core::RunStore`] and an
//! [`askloop_core::registry::AgentRegistry`]; the CLI's `askloop serve` picks the concrete store
//! and models. Runs live apart from connections: each stream is driven by a task of the server
//! and recorded in a per-run buffer that responses subscribe to, so a client that disconnects
//! does not stop its run, and another can re-attach.
//!
//! Main types: [`Server`] (built by [`ServerBuilder`]), [`ApiKey`], [`Limits`], [`AllowedHost`],
//! [`CorsOrigin`], [`ServerError`].
//!
//! # Routes
//! Streams are SSE: `data: <chunk JSON>\n\n` per chunk (askloop's wire format,
//! `docs/wire-format.md`), then `data: [DONE]\n\n`, then the body ends; `: keep-alive` comments
//! every 15 s. Errors are JSON `{code, message, details?}`; an error before a stream starts is a
//! plain HTTP error, one after it an `error` chunk.
//!
//! | method | path | what |
//! |---|---|---|
//! | GET | `/api/agents` | the agents, keyed by id (the reference framework's shape: id, name, instructions, tools with their argument schemas and whether they need approval; never the model setting) |
//! | GET | `/api/agents/{agentId}` | one agent; 404 `agent_not_found` |
//! | POST | `/api/agents/{agentId}/stream` | `{messages, runId?, threadId?, resourceId?, memory?}` → SSE |
//! | POST | `/api/agents/{agentId}/resume-stream` | `{runId, resumeData, toolCallId?, resourceId?}` → SSE |
//! | POST | `/api/agents/{agentId}/approve-tool-call` | `{runId, toolCallId, args?, resourceId?}` → SSE; `args` (askloop's): edit, then approve — the tool runs with them, checked against its input schema first (400 `invalid_args`) |
//! | POST | `/api/agents/{agentId}/decline-tool-call` | `{runId, toolCallId, reason?, resourceId?}` → SSE |
//! | POST | `/api/agents/{agentId}/chat` | the AI SDK's UI message stream (`useChat`): a new message starts a turn of thread `id`, tool outputs and approval responses (`approval: {id, approved, reason?, args?}`; `args`, askloop's: edit, then approve) answer its waiting calls → SSE |
//! | GET | `/api/agents/{agentId}/chat/{chatId}/messages` | the chat's thread as UI messages |
//! | GET | `/api/agents/{agentId}/chat/{chatId}/stream` | the AI SDK's stream resumption: 204 when no turn of the chat runs (also a suspended one, another tenant's); else the running turn's UI message stream from its start, then live (a turn another server drives: its committed steps, then step by step from the store) |
//! | GET | `/api/agents/{agentId}/suspended-runs` | `?threadId=&resourceId=&page=&perPage=` → `{runs, total}` |
//! | GET | `/api/runs` | `?status=&agentId=&resourceId=&threadId=&cursor=&limit=` → `{runs, nextCursor?}`, newest first |
//! | GET | `/api/runs/{runId}` | `?resourceId=`: summary, pending calls, messages (every `/api/runs/{runId}…` route takes `?resourceId=`) |
//! | POST | `/api/runs/{runId}/cancel` | cancels a suspended, failed or running run (whichever server or process drives it stops; its stream ends with an `error` chunk, code `cancelled`); its calls without a result get cancelled results |
//! | POST | `/api/runs/{runId}/continue` | continues a failed or abandoned run → SSE |
//! | POST | `/api/runs/{runId}/responses` | `{responses: [{toolCallId, answer} \| {toolCallId, approved: true, args?} \| {toolCallId, approved: false, reason?}]}`, one commit → SSE (`args`: edit, then approve) |
//! | POST | `/api/runs/{runId}/calls/{toolCallId}/link` | `{expiresInSeconds?, role?}` (optional) → 201 `{url, path, expiresAt, linkId}`: an answer link to the waiting call ([`links`]) |
//! | DELETE | `/api/runs/{runId}/calls/{toolCallId}/link` | revokes every link of the call → `{revoked}` |
//! | GET | `/answer/{token}` | an answer link's page (no key): its one question or approval with the page's form; a link that does not work: 410, the one page "this link no longer works" |
//! | POST | `/answer/{token}` | `{resumeData}` or `{approved, reason?, args?}` (no key) → `{outcome}`: answers the link's call once; 410 `link_gone` for every dead link |
//! | GET | `/api/runs/{runId}/stream` | re-attach: a live run's chunks so far then the live ones; a suspended run's calls re-announced; a finished run's `finish` (or `error`) |
//! | GET | `/api/inbox/events` | SSE of `question-raised` / `question-resolved` across every server on the store |
//! | GET | `/metrics` | Prometheus metrics (OpenMetrics text; needs a key when keys are configured; see below) |
//! | GET | `/openapi.json`, `/docs`, `/healthz` | the OpenAPI document (utoipa), a page of the routes, `ok` (no key needed) |
//!
//! Error codes and statuses: 400 `bad_request` (also every blank, control-character or
//! over-long id: run, thread, resource, agent, tool call), `invalid_answer` (details:
//! `expected`, `problems`, `allowed` labels; also an approval without a boolean `approved`, on
//! every route), `invalid_args` (an approval's edited `args` that do not fit the tool's input
//! schema; details: `toolCallId`, `toolName`, `problems`; nothing changed),
//! `ambiguous_tool_call`; 401 `unauthorized`; 403 `forbidden`, `cross_origin`;
//! 404 `run_not_found`, `agent_not_found`, `unknown_tool_call`; 409 `not_suspended`,
//! `conflict`, `already_answered` (a different answer to a call that has its answer; the same
//! answer again, also by a label's number or in another case, is a harmless 200 with a JSON note
//! and resumes nothing), `in_progress`, `not_cancellable`, `not_continuable`,
//! `thread_moved_on` (a failed run continued after its thread got a newer run),
//! `thread_busy` (details: `threadId`, `runningRunId`), `ambiguous_run` (details:
//! `resources`); 410 `expired` (an answer, approval or decline after the call's deadline;
//! details: `toolCallId`, `expiredAt`), `link_gone` (an answer link that does not work); 413
//! `too_large`; 501 `unsupported` (a store without answer links); 408 `timeout` (a non-streaming
//! route's answer, or any request body, late); 421 `host_not_allowed`. Ids (run, thread,
//! resource) are 1 to 256 bytes; tool call ids 1 to 4,096 (providers make long ones), on every
//! route.
//!
//! # Tenants, threads and turns
//! Run ids and thread ids are per resource: a run is named by its resource and its id, a thread
//! likewise, so the same id used by two resources is two runs or two threads (a `runId` another
//! tenant uses starts the caller's own run; one its own resource uses is 409 `conflict`). A
//! thread has one turn at a time: a new message (`/stream` with a `threadId`, `/chat`) while
//! the thread's run is running is 409 `thread_busy` naming that run, and nothing is stored; a
//! resume or continue that would run beside a newer turn is refused the same way. A new message
//! to a thread whose run waits for answers supersedes that run (its calls get results saying
//! so) once the new run holds the turn. On a server without keys, a run id used by several
//! resources needs `resourceId` (409 `ambiguous_run` otherwise, naming them).
//!
//! # Hosts, origins, connections
//! Every request must name a host the server answers to — `localhost`, `127.0.0.1`, `[::1]`,
//! the address the connection came in on, or one of [`ServerBuilder::allowed_hosts`] — else
//! 421 `host_not_allowed` (DNS rebinding). A request that changes state (not GET, HEAD,
//! OPTIONS) from a page of another origin than the server's own or one of
//! [`ServerBuilder::cors_origins`] is 403 `cross_origin`; those origins get CORS headers.
//! [`Server::serve`] bounds connections ([`Limits`]: how many, how slow a request head or body
//! may be, how long one may idle), never cutting a response being sent. See the `edge` and
//! `connections` modules' docs in the source for the exact rules.
//!
//! # Keys
//! With [`ServerBuilder::keys`], every `/api` route needs `Authorization: Bearer <secret>` or
//! `X-Api-Key: <secret>`. Keys are kept as SHA-256 and looked up by hash. A key is bound to a
//! resource id: the runs it starts get it, it sees and answers only that resource's runs
//! (another tenant's run is 404, so existence does not leak), and lists are filtered to it;
//! [`ApiKey::agents`] restricts it to some agents (others 403, not listed). One secret for two
//! keys is refused ([`ApiKey::check_distinct`]; [`Server::serve`] fails with
//! [`ServerError::Keys`]). Without keys the server is open: bind it to loopback.
//!
//! # Observability
//! `GET /metrics` serves, per server (an explicit `prometheus-client` registry, no global
//! recorder): `askloop_runs{status}` and `askloop_pending_questions` (the store's view, read at
//! scrape time: every instance on the store), `askloop_cycle_duration_seconds{outcome}` (a new
//! run's stream, from its request reaching the handler to the stream's end: suspension,
//! finish, error), `askloop_resume_duration_seconds{outcome}` (the same for resumes: resume,
//! approve, decline, `/responses`, a chat answer), `askloop_http_requests_total{method,route,status}`
//! and `askloop_http_request_duration_seconds{method,route}` (route templates and standard
//! methods, else `unmatched` and `other`: labels come from closed sets, never from request
//! text; to the response head), `askloop_http_connections` (open now). With keys configured
//! any valid key may scrape. Each run task runs in a `run` span
//! (run id, agent id); the agent loop's spans (`askloop_core`) nest inside it.
//!
//! # Example
//! ```no_run
//! use std::sync::Arc;
//!
//! use askloop_core::registry::AgentSet;
//! use askloop_core::store::MemoryStore;
//! use askloop_core::testing::ScriptedModel;
//! use askloop_core::{Agent, AskUser, RunStore};
//! use askloop_server::{ApiKey, Server};
//!
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store: Arc<dyn RunStore> = Arc::new(MemoryStore::new());
//! let model = ScriptedModel::from_json(r#"{"steps":[{"text":"Hi."}]}"#)?;
//! let agent = Agent::builder("assistant").model(model).tool(AskUser::new())
//!     .shared_store(store.clone()).build()?;
//! let secret = ApiKey::new_secret();
//! let server = Server::builder(Arc::new(AgentSet::new().with(agent)), store)
//!     .keys(vec![ApiKey::from_secret(&secret, "tenant-a".into())])
//!     .build();
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:4111").await?;
//! server.serve(listener, async { let _ = tokio::signal::ctrl_c().await; }).await?;
//! # Ok(()) }
//! ```

mod access;
mod api;
mod body_deadline;
mod checks;
mod closing;
mod connections;
mod edge;
mod error;
mod extract;
mod hub;
mod inbox;
mod keys;
mod limits;
pub mod links;
mod listing;
mod metrics;
mod replay;
mod resume;
mod routes;
mod server;
mod sse;
mod state;
mod sweep;
mod ui_messages;
mod ui_stream;
pub mod webhooks;

pub use edge::{AllowListError, AllowedHost, CorsOrigin};
pub use error::ServerError;
pub use keys::{ApiKey, KeyError, RESERVED_LABELS};
pub use limits::Limits;
pub use server::{Server, ServerBuilder};
