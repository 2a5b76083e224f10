//! Model SPECs: the one place a SPEC becomes a model.
//!
//! A SPEC is `PROVIDER:MODEL` as [`askloop_providers::ModelSpec`] parses it: `openai:MODEL`,
//! `anthropic:MODEL`, `ollama:MODEL`, `scripted:PATH`, `local[:NAME|:PATH]`. The models are built by
//! [`askloop_providers::build_model`], reading keys and base URLs from the environment.

use std::path::Path;
use std::sync::Arc;

use askloop_core::model::LanguageModel;
use askloop_providers::{ModelSpec, ProviderError, ProviderOptions, SpecError};

use crate::exit::invalid_error;

/// A checked model SPEC: the text recorded with runs and its parsed form, so a command parses
/// the SPEC it runs once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Spec {
    /// The SPEC as recorded with runs.
    text: String,
    /// The SPEC parsed.
    parsed: ModelSpec,
}

impl Spec {
    /// A SPEC as written (a stored run's, or one already resolved).
    ///
    /// # Errors
    /// An invalid-input error for an empty SPEC, an unknown provider or a missing model or path.
    pub(crate) fn parse(text: &str) -> anyhow::Result<Self> {
        let parsed = ModelSpec::parse(text).map_err(invalid_error)?;
        Ok(Self {
            text: text.to_owned(),
            parsed,
        })
    }

    /// Checks a SPEC and makes it independent of the current directory: a relative
    /// `scripted:` or `local:` path is resolved against `base` (the current directory for
    /// `--model` and `ASKLOOP_MODEL`, the file's folder for askloop.toml), so the SPEC
    /// recorded with a run works from anywhere.
    ///
    /// # Errors
    /// The parser's error for an empty SPEC, an unknown provider or a missing model or path.
    pub(crate) fn resolve(text: &str, base: &Path) -> Result<Self, SpecError> {
        let parsed = ModelSpec::parse(text)?;
        // A catalogue name (`local:qwen2.5-coder-1.5b`) is not a path.
        let parsed = if parsed.local_model_name().is_some() {
            parsed
        } else {
            match parsed {
                ModelSpec::Scripted(path) => ModelSpec::Scripted(base.join(path)),
                ModelSpec::Local(Some(path)) => ModelSpec::Local(Some(base.join(path))),
                other => other,
            }
        };
        Ok(Self {
            text: parsed.to_string(),
            parsed,
        })
    }

    /// The SPEC's text, as recorded with runs.
    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    /// The SPEC parsed.
    pub(crate) fn parsed(&self) -> &ModelSpec {
        &self.parsed
    }

    /// Whether the SPEC names the embedded local model (`local`, `local:NAME|PATH`).
    pub(crate) fn is_local(&self) -> bool {
        matches!(self.parsed, ModelSpec::Local(_))
    }
}

/// [`Spec::resolve`], its error as invalid input.
///
/// # Errors
/// An invalid-input error for an empty SPEC, an unknown provider or a missing model or path.
pub(crate) fn resolve_spec(spec: &str, base: &Path) -> anyhow::Result<Spec> {
    Spec::resolve(spec, base).map_err(invalid_error)
}

/// Builds the model a SPEC names.
///
/// # Errors
/// An invalid-input error for a missing API key or base URL, an unreadable script or a
/// feature this build lacks; other provider errors as they are.
pub(crate) async fn build_model(spec: &Spec) -> anyhow::Result<Arc<dyn LanguageModel>> {
    match askloop_providers::build_model(spec.parsed(), &ProviderOptions::from_env()).await {
        Ok(model) => Ok(model),
        Err(
            error @ (ProviderError::MissingApiKey { .. }
            | ProviderError::InvalidBaseUrl { .. }
            | ProviderError::Script(_)
            | ProviderError::FeatureDisabled { .. }),
        ) => Err(invalid_error(error)),
        Err(error) => Err(error.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_script_paths_become_absolute() {
        let spec = resolve_spec("scripted:demo.json", Path::new("/work/x"))
            .unwrap()
            .text()
            .to_owned();
        assert_eq!(spec, "scripted:/work/x/demo.json");
        let spec = resolve_spec("scripted:/abs/demo.json", Path::new("/work/x"))
            .unwrap()
            .text()
            .to_owned();
        assert_eq!(spec, "scripted:/abs/demo.json");
        let spec = resolve_spec("openai:gpt-4o-mini", Path::new("/work/x"))
            .unwrap()
            .text()
            .to_owned();
        assert_eq!(spec, "openai:gpt-4o-mini");
        let spec = resolve_spec("local:qwen2.5-coder-1.5b", Path::new("/work/x"))
            .unwrap()
            .text()
            .to_owned();
        assert_eq!(spec, "local:qwen2.5-coder-1.5b");
        let spec = resolve_spec("local:models/a.gguf", Path::new("/work/x"))
            .unwrap()
            .text()
            .to_owned();
        assert_eq!(spec, "local:/work/x/models/a.gguf");
    }

    #[test]
    fn unknown_providers_name_the_known_forms() {
        for bad in ["gpt-4o", "gemini:pro", "scripted:", "openai:"] {
            let error = resolve_spec(bad, Path::new("/")).unwrap_err().to_string();
            assert!(
                error.contains("scripted") || error.contains("openai:"),
                "{bad}: {error}"
            );
        }
    }
}
