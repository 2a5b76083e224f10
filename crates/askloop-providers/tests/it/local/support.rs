//! Helpers of the local model tests: the model file (fetched on first use), one model run at a
//! time, collecting events.

use std::path::PathBuf;
use std::sync::OnceLock;

use askloop_core::model::{LanguageModel, ModelError, ModelEvent, ModelRequest, ToolDefinition};
use askloop_core::{Agent, AskUser};
use askloop_providers::local::{
    CatalogueModel, FetchOptions, LocalModel, QWEN25_CODER_1_5B, SMOLLM2_135M, fetch_model,
};
use futures::StreamExt;
use tokio::sync::{Mutex, MutexGuard};

/// A catalogue model's file, fetched through the same first-use path as `askloop model pull`
/// (once per data folder: a lock file keeps concurrent test processes from fetching twice).
fn fetched(model: &'static CatalogueModel) -> PathBuf {
    // Tests run on runtimes of their own; the fetch gets one on a thread of its own.
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async { fetch_model(model, &FetchOptions::from_data_dir()?, |_| {}).await })
    })
    .join()
    .unwrap()
    .unwrap_or_else(|error| panic!("cannot fetch {}: {}", model.name, chain(&error)))
}

/// SmolLM2-135M, the small model most tests run (fast, and enough to test the machinery).
pub(crate) fn model_path() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| fetched(&SMOLLM2_135M)).clone()
}

/// Qwen2.5-Coder-1.5B, the default model, for the few tests that need the real one.
pub(crate) fn qwen_path() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| fetched(&QWEN25_CODER_1_5B)).clone()
}

/// An error and its sources, joined with `: `.
pub(crate) fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// SmolLM2-135M, loaded once for the whole test binary.
pub(crate) fn model() -> LocalModel {
    LocalModel::load(&model_path()).expect("SmolLM2-135M loads")
}

/// Qwen2.5-Coder-1.5B, loaded once for the whole test binary.
pub(crate) fn qwen() -> LocalModel {
    LocalModel::load(&qwen_path()).expect("Qwen2.5-Coder-1.5B loads")
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
        .model(askloop_core::testing::ScriptedModel::from_steps(vec![]))
        .tool(AskUser::new())
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
