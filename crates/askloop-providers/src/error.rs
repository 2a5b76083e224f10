//! [`ProviderError`] (building a model failed) and [`WireError`] (why a call to a provider failed,
//! the source of [`askloop_core::model::ModelError::Request`]).

use askloop_core::testing::ScriptError;

/// Why [`crate::build_model`] could not build a model.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProviderError {
    /// The provider's API key variable is not set.
    #[error(
        "{provider} models need an API key and {variable} is not set; expected `export {variable}=...`"
    )]
    MissingApiKey {
        /// The provider (`"openai"`, `"anthropic"`).
        provider: &'static str,
        /// The environment variable to set (`"OPENAI_API_KEY"`, …).
        variable: &'static str,
    },
    /// A base URL variable holds something that is not an `http(s)://` URL.
    #[error(
        "the base URL {variable}={value:?} is not valid; expected http:// or https:// followed by a host"
    )]
    InvalidBaseUrl {
        /// The variable (`"OPENAI_BASE_URL"`, …).
        variable: &'static str,
        /// Its value.
        value: String,
    },
    /// The script of a `scripted:PATH` model could not be loaded.
    #[error(transparent)]
    Script(#[from] ScriptError),
    /// The SPEC needs a cargo feature this build does not have.
    #[error("model SPEC {spec} needs askloop built with the {feature:?} feature")]
    FeatureDisabled {
        /// The SPEC.
        spec: String,
        /// The missing feature (`"openai"`, `"anthropic"`, `"ollama"`, `"local"`).
        feature: &'static str,
    },
    /// The embedded local model could not be loaded; the source is a `LocalModelError` (feature
    /// `local`).
    #[error("cannot load the local model")]
    Local(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client for {provider}")]
    HttpClient {
        /// The provider.
        provider: &'static str,
        /// The client library's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// What went wrong on the wire in a failed model call. Carried as the `source` of
/// [`askloop_core::model::ModelError::Request`], describing the last attempt.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The server answered with an HTTP error status.
    #[error("HTTP {status}: {message}")]
    Status {
        /// The status code.
        status: u16,
        /// The provider's error message (from its JSON error body), or the body itself.
        message: String,
    },
    /// The provider sent an error event inside the stream.
    #[error("the provider sent an error event: {message}")]
    ErrorEvent {
        /// The provider's error type, e.g. `"overloaded_error"`, when it gave one.
        kind: Option<String>,
        /// The provider's message, or the event's JSON.
        message: String,
    },
    /// The connection failed, or the server took too long (connect, headers, or a silent stream).
    #[error("{problem}")]
    Transport {
        /// What happened.
        problem: TransportProblem,
        /// The HTTP library's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The response ended before it was complete.
    #[error("the response stream ended before it was complete, after {events} event(s)")]
    StreamCut {
        /// How many events of the response had arrived.
        events: usize,
    },
    /// The request could not be prepared.
    #[error("the request could not be prepared")]
    Request {
        /// The wire library's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// What went wrong in a [`WireError::Transport`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TransportProblem {
    /// No connection to the server could be made.
    #[error("cannot connect to the server")]
    Connect,
    /// The server did not answer in time (connect or response headers).
    #[error("the request timed out")]
    Timeout,
    /// The connection failed after it was made.
    #[error("the connection failed")]
    Connection,
    /// The server went silent in the middle of a streamed response.
    #[error("the response stream went silent for too long")]
    StreamTimeout,
    /// Reading the streamed response failed.
    #[error("the response stream failed")]
    Stream,
}
