//! [`Agent`]: a model, instructions and tools, and the entry points of a run: `stream`,
//! `generate`, `resume_stream`, `continue_stream`.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::actor::Actor;
use crate::approvers::ApproverPolicy;
use crate::definition::{AgentDefinition, ApprovalPolicy};
use crate::error::{AgentError, ResumeError};
use crate::ids::{AgentId, LeaseHolder, RunRef, ToolCallId};
use crate::model::{LanguageModel, ModelSettings, ToolDefinition};
use crate::options::RunOptions;
use crate::response::CallResponse;
use crate::run_loop::{self, Resolution};
use crate::schema::SchemaError;
use crate::store::{MemoryStore, RunStore, StoredRun};
use crate::stream::{AgentStream, RunOutput};
use crate::subagent::{DEFAULT_MAX_SUBAGENT_DEPTH, SubagentTool};
use crate::tool::{DynTool, RegisteredTool};

/// Default of [`AgentBuilder::max_steps`].
pub const DEFAULT_MAX_STEPS: u32 = 10;

/// Default of [`AgentBuilder::lease`]: 30 seconds.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// An agent: calls its model in a loop, runs the tools the model calls, suspends when a tool
/// asks, and commits every run to its store.
///
/// Cheap to clone; clones share the model, tools and store.
///
/// # Example
/// ```
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use askloop_core::{Agent, AskUser, RunOutcome};
/// use askloop_core::testing::ScriptedModel;
///
/// let model = ScriptedModel::from_json(r#"{"steps":[
///     {"toolCalls":[{"id":"c1","name":"ask_user","args":{"question":"Which repo?"}}]},
///     {"text":"Done."}]}"#)?;
/// let agent = Agent::builder("assistant").model(model).tool(AskUser::new()).build()?;
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
    inner: Arc<AgentDefinition>,
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
            max_questions: None,
            settings: ModelSettings::default(),
            store: None,
            lease: DEFAULT_LEASE,
            approval: ApprovalPolicy::default(),
            description: None,
            subagents: Vec::new(),
            max_subagent_depth: DEFAULT_MAX_SUBAGENT_DEPTH,
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

    /// The model SPEC recorded with each run, if one was given ([`AgentBuilder::model_spec`]).
    pub fn model_spec(&self) -> Option<&str> {
        self.inner.model_spec.as_deref()
    }

    /// The agent's instructions (system prompt), if any.
    pub fn instructions(&self) -> Option<&str> {
        self.inner.instructions.as_deref()
    }

    /// At most this many model steps per run.
    pub fn max_steps(&self) -> u32 {
        self.inner.max_steps
    }

    /// The question budget per run, if any ([`AgentBuilder::max_questions`]).
    pub fn max_questions(&self) -> Option<u32> {
        self.inner.max_questions
    }

    /// Whether every call of the tool `name` needs a person's approval by this agent's rules
    /// ([`AgentBuilder::require_approval`], [`AgentBuilder::require_approval_for`]) or by the
    /// tool's own rule asked about a call without arguments ([`crate::Tool::requires_approval`] with
    /// `null`: an MCP server's `require_approval` covers every call); a tool's per-call rule or
    /// a predicate ([`AgentBuilder::require_approval_if`]) may require it for some calls too.
    /// `false` for a tool the agent does not have.
    ///
    /// ```
    /// use askloop_core::testing::ScriptedModel;
    /// use askloop_core::{Agent, AskUser};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let model = || ScriptedModel::from_json(r#"{"steps":[{"text":"Hi."}]}"#);
    /// let all = Agent::builder("a").model(model()?).tool(AskUser::new()).require_approval(true).build()?;
    /// assert!(!all.tool_requires_approval("ask_user")); // tools that ask are exempt from "all"
    /// let named = Agent::builder("b").model(model()?).tool(AskUser::new())
    ///     .require_approval_for("ask_user").build()?;
    /// assert!(named.tool_requires_approval("ask_user"));
    /// assert!(!named.tool_requires_approval("no_such_tool"));
    /// # Ok(()) }
    /// ```
    pub fn tool_requires_approval(&self, name: &str) -> bool {
        self.inner.always_requires_approval(name)
    }

    /// Starts a run on a new thread and streams it. The run id is known at once
    /// ([`AgentStream::run_id`]); the run is inserted into the store before its first chunk.
    pub fn stream(&self, input: impl Into<String>) -> AgentStream {
        self.stream_with(input, RunOptions::default())
    }

    /// Starts a run with a thread and owner, and streams it. Its key is known at once
    /// ([`AgentStream::run_key`]).
    ///
    /// A thread has one turn at a time: while another run of the thread (the same thread id
    /// in the same resource) is running, the stream's first item is
    /// [`AgentError::ThreadBusy`] and nothing is stored. Otherwise the run is inserted (it
    /// holds the thread's turn from then on), the thread's waiting runs are superseded by its
    /// message, and the thread's history is read (see the crate's ARCHITECTURE.md, "the path of
    /// one run"). Ids of `options` that do not pass [`crate::IdKind::check`] end the stream
    /// with [`AgentError::InvalidId`]; a run id the resource already uses, with
    /// [`AgentError::Store`]`(`[`crate::StoreError::AlreadyExists`]`)`.
    /// [`AgentStream::started`] waits for either outcome.
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
    /// - `resume_data`: the answer, any JSON value. It is checked against the call's question
    ///   before anything changes (for `ask_user`: a non-blank string, one of the labels, or a
    ///   non-empty array of distinct labels; for other tools, their resume schema).
    /// - `run`: the suspended run: its key ([`AgentStream::run_key`], [`RunOutput::run_key`]),
    ///   or its id alone (`&RunId`) when no other resource uses that id
    ///   ([`ResumeError::AmbiguousRun`] otherwise; see [`RunRef`]).
    /// - `tool_call_id`: the call this answer is for, as announced by its `tool-call-suspended`
    ///   chunk. Give it whenever you can: a repeated or retried answer naming its call is refused
    ///   with [`ResumeError::AlreadyAnswered`] once the call has its answer, so it can never land
    ///   on a later question. `None` means "the call pending now" (the reference framework's
    ///   `resumeStream(answer, { runId })`): it works only while exactly one call is pending
    ///   ([`ResumeError::Ambiguous`] otherwise), and a retry after success would answer whatever
    ///   the run asks next.
    ///
    /// The call is claimed in the store (compare-and-swap) before its tool's resume path runs,
    /// so of several concurrent resumes of one call exactly one wins; answers to *different*
    /// calls of one step sent at the same moment all land. To answer several calls in one
    /// commit, or to say who answered, use [`Agent::respond`].
    ///
    /// # Errors
    /// Before anything changes: [`ResumeError::InvalidId`], [`ResumeError::RunNotFound`],
    /// [`ResumeError::AmbiguousRun`], [`ResumeError::NotSuspended`],
    /// [`ResumeError::UnknownToolCall`], [`ResumeError::AlreadyAnswered`],
    /// [`ResumeError::Expired`] (the call's deadline passed, whether or not a sweep has resolved
    /// it yet), [`ResumeError::Ambiguous`], [`ResumeError::InvalidAnswer`], [`ResumeError::Conflict`]
    /// (another resume won), [`ResumeError::ThreadBusy`] (another run of the thread is
    /// running: a new message came first), [`ResumeError::ToolUnavailable`],
    /// [`ResumeError::WrongAgent`], [`ResumeError::Store`].
    pub async fn resume_stream(
        &self,
        resume_data: Value,
        run: impl Into<RunRef>,
        tool_call_id: Option<&ToolCallId>,
    ) -> Result<AgentStream, ResumeError> {
        let respond = self.respond(run);
        match tool_call_id {
            Some(id) => respond.answer(id, resume_data),
            None => respond.answer_pending_call(resume_data),
        }
        .stream()
        .await
    }

    /// Forks `run` at its question `tool_call_id` with another answer: a new run (new
    /// [`crate::RunId`], new thread) whose conversation is the original's up to the assistant message
    /// that asked, continued with `answer` (build with [`Fork::by`], then [`Fork::stream`]).
    /// The question may be answered already or still waiting, in any step of the run; the
    /// original is only read, never changed. The fork records where it comes from
    /// ([`crate::store::RunState::forked_from`], `forkedFrom`); the original's forks are the runs a
    /// listing with [`crate::store::RunFilter::forked_from`] finds.
    ///
    /// The question waits again in the fork exactly as it was asked (its payload and resume
    /// schema, without its deadline: it is answered now) and `answer` is checked against it as
    /// a resume's would be, before anything is written: a refused answer creates nothing. The
    /// other calls of the question's step keep the results the original recorded (they do not
    /// run again), and tools the original ran after the question run in the fork only if the
    /// model calls them again. The fork's messages begin with a copy of the history the
    /// original saw (its thread's earlier turns), so later turns in the fork's thread see it.
    ///
    /// ```no_run
    /// # async fn demo(agent: &askloop_core::Agent, run: &askloop_core::RunId,
    /// #   question: &askloop_core::ToolCallId) -> Result<(), askloop_core::ResumeError> {
    /// let fork = agent
    ///     .fork(run, question, serde_json::json!("MySQL"))
    ///     .by("alice")
    ///     .stream()
    ///     .await?;
    /// println!("forked as {}", fork.run_key().run_id);
    /// # Ok(()) }
    /// ```
    pub fn fork(
        &self,
        run: impl Into<RunRef>,
        tool_call_id: &ToolCallId,
        answer: Value,
    ) -> Fork<'_> {
        Fork {
            agent: self,
            run: run.into(),
            tool_call_id: tool_call_id.clone(),
            answer,
            actor: None,
        }
    }

    /// Responses to several waiting calls of one run, sent together: build them with
    /// [`Respond::answer`], [`Respond::approve`], [`Respond::decline`] and [`Respond::by`],
    /// then [`Respond::stream`]. All are checked first, then all applied in one commit, or
    /// none. `run` as for [`Agent::resume_stream`].
    pub fn respond(&self, run: impl Into<RunRef>) -> Respond<'_> {
        Respond {
            agent: self,
            run: run.into(),
            items: Vec::new(),
            actor: None,
            loaded: None,
        }
    }

    /// Approves a call awaiting approval (`tool-call-approval`): its tool runs, and the run
    /// streams on from there. The reference framework's `approveToolCall`.
    ///
    /// # Errors
    /// As [`Agent::resume_stream`]; [`ResumeError::InvalidAnswer`] when the call asks a
    /// question instead.
    pub async fn approve_tool_call(
        &self,
        run: impl Into<RunRef>,
        tool_call_id: &ToolCallId,
    ) -> Result<AgentStream, ResumeError> {
        self.respond(run).approve(tool_call_id).stream().await
    }

    /// Approves a call awaiting approval with arguments a person edited
    /// ([`CallResponse::ApproveWith`]): `args` are checked against the tool's input schema
    /// first, then the tool runs with them, the model is told in the call's result that the
    /// person changed the arguments and to what, and the audit keeps both versions.
    ///
    /// # Errors
    /// As [`Agent::approve_tool_call`]; [`ResumeError::InvalidArgs`] listing every problem
    /// when `args` do not fit the tool's input schema (nothing changed).
    pub async fn approve_tool_call_with(
        &self,
        run: impl Into<RunRef>,
        tool_call_id: &ToolCallId,
        args: Value,
    ) -> Result<AgentStream, ResumeError> {
        self.respond(run)
            .approve_with(tool_call_id, args)
            .stream()
            .await
    }

    /// Declines a call awaiting approval: its tool never runs; the model gets an error result
    /// with `reason` (a default text when `None`), and the run streams on. The reference
    /// framework's `declineToolCall`.
    ///
    /// # Errors
    /// As [`Agent::approve_tool_call`].
    pub async fn decline_tool_call(
        &self,
        run: impl Into<RunRef>,
        tool_call_id: &ToolCallId,
        reason: Option<String>,
    ) -> Result<AgentStream, ResumeError> {
        self.respond(run)
            .decline(tool_call_id, reason)
            .stream()
            .await
    }

    /// Cancels a run — suspended, failed, or running in any process on the store: every call
    /// of its step without a result (waiting, awaiting approval, or executing right now) gets
    /// one error result saying the run was cancelled, the run ends as
    /// [`RunStatus::Cancelled`](crate::RunStatus::Cancelled) and refuses resumes and continues
    /// from then on; its messages join its thread's history (the next turn sees what was
    /// cancelled). A running run's driver notices within moments (the store's notifications,
    /// or a read every 250 ms on a store without them), drops its model call and tools, and
    /// its stream ends with [`crate::AgentError::RunCancelled`]. `by` is recorded in the audit
    /// (a resource id, a key's name, `cli`). `run` as for [`Agent::resume_stream`].
    ///
    /// # Errors
    /// [`ResumeError::InvalidId`], [`ResumeError::RunNotFound`],
    /// [`ResumeError::AmbiguousRun`], [`ResumeError::WrongAgent`],
    /// [`ResumeError::NotCancellable`] (completed or already cancelled),
    /// [`ResumeError::Conflict`] (the driver committed again at every attempt),
    /// [`ResumeError::Store`].
    pub async fn cancel_run(
        &self,
        run: impl Into<RunRef>,
        by: Option<String>,
    ) -> Result<(), ResumeError> {
        run_loop::cancel_run(&self.inner, &run.into(), by).await
    }

    /// Expires the calls of `expired` (found by [`expired_runs`]) whose deadline passed: a
    /// question gets an error result telling the model no answer came in time, a call awaiting
    /// approval one telling it no decision came in time and the tool did not run (each with an
    /// `expire` audit record by `by`), and the run streams on (or stays suspended on its other
    /// calls). Of several sweepers racing, one expires each call; the others get
    /// [`ResumeError::Conflict`] or [`ResumeError::Expired`] and change nothing.
    ///
    /// # Errors
    /// As [`Agent::resume_stream`]; [`ResumeError::InvalidAnswer`] for a call whose deadline
    /// has not passed (or that has none).
    pub async fn expire_due(
        &self,
        expired: &crate::ExpiredRun,
        by: Option<String>,
    ) -> Result<AgentStream, ResumeError> {
        let items = expired
            .tool_call_ids
            .iter()
            .map(|id| (Some(id.clone()), Resolution::Expire))
            .collect();
        let claim = run_loop::claim_resume(
            &self.inner,
            &expired.key().into(),
            items,
            by.map(Actor::new),
            None,
        )
        .await?;
        Ok(run_loop::resume(self.inner.clone(), claim))
    }

    /// Continues a run that failed (or whose process died while it was running): retries the
    /// step that did not finish, with every answer already recorded. Nobody is asked again.
    ///
    /// `run` as for [`Agent::resume_stream`].
    ///
    /// # Errors
    /// [`ResumeError::InvalidId`]; [`ResumeError::RunNotFound`];
    /// [`ResumeError::AmbiguousRun`]; [`ResumeError::NotContinuable`] naming the status when
    /// the run is suspended or completed (answer it, or start a new run);
    /// [`ResumeError::Conflict`]; [`ResumeError::ThreadBusy`] (another run of its thread is
    /// running); [`ResumeError::WrongAgent`]; [`ResumeError::Store`].
    pub async fn continue_stream(
        &self,
        run: impl Into<RunRef>,
    ) -> Result<AgentStream, ResumeError> {
        let claim = run_loop::claim_continue(&self.inner, &run.into()).await?;
        Ok(run_loop::resume(self.inner.clone(), claim))
    }
}

/// Cancels a run of any agent in `store`, as [`Agent::cancel_run`] does, without the agent's
/// definition: what a process uses that does not define the run's agent (a server or CLI
/// configured with other agents). Cancelling runs no tool and calls no model; a live driver of
/// the run, in any process, stops as for [`Agent::cancel_run`].
///
/// # Errors
/// As [`Agent::cancel_run`], without [`ResumeError::WrongAgent`].
pub async fn cancel_run_in(
    store: &dyn crate::RunStore,
    run: impl Into<RunRef>,
    by: Option<String>,
) -> Result<(), ResumeError> {
    run_loop::cancel_in_store(store, &run.into(), None, by).await
}

/// The suspended runs in `store` with waiting calls (questions or approvals) whose deadline is
/// at or before `now_ms` (ms since the Unix epoch), oldest first: what a sweep expires with [`Agent::expire_due`] (the
/// agent whose id [`crate::ExpiredRun::agent_id`] names).
///
/// # Errors
/// [`crate::StoreError`] when the store fails.
pub async fn expired_runs(
    store: &dyn RunStore,
    now_ms: u64,
) -> Result<Vec<crate::ExpiredRun>, crate::StoreError> {
    run_loop::expired_calls(store, now_ms).await
}

/// Responses to waiting calls of one run, sent in one commit ([`Agent::respond`]).
///
/// ```no_run
/// # async fn demo(agent: &askloop_core::Agent, run: &askloop_core::RunId,
/// #   a: &askloop_core::ToolCallId, b: &askloop_core::ToolCallId) -> Result<(), askloop_core::ResumeError> {
/// let stream = agent
///     .respond(run)
///     .by("alice")
///     .answer(a, serde_json::json!("PostgreSQL"))
///     .approve(b)
///     .stream()
///     .await?;
/// # Ok(()) }
/// ```
#[must_use]
pub struct Respond<'a> {
    agent: &'a Agent,
    run: RunRef,
    items: Vec<(Option<ToolCallId>, Resolution)>,
    actor: Option<Actor>,
    loaded: Option<StoredRun>,
}

impl std::fmt::Debug for Respond<'_> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Respond")
            .field("run", &self.run)
            .field("responses", &self.items.len())
            .field("actor", &self.actor)
            .finish()
    }
}

impl Respond<'_> {
    /// Who responds, for the audit (a resource id, an API key's name, `cli`): an actor with
    /// only this id ([`Respond::actor`]).
    pub fn by(mut self, by: impl Into<String>) -> Self {
        self.actor = Some(Actor::new(by));
        self
    }

    /// Who responds ([`Actor`]: id, resource, roles, route): recorded in the audit of every
    /// decision, and checked against the agent's approver policies ([`ApproverPolicy`]) before
    /// anything changes ([`ResumeError::NotPermitted`]).
    pub fn actor(mut self, actor: Actor) -> Self {
        self.actor = Some(actor);
        self
    }

    /// The run as the caller has just loaded it (a server that checked who may see it):
    /// the claim's first attempt starts from this copy instead of reading the store again.
    /// Nothing else changes: the compare-and-swap still names this copy's version, so a copy
    /// that is stale by then (or one the responses do not fit) only costs a re-read, never a
    /// wrong claim; a copy of another run (another key) is ignored.
    pub fn loaded(mut self, stored: StoredRun) -> Self {
        self.loaded = Some(stored);
        self
    }

    /// Answers the suspended call `tool_call_id`.
    pub fn answer(mut self, tool_call_id: &ToolCallId, answer: Value) -> Self {
        self.items.push((
            Some(tool_call_id.clone()),
            Resolution::Respond(CallResponse::Answer(answer)),
        ));
        self
    }

    /// Answers the one call pending now, whichever it is (see [`Agent::resume_stream`] with
    /// `None`: refused when several calls wait, and alone in its batch).
    pub fn answer_pending_call(mut self, answer: Value) -> Self {
        self.items
            .push((None, Resolution::Respond(CallResponse::Answer(answer))));
        self
    }

    /// Responds to the call `tool_call_id` with `response`.
    pub fn response(mut self, tool_call_id: &ToolCallId, response: CallResponse) -> Self {
        self.items
            .push((Some(tool_call_id.clone()), Resolution::Respond(response)));
        self
    }

    /// Approves the call `tool_call_id`, which awaits approval.
    pub fn approve(self, tool_call_id: &ToolCallId) -> Self {
        self.response(tool_call_id, CallResponse::Approve)
    }

    /// Approves the call `tool_call_id`, which awaits approval, with the arguments a person
    /// edited ([`CallResponse::ApproveWith`]).
    pub fn approve_with(self, tool_call_id: &ToolCallId, args: Value) -> Self {
        self.response(tool_call_id, CallResponse::ApproveWith { args })
    }

    /// Declines the call `tool_call_id`, which awaits approval, with an optional reason for
    /// the model.
    pub fn decline(self, tool_call_id: &ToolCallId, reason: Option<String>) -> Self {
        self.response(tool_call_id, CallResponse::Decline { reason })
    }

    /// Checks every response, applies them all in one compare-and-swap, and streams the run
    /// from there (it suspends again if calls still wait).
    ///
    /// # Errors
    /// As [`Agent::resume_stream`], for the first response that is refused (then nothing
    /// changed); [`ResumeError::DuplicateToolCall`], [`ResumeError::UnnamedInBatch`],
    /// [`ResumeError::EmptyBatch`].
    pub async fn stream(self) -> Result<AgentStream, ResumeError> {
        let claim = run_loop::claim_resume(
            &self.agent.inner,
            &self.run,
            self.items,
            self.actor,
            self.loaded,
        )
        .await?;
        Ok(run_loop::resume(self.agent.inner.clone(), claim))
    }
}

/// A fork of a run at one of its questions, with another answer ([`Agent::fork`]).
#[must_use]
#[derive(Debug)]
pub struct Fork<'a> {
    agent: &'a Agent,
    run: RunRef,
    tool_call_id: ToolCallId,
    answer: Value,
    actor: Option<Actor>,
}

impl Fork<'_> {
    /// Who gives the new answer, for the fork's audit (a resource id, an API key's name, `cli`):
    /// an actor with only this id ([`Fork::actor`]).
    pub fn by(mut self, by: impl Into<String>) -> Self {
        self.actor = Some(Actor::new(by));
        self
    }

    /// Who gives the new answer: recorded in the fork's audit and as the fork's starter, and
    /// checked against the question's tool's approver policy, as an answer would be.
    pub fn actor(mut self, actor: Actor) -> Self {
        self.actor = Some(actor);
        self
    }

    /// Builds the fork, checks the answer, inserts the fork already claimed (one write), and
    /// streams it from there: the question's `tool-call` and `tool-result` with the new
    /// answer, then the model's next step. The stream's [`AgentStream::run_key`] is the fork's.
    ///
    /// # Errors
    /// Before anything is written: [`ResumeError::InvalidId`], [`ResumeError::RunNotFound`],
    /// [`ResumeError::AmbiguousRun`], [`ResumeError::WrongAgent`],
    /// [`ResumeError::NotAQuestion`], [`ResumeError::InvalidAnswer`],
    /// [`ResumeError::ToolUnavailable`], [`ResumeError::InProgress`] or
    /// [`ResumeError::Interrupted`] (another call of the question's step is still running in
    /// the original), [`ResumeError::Store`].
    pub async fn stream(self) -> Result<AgentStream, ResumeError> {
        let claim = run_loop::claim_fork(
            &self.agent.inner,
            &self.run,
            &self.tool_call_id,
            self.answer,
            self.actor,
        )
        .await?;
        Ok(run_loop::resume(self.agent.inner.clone(), claim))
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
    /// A sub-agent's runs would be stored elsewhere than its parent's: a sub-agent must share
    /// its parent's store ([`AgentBuilder::shared_store`] with the same store).
    #[error(
        "sub-agent {subagent} of agent {agent} uses another store than its parent; give both the same store"
    )]
    SubagentStore {
        /// The parent.
        agent: AgentId,
        /// The sub-agent.
        subagent: AgentId,
    },
    /// A sub-agent's id is not a name providers take for a tool (`^[a-zA-Z0-9_-]{1,64}$`, as
    /// OpenAI's and Anthropic's APIs require): its tool is named by it.
    #[error(
        "sub-agent {subagent} of agent {agent}: its id names its tool, and tool names are 1 to 64 letters, digits, `_` or `-`"
    )]
    SubagentName {
        /// The parent.
        agent: AgentId,
        /// The sub-agent.
        subagent: AgentId,
    },
    /// Sub-agents nest deeper than the limit ([`AgentBuilder::max_subagent_depth`]).
    #[error("agent {agent} has sub-agents {levels} levels deep; at most {limit} are allowed")]
    SubagentTooDeep {
        /// The agent.
        agent: AgentId,
        /// How many levels of sub-agents it has.
        levels: u32,
        /// The limit.
        limit: u32,
    },
    /// A tool's input schema is not a valid JSON Schema.
    #[error("tool {tool} has an invalid input schema")]
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
    max_questions: Option<u32>,
    settings: ModelSettings,
    store: Option<Arc<dyn RunStore>>,
    lease: Duration,
    approval: ApprovalPolicy,
    description: Option<String>,
    subagents: Vec<Agent>,
    max_subagent_depth: u32,
}

impl AgentBuilder {
    /// Every call of every tool that does not itself ask the user (all but `ask_user`) waits
    /// for a person's approval before it runs (`true`), or only those other rules name
    /// (`false`, the default).
    pub fn require_approval(mut self, all: bool) -> Self {
        self.approval.all = all;
        self
    }

    /// Every call of the tool `name` waits for a person's approval before it runs.
    pub fn require_approval_for(mut self, name: impl Into<String>) -> Self {
        self.approval.tools.push((name.into(), None));
        self
    }

    /// A call of the tool `name` waits for a person's approval when `predicate` says so, given
    /// the call's arguments (already checked against the tool's input schema).
    pub fn require_approval_if(
        mut self,
        name: impl Into<String>,
        predicate: impl Fn(&Value) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.approval
            .tools
            .push((name.into(), Some(Arc::new(predicate))));
        self
    }

    /// How long a call that needs approval waits for a person's decision: once `timeout` has
    /// passed since the model made the call, the approval has expired. Its deadline is stored
    /// with the call and announced (`tool-call-approval`'s `expiresAt`, RFC 3339;
    /// [`crate::PendingToolCall::expires_at_ms`]); from then on an approval or a decline is
    /// refused ([`ResumeError::Expired`], nothing changes), and a sweep
    /// ([`Agent::expire_due`], `askloop runs sweep`, the server's background sweep) gives the
    /// call an error result telling the model that no decision came in time and the tool did
    /// not run, and the run goes on. Default: no deadline (an approval waits until it is
    /// given, the run is cancelled or a new message supersedes it).
    ///
    /// This is the agent's default for every tool; a tool's own
    /// [`crate::Tool::approval_timeout`] wins over it, and [`AgentBuilder::approval_timeout_for`]
    /// over both. Questions have their own deadlines ([`crate::AskUser::timeout`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use askloop_core::{Agent, testing::ScriptedModel};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let agent = Agent::builder("ops")
    ///     .model(ScriptedModel::from_json(r#"{"steps":[{"text":"Hi."}]}"#)?)
    ///     .require_approval(true)
    ///     .approval_timeout(Duration::from_secs(3600)) // every approval: one hour
    ///     .approval_timeout_for("transfer", Duration::from_secs(600)) // this tool: ten minutes
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn approval_timeout(mut self, timeout: Duration) -> Self {
        self.approval.timeout = Some(timeout);
        self
    }

    /// How long a call of the tool `name` waits for a person's approval (see
    /// [`AgentBuilder::approval_timeout`]); for this tool it wins over the agent's default and
    /// the tool's own [`crate::Tool::approval_timeout`]. Given twice for one tool, the last
    /// one counts. It sets a deadline only: whether a call needs approval is decided by
    /// [`AgentBuilder::require_approval_for`] and the other rules.
    pub fn approval_timeout_for(mut self, name: impl Into<String>, timeout: Duration) -> Self {
        self.approval.timeouts.push((name.into(), timeout));
        self
    }

    /// Who may approve the agent's calls ([`ApproverPolicy`]: roles, self-approval, quorum),
    /// checked before an approval or a decline changes anything
    /// ([`ResumeError::NotPermitted`] says why not; the call keeps waiting). It governs
    /// approvals only; a tool's own policy ([`AgentBuilder::approvers_for`]) wins over it for
    /// that tool and also governs answers to its questions. Whether a call needs approval at all
    /// is decided by [`AgentBuilder::require_approval`] and the other rules. See
    /// [`ApproverPolicy`] for the rules.
    pub fn approvers(mut self, policy: ApproverPolicy) -> Self {
        self.approval.approvers = Some(policy);
        self
    }

    /// Who may approve the calls of the tool `name` and answer its questions (the agent's
    /// [`AgentBuilder::approvers`] does not apply to it). Given twice for one tool, the last
    /// one counts.
    pub fn approvers_for(mut self, name: impl Into<String>, policy: ApproverPolicy) -> Self {
        self.approval.tool_approvers.push((name.into(), policy));
        self
    }

    /// Offers `agent` to this one as a tool, named by the sub-agent's id, described by its
    /// [`AgentBuilder::description`], taking `{"prompt": string, "context"?: string}`. A call of
    /// it starts a **child run** of `agent` (its own model, instructions, tools, limits and
    /// policies; stored in the same store and resource, with [`crate::ParentRun`] naming this
    /// run and call), streams the child's chunks as [`Chunk::Subagent`](crate::Chunk), and
    /// returns the child's final text. When the child waits for a person, so does this run:
    /// its waiting calls are the child's, named `THIS_CALL~CHILD_CALL`
    /// ([`crate::SUBAGENT_CALL_SEPARATOR`]), with their origin
    /// ([`crate::PendingToolCall::subagent`]); answering one through this run (any entry
    /// point) resumes the child, then this run with the child's result. The sub-agent must use
    /// this agent's store ([`AgentBuildError::SubagentStore`]); nesting is limited
    /// ([`AgentBuilder::max_subagent_depth`]). See docs/subagents.md.
    pub fn subagent(mut self, agent: Agent) -> Self {
        self.subagents.push(agent);
        self
    }

    /// What the agent does, in a sentence or two: the description of its tool when another
    /// agent offers it as a sub-agent ([`AgentBuilder::subagent`]). Default: a sentence naming
    /// the agent.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// How many levels of sub-agents may be below this agent (default
    /// [`DEFAULT_MAX_SUBAGENT_DEPTH`], 3: a question asked three levels down is the deepest);
    /// deeper trees are refused when built ([`AgentBuildError::SubagentTooDeep`]).
    pub fn max_subagent_depth(mut self, levels: u32) -> Self {
        self.max_subagent_depth = levels;
        self
    }

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
    /// [`crate::model::FinishReason::MaxSteps`].
    pub fn max_steps(mut self, max_steps: u32) -> Self {
        self.max_steps = max_steps;
        self
    }

    /// At most this many questions per run (calls of tools that ask the user, such as
    /// `ask_user`; see [`Tool::asks_user`](crate::Tool::asks_user)). Once they are spent, those
    /// tools are no longer offered to the model (a tool choice naming one falls back to `auto`,
    /// or to `none` when no tool is left), and a call of one anyway gets an error result telling
    /// the model to answer with what it knows. Default: no budget.
    pub fn max_questions(mut self, max_questions: u32) -> Self {
        self.max_questions = Some(max_questions);
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

    /// How long a run this agent drives stays leased to it without a heartbeat (default
    /// [`DEFAULT_LEASE`], 30 s). While the agent drives a run, a heartbeat renews the lease
    /// every third of this; another process may take the run over (`continue_stream`) only
    /// once it has expired, i.e. this long after the driving process died. A zero duration is
    /// raised to one millisecond.
    pub fn lease(mut self, duration: Duration) -> Self {
        self.lease = duration.max(Duration::from_millis(1));
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
            .clone()
            .ok_or_else(|| AgentBuildError::MissingModel(self.id.clone()))?;
        let store = self
            .store
            .clone()
            .unwrap_or_else(|| Arc::new(MemoryStore::new()));
        let subagents = self.check_subagents(&store)?;
        let subagent_levels = subagents
            .iter()
            .map(|child| child.subagent_levels + 1)
            .max()
            .unwrap_or(0);
        let mut offered = self.tools;
        offered.extend(
            subagents
                .iter()
                .map(|child| Arc::new(SubagentTool::new(Arc::clone(child))) as Arc<dyn DynTool>),
        );
        let mut tools: Vec<RegisteredTool> = Vec::with_capacity(offered.len());
        for tool in offered {
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
            inner: Arc::new(AgentDefinition {
                name: self.name.unwrap_or_else(|| self.id.to_string()),
                id: self.id,
                instructions: self.instructions,
                model,
                model_spec: self.model_spec,
                tools,
                tool_definitions,
                max_steps: self.max_steps,
                max_questions: self.max_questions,
                settings: self.settings,
                store,
                lease_holder: LeaseHolder::generate(),
                lease_duration: self.lease,
                approval: self.approval,
                description: self.description,
                subagents,
                subagent_levels,
            }),
        })
    }

    /// The sub-agents' definitions, checked: each uses `store`, and the tree below this agent
    /// is at most [`AgentBuilder::max_subagent_depth`] levels deep.
    fn check_subagents(
        &self,
        store: &Arc<dyn RunStore>,
    ) -> Result<Vec<Arc<AgentDefinition>>, AgentBuildError> {
        let mut definitions = Vec::with_capacity(self.subagents.len());
        for child in &self.subagents {
            let child = Arc::clone(&child.inner);
            if !std::ptr::addr_eq(Arc::as_ptr(&child.store), Arc::as_ptr(store)) {
                return Err(AgentBuildError::SubagentStore {
                    agent: self.id.clone(),
                    subagent: child.id.clone(),
                });
            }
            if !is_tool_name(child.id.as_str()) {
                return Err(AgentBuildError::SubagentName {
                    agent: self.id.clone(),
                    subagent: child.id.clone(),
                });
            }
            let levels = child.subagent_levels + 1;
            if levels > self.max_subagent_depth {
                return Err(AgentBuildError::SubagentTooDeep {
                    agent: self.id.clone(),
                    levels,
                    limit: self.max_subagent_depth,
                });
            }
            definitions.push(child);
        }
        Ok(definitions)
    }
}

/// Whether `name` is a tool name every provider takes: 1 to 64 ASCII letters, digits, `_`, `-`.
fn is_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-')
}
