//! Models: the [`LanguageModel`] trait (the seam between the agent loop and every model
//! provider), what it is asked ([`ModelRequest`]) and answers ([`ModelEvent`]), and the
//! provider-neutral messages of a conversation ([`Message`]).

use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;
use futures::Stream;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use crate::message::{
    AssistantPart, AuditAction, AuditRecord, FinishReason, Message, ToolArgs, ToolCall, ToolResult,
    Usage,
};

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
/// provider's default. Build with [`ModelSettings::new`] and the `with_*` setters.
///
/// # Example
/// ```
/// use askloop_core::model::{ModelSettings, ToolChoice};
///
/// let settings = ModelSettings::new()
///     .with_temperature(0.2)
///     .with_first_step_tool_choice(ToolChoice::Tool("ask_user".into()));
/// assert_eq!(settings.temperature, Some(0.2));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
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

impl ModelSettings {
    /// Provider defaults everywhere, `tool_choice` auto.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets [`ModelSettings::temperature`].
    pub fn with_temperature(mut self, temperature: f32) -> Self {
        self.temperature = Some(temperature);
        self
    }

    /// Sets [`ModelSettings::top_p`].
    pub fn with_top_p(mut self, top_p: f32) -> Self {
        self.top_p = Some(top_p);
        self
    }

    /// Sets [`ModelSettings::max_tokens`].
    pub fn with_max_tokens(mut self, max_tokens: u32) -> Self {
        self.max_tokens = Some(max_tokens);
        self
    }

    /// Sets [`ModelSettings::seed`].
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Sets [`ModelSettings::tool_choice`].
    pub fn with_tool_choice(mut self, tool_choice: ToolChoice) -> Self {
        self.tool_choice = tool_choice;
        self
    }

    /// Sets [`ModelSettings::first_step_tool_choice`].
    pub fn with_first_step_tool_choice(mut self, tool_choice: ToolChoice) -> Self {
        self.first_step_tool_choice = Some(tool_choice);
        self
    }
}

/// Everything a model needs for one step. The agent loop builds it; model implementations read
/// it. [`ModelRequest::new`] builds one for tests and direct calls.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
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

impl ModelRequest {
    /// A request with these messages, no instructions, no tools, default settings.
    pub fn new(messages: Vec<Message>) -> Self {
        Self {
            system: None,
            messages,
            tools: Vec::new(),
            settings: ModelSettings::default(),
        }
    }

    /// Sets the instructions (system prompt).
    pub fn with_system(mut self, system: impl Into<String>) -> Self {
        self.system = Some(system.into());
        self
    }

    /// Sets the tools.
    pub fn with_tools(mut self, tools: Vec<ToolDefinition>) -> Self {
        self.tools = tools;
        self
    }

    /// Sets the settings.
    pub fn with_settings(mut self, settings: ModelSettings) -> Self {
        self.settings = settings;
        self
    }

    /// Whether the model may call a tool in answer to this request: some tool is offered and
    /// the tool choice is not `none`. When it may not, a tool call in the response is
    /// [`ModelError::ToolNotOffered`].
    pub fn offers_tools(&self) -> bool {
        !self.tools.is_empty() && self.settings.tool_choice != ToolChoice::None
    }
}

/// One event of a model's streamed response: the provider-neutral form every adapter produces.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
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
    /// The model implementation failed in a way of its own (e.g. a scripted model past the
    /// end of its script, an embedded model that could not load); the cause says how.
    #[error("model {model} failed")]
    Failed {
        /// The model that was called.
        model: String,
        /// What went wrong.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The model called a tool although the request offered none at this step (no tools, or
    /// tool choice `none`; see [`ModelRequest::offers_tools`]): the call is not an answer. The
    /// agent loop asks again once if nothing of the step was streamed yet, else the run fails
    /// with this error.
    #[error(
        "model {model} called the tool `{tool}`, which was not offered at this step (no tool may be called now)"
    )]
    ToolNotOffered {
        /// The model that was called.
        model: String,
        /// The tool the model named.
        tool: String,
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
///   [`ToolArgs::Malformed`], never dropped and never a panic.
/// - A request that offers no tool ([`ModelRequest::offers_tools`] is false) gets no
///   [`ModelEvent::ToolCall`]: a call the model makes anyway is yielded as
///   [`ModelError::ToolNotOffered`], never turned into text. (The agent loop treats a call
///   yielded anyway the same way.)
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
