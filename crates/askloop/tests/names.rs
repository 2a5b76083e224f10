//! Every type that appears in a public signature of the facade can be named through `askloop::`
//! paths alone (issue 32): this file names each one and uses no inner crate. It compiles with
//! any set of features; the items behind a feature are named under the same `cfg`.

use std::convert::Infallible;

/// Names a type: compiles only if the path resolves.
fn named<T>() -> Option<T> {
    None
}

/// Names the traits a tool implements: compiles only if the paths resolve to traits.
#[allow(dead_code)]
fn tool_traits<T: askloop::Tool, S: askloop::SuspendingTool>() {}

#[test]
fn root_types_are_named() {
    let _ = named::<askloop::Agent>();
    let _ = named::<askloop::AgentBuildError>();
    let _ = named::<askloop::AgentBuilder>();
    let _ = named::<askloop::AgentError>();
    let _ = named::<askloop::AgentId>();
    let _ = named::<askloop::AgentStream>();
    let _ = named::<askloop::AskUser>();
    let _ = named::<askloop::AskUserArgs>();
    let _ = named::<askloop::AskUserOption>();
    let _ = named::<askloop::AskUserQuestion>();
    let _ = named::<askloop::AskUserResult>();
    let _ = named::<askloop::AuditAction>();
    let _ = named::<askloop::AuditRecord>();
    let _ = named::<askloop::CallResponse>();
    let _ = named::<askloop::CancelHandle>();
    let _ = named::<askloop::Chunk>();
    let _ = named::<std::sync::Arc<dyn askloop::DynTool>>();
    let _ = named::<askloop::Execution<()>>();
    let _ = named::<askloop::ExpiredRun>();
    let _ = named::<askloop::IdKind>();
    let _ = named::<askloop::IdProblem>();
    let _ = named::<askloop::InvalidId>();
    let _ = named::<askloop::LeaseHolder>();
    let _ = named::<askloop::ParentRun>();
    let _ = named::<askloop::SubagentOrigin>();
    let _: u32 = askloop::DEFAULT_MAX_SUBAGENT_DEPTH;
    let _: char = askloop::SUBAGENT_CALL_SEPARATOR;
    let _ = named::<askloop::PendingKind>();
    let _ = named::<askloop::PendingToolCall>();
    let _ = named::<askloop::ResourceId>();
    let _ = named::<askloop::Respond<'static>>();
    let _ = named::<askloop::ResumeError>();
    let _ = named::<askloop::ResumeRejection>();
    let _ = named::<askloop::RunFailure>();
    let _ = named::<askloop::RunId>();
    let _ = named::<askloop::RunKey>();
    let _ = named::<askloop::RunOptions>();
    let _ = named::<askloop::RunOutcome>();
    let _ = named::<askloop::RunOutput>();
    let _ = named::<askloop::RunRef>();
    let _ = named::<askloop::RunStatus>();
    let _ = named::<std::sync::Arc<dyn askloop::RunStore>>();
    let _ = named::<askloop::SelectionMode>();
    let _ = named::<askloop::StoreError>();
    let _ = named::<askloop::Suspendable<(), ()>>();
    let _ = named::<askloop::Suspending<()>>();
    let _ = named::<askloop::SuspendingError<Infallible>>();
    let _ = named::<askloop::Suspension>();
    let _ = named::<askloop::ThreadId>();
    let _ = named::<askloop::ThreadKey>();
    let _ = named::<askloop::ToolCallId>();
    let _ = named::<askloop::ToolContext>();
    let _ = named::<askloop::ToolError>();
    let _ = named::<askloop::UnknownRunStatus>();
}

/// Names the root's functions and the clock a sweep reads: compiles only if the paths resolve.
#[allow(dead_code)]
async fn sweep(
    store: &dyn askloop::RunStore,
    run: askloop::RunId,
) -> Result<(), Box<dyn std::error::Error>> {
    let now: u64 = askloop::time::lease_now_ms();
    let _: Vec<askloop::ExpiredRun> = askloop::expired_runs(store, now).await?;
    let _: String = askloop::time::rfc3339(now);
    askloop::cancel_run_in(store, run, None).await?;
    Ok(())
}

#[test]
fn model_types_are_named() {
    let _ = named::<askloop::model::AssistantPart>();
    let _ = named::<askloop::model::AuditAction>();
    let _ = named::<askloop::model::AuditRecord>();
    let _ = named::<askloop::model::FinishReason>();
    let _ = named::<askloop::model::Message>();
    let _ = named::<askloop::model::ToolArgs>();
    let _ = named::<askloop::model::ToolCall>();
    let _ = named::<askloop::model::ToolResult>();
    let _ = named::<askloop::model::Usage>();
    let _ = named::<askloop::model::ToolDefinition>();
    let _ = named::<askloop::model::ToolChoice>();
    let _ = named::<askloop::model::ModelSettings>();
    let _ = named::<askloop::model::ModelRequest>();
    let _ = named::<askloop::model::ModelEvent>();
    let _ = named::<askloop::model::ModelEventStream>();
    let _ = named::<askloop::model::ModelError>();
    let _ = named::<std::sync::Arc<dyn askloop::model::LanguageModel>>();
}

#[test]
fn store_types_are_named() {
    let _ = named::<askloop::store::ChangeFeed>();
    let _ = named::<askloop::store::InvalidCursor>();
    let _ = named::<askloop::store::Lease>();
    let _ = named::<askloop::store::ListedRun>();
    let _ = named::<askloop::store::MemoryStore>();
    let _ = named::<askloop::store::ResourceFilter>();
    let _ = named::<askloop::store::RunChange>();
    let _ = named::<askloop::store::RunChanges>();
    let _ = named::<askloop::store::RunCounts>();
    let _ = named::<askloop::store::RunCursor>();
    let _ = named::<askloop::store::RunFilter>();
    let _ = named::<askloop::store::RunPage>();
    let _ = named::<askloop::store::RunState>();
    let _ = named::<std::sync::Arc<dyn askloop::store::RunStore>>();
    let _ = named::<askloop::store::RunSummary>();
    let _ = named::<askloop::store::StoreError>();
    let _ = named::<askloop::store::StoredRun>();
    let _ = named::<askloop::store::ThreadHistory>();
    let _ = named::<askloop::store::UnfinishedCall>();
    let _ = askloop::store::notifies;
    let _ = askloop::store::codec::encode_state;
    let _ = askloop::store::FIRST_MESSAGE_CHARS;
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
#[test]
fn durable_store_types_are_named() {
    let _ = named::<askloop::store::OpenError>();
    let _ = named::<askloop::store::OpenOptions>();
    let _ = named::<askloop::store::SqliteStore>();
    let _ = named::<askloop::store::StoreUrl>();
    let _ = named::<askloop::store::Synchronous>();
}

#[cfg(feature = "postgres")]
#[test]
fn postgres_types_are_named() {
    let _ = named::<askloop::store::PgStore>();
    let _ = named::<askloop::store::PgUrl>();
    let _ = named::<askloop::store::PgUrlError>();
}

#[test]
fn other_module_types_are_named() {
    let _ = named::<askloop::testing::ScriptError>();
    let _ = named::<askloop::testing::ScriptStep>();
    let _ = named::<askloop::testing::ScriptToolCall>();
    let _ = named::<askloop::testing::ScriptedModel>();
    let _ = named::<askloop::schema::SchemaValidator>();
    let _ = named::<askloop::schema::SchemaError>();
    let _ = named::<askloop::form::Field>();
    let _ = named::<askloop::form::FieldKind>();
    let _ = named::<askloop::form::Choice>();
    let _ = named::<askloop::form::Property>();
    let _ = named::<askloop::answer::AnswerError>();
    let _ = named::<askloop::registry::RegistryError>();
    let _ = named::<askloop::registry::AgentSet>();
    let _ = named::<std::sync::Arc<dyn askloop::registry::AgentRegistry>>();
}

#[cfg(any(
    feature = "openai",
    feature = "anthropic",
    feature = "ollama",
    feature = "local"
))]
#[test]
fn provider_types_are_named() {
    let _ = named::<askloop::providers::ModelSpec>();
    let _ = named::<askloop::providers::ProviderError>();
    let _ = named::<askloop::providers::ProviderOptions>();
    let _ = named::<askloop::providers::RetryPolicy>();
    let _ = named::<askloop::providers::SpecError>();
    let _ = named::<askloop::providers::TransportProblem>();
    let _ = named::<askloop::providers::WireError>();
}
