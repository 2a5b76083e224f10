//! [`Protocol`]: the three wire protocols, and what each needs from the environment.

use genai::adapter::AdapterKind;

use crate::error::ProviderError;
use crate::options::ProviderOptions;

/// A hosted provider's wire protocol. Chosen from the SPEC's provider name, never from the model
/// name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Protocol {
    /// OpenAI Chat Completions (`POST {base}/chat/completions`, SSE).
    OpenAi,
    /// Anthropic Messages (`POST {base}/v1/messages`, SSE).
    Anthropic,
    /// Ollama's native chat (`POST {base}/api/chat`, newline-delimited JSON).
    Ollama,
}

/// Where and how to reach a provider: resolved once, when the model is built.
#[derive(Clone, Debug)]
pub(crate) struct Connection {
    /// The base URL as genai's adapter expects it (ends with `/`).
    pub(crate) base_url: String,
    /// The API key, for protocols that need one.
    pub(crate) api_key: Option<String>,
}

impl Protocol {
    /// The provider name ([`askloop_core::model::LanguageModel::provider`]).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::OpenAi => "openai",
            Self::Anthropic => "anthropic",
            Self::Ollama => "ollama",
        }
    }

    /// genai's adapter for this protocol.
    pub(crate) fn adapter_kind(self) -> AdapterKind {
        match self {
            Self::OpenAi => AdapterKind::OpenAI,
            Self::Anthropic => AdapterKind::Anthropic,
            Self::Ollama => AdapterKind::Ollama,
        }
    }

    /// The variable holding the API key, if the protocol needs one.
    pub(crate) fn key_variable(self) -> Option<&'static str> {
        match self {
            Self::OpenAi => Some("OPENAI_API_KEY"),
            Self::Anthropic => Some("ANTHROPIC_API_KEY"),
            Self::Ollama => None,
        }
    }

    /// The variable that overrides the base URL.
    pub(crate) fn base_url_variable(self) -> &'static str {
        match self {
            Self::OpenAi => "OPENAI_BASE_URL",
            Self::Anthropic => "ANTHROPIC_BASE_URL",
            Self::Ollama => "OLLAMA_BASE_URL",
        }
    }

    fn default_base_url(self) -> &'static str {
        match self {
            Self::OpenAi => "https://api.openai.com/v1",
            Self::Anthropic => "https://api.anthropic.com",
            Self::Ollama => "http://127.0.0.1:11434",
        }
    }

    /// Reads the key and base URL from `options`.
    ///
    /// Base URLs follow each provider's own SDK convention: `OPENAI_BASE_URL` includes `/v1`,
    /// `ANTHROPIC_BASE_URL` does not (a trailing `/v1` is accepted too), `OLLAMA_BASE_URL` is the
    /// server's root.
    pub(crate) fn connect(self, options: &ProviderOptions) -> Result<Connection, ProviderError> {
        let api_key = match self.key_variable() {
            Some(variable) => Some(options.var(variable).ok_or(ProviderError::MissingApiKey {
                provider: self.name(),
                variable,
            })?),
            None => None,
        };
        let variable = self.base_url_variable();
        let configured = options.var(variable);
        let raw = configured
            .as_deref()
            .unwrap_or(self.default_base_url())
            .trim();
        let has_host = raw
            .strip_prefix("http://")
            .or_else(|| raw.strip_prefix("https://"))
            .is_some_and(|rest| !rest.is_empty() && !rest.starts_with('/'));
        if !has_host {
            return Err(ProviderError::InvalidBaseUrl {
                variable,
                value: raw.to_owned(),
            });
        }
        let root = raw.trim_end_matches('/');
        let base_url = match self {
            Self::Anthropic if root.ends_with("/v1") => format!("{root}/"),
            Self::Anthropic => format!("{root}/v1/"),
            Self::OpenAi | Self::Ollama => format!("{root}/"),
        };
        Ok(Connection { base_url, api_key })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn connect(protocol: Protocol, vars: &[(&str, &str)]) -> Result<Connection, ProviderError> {
        protocol.connect(&ProviderOptions::with_vars(vars.iter().copied()))
    }

    #[test]
    fn base_urls_follow_each_sdk_convention() {
        let openai = connect(
            Protocol::OpenAi,
            &[
                ("OPENAI_API_KEY", "k"),
                ("OPENAI_BASE_URL", "http://h:8000/v1"),
            ],
        )
        .unwrap();
        assert_eq!(openai.base_url, "http://h:8000/v1/");
        let anthropic = connect(Protocol::Anthropic, &[("ANTHROPIC_API_KEY", "k")]).unwrap();
        assert_eq!(anthropic.base_url, "https://api.anthropic.com/v1/");
        let with_v1 = connect(
            Protocol::Anthropic,
            &[
                ("ANTHROPIC_API_KEY", "k"),
                ("ANTHROPIC_BASE_URL", "http://h/v1/"),
            ],
        )
        .unwrap();
        assert_eq!(with_v1.base_url, "http://h/v1/");
        let ollama = connect(Protocol::Ollama, &[]).unwrap();
        assert_eq!(ollama.base_url, "http://127.0.0.1:11434/");
        assert_eq!(ollama.api_key, None);
    }

    #[test]
    fn missing_key_and_bad_url_name_the_variable() {
        let missing = connect(Protocol::Anthropic, &[]).unwrap_err();
        assert_eq!(
            missing.to_string(),
            "anthropic models need an API key and ANTHROPIC_API_KEY is not set; expected `export ANTHROPIC_API_KEY=...`"
        );
        let bad = connect(Protocol::Ollama, &[("OLLAMA_BASE_URL", "localhost:11434")]).unwrap_err();
        assert!(matches!(
            bad,
            ProviderError::InvalidBaseUrl {
                variable: "OLLAMA_BASE_URL",
                ..
            }
        ));
    }
}
