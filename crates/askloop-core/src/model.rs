//! The [`LanguageModel`] trait: the seam between the agent loop and every model provider.

use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;
use futures::Stream;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::message::{FinishReason, Message, ToolCall, Usage};

/// A tool as the model sees it: name, description and the JSON Schema of its arguments.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolDefinition {
    /// The tool's name; the model calls it by this name.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// JSON Schema (draft 2020-12 as produced by schemars) of the arguments object.
    pub input_schema: Value,
}

/// How the model may use tools in one request.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "type", content = "name")]
pub enum ToolChoice {
    /// The model decides (the default).
    #[default]
    Auto,
    /// The model must call some tool.
    Required,
    /// The model must not call tools.
    None,
    /// The model must call the named tool.
    Tool(String),
}

/// Sampling and tool settings of a model request. Every field is optional; `None` leaves the
/// provider's default.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelSettings {
    /// Sampling temperature (0.0 ..= 2.0 for most providers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Nucleus sampling probability mass (0.0 ..= 1.0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f32>,
    /// Maximum output tokens of one model call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Random seed, for providers that support reproducible sampling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Tool choice for every step (see also [`ModelSettings::first_step_tool_choice`]).
    #[serde(default)]
    pub tool_choice: ToolChoice,
    /// Tool choice for the first step of a run only, overriding `tool_choice` there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_step_tool_choice: Option<ToolChoice>,
}

/// Everything a model needs for one step.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelRequest {
    /// The agent's instructions (the system prompt), if any.
    pub system: Option<String>,
    /// The conversation so far, oldest first.
    pub messages: Vec<Message>,
    /// The tools the model may call.
    pub tools: Vec<ToolDefinition>,
    /// Sampling settings; `tool_choice` is already resolved for this step.
    pub settings: ModelSettings,
}

/// One event of a model's streamed response: the provider-neutral form every adapter produces.
#[derive(Clone, Debug, PartialEq)]
pub enum ModelEvent {
    /// A piece of visible text.
    TextDelta(String),
    /// A piece of reasoning text.
    ReasoningDelta(String),
    /// A complete reasoning block with its opaque signature, to be echoed back later.
    Reasoning {
        /// The full reasoning text.
        text: String,
        /// The provider's signature, if it gave one.
        signature: Option<String>,
    },
    /// A piece of a tool call's argument text, as it streams (for progress display only; the
    /// agent loop acts on [`ModelEvent::ToolCall`]).
    ToolCallDelta {
        /// The call's id.
        id: String,
        /// The tool's name.
        name: String,
        /// The new piece of argument text.
        args_delta: String,
    },
    /// A complete tool call, arguments assembled.
    ToolCall(ToolCall),
    /// The end of the response. Always the last event of a successful stream.
    Finish {
        /// Why the model stopped.
        reason: FinishReason,
        /// Tokens used by this call.
        usage: Usage,
    },
}

/// A model's streamed response.
pub type ModelEventStream = Pin<Box<dyn Stream<Item = Result<ModelEvent, ModelError>> + Send>>;

/// Why a model call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// The provider rejected the credentials (HTTP 401/403), or none were configured.
    #[error("authentication with {provider} failed: {message}")]
    Authentication {
        /// The provider (`"openai"`, `"anthropic"`, …).
        provider: String,
        /// What the provider or the configuration said.
        message: String,
    },
    /// A required setting is missing, e.g. an API key variable.
    #[error("{0}")]
    Configuration(String),
    /// The request failed after every retry (rate limits, server errors, timeouts, cut streams).
    #[error("model {model} request failed: {message}")]
    Request {
        /// The model that was called.
        model: String,
        /// What went wrong last.
        message: String,
        /// The underlying error, if any.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// The provider answered with something that is not its documented format.
    #[error("model {model} returned an invalid response: {message}")]
    InvalidResponse {
        /// The model that was called.
        model: String,
        /// What was wrong.
        message: String,
    },
    /// A scripted model was asked for a step past the end of its script.
    #[error("the script {script} has {steps} step(s); step {requested} was requested")]
    ScriptExhausted {
        /// Where the script came from.
        script: String,
        /// How many steps it has.
        steps: usize,
        /// The 1-based step that was requested.
        requested: usize,
    },
    /// The call was cancelled (e.g. Ctrl-C).
    #[error("the model call was cancelled")]
    Cancelled,
}

/// A language model the agent loop can call: one request in, a stream of [`ModelEvent`]s out.
///
/// # Contract
/// - `stream` sends one request and yields events as they arrive; the last event of a successful
///   response is exactly one [`ModelEvent::Finish`].
/// - Every [`ModelEvent::ToolCall`] carries complete arguments; text that is not JSON is given as
///   [`crate::ToolArgs::Malformed`], never dropped and never a panic.
/// - An error (returned, or yielded by the stream) ends the response; the caller discards partial
///   output and nothing was recorded for it.
/// - Implementations hold no per-run state: the whole conversation is in the request, so a run can
///   continue on another process or machine.
#[async_trait]
pub trait LanguageModel: Send + Sync {
    /// The provider's name (`"openai"`, `"anthropic"`, `"scripted"`, …).
    fn provider(&self) -> &str;

    /// The model's id as the provider names it.
    fn model_id(&self) -> &str;

    /// Sends one request and streams the response.
    ///
    /// # Errors
    /// Any [`ModelError`]; see the variants.
    async fn stream(&self, request: ModelRequest) -> Result<ModelEventStream, ModelError>;
}

#[async_trait]
impl<M: LanguageModel + ?Sized> LanguageModel for Arc<M> {
    fn provider(&self) -> &str {
        (**self).provider()
    }

    fn model_id(&self) -> &str {
        (**self).model_id()
    }

    async fn stream(&self, request: ModelRequest) -> Result<ModelEventStream, ModelError> {
        (**self).stream(request).await
    }
}
