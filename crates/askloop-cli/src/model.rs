//! Model SPECs: the one place a SPEC becomes a model.
//!
//! A SPEC is `PROVIDER:MODEL` as [`askloop_providers::ModelSpec`] parses it: `openai:MODEL`,
//! `anthropic:MODEL`, `ollama:MODEL`, `scripted:PATH`, `local[:NAME|:PATH]`. The models are built by
//! [`askloop_providers::build_model`], reading keys and base URLs from the environment.

use std::path::Path;
use std::sync::Arc;

use askloop_core::model::LanguageModel;
use askloop_providers::{ModelSpec, ProviderError, ProviderOptions};

use crate::exit::invalid_error;

/// Checks a SPEC and makes it independent of the current directory: a relative `scripted:` or
/// `local:` path is resolved against `base` (the current directory for `--model` and
/// `ASKLOOP_MODEL`, the file's folder for askloop.toml), so the SPEC recorded with a run works
/// from anywhere.
///
/// # Errors
/// An invalid-input error for an empty SPEC, an unknown provider or a missing model or path.
pub(crate) fn resolve_spec(spec: &str, base: &Path) -> anyhow::Result<String> {
    let parsed = ModelSpec::parse(spec).map_err(invalid_error)?;
    // A catalogue name (`local:smollm2-135m`) is not a path.
    if parsed.local_model_name().is_some() {
        return Ok(parsed.to_string());
    }
    let resolved = match parsed {
        ModelSpec::Scripted(path) => ModelSpec::Scripted(base.join(path)),
        ModelSpec::Local(Some(path)) => ModelSpec::Local(Some(base.join(path))),
        other => other,
    };
    Ok(resolved.to_string())
}

/// Builds the model a SPEC names (as returned by [`resolve_spec`]).
///
/// # Errors
/// An invalid-input error for a bad SPEC, a missing API key or base URL, an unreadable script
/// or a feature this build lacks; other provider errors as they are.
pub(crate) async fn build_model(spec: &str) -> anyhow::Result<Arc<dyn LanguageModel>> {
    let parsed = ModelSpec::parse(spec).map_err(invalid_error)?;
    match askloop_providers::build_model(&parsed, &ProviderOptions::from_env()).await {
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
        let spec = resolve_spec("scripted:demo.json", Path::new("/work/x")).unwrap();
        assert_eq!(spec, "scripted:/work/x/demo.json");
        let spec = resolve_spec("scripted:/abs/demo.json", Path::new("/work/x")).unwrap();
        assert_eq!(spec, "scripted:/abs/demo.json");
        let spec = resolve_spec("openai:gpt-4o-mini", Path::new("/work/x")).unwrap();
        assert_eq!(spec, "openai:gpt-4o-mini");
        let spec = resolve_spec("local:smollm2-135m", Path::new("/work/x")).unwrap();
        assert_eq!(spec, "local:smollm2-135m");
        let spec = resolve_spec("local:models/a.gguf", Path::new("/work/x")).unwrap();
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
