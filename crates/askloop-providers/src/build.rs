//! [`build_model`]: one entry point from a [`ModelSpec`] to a [`LanguageModel`].

use std::sync::Arc;

use askloop_core::model::LanguageModel;
use askloop_core::testing::ScriptedModel;

use crate::error::ProviderError;
use crate::model::GenaiModel;
use crate::options::ProviderOptions;
use crate::protocol::Protocol;
use crate::spec::ModelSpec;

/// Builds the model a SPEC names.
///
/// Hosted providers read their key and base URL through `options` now, so a missing key fails
/// here, before any run starts; no request is sent. `scripted:PATH` loads the script file.
/// `local` builds the embedded model when the crate has the `local` feature.
///
/// # Errors
/// [`ProviderError::MissingApiKey`] naming the variable to set;
/// [`ProviderError::InvalidBaseUrl`]; [`ProviderError::HttpClient`];
/// [`ProviderError::Script`] for an unreadable or invalid script;
/// [`ProviderError::FeatureDisabled`] for a provider whose feature (`openai`, `anthropic`,
/// `ollama`, `local`) this build lacks;
/// [`ProviderError::Local`] when the local model cannot be loaded.
///
/// # Example
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use askloop_core::{Agent, AskUser};
/// use askloop_providers::{ModelSpec, ProviderOptions, build_model};
///
/// let spec: ModelSpec = "anthropic:claude-sonnet-4-5".parse()?;
/// let model = build_model(&spec, &ProviderOptions::from_env()).await?;
/// let agent = Agent::builder("assistant")
///     .shared_model(model)
///     .model_spec(spec.to_string())
///     .tool(AskUser::new())
///     .build()?;
/// # let _ = agent;
/// # Ok(()) }
/// ```
pub async fn build_model(
    spec: &ModelSpec,
    options: &ProviderOptions,
) -> Result<Arc<dyn LanguageModel>, ProviderError> {
    let hosted = |protocol: Protocol, model: &str, enabled: bool, feature: &'static str| {
        if !enabled {
            return Err(ProviderError::FeatureDisabled {
                spec: spec.to_string(),
                feature,
            });
        }
        let model: Arc<dyn LanguageModel> = Arc::new(GenaiModel::new(protocol, model, options)?);
        Ok(model)
    };
    match spec {
        ModelSpec::OpenAi { model } => {
            hosted(Protocol::OpenAi, model, cfg!(feature = "openai"), "openai")
        }
        ModelSpec::Anthropic { model } => hosted(
            Protocol::Anthropic,
            model,
            cfg!(feature = "anthropic"),
            "anthropic",
        ),
        ModelSpec::Ollama { model } => {
            hosted(Protocol::Ollama, model, cfg!(feature = "ollama"), "ollama")
        }
        ModelSpec::Scripted(path) => Ok(Arc::new(ScriptedModel::from_file(path)?)),
        ModelSpec::Local(path) => build_local(spec, path.as_deref(), options).await,
    }
}

/// The embedded model. With the `local` feature this calls
/// `crate::local::build(path: Option<&Path>, options: &ProviderOptions)
///     -> Result<Arc<dyn LanguageModel>, ProviderError>` (in `src/local/`).
#[cfg(feature = "local")]
async fn build_local(
    _spec: &ModelSpec,
    path: Option<&std::path::Path>,
    options: &ProviderOptions,
) -> Result<Arc<dyn LanguageModel>, ProviderError> {
    crate::local::build(path, options).await
}

#[cfg(not(feature = "local"))]
async fn build_local(
    spec: &ModelSpec,
    _path: Option<&std::path::Path>,
    _options: &ProviderOptions,
) -> Result<Arc<dyn LanguageModel>, ProviderError> {
    Err(ProviderError::FeatureDisabled {
        spec: spec.to_string(),
        feature: "local",
    })
}
