//! [`Agent`]: a model, instructions and tools, and the entry points of a run: `stream`,
//! `generate`, `resume_stream`, `continue_stream`.

use std::sync::Arc;

use serde_json::Value;

use crate::error::{AgentError, ResumeError};
use crate::ids::{AgentId, ResourceId, RunId, ThreadId, ToolCallId};
use crate::memory::MemoryStore;
use crate::model::{LanguageModel, ModelSettings, ToolDefinition};
use crate::run_loop::{self, Claim};
use crate::schema::SchemaError;
use crate::store::RunStore;
use crate::stream::{AgentStream, RunOutput};
use crate::tool::{DynTool, RegisteredTool};

/// Default of [`AgentBuilder::max_steps`].
pub const DEFAULT_MAX_STEPS: u32 = 10;

/// Where a new run goes: its thread and owner.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunOptions {
    /// The thread to continue; a new thread when `None`. A run of an existing thread sees the
    /// messages of its completed runs.
    pub thread_id: Option<ThreadId>,
    /// The user or tenant owning the run.
    pub resource_id: Option<ResourceId>,
}

/// An agent: calls its model in a loop, runs the tools the model calls, suspends when a tool
/// asks, and commits every run to its store.
///
/// Cheap to clone; clones share the model, tools and store.
///
/// # Example
/// ```
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use askloop_core::{Agent, AskUser, RunOutcome, ScriptedModel};
///
/// let model = ScriptedModel::from_json(r#"{"steps":[
///     {"toolCalls":[{"id":"c1","name":"ask_user","args":{"question":"Which repo?"}}]},
///     {"text":"Done."}]}"#)?;
/// let agent = Agent::builder("assistant").model(model).tool(AskUser).build()?;
///
/// let first = agent.generate("Summarize my project").await?;
/// assert!(matches!(first.status, RunOutcome::Suspended { .. }));
/// let answered = agent
///     .resume_stream(serde_json::json!("main"), &first.run_id, None)
///     .await?
///     .collect_output()
///     .await?;
/// assert_eq!(answered.text, "Done.");
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Agent {
    pub(crate) inner: Arc<AgentInner>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Agent")
            .field("id", &self.inner.id)
            .field("model", &self.inner.model.model_id())
            .field(
                "tools",
                &self
                    .inner
                    .tool_definitions
                    .iter()
                    .map(|tool| &tool.name)
                    .collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

pub(crate) struct AgentInner {
    pub(crate) id: AgentId,
    pub(crate) name: String,
    pub(crate) instructions: Option<String>,
    pub(crate) model: Arc<dyn LanguageModel>,
    pub(crate) model_spec: Option<String>,
    pub(crate) tools: Vec<RegisteredTool>,
    pub(crate) tool_definitions: Vec<ToolDefinition>,
    pub(crate) max_steps: u32,
    pub(crate) settings: ModelSettings,
    pub(crate) store: Arc<dyn RunStore>,
}

impl AgentInner {
    pub(crate) fn tool(&self, name: &str) -> Option<&RegisteredTool> {
        self.tools
            .iter()
            .find(|tool| tool.definition().name == name)
    }
}

impl Agent {
    /// Starts building an agent with this id.
    pub fn builder(id: impl Into<AgentId>) -> AgentBuilder {
        AgentBuilder {
            id: id.into(),
            name: None,
            instructions: None,
            model: None,
            model_spec: None,
            tools: Vec::new(),
            max_steps: DEFAULT_MAX_STEPS,
            settings: ModelSettings::default(),
            store: None,
        }
    }

    /// The agent's id.
    pub fn id(&self) -> &AgentId {
        &self.inner.id
    }

    /// The agent's display name (its id unless set).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The store runs are committed to.
    pub fn store(&self) -> &Arc<dyn RunStore> {
        &self.inner.store
    }

    /// The tools the model sees.
    pub fn tool_definitions(&self) -> &[ToolDefinition] {
        &self.inner.tool_definitions
    }

    /// Starts a run on a new thread and streams it. The run id is known at once
    /// ([`AgentStream::run_id`]); the run is inserted into the store before its first chunk.
    pub fn stream(&self, input: impl Into<String>) -> AgentStream {
        self.stream_with(input, RunOptions::default())
    }

    /// Starts a run with a thread and owner, and streams it.
    pub fn stream_with(&self, input: impl Into<String>, options: RunOptions) -> AgentStream {
        run_loop::start(self.inner.clone(), input.into(), options)
    }

    /// Runs to the end of the stream (finish or suspension) and collects text, status and usage.
    ///
    /// # Errors
    /// The [`AgentError`] that ended the run.
    pub async fn generate(&self, input: impl Into<String>) -> Result<RunOutput, AgentError> {
        self.stream(input).collect_output().await
    }

    /// Answers a suspended tool call and streams the run from there.
    ///
    /// `tool_call_id` picks the call; it may be `None` when exactly one call is pending. The
    /// answer is checked against the call's question, then the call is claimed in the store
    /// (compare-and-swap), and only then does the tool's resume path run.
    ///
    /// # Errors
    /// Before anything changes: [`ResumeError::RunNotFound`], [`ResumeError::NotSuspended`],
    /// [`ResumeError::UnknownToolCall`], [`ResumeError::AlreadyAnswered`],
    /// [`ResumeError::Ambiguous`], [`ResumeError::InvalidAnswer`], [`ResumeError::Conflict`]
    /// (another resume won), [`ResumeError::ToolUnavailable`], [`ResumeError::WrongAgent`],
    /// [`ResumeError::Store`].
    pub async fn resume_stream(
        &self,
        resume_data: Value,
        run_id: &RunId,
        tool_call_id: Option<&ToolCallId>,
    ) -> Result<AgentStream, ResumeError> {
        let claim = run_loop::claim_resume(&self.inner, resume_data, run_id, tool_call_id).await?;
        Ok(run_loop::resume(self.inner.clone(), claim))
    }

    /// Continues a run that failed (or whose process died while it was running): retries the
    /// step that did not finish, with every answer already recorded. Nobody is asked again.
    ///
    /// # Errors
    /// [`ResumeError::RunNotFound`]; [`ResumeError::NotContinuable`] naming the status when the
    /// run is suspended or completed (answer it, or start a new run); [`ResumeError::Conflict`];
    /// [`ResumeError::WrongAgent`]; [`ResumeError::Store`].
    pub async fn continue_stream(&self, run_id: &RunId) -> Result<AgentStream, ResumeError> {
        let claim: Claim = run_loop::claim_continue(&self.inner, run_id).await?;
        Ok(run_loop::resume(self.inner.clone(), claim))
    }
}

/// Why an agent could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentBuildError {
    /// No model was given.
    #[error("agent {0} has no model")]
    MissingModel(AgentId),
    /// Two tools share a name.
    #[error("agent {agent} has two tools named {tool}")]
    DuplicateTool {
        /// The agent.
        agent: AgentId,
        /// The name.
        tool: String,
    },
    /// A tool's input schema is not a valid JSON Schema.
    #[error("tool {tool} has an invalid input schema: {source}")]
    InvalidToolSchema {
        /// The tool.
        tool: String,
        /// The compiler's error.
        #[source]
        source: SchemaError,
    },
}

/// Builds an [`Agent`]. Defaults: no instructions, no tools, 10 max steps, provider-default
/// settings, a fresh [`MemoryStore`].
#[must_use]
pub struct AgentBuilder {
    id: AgentId,
    name: Option<String>,
    instructions: Option<String>,
    model: Option<Arc<dyn LanguageModel>>,
    model_spec: Option<String>,
    tools: Vec<Arc<dyn DynTool>>,
    max_steps: u32,
    settings: ModelSettings,
    store: Option<Arc<dyn RunStore>>,
}

impl AgentBuilder {
    /// The display name.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The instructions (system prompt).
    pub fn instructions(mut self, instructions: impl Into<String>) -> Self {
        self.instructions = Some(instructions.into());
        self
    }

    /// The model.
    pub fn model(mut self, model: impl LanguageModel + 'static) -> Self {
        self.model = Some(Arc::new(model));
        self
    }

    /// The model, shared.
    pub fn shared_model(mut self, model: Arc<dyn LanguageModel>) -> Self {
        self.model = Some(model);
        self
    }

    /// The model SPEC recorded with each run (e.g. `scripted:PATH`), so that another process
    /// can rebuild the model to resume it.
    pub fn model_spec(mut self, spec: impl Into<String>) -> Self {
        self.model_spec = Some(spec.into());
        self
    }

    /// Adds a tool.
    pub fn tool(mut self, tool: impl DynTool + 'static) -> Self {
        self.tools.push(Arc::new(tool));
        self
    }

    /// Adds a shared tool.
    pub fn shared_tool(mut self, tool: Arc<dyn DynTool>) -> Self {
        self.tools.push(tool);
        self
    }

    /// At most this many model steps per run (default 10); the run then finishes with
    /// [`crate::FinishReason::MaxSteps`].
    pub fn max_steps(mut self, max_steps: u32) -> Self {
        self.max_steps = max_steps;
        self
    }

    /// Sampling and tool-choice settings.
    pub fn settings(mut self, settings: ModelSettings) -> Self {
        self.settings = settings;
        self
    }

    /// The store runs are committed to.
    pub fn store(mut self, store: impl RunStore + 'static) -> Self {
        self.store = Some(Arc::new(store));
        self
    }

    /// The store, shared.
    pub fn shared_store(mut self, store: Arc<dyn RunStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// Builds the agent, compiling every tool's input schema.
    ///
    /// # Errors
    /// [`AgentBuildError::MissingModel`], [`AgentBuildError::DuplicateTool`],
    /// [`AgentBuildError::InvalidToolSchema`].
    pub fn build(self) -> Result<Agent, AgentBuildError> {
        let model = self
            .model
            .ok_or_else(|| AgentBuildError::MissingModel(self.id.clone()))?;
        let mut tools: Vec<RegisteredTool> = Vec::with_capacity(self.tools.len());
        for tool in self.tools {
            let name = tool.name().to_owned();
            if tools
                .iter()
                .any(|existing| existing.definition().name == name)
            {
                return Err(AgentBuildError::DuplicateTool {
                    agent: self.id,
                    tool: name,
                });
            }
            let registered = RegisteredTool::new(tool)
                .map_err(|source| AgentBuildError::InvalidToolSchema { tool: name, source })?;
            tools.push(registered);
        }
        let tool_definitions = tools.iter().map(|tool| tool.definition().clone()).collect();
        Ok(Agent {
            inner: Arc::new(AgentInner {
                name: self.name.unwrap_or_else(|| self.id.to_string()),
                id: self.id,
                instructions: self.instructions,
                model,
                model_spec: self.model_spec,
                tools,
                tool_definitions,
                max_steps: self.max_steps,
                settings: self.settings,
                store: self.store.unwrap_or_else(|| Arc::new(MemoryStore::new())),
            }),
        })
    }
}
