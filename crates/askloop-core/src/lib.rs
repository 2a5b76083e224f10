//! askloop's core: the agent loop and its tool suspension, with no I/O of its own.
//!
//! An [`Agent`] calls a [`model::LanguageModel`] in a loop; the model calls tools ([`Tool`],
//! [`DynTool`]). A tool may suspend ([`ToolContext::suspend`]): the run's whole state
//! ([`store::RunState`]) is committed to a [`RunStore`], the stream yields a
//! [`Chunk::ToolCallSuspended`] and ends. [`Agent::resume_stream`] later answers that exact call,
//! in this process or another, and the loop goes on. The built-in [`AskUser`] tool asks people
//! questions this way.
//!
//! This crate sits at the bottom of the workspace: `askloop-store` (SQLite) implements
//! [`RunStore`], `askloop-cli` picks concrete types, and the `askloop` facade re-exports this
//! crate. It depends on no database, HTTP or model library.
//!
//! Main types: [`Agent`] and [`AgentBuilder`]; [`AgentStream`] and [`Chunk`]; [`Tool`],
//! [`ToolContext`], [`Execution`]; [`AskUser`]; [`RunStore`]. The rest sits in modules:
//! [`model`] (the [`model::LanguageModel`] trait and the messages it reads and writes),
//! [`store`] (listing, the state codec, [`store::MemoryStore`]), [`wire`] (the JSON form of
//! chunks), [`testing`] ([`testing::ScriptedModel`], and the conformance suite behind
//! `test-support`), [`schema`] (JSON Schema checks that report every problem), [`form`] (what a
//! resume schema asks a person for) and [`answer`] (typed text to a JSON answer, the same forms
//! for every front end), [`registry`] (the agents a front end offers: new runs by agent id, stored
//! runs by the agent that started them), [`time`] (the clock leases and deadlines are read
//! against, timestamps as text). Typed suspending tools implement [`SuspendingTool`] and are registered
//! as [`Suspending`]`(tool)`.
//!
//! # Example
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use askloop_core::testing::ScriptedModel;
//! use askloop_core::{Agent, AskUser, Chunk};
//! use futures::StreamExt;
//!
//! let model = ScriptedModel::from_json(r#"{"steps":[
//!   {"toolCalls":[{"id":"c1","name":"ask_user",
//!     "args":{"question":"Which repo?","options":[{"label":"main"},{"label":"docs"}]}}]},
//!   {"text":"Summary of main."}]}"#)?;
//! let agent = Agent::builder("assistant").model(model).tool(AskUser::new()).build()?;
//!
//! let mut stream = agent.stream("Summarize my project");
//! let run_id = stream.run_id().clone();
//! while let Some(chunk) = stream.next().await {
//!     if let Chunk::ToolCallSuspended { suspension, .. } = chunk? {
//!         assert_eq!(suspension.payload["selectionMode"], "single_select");
//!     }
//! }
//! let answer = agent.resume_stream(serde_json::json!("main"), &run_id, None).await?;
//! assert_eq!(answer.collect_output().await?.text, "Summary of main.");
//! # Ok(()) }
//! ```
//!
//! # Features
//! | feature | what it adds |
//! |---|---|
//! | `test-support` | `testing::conformance`: the store conformance suite other crates run on their stores |

mod actor;
mod agent;
mod approvers;
mod ask_user;
mod cancel;
mod chunk;
mod definition;
mod error;
mod ids;
mod message;
mod options;
mod paths;
mod response;
mod run;
mod run_loop;
mod stream;
mod subagent;
mod suspending;
mod text;
mod tool;

pub mod answer;
pub mod event;
pub mod form;
pub mod model;
pub mod registry;
pub mod schema;
pub mod store;
pub mod testing;
pub mod time;
pub mod wire;

pub use actor::Actor;
pub use agent::{
    Agent, AgentBuildError, AgentBuilder, DEFAULT_LEASE, DEFAULT_MAX_STEPS, Fork, Respond,
    cancel_run_in, expired_runs,
};
pub use approvers::{ApproverPolicy, PolicyRefusal};
pub use ask_user::{
    AskUser, AskUserArgs, AskUserOption, AskUserQuestion, AskUserResult, SelectionMode,
};
pub use cancel::CancelHandle;
pub use chunk::Chunk;
pub use error::{AgentError, ResumeError, error_chain_text};
pub use ids::{
    AgentId, IdKind, IdProblem, InvalidId, LeaseHolder, MAX_ID_BYTES, ResourceId, RunId, RunKey,
    RunRef, ThreadId, ThreadKey, ToolCallId, resource_of_scope,
};
pub use message::{ArgsEdit, AuditAction, AuditRecord};
pub use options::RunOptions;
pub use paths::{DATA_DIR_ENV, data_dir};
pub use response::CallResponse;
pub use run::{
    ApprovalVote, Decision, ForkedFrom, ParentRun, PendingKind, PendingToolCall, RunFailure,
    RunStatus, SUBAGENT_CALL_SEPARATOR, SubagentOrigin, UnknownRunStatus, approval_schema,
    child_call_id, nested_call_id,
};
pub use run_loop::ExpiredRun;
pub use store::{RunStore, StoreError};
pub use stream::{AgentStream, RunOutcome, RunOutput};
pub use subagent::DEFAULT_MAX_SUBAGENT_DEPTH;
pub use suspending::{Suspendable, Suspending, SuspendingError, SuspendingTool};
pub use text::is_blank;
pub use tool::{DynTool, Execution, ResumeRejection, Suspension, Tool, ToolContext, ToolError};
