//! Tools: the typed [`Tool`] trait authors implement, its erased twin [`DynTool`] the agent keeps,
//! the [`ToolContext`] a call runs with, and suspension ([`Execution::Suspend`]).

use std::fmt;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::actor::Actor;
use crate::chunk::Chunk;
use crate::ids::{ResourceId, RunId, ToolCallId};
pub use crate::message::Suspension;
use crate::model::ToolDefinition;
use crate::run::{ParentRun, SubagentWait};
use crate::schema::{SchemaValidator, schema_of};

/// What a tool call produced: an output, or a request to suspend the run until someone answers.
#[derive(Clone, Debug, PartialEq)]
pub enum Execution<T> {
    /// The call finished with this output.
    Complete(T),
    /// The call is waiting: the run is committed and suspended until `resume_stream` answers it.
    Suspend(Suspension),
}

/// The context one tool call runs in.
///
/// Inside an agent run it carries the run id and tool call id, and on resume the answer
/// ([`ToolContext::resume_data`]) and the suspension it answers ([`ToolContext::suspension`]).
/// Outside a run ([`ToolContext::standalone`]) suspension is not available and tools fall back
/// to an answer of their own.
#[derive(Clone, Debug)]
pub struct ToolContext {
    run_id: Option<RunId>,
    tool_call_id: Option<ToolCallId>,
    resume_data: Option<Value>,
    suspension: Option<Suspension>,
    scope: Option<Arc<CallScope>>,
}

/// What the loop tells a call about its run beyond the ids (set by the loop for every call in a
/// run; what a sub-agent's tool needs to start and follow its child run).
pub(crate) struct CallScope {
    /// The run's resource.
    pub(crate) resource_id: Option<ResourceId>,
    /// The run's own parent, when the run is a child run.
    pub(crate) parent: Option<ParentRun>,
    /// Who started the run.
    pub(crate) started_by: Option<Actor>,
    /// Where a sub-agent's tool sends its child's chunks (the loop streams them).
    pub(crate) chunks: futures::channel::mpsc::Sender<Chunk>,
    /// What a sub-agent's call waits for when it suspends (its child's waiting calls), for the
    /// loop to keep with the call.
    pub(crate) wait: Mutex<Option<SubagentWait>>,
}

impl fmt::Debug for CallScope {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("CallScope")
            .field("resource_id", &self.resource_id)
            .field("parent", &self.parent)
            .finish_non_exhaustive()
    }
}

impl ToolContext {
    /// The context of a call inside an agent run; `resume_data` is the answer on resume.
    pub fn in_run(run_id: RunId, tool_call_id: ToolCallId, resume_data: Option<Value>) -> Self {
        Self {
            run_id: Some(run_id),
            tool_call_id: Some(tool_call_id),
            resume_data,
            suspension: None,
            scope: None,
        }
    }

    /// This context with what the loop tells a call about its run.
    pub(crate) fn with_scope(mut self, scope: Arc<CallScope>) -> Self {
        self.scope = Some(scope);
        self
    }

    /// What the loop told this call about its run, inside a run.
    pub(crate) fn scope(&self) -> Option<&CallScope> {
        self.scope.as_deref()
    }

    /// This context with the suspension its answer resolves (set by the loop on resume).
    pub fn with_suspension(mut self, suspension: Suspension) -> Self {
        self.suspension = Some(suspension);
        self
    }

    /// A context outside any agent run: no run, no suspension.
    pub fn standalone() -> Self {
        Self {
            run_id: None,
            tool_call_id: None,
            resume_data: None,
            suspension: None,
            scope: None,
        }
    }

    /// The run this call belongs to, if inside a run.
    pub fn run_id(&self) -> Option<&RunId> {
        self.run_id.as_ref()
    }

    /// This call's id, if inside a run.
    pub fn tool_call_id(&self) -> Option<&ToolCallId> {
        self.tool_call_id.as_ref()
    }

    /// The answer this call was resumed with, if it is being resumed.
    pub fn resume_data(&self) -> Option<&Value> {
        self.resume_data.as_ref()
    }

    /// The suspension this call is resumed from (its payload, resume schema and deadline, as
    /// committed when it suspended), when it is being resumed with an answer; `None` for a
    /// first execution, an approved call, or outside a run. A tool whose suspension carries
    /// state of its own (e.g. an MCP tool's earlier answers) reads it here, in whatever process
    /// resumes the run.
    pub fn suspension(&self) -> Option<&Suspension> {
        self.suspension.as_ref()
    }

    /// Whether [`ToolContext::suspend`] can be used (only inside an agent run).
    pub fn can_suspend(&self) -> bool {
        self.run_id.is_some()
    }

    /// Suspends this call with `payload`; the suspension carries the tool's
    /// [`Tool::resume_schema`], if any (front ends render it, answers are checked against it).
    /// Return the value from `execute`.
    pub fn suspend<T>(&self, payload: Value) -> Execution<T> {
        Execution::Suspend(Suspension::new(payload))
    }

    /// Suspends this call with `payload` and a JSON Schema for this suspension's answers.
    pub fn suspend_with_schema<T>(&self, payload: Value, resume_schema: Value) -> Execution<T> {
        Execution::Suspend(Suspension {
            payload,
            resume_schema: Some(resume_schema),
            expires_at_ms: None,
        })
    }
}

/// Why an answer was refused before anything changed: what was expected, and each problem found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResumeRejection {
    /// What the suspended call accepts, in words (e.g. `one of the labels: "main", "docs"`).
    pub expected: String,
    /// Every problem with the answer given.
    pub problems: Vec<String>,
}

impl fmt::Display for ResumeRejection {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "expected {}", self.expected)?;
        if !self.problems.is_empty() {
            write!(formatter, "; {}", self.problems.join("; "))?;
        }
        Ok(())
    }
}

/// A tool, typed: arguments are deserialized from the model's JSON after a schema check, and the
/// output is serialized back to JSON for the model.
///
/// # Contract
/// - `execute` runs once per tool call, and once more per answer when it suspended: on resume,
///   [`ToolContext::resume_data`] holds the answer, and the tool returns its output (or suspends
///   again).
/// - Returning `Err` becomes an error tool result the model sees (`isError: true`); the run goes on.
/// - A tool must not assume it runs in the process that suspended it.
#[async_trait]
pub trait Tool: Send + Sync + 'static {
    /// The tool's name, as the model calls it.
    const NAME: &'static str;
    /// The arguments, deserialized from the model's JSON. Its schemars schema is the input schema.
    type Args: DeserializeOwned + JsonSchema + Send;
    /// The output, serialized to JSON for the model.
    type Output: Serialize + Send;
    /// The tool's own error.
    type Error: std::error::Error + Send + Sync + 'static;

    /// What the tool does, for the model.
    fn description(&self) -> String;

    /// JSON Schema of the arguments, as the model sees it. Default: the schemars schema of
    /// [`Tool::Args`] ([`crate::schema::schema_of`]); override to hide fields a setting switches off.
    fn input_schema(&self) -> Value {
        schema_of::<Self::Args>()
    }

    /// JSON Schema of the suspend payload, if the tool suspends.
    fn suspend_schema(&self) -> Option<Value> {
        None
    }

    /// JSON Schema of answers, if the tool suspends and every suspension accepts the same answers.
    fn resume_schema(&self) -> Option<Value> {
        None
    }

    /// Whether the tool may run again (`execute`, and its resume path with the same answer)
    /// without harm: it has no side effects and gives the same result (true for `ask_user`,
    /// which only asks and records the answer). Default `false`.
    ///
    /// The loop keeps a journal of non-idempotent calls: before `execute` runs it commits the
    /// call as `running`, and it commits the call's result (or suspension) as soon as it
    /// exists. After a crash, `continue_stream` re-runs an unfinished call only if its tool is
    /// idempotent; otherwise the model gets the error result "outcome unknown: the process
    /// stopped while this tool was running", and the call never runs twice. Idempotent calls
    /// skip those commits and simply run again after a crash.
    fn idempotent(&self) -> bool {
        false
    }

    /// Whether this call needs a person's approval before it runs (`args` passed the input
    /// schema). Agents can also require approval per tool name
    /// ([`crate::AgentBuilder::require_approval`]); either is enough. Default `false`.
    fn requires_approval(&self, args: &Value) -> bool {
        let _ = args;
        false
    }

    /// How long a call of this tool waits for a person's approval, when it needs one: once
    /// this has passed since the call was made, the approval expires — answers are refused
    /// ([`crate::ResumeError::Expired`]) and a sweep ([`crate::Agent::expire_due`], `askloop
    /// runs sweep`) gives the model a result saying no decision came in time and the tool did
    /// not run. An agent's [`crate::AgentBuilder::approval_timeout_for`] of this tool wins over
    /// it; it wins over the agent's [`crate::AgentBuilder::approval_timeout`]. Default `None`
    /// (the agent decides).
    fn approval_timeout(&self) -> Option<std::time::Duration> {
        None
    }

    /// Whether a call of this tool asks the user a question, and so counts against the agent's
    /// question budget ([`crate::AgentBuilder::max_questions`]). True for `ask_user`; default
    /// `false`.
    fn asks_user(&self) -> bool {
        false
    }

    /// Checks an answer against a suspension before anything changes. The default checks it
    /// against the suspension's schema, or [`Tool::resume_schema`].
    ///
    /// # Errors
    /// A [`ResumeRejection`] saying what was expected.
    fn validate_resume(
        &self,
        suspension: &Suspension,
        resume_data: &Value,
    ) -> Result<(), ResumeRejection> {
        validate_against_schema(
            suspension
                .resume_schema
                .as_ref()
                .or(self.resume_schema().as_ref()),
            resume_data,
        )
    }

    /// Runs the call (or resumes it; see [`ToolContext::resume_data`]).
    ///
    /// # Errors
    /// The tool's own error, shown to the model as an error result.
    async fn execute(
        &self,
        args: Self::Args,
        context: &ToolContext,
    ) -> Result<Execution<Self::Output>, Self::Error>;
}

/// Checks `value` against `schema` (`None` accepts anything).
///
/// # Errors
/// A [`ResumeRejection`] listing every problem, or saying that the schema itself is invalid.
pub(crate) fn validate_against_schema(
    schema: Option<&Value>,
    value: &Value,
) -> Result<(), ResumeRejection> {
    let Some(schema) = schema else { return Ok(()) };
    match SchemaValidator::new(schema) {
        Ok(validator) => {
            let problems = validator.problems(value);
            if problems.is_empty() {
                Ok(())
            } else {
                Err(ResumeRejection {
                    expected: format!("an answer matching {schema}"),
                    problems,
                })
            }
        }
        Err(error) => Err(ResumeRejection {
            expected: "an answer matching the tool's resume schema".into(),
            problems: vec![format!("the resume schema itself is invalid: {error}")],
        }),
    }
}

/// Why a tool call could not produce an output.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ToolError {
    /// The arguments are not JSON, or do not match the input schema. One entry per problem.
    #[error("invalid arguments for tool {tool}: {}", problems.join("; "))]
    InvalidArguments {
        /// The tool's name.
        tool: String,
        /// Each bad field, as `` `path`: problem ``.
        problems: Vec<String>,
    },
    /// The model called a tool the agent does not have.
    #[error("unknown tool {tool}; {}", describe_available(available))]
    UnknownTool {
        /// The name the model used.
        tool: String,
        /// The agent's tools.
        available: Vec<String>,
    },
    /// The tool's own error.
    #[error("tool {tool} failed")]
    Failed {
        /// The tool's name.
        tool: String,
        /// The tool's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The output could not be serialized to JSON.
    #[error("tool {tool} produced output that is not JSON")]
    Output {
        /// The tool's name.
        tool: String,
        /// The serializer's error.
        #[source]
        source: serde_json::Error,
    },
}

fn describe_available(available: &[String]) -> String {
    if available.is_empty() {
        "the agent has no tools".to_owned()
    } else {
        format!("available tools: {}", available.join(", "))
    }
}

/// The erased form of a [`Tool`]: JSON in, JSON out. The agent keeps its tools in this form;
/// every `T: Tool` is one, and tools built at run time can implement it directly.
#[async_trait]
pub trait DynTool: Send + Sync {
    /// The tool's name.
    fn name(&self) -> &str;
    /// Name, description and input schema for the model.
    fn definition(&self) -> ToolDefinition;
    /// JSON Schema of the suspend payload, if any.
    fn suspend_schema(&self) -> Option<Value>;
    /// JSON Schema of answers common to every suspension, if any.
    fn resume_schema(&self) -> Option<Value>;
    /// See [`Tool::idempotent`].
    fn idempotent(&self) -> bool;
    /// See [`Tool::asks_user`].
    fn asks_user(&self) -> bool;
    /// See [`Tool::requires_approval`].
    fn requires_approval(&self, args: &Value) -> bool;
    /// See [`Tool::approval_timeout`]. Default `None`.
    fn approval_timeout(&self) -> Option<std::time::Duration> {
        None
    }
    /// See [`Tool::validate_resume`].
    ///
    /// # Errors
    /// A [`ResumeRejection`] saying what was expected.
    fn validate_resume(
        &self,
        suspension: &Suspension,
        resume_data: &Value,
    ) -> Result<(), ResumeRejection>;
    /// Runs the call with arguments that already passed the input schema.
    ///
    /// # Errors
    /// [`ToolError::InvalidArguments`] if they do not deserialize, [`ToolError::Failed`] for the
    /// tool's own error, [`ToolError::Output`] if the output is not JSON.
    async fn execute_json(
        &self,
        args: Value,
        context: &ToolContext,
    ) -> Result<Execution<Value>, ToolError>;
}

#[async_trait]
impl<T: Tool> DynTool for T {
    fn name(&self) -> &str {
        T::NAME
    }

    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: T::NAME.to_owned(),
            description: Tool::description(self),
            input_schema: Tool::input_schema(self),
        }
    }

    fn suspend_schema(&self) -> Option<Value> {
        Tool::suspend_schema(self)
    }

    fn resume_schema(&self) -> Option<Value> {
        Tool::resume_schema(self)
    }

    fn idempotent(&self) -> bool {
        Tool::idempotent(self)
    }

    fn asks_user(&self) -> bool {
        Tool::asks_user(self)
    }

    fn requires_approval(&self, args: &Value) -> bool {
        Tool::requires_approval(self, args)
    }

    fn approval_timeout(&self) -> Option<std::time::Duration> {
        Tool::approval_timeout(self)
    }

    fn validate_resume(
        &self,
        suspension: &Suspension,
        resume_data: &Value,
    ) -> Result<(), ResumeRejection> {
        Tool::validate_resume(self, suspension, resume_data)
    }

    async fn execute_json(
        &self,
        args: Value,
        context: &ToolContext,
    ) -> Result<Execution<Value>, ToolError> {
        let typed: T::Args =
            serde_json::from_value(args).map_err(|error| ToolError::InvalidArguments {
                tool: T::NAME.to_owned(),
                problems: vec![error.to_string()],
            })?;
        match self.execute(typed, context).await {
            Ok(Execution::Complete(output)) => serde_json::to_value(output)
                .map(Execution::Complete)
                .map_err(|source| ToolError::Output {
                    tool: T::NAME.to_owned(),
                    source,
                }),
            // The loop gives a suspension without a schema of its own the tool's
            // (`run_loop/tools.rs`), for every `DynTool` alike.
            Ok(Execution::Suspend(suspension)) => Ok(Execution::Suspend(suspension)),
            Err(error) => Err(ToolError::Failed {
                tool: T::NAME.to_owned(),
                source: Box::new(error),
            }),
        }
    }
}

/// A tool registered with an agent: the erased tool, its definition, and its compiled input
/// schema. Built once per agent, shared by every run.
#[derive(Clone)]
pub(crate) struct RegisteredTool {
    tool: Arc<dyn DynTool>,
    definition: ToolDefinition,
    validator: Arc<SchemaValidator>,
}

impl fmt::Debug for RegisteredTool {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("RegisteredTool")
            .field("name", &self.definition.name)
            .finish()
    }
}

impl RegisteredTool {
    /// Registers a tool, compiling its input schema.
    ///
    /// # Errors
    /// [`crate::schema::SchemaError`] if the tool's input schema is not a valid JSON Schema.
    pub(crate) fn new(tool: Arc<dyn DynTool>) -> Result<Self, crate::schema::SchemaError> {
        let definition = tool.definition();
        let validator = Arc::new(SchemaValidator::new(&definition.input_schema)?);
        Ok(Self {
            tool,
            definition,
            validator,
        })
    }

    /// The tool's definition.
    pub(crate) fn definition(&self) -> &ToolDefinition {
        &self.definition
    }

    /// The erased tool.
    pub(crate) fn tool(&self) -> &Arc<dyn DynTool> {
        &self.tool
    }

    /// Checks arguments against the input schema.
    ///
    /// # Errors
    /// [`ToolError::InvalidArguments`] listing every bad field.
    pub(crate) fn check_args(&self, args: &crate::message::ToolArgs) -> Result<Value, ToolError> {
        match args {
            crate::message::ToolArgs::Malformed(raw) => Err(ToolError::InvalidArguments {
                tool: self.definition.name.clone(),
                problems: vec![format!(
                    "arguments are not valid JSON: {}",
                    crate::schema::json_syntax_error(raw)
                )],
            }),
            crate::message::ToolArgs::Json(value) => {
                let problems = self.validator.problems(value);
                if problems.is_empty() {
                    Ok(value.clone())
                } else {
                    Err(ToolError::InvalidArguments {
                        tool: self.definition.name.clone(),
                        problems,
                    })
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue7_fault10_an_agent_without_tools_says_so() {
        let error = ToolError::UnknownTool {
            tool: "ask_user".into(),
            available: vec![],
        };
        assert_eq!(
            error.to_string(),
            "unknown tool ask_user; the agent has no tools"
        );
        let error = ToolError::UnknownTool {
            tool: "x".into(),
            available: vec!["a".into(), "b".into()],
        };
        assert_eq!(error.to_string(), "unknown tool x; available tools: a, b");
    }
}
