//! askloop: AI agents whose tools stop to ask a person and pick up where they left off —
//! minutes or days later, in the same process or another.
//!
//! This is the crate to depend on. It re-exports the core ([`Agent`], [`Tool`], [`AskUser`],
//! [`RunStore`], [`Chunk`], …) and, behind features, the durable stores. The inner crates
//! (`askloop-core`, `askloop-store`) are implementation detail; this crate carries the
//! stability promise.
//!
//! An [`Agent`] calls a model in a loop; the model calls tools. A tool may call
//! [`ToolContext::suspend`]: the run is committed to the store, the stream yields a
//! [`Chunk::ToolCallSuspended`] and ends. [`Agent::resume_stream`] later answers exactly that
//! tool call and the loop goes on.
//!
//! # Example
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use askloop::{Agent, AskUser, RunOutcome, ScriptedModel};
//!
//! let model = ScriptedModel::from_json(r#"{"steps":[
//!   {"toolCalls":[{"id":"c1","name":"ask_user","args":{"question":"Which repo?"}}]},
//!   {"text":"Done."}]}"#)?;
//! let agent = Agent::builder("assistant").model(model).tool(AskUser).build()?;
//! let first = agent.generate("Summarize my project").await?;
//! let RunOutcome::Suspended { pending } = &first.status else { unreachable!() };
//! assert_eq!(pending[0].suspend_payload["question"], "Which repo?");
//! let answer = agent.resume_stream("main".into(), &first.run_id, None).await?;
//! assert_eq!(answer.collect_output().await?.text, "Done.");
//! # Ok(()) }
//! ```
//!
//! # Features
//! | feature | default | what it adds |
//! |---|---|---|
//! | `sqlite` | yes | [`store`]: [`store::SqliteStore`] and [`store::open_store`] |

pub use askloop_core::*;

/// Durable stores (feature `sqlite`): [`store::SqliteStore`], store URLs and [`store::open_store`].
#[cfg(feature = "sqlite")]
pub mod store {
    pub use askloop_store::{
        DEFAULT_DB_FILE, OpenError, OpenOptions, SqliteStore, StoreUrl, Synchronous,
        default_store_url, open_store,
    };
}
