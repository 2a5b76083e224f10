//! [`ModelSpec`]: the `PROVIDER:MODEL` text of `--model`, `ASKLOOP_MODEL` and `askloop.toml`.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// Which model to use, parsed from a model SPEC string.
///
/// The provider is always named explicitly by the text before the first `:`; the model name is
/// never used to guess it. The SPEC forms are:
///
/// | SPEC | variant |
/// |---|---|
/// | `openai:MODEL` | [`ModelSpec::OpenAi`]: any OpenAI-compatible server (see `OPENAI_BASE_URL`) |
/// | `anthropic:MODEL` | [`ModelSpec::Anthropic`] |
/// | `ollama:MODEL` | [`ModelSpec::Ollama`]: Ollama's native `/api/chat` |
/// | `scripted:PATH` | [`ModelSpec::Scripted`]: an [`askloop_core::testing::ScriptedModel`] script file |
/// | `local`, `local:NAME` or `local:PATH` | [`ModelSpec::Local`]: the embedded model (feature `local`): the default, a model of the catalogue by name, or a GGUF file |
///
/// [`fmt::Display`] writes the SPEC back in this form, so it can be recorded with a run and
/// parsed again by another process.
///
/// # Example
/// ```
/// use askloop_providers::ModelSpec;
///
/// let spec: ModelSpec = "openai:gpt-4o-mini".parse()?;
/// assert_eq!(spec, ModelSpec::OpenAi { model: "gpt-4o-mini".into() });
/// assert_eq!(spec.to_string(), "openai:gpt-4o-mini");
/// // Model names may contain `:` (Ollama tags); only the first one separates the provider.
/// assert_eq!(
///     ModelSpec::parse("ollama:llama3.2:3b")?,
///     ModelSpec::Ollama { model: "llama3.2:3b".into() }
/// );
/// # Ok::<(), askloop_providers::SpecError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ModelSpec {
    /// An OpenAI Chat Completions model (`openai:MODEL`).
    OpenAi {
        /// The model id as the server names it (e.g. `gpt-4o-mini`).
        model: String,
    },
    /// An Anthropic Messages model (`anthropic:MODEL`).
    Anthropic {
        /// The model id (e.g. `claude-sonnet-4-5`).
        model: String,
    },
    /// A model served by Ollama (`ollama:MODEL`).
    Ollama {
        /// The model name with its tag, if any (e.g. `llama3.2` or `qwen3:8b`).
        model: String,
    },
    /// A scripted model replaying a JSON script file (`scripted:PATH`).
    Scripted(PathBuf),
    /// The embedded local model: `local` (the default model), `local:NAME` (a model of the
    /// catalogue by name, such as `qwen2.5-coder-1.5b`; see [`ModelSpec::local_model_name`]), or
    /// `local:PATH` for a GGUF file or a folder holding one. A catalogue name wins over a file
    /// of the same name in the current folder (write `local:./NAME` for that).
    Local(Option<PathBuf>),
}

/// The providers a SPEC may name.
pub const PROVIDERS: [&str; 5] = ["openai", "anthropic", "ollama", "scripted", "local"];

/// The SPEC forms, as error messages list them.
const SPEC_FORMS: &str =
    "openai:MODEL, anthropic:MODEL, ollama:MODEL, scripted:PATH, local or local:PATH";

/// Why a model SPEC could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SpecError {
    /// The SPEC is empty.
    #[error("the model SPEC is empty; expected one of {SPEC_FORMS}")]
    Empty,
    /// The SPEC has no `PROVIDER:` prefix (and is not `local`).
    #[error(
        "model SPEC {spec:?} names no provider; expected one of {SPEC_FORMS}, e.g. openai:{spec}"
    )]
    MissingProvider {
        /// The SPEC as given.
        spec: String,
    },
    /// The provider before the `:` is not one askloop knows.
    #[error(
        "model SPEC {spec:?} names unknown provider {provider:?}; expected one of {SPEC_FORMS}"
    )]
    UnknownProvider {
        /// The SPEC as given.
        spec: String,
        /// The text before the first `:`.
        provider: String,
    },
    /// Nothing follows `PROVIDER:` where a model name or path is required.
    #[error(
        "model SPEC {spec:?} has no {expected} after {provider}:; expected {provider}:{placeholder}",
        placeholder = if *expected == "path" { "PATH" } else { "MODEL" }
    )]
    MissingModel {
        /// The SPEC as given.
        spec: String,
        /// The provider.
        provider: &'static str,
        /// What was expected (`"model name"` or `"path"`).
        expected: &'static str,
    },
}

impl ModelSpec {
    /// Parses a SPEC (the same as [`str::parse`]). Surrounding whitespace is ignored; the
    /// provider name is case-insensitive; the model name is kept exactly.
    ///
    /// # Errors
    /// [`SpecError::Empty`], [`SpecError::MissingProvider`], [`SpecError::UnknownProvider`],
    /// [`SpecError::MissingModel`].
    pub fn parse(spec: &str) -> Result<Self, SpecError> {
        let spec = spec.trim();
        if spec.is_empty() {
            return Err(SpecError::Empty);
        }
        let Some((provider, rest)) = spec.split_once(':') else {
            if spec.eq_ignore_ascii_case("local") {
                return Ok(Self::Local(None));
            }
            return Err(SpecError::MissingProvider {
                spec: spec.to_owned(),
            });
        };
        let missing = |provider: &'static str, expected: &'static str| SpecError::MissingModel {
            spec: spec.to_owned(),
            provider,
            expected,
        };
        match provider.to_ascii_lowercase().as_str() {
            "openai" if rest.is_empty() => Err(missing("openai", "model name")),
            "openai" => Ok(Self::OpenAi {
                model: rest.to_owned(),
            }),
            "anthropic" if rest.is_empty() => Err(missing("anthropic", "model name")),
            "anthropic" => Ok(Self::Anthropic {
                model: rest.to_owned(),
            }),
            "ollama" if rest.is_empty() => Err(missing("ollama", "model name")),
            "ollama" => Ok(Self::Ollama {
                model: rest.to_owned(),
            }),
            "scripted" if rest.is_empty() => Err(missing("scripted", "path")),
            "scripted" => Ok(Self::Scripted(PathBuf::from(rest))),
            "local" if rest.is_empty() => Err(missing("local", "path")),
            "local" => Ok(Self::Local(Some(PathBuf::from(rest)))),
            _ => Err(SpecError::UnknownProvider {
                spec: spec.to_owned(),
                provider: provider.to_owned(),
            }),
        }
    }

    /// For `local:NAME` where NAME is a model of askloop's catalogue (`qwen2.5-coder-1.5b`),
    /// that name; `None` for every other SPEC, `local` and `local:PATH` included.
    ///
    /// ```
    /// use askloop_providers::ModelSpec;
    ///
    /// let spec = ModelSpec::parse("local:qwen2.5-coder-1.5b")?;
    /// assert_eq!(spec.local_model_name(), Some("qwen2.5-coder-1.5b"));
    /// assert_eq!(ModelSpec::parse("local:./qwen2.5-coder-1.5b")?.local_model_name(), None);
    /// // Not in the catalogue (the tests' own small model): a path.
    /// assert_eq!(ModelSpec::parse("local:smollm2-135m")?.local_model_name(), None);
    /// assert_eq!(ModelSpec::parse("local")?.local_model_name(), None);
    /// # Ok::<(), askloop_providers::SpecError>(())
    /// ```
    pub fn local_model_name(&self) -> Option<&str> {
        let Self::Local(Some(path)) = self else {
            return None;
        };
        let name = path.to_str()?;
        crate::catalogue::catalogue_model(name).map(|model| model.name)
    }

    /// The provider's name as written in the SPEC (`"openai"`, `"anthropic"`, `"ollama"`,
    /// `"scripted"`, `"local"`).
    pub fn provider(&self) -> &'static str {
        match self {
            Self::OpenAi { .. } => "openai",
            Self::Anthropic { .. } => "anthropic",
            Self::Ollama { .. } => "ollama",
            Self::Scripted(_) => "scripted",
            Self::Local(_) => "local",
        }
    }
}

impl FromStr for ModelSpec {
    type Err = SpecError;

    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        Self::parse(spec)
    }
}

impl fmt::Display for ModelSpec {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::OpenAi { model } => write!(formatter, "openai:{model}"),
            Self::Anthropic { model } => write!(formatter, "anthropic:{model}"),
            Self::Ollama { model } => write!(formatter, "ollama:{model}"),
            Self::Scripted(path) => write!(formatter, "scripted:{}", path.display()),
            Self::Local(None) => formatter.write_str("local"),
            Self::Local(Some(path)) => write!(formatter, "local:{}", path.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_parses_and_prints_back() {
        for text in [
            "openai:gpt-4o-mini",
            "anthropic:claude-sonnet-4-5",
            "ollama:qwen3:8b",
            "scripted:/tmp/script.json",
            "local",
            "local:/models/tiny",
        ] {
            let spec = ModelSpec::parse(text).unwrap();
            assert_eq!(spec.to_string(), text);
        }
        assert_eq!(
            ModelSpec::parse(" OpenAI:gpt-4o ").unwrap(),
            ModelSpec::OpenAi {
                model: "gpt-4o".into()
            }
        );
    }

    #[test]
    fn issue7_spec_errors_are_lowercase_unpunctuated_and_say_what_was_expected() {
        for text in [
            "",
            "gpt-4o",
            "gemini:pro",
            "openai:",
            "anthropic:",
            "ollama:",
            "scripted:",
            "local:",
        ] {
            let message = ModelSpec::parse(text).unwrap_err().to_string();
            assert!(message.starts_with(|c: char| c.is_lowercase()), "{message}");
            assert!(!message.ends_with('.'), "{message}");
            assert!(message.contains("expected"), "{message}");
        }
        assert_eq!(
            ModelSpec::parse("openai:").unwrap_err().to_string(),
            "model SPEC \"openai:\" has no model name after openai:; expected openai:MODEL"
        );
        assert_eq!(
            ModelSpec::parse("local:").unwrap_err().to_string(),
            "model SPEC \"local:\" has no path after local:; expected local:PATH"
        );
    }

    #[test]
    fn bad_specs_say_what_was_expected() {
        assert_eq!(ModelSpec::parse("  "), Err(SpecError::Empty));
        assert!(matches!(
            ModelSpec::parse("gpt-4o"),
            Err(SpecError::MissingProvider { .. })
        ));
        let unknown = ModelSpec::parse("gemini:pro").unwrap_err();
        assert!(unknown.to_string().ends_with(
            "expected one of openai:MODEL, anthropic:MODEL, ollama:MODEL, scripted:PATH, local or local:PATH"
        ));
        assert!(matches!(
            ModelSpec::parse("openai:"),
            Err(SpecError::MissingModel {
                provider: "openai",
                ..
            })
        ));
        assert!(matches!(
            ModelSpec::parse("scripted:"),
            Err(SpecError::MissingModel {
                expected: "path",
                ..
            })
        ));
    }
}
