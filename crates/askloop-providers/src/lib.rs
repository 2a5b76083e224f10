//! askloop's model providers: OpenAI-compatible servers, Anthropic and Ollama, behind
//! [`askloop_core::model::LanguageModel`], and the model SPEC parser every front end shares.
//!
//! This crate sits beside `askloop-store` above `askloop-core`, and depends on core only; the
//! CLI picks a model with [`ModelSpec`] and [`build_model`], and the `askloop` facade re-exports
//! this crate. The wire protocols are spoken by [genai](https://docs.rs/genai) 0.7, with the
//! adapter fixed by the SPEC's provider (never guessed from the model name). genai's types stay
//! inside this crate: requests are built from askloop's own [`askloop_core::model::Message`]s at every
//! call, and responses become [`askloop_core::model::ModelEvent`]s, so what a run stores is askloop's
//! versioned format and a run suspended days ago resumes against the same or another process.
//! genai covers everything askloop needs, tool choice included, so there is no hand-written HTTP
//! layer; `reqwest` is a dependency only to classify transport errors.
//!
//! Main types: [`ModelSpec`] (parse `openai:gpt-4o-mini`, `anthropic:…`, `ollama:…`,
//! `scripted:PATH`, `local[:PATH]`); [`build_model`]; [`ProviderOptions`] (environment lookup,
//! timeouts) and [`RetryPolicy`]; [`ProviderError`] and [`WireError`].
//!
//! Every call is retried on rate limits (429), server errors (5xx), timeouts, connection
//! failures and a stream cut before anything of it was passed on, with exponential backoff and
//! jitter; after the last attempt it fails with [`askloop_core::model::ModelError::Request`] whose
//! source is a [`WireError`]. 401/403 fail at once with
//! [`askloop_core::model::ModelError::Authentication`]. Each retry is announced by one `tracing` WARN
//! event of target [`RETRY_TARGET`] whose message is a line for a person, e.g.
//! `model openai:gpt-4o-mini: rate limited (HTTP 429); retrying in 2.1 s (attempt 2 of 4)`.
//!
//! # Example
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use askloop_providers::{ModelSpec, ProviderError, ProviderOptions, build_model};
//!
//! let spec: ModelSpec = "openai:gpt-4o-mini".parse()?;
//! let options = ProviderOptions::with_vars([("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1")]);
//! let Err(error) = build_model(&spec, &options).await else { panic!("no key was given") };
//! assert!(matches!(error, ProviderError::MissingApiKey { variable: "OPENAI_API_KEY", .. }));
//! # Ok(()) }
//! ```
//!
//! # Features
//! | feature | what it adds |
//! |---|---|
//! | `local` | the embedded candle model behind `local` / `local:PATH` |

mod build;
mod error;
mod events;
mod failure;
// The catalogue is plain data, compiled with or without `local`, so a SPEC can tell a catalogue
// name (`local:qwen2.5-coder-1.5b`) from a path in every build.
#[cfg_attr(not(feature = "local"), allow(dead_code))]
#[path = "local/catalogue.rs"]
mod catalogue;
#[cfg(feature = "local")]
pub mod local;
mod model;
mod options;
mod protocol;
mod request;
mod spec;

pub use build::build_model;
pub use error::{ProviderError, TransportProblem, WireError};
pub use model::RETRY_TARGET;
pub use options::{ProviderOptions, RetryPolicy};
pub use spec::{ModelSpec, PROVIDERS, SpecError};
