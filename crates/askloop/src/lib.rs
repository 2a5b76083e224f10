//! askloop: AI agents whose tools stop to ask a person and pick up where they left off —
//! minutes or days later, in the same process or another.
//!
//! This is the crate to depend on; it carries the stability promise. The inner crates
//! (`askloop-core`, `askloop-store`, `askloop-providers`) are implementation detail and may
//! change in any release.
//!
//! An [`Agent`] calls a model in a loop; the model calls tools. A tool may call
//! [`ToolContext::suspend`]: the run is committed to the store, the stream yields a
//! [`Chunk::ToolCallSuspended`] and ends. [`Agent::resume_stream`] later answers exactly that
//! tool call and the loop goes on. The built-in [`AskUser`] tool asks people questions this way.
//!
//! The root holds what every user touches: the agent, its stream and chunks, tools and their
//! context, answering waiting calls ([`Respond`], [`CallResponse`]) and expiring them
//! ([`expired_runs`], [`ExpiredRun`]), ids and errors. The rest sits in modules: [`model`] (the
//! `LanguageModel` trait and conversation messages), [`store`] (the `RunStore` trait, listing,
//! change notifications, the stores), [`wire`] (the JSON form of chunks), [`testing`] (a scripted
//! model), [`providers`] (real models from a SPEC string, behind features), [`schema`] (JSON
//! Schema checks), [`form`] (what a resume schema asks a person for), [`answer`] (typed text to a
//! JSON answer), [`registry`] (the agents a front end offers) and [`time`] (the clock deadlines
//! are read against, timestamps as text). Every type in a public signature of this crate can be
//! named through it. Typed suspending tools
//! implement [`SuspendingTool`] and are registered as [`Suspending`]`(tool)`. What implementing a [`Tool`] needs
//! is re-exported too ([`macro@async_trait`], [`schemars`], [`serde`], [`serde_json`]), so your
//! `Cargo.toml` need not match askloop's versions of them.
//!
//! # Example
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use askloop::testing::ScriptedModel;
//! use askloop::{Agent, AskUser, RunOutcome};
//!
//! let model = ScriptedModel::from_json(r#"{"steps":[
//!   {"toolCalls":[{"id":"c1","name":"ask_user","args":{"question":"Which repo?"}}]},
//!   {"text":"Done."}]}"#)?;
//! let agent = Agent::builder("assistant").model(model).tool(AskUser::new()).build()?;
//! let first = agent.generate("Summarize my project").await?;
//! let RunOutcome::Suspended { pending } = &first.status else { unreachable!() };
//! assert_eq!(pending[0].suspend_payload["question"], "Which repo?");
//! let call = &pending[0].tool_call_id;
//! let answer = agent.resume_stream("main".into(), &first.run_id, Some(call)).await?;
//! assert_eq!(answer.collect_output().await?.text, "Done.");
//! # Ok(()) }
//! ```
//!
//! # Features
//! | feature | default | what it adds |
//! |---|---|---|
//! | `sqlite` | yes | [`store::SqliteStore`], store URLs and [`store::open_store`] |
//! | `postgres` | no | `store::PgStore` and `postgres://` store URLs (with what `sqlite` adds) |
//! | `openai` | no | [`providers`]: OpenAI Chat Completions and compatible servers (`openai:MODEL`) |
//! | `anthropic` | no | [`providers`]: Anthropic Messages (`anthropic:MODEL`) |
//! | `ollama` | no | [`providers`]: a local Ollama (`ollama:MODEL`) |
//! | `local` | no | [`providers`]: the embedded model on the CPU (`local`, `local:PATH`) |

pub use askloop_core::{
    Actor, Agent, AgentBuildError, AgentBuilder, AgentError, AgentId, AgentStream, ApprovalVote,
    ApproverPolicy, ArgsEdit, AskUser, AskUserArgs, AskUserOption, AskUserQuestion, AskUserResult,
    AuditAction, AuditRecord, CallResponse, CancelHandle, Chunk, DEFAULT_LEASE, DEFAULT_MAX_STEPS,
    DEFAULT_MAX_SUBAGENT_DEPTH, Decision, DynTool, Execution, ExpiredRun, Fork, ForkedFrom, IdKind,
    IdProblem, InvalidId, LeaseHolder, MAX_ID_BYTES, ParentRun, PendingKind, PendingToolCall,
    PolicyRefusal, ResourceId, Respond, ResumeError, ResumeRejection, RunFailure, RunId, RunKey,
    RunOptions, RunOutcome, RunOutput, RunRef, RunStatus, RunStore, SUBAGENT_CALL_SEPARATOR,
    SelectionMode, StoreError, SubagentOrigin, Suspendable, Suspending, SuspendingError,
    SuspendingTool, Suspension, ThreadId, ThreadKey, Tool, ToolCallId, ToolContext, ToolError,
    UnknownRunStatus, approval_schema, cancel_run_in, expired_runs,
};
pub use askloop_core::{answer, event, form, model, registry, schema, time, wire};

/// Re-exported for implementing [`Tool`]: `#[askloop::async_trait]` on the `impl`.
pub use async_trait::async_trait;
/// Re-exported for tool arguments: derive `askloop::schemars::JsonSchema` with
/// `#[schemars(crate = "askloop::schemars")]`.
pub use schemars;
/// Re-exported for tool arguments and outputs: derive with `#[serde(crate = "askloop::serde")]`.
pub use serde;
/// Re-exported: tool outputs and answers are `serde_json::Value`s.
pub use serde_json;

/// Where runs are kept: the [`RunStore`] trait and its contract, listing, the shared state
/// codec, the in-memory store and (features `sqlite`, `postgres`) the SQLite and PostgreSQL
/// stores.
pub mod store {
    pub use askloop_core::resource_of_scope;
    pub use askloop_core::store::{
        AnswerLink, AnswerLinks, ChangeFeed, Delivery, DeliveryAttempt, DeliveryClaim,
        DeliveryFilter, DeliveryId, DeliveryNext, DeliveryStatus, FIRST_MESSAGE_CHARS, FanOut,
        InvalidCursor, Lease, LinkHash, LinkId, ListedRun, MemoryStore, NewAnswerLink,
        ResourceFilter, RunChange, RunChanges, RunCounts, RunCursor, RunFilter, RunPage, RunState,
        RunStore, RunSummary, StoreError, StoredEvent, StoredRun, ThreadHistory, UnfinishedCall,
        codec, notifies, running_run_of,
    };
    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    pub use askloop_store::{
        DEFAULT_DB_FILE, OpenError, OpenOptions, SqliteStore, StoreUrl, Synchronous,
        default_store_url, open_store,
    };
    #[cfg(feature = "postgres")]
    pub use askloop_store::{PgStore, PgUrl, PgUrlError};
}

/// Helpers for tests and demos: [`testing::ScriptedModel`] replays a JSON script of model
/// steps.
pub mod testing {
    pub use askloop_core::testing::{ScriptError, ScriptStep, ScriptToolCall, ScriptedModel};
}

/// Real models from a SPEC string (`PROVIDER:MODEL`): [`providers::build_model`] and the SPEC
/// parser. Each provider is a feature: `openai`, `anthropic`, `ollama`, `local`.
#[cfg(any(
    feature = "openai",
    feature = "anthropic",
    feature = "ollama",
    feature = "local"
))]
pub mod providers {
    #[cfg(feature = "local")]
    pub use askloop_providers::local;
    pub use askloop_providers::{
        ModelSpec, PROVIDERS, ProviderError, ProviderOptions, RetryPolicy, SpecError,
        TransportProblem, WireError, build_model,
    };
}

/// The README's Rust examples, compiled as doc tests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeExamples;

/// The Rust examples of `docs/library.md`, compiled as doc tests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/library.md")]
struct LibraryGuideExamples;

/// The Rust examples of `docs/approvers.md`, compiled as doc tests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/approvers.md")]
struct ApproverGuideExamples;
