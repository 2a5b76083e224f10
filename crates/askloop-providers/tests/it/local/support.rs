//! Helpers of the local model tests: the model file, one model run at a time, collecting events.

use std::path::PathBuf;

use askloop_core::{
    Agent, AskUser, LanguageModel, ModelError, ModelEvent, ModelRequest, ToolDefinition,
};
use askloop_providers::local::{LocalModel, PULL_COMMAND, default_model_path};
use futures::StreamExt;
use tokio::sync::{Mutex, MutexGuard};

/// The default model file; panics with the command that fetches it when it is missing.
pub(crate) fn model_path() -> PathBuf {
    let path = default_model_path().expect("a data folder (set ASKLOOP_DATA_DIR)");
    assert!(
        path.is_file(),
        "the local model is missing at {}; run `{PULL_COMMAND}` (or `cargo run -p askloop-providers --features local --example local_pull`) before these tests",
        path.display()
    );
    path
}

/// The default model, loaded once for the whole test binary.
pub(crate) fn model() -> LocalModel {
    LocalModel::load(&model_path()).expect("the default model loads")
}

/// Held by every test that runs the model, so they do not compete for the cores (candle's
/// thread pool slows down badly when oversubscribed).
pub(crate) async fn one_at_a_time() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::const_new(());
    LOCK.lock().await
}

/// The definitions of `ask_user` as an agent registers it.
pub(crate) fn ask_user_definition() -> ToolDefinition {
    let agent = Agent::builder("tools")
        .model(askloop_core::ScriptedModel::from_steps(vec![]))
        .tool(AskUser)
        .build()
        .unwrap();
    agent.tool_definitions()[0].clone()
}

/// Every event of one call, or the error that ended it.
pub(crate) async fn collect(
    model: &dyn LanguageModel,
    request: ModelRequest,
) -> Result<Vec<ModelEvent>, ModelError> {
    let mut stream = model.stream(request).await?;
    let mut events = Vec::new();
    while let Some(event) = stream.next().await {
        events.push(event?);
    }
    Ok(events)
}

/// The text of the events.
pub(crate) fn text_of(events: &[ModelEvent]) -> String {
    events
        .iter()
        .filter_map(|event| match event {
            ModelEvent::TextDelta(text) => Some(text.as_str()),
            _ => None,
        })
        .collect()
}
