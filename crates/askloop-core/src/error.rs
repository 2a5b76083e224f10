//! The agent's errors: [`AgentError`] ends a stream, [`ResumeError`] refuses a resume before
//! anything changes.

use crate::ids::{AgentId, InvalidId, ResourceId, RunId, ThreadId, ToolCallId};
use crate::model::ModelError;
use crate::run::RunStatus;
use crate::store::StoreError;
use crate::tool::ResumeRejection;

/// An error that ends a run's stream. What was committed before it stays committed; the run is
/// recorded as failed when the store can still be reached — except after
/// [`AgentError::RunCancelled`], where the run stays as its canceller stored it.
///
/// A new run's stream ends with [`AgentError::InvalidId`], [`AgentError::ThreadBusy`] or
/// [`AgentError::Store`]`(`[`StoreError::AlreadyExists`]`)` as its first item when the run
/// could not be started: then nothing was stored (see [`crate::AgentStream::started`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    /// The model call failed.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// The store failed.
    #[error(transparent)]
    Store(StoreError),
    /// A run, thread or resource id of [`crate::RunOptions`] is refused
    /// ([`crate::IdKind::check`]); the run was not started.
    #[error(transparent)]
    InvalidId(#[from] InvalidId),
    /// The thread already has a turn running (one turn at a time per thread): the new run was
    /// not started. Wait for the running run to end, or cancel or continue it.
    #[error("thread {thread_id} has a turn running{}", crate::store::running_text(running_run_id.as_ref()))]
    ThreadBusy {
        /// The thread.
        thread_id: ThreadId,
        /// The run that is running in it, if it could be read.
        running_run_id: Option<RunId>,
    },
    /// The run was cancelled while this stream drove it ([`crate::Agent::cancel_run`] through
    /// any agent or process on the same store, `POST /api/runs/{runId}/cancel`, `askloop runs
    /// cancel`): the stored run is [`crate::RunStatus::Cancelled`], every call of its step got
    /// exactly one result, and this stream's unfinished work (the model call, running tools)
    /// was dropped without being recorded. The run cannot be resumed or continued.
    #[error("run {run_id} was cancelled while it ran; it ended as cancelled")]
    RunCancelled {
        /// The run.
        run_id: RunId,
    },
}

impl From<StoreError> for AgentError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::ThreadBusy {
                thread_id,
                running_run_id,
            } => Self::ThreadBusy {
                thread_id,
                running_run_id,
            },
            other => Self::Store(other),
        }
    }
}

impl AgentError {
    /// A stable code for clients: `"model_error"`, `"auth_error"`, `"cancelled"`,
    /// `"store_error"`, `"conflict"`, `"invalid_id"`, `"thread_busy"`.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Model(ModelError::Authentication { .. }) => "auth_error",
            Self::Model(ModelError::Cancelled) | Self::RunCancelled { .. } => "cancelled",
            Self::Model(_) => "model_error",
            Self::Store(StoreError::Conflict { .. }) => "conflict",
            Self::Store(_) => "store_error",
            Self::InvalidId(_) => "invalid_id",
            Self::ThreadBusy { .. } => "thread_busy",
        }
    }
}

/// Why a resume (or continue) was refused. In every case nothing changed: no tool ran, no model
/// was called, the stored run is as it was.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResumeError {
    /// No run has this id.
    #[error("run {run_id} not found")]
    RunNotFound {
        /// The id given.
        run_id: RunId,
    },
    /// The run is not waiting for an answer.
    #[error("run {run_id} is {status}, not suspended")]
    NotSuspended {
        /// The run.
        run_id: RunId,
        /// Its status.
        status: RunStatus,
    },
    /// `continue_stream` on a run that is neither failed nor running: a suspended run needs an
    /// answer, a completed one a new run.
    #[error("run {run_id} is {status}; only a failed (or abandoned running) run can be continued")]
    NotContinuable {
        /// The run.
        run_id: RunId,
        /// Its status.
        status: RunStatus,
    },
    /// `continue_stream` on a failed run whose thread has a newer run: its turn is over (the
    /// thread went on without it), and continuing it would put its reply after the newer
    /// turns in the thread's history.
    #[error(
        "run {run_id} failed and its thread has moved on (run {newer_run_id} came after it); send a new message instead"
    )]
    ThreadMovedOn {
        /// The run.
        run_id: RunId,
        /// The thread's newest run.
        newer_run_id: RunId,
    },
    /// The run has no suspended call with this id.
    #[error(
        "run {run_id} has no pending tool call {tool_call_id}; pending: {}",
        join_ids(pending)
    )]
    UnknownToolCall {
        /// The run.
        run_id: RunId,
        /// The id given.
        tool_call_id: ToolCallId,
        /// The calls that are pending.
        pending: Vec<ToolCallId>,
    },
    /// That call already has its answer (nothing was applied again).
    #[error(
        "tool call {tool_call_id} of run {run_id} was already answered{}",
        if *same_answer { " with this answer" } else { "" }
    )]
    AlreadyAnswered {
        /// The run.
        run_id: RunId,
        /// The call.
        tool_call_id: ToolCallId,
        /// Whether the recorded answer equals this one: the resume is a harmless repeat.
        same_answer: bool,
    },
    /// That call's deadline passed before this answer, approval or decline came: a question
    /// ([`crate::AskUser::timeout`]) or an approval ([`crate::AgentBuilder::approval_timeout`])
    /// expires at its deadline, whether or not a sweep has given it its "no answer came in
    /// time" result yet. Nothing was applied.
    #[error(
        "tool call {tool_call_id} of run {run_id} expired at {}: its deadline passed before this response came; nothing changed",
        crate::time::rfc3339(*expired_at_ms)
    )]
    Expired {
        /// The run.
        run_id: RunId,
        /// The call.
        tool_call_id: ToolCallId,
        /// When it expired (its deadline), ms since the Unix epoch.
        expired_at_ms: u64,
    },
    /// No tool call id was given and several calls are pending.
    #[error("run {run_id} has {} pending tool calls; say which one to answer: {}", pending.len(), join_ids(pending))]
    Ambiguous {
        /// The run.
        run_id: RunId,
        /// The pending calls.
        pending: Vec<ToolCallId>,
    },
    /// The answer does not fit the question.
    #[error("invalid answer for {tool_name} call {tool_call_id}: {rejection}")]
    InvalidAnswer {
        /// The run.
        run_id: RunId,
        /// The call.
        tool_call_id: ToolCallId,
        /// The tool.
        tool_name: String,
        /// What was expected and what was wrong.
        rejection: ResumeRejection,
    },
    /// The arguments a person edited when approving a call
    /// ([`crate::CallResponse::ApproveWith`]) do not fit the tool's input schema: nothing
    /// changed, the call still awaits approval.
    #[error(
        "invalid arguments for {tool_name} call {tool_call_id}: {}; nothing changed",
        problems.join("; ")
    )]
    InvalidArgs {
        /// The run.
        run_id: RunId,
        /// The call.
        tool_call_id: ToolCallId,
        /// The tool.
        tool_name: String,
        /// Every problem found, one text each (lowercase, naming the field).
        problems: Vec<String>,
    },
    /// The call's approver policy ([`crate::ApproverPolicy`]) does not let this actor decide:
    /// a role it lacks, the run's starter approving its own call, an approver of a quorum
    /// approving twice, an actor-less response to a policy that needs to know who acts, or
    /// other arguments than earlier approvers approved. Nothing changed; the call still waits.
    #[error("{} may not decide on {tool_name} call {tool_call_id} of run {run_id}: {reason}; nothing changed", actor.as_deref().unwrap_or("an unnamed actor"))]
    NotPermitted {
        /// The run.
        run_id: RunId,
        /// The call.
        tool_call_id: ToolCallId,
        /// Its tool.
        tool_name: String,
        /// The actor refused (its id), if the response named one.
        actor: Option<String>,
        /// Why (boxed: the error stays small).
        reason: Box<crate::approvers::PolicyRefusal>,
    },
    /// Another resume (or continue) of this run was applied first (exactly-once: this one
    /// changed nothing).
    #[error("another resume of run {run_id} was applied first; this one changed nothing")]
    Conflict {
        /// The run.
        run_id: RunId,
    },
    /// Another process drives the run now (it holds a live lease).
    #[error(
        "run {run_id} is being run by another process; it can be taken over only once that process's lease expires"
    )]
    InProgress {
        /// The run.
        run_id: RunId,
        /// When that process's lease ends unless it renews it, ms since the Unix epoch. If it
        /// died, the run can be continued after this.
        lease_expires_at_ms: u64,
    },
    /// The process that claimed this call (or was running it) stopped before recording its
    /// result. Continuing the run (`continue_stream`) finishes it: the call is re-run with the
    /// recorded answer if its tool is idempotent, otherwise the model is told its outcome is
    /// unknown.
    #[error(
        "the process answering tool call {tool_call_id} of run {run_id} stopped before recording its result; continue the run to finish it"
    )]
    Interrupted {
        /// The run.
        run_id: RunId,
        /// The call left unfinished.
        tool_call_id: ToolCallId,
    },
    /// The run is a sub-agent's child run: its calls are answered, and it is continued and
    /// cancelled, through its root run (whose waiting calls include the child's, as
    /// `PARENT_CALL~CHILD_CALL`).
    #[error(
        "run {run_id} is a sub-agent's run: answer, continue or cancel it through its root run {root_run_id}"
    )]
    ChildRun {
        /// The child run.
        run_id: RunId,
        /// The root of its tree.
        root_run_id: RunId,
    },
    /// The agent has no tool of that name (the run was started by an agent with other tools).
    #[error("the agent has no tool {tool_name}, which run {run_id} is waiting on")]
    ToolUnavailable {
        /// The run.
        run_id: RunId,
        /// The missing tool.
        tool_name: String,
    },
    /// The run belongs to another agent.
    #[error("run {run_id} belongs to agent {expected}, not {actual}")]
    WrongAgent {
        /// The run.
        run_id: RunId,
        /// The run's agent.
        expected: AgentId,
        /// The agent asked to resume it.
        actual: AgentId,
    },
    /// A batch named the same call twice.
    #[error("the answers for run {run_id} name tool call {tool_call_id} twice")]
    DuplicateToolCall {
        /// The run.
        run_id: RunId,
        /// The call named twice.
        tool_call_id: ToolCallId,
    },
    /// A batch of several responses left one without its tool call id.
    #[error("the answers for run {run_id} must each name their tool call")]
    UnnamedInBatch {
        /// The run.
        run_id: RunId,
    },
    /// A batch without any response.
    #[error("no answer was given for run {run_id}")]
    EmptyBatch {
        /// The run.
        run_id: RunId,
    },
    /// The run has ended (completed or cancelled): nothing is left to cancel.
    #[error("run {run_id} is {status}; only a suspended, failed or running run can be cancelled")]
    NotCancellable {
        /// The run.
        run_id: RunId,
        /// Its status.
        status: RunStatus,
    },
    /// A bare run id ([`crate::RunRef::Id`]) names runs of several resources: name the one
    /// meant with its key ([`crate::RunRef::Key`]). Nothing changed.
    #[error(
        "run id {run_id} is used by {} resources ({}); say which run is meant by its resource",
        resources.len(),
        join_resources(resources)
    )]
    AmbiguousRun {
        /// The id given.
        run_id: RunId,
        /// The resources holding a run with that id (`None`: a run without resource).
        resources: Vec<Option<ResourceId>>,
    },
    /// The claim would make the run running while another run of its thread runs (one turn at
    /// a time per thread; e.g. a new message arrived first). Nothing changed.
    #[error("thread {thread_id} has a turn running{}; run {run_id} can go on once it ends", crate::store::running_text(running_run_id.as_ref()))]
    ThreadBusy {
        /// The run that was to be resumed or continued.
        run_id: RunId,
        /// Its thread.
        thread_id: ThreadId,
        /// The run that is running in it, if it could be read.
        running_run_id: Option<RunId>,
    },
    /// A fork ([`crate::Agent::fork`]) named a tool call that is not a question of the run: no
    /// call of its conversation has this id, or the call never suspended for an answer (or its
    /// question was recorded before askloop kept questions with their results). Nothing was
    /// created.
    #[error("run {run_id} has no question {tool_call_id} to fork from")]
    NotAQuestion {
        /// The run.
        run_id: RunId,
        /// The id given.
        tool_call_id: ToolCallId,
    },
    /// A run or resource id given is refused ([`crate::IdKind::check`]).
    #[error(transparent)]
    InvalidId(#[from] InvalidId),
    /// The store failed.
    #[error(transparent)]
    Store(StoreError),
}

impl ResumeError {
    /// A stable code for clients (`"run_not_found"`, `"invalid_answer"`, `"invalid_args"`,
    /// `"not_permitted"`, `"conflict"`, `"expired"`, …).
    pub fn code(&self) -> &'static str {
        match self {
            Self::RunNotFound { .. } => "run_not_found",
            Self::NotSuspended { .. } => "not_suspended",
            Self::NotContinuable { .. } => "not_continuable",
            Self::ThreadMovedOn { .. } => "thread_moved_on",
            Self::UnknownToolCall { .. } => "unknown_tool_call",
            Self::AlreadyAnswered { .. } => "already_answered",
            Self::Expired { .. } => "expired",
            Self::Ambiguous { .. } => "ambiguous_tool_call",
            Self::InvalidAnswer { .. } => "invalid_answer",
            Self::InvalidArgs { .. } => "invalid_args",
            Self::NotPermitted { .. } => "not_permitted",
            Self::Conflict { .. } => "conflict",
            Self::InProgress { .. } => "in_progress",
            Self::Interrupted { .. } => "interrupted",
            Self::ToolUnavailable { .. } => "tool_unavailable",
            Self::ChildRun { .. } => "child_run",
            Self::WrongAgent { .. } => "wrong_agent",
            Self::DuplicateToolCall { .. } => "duplicate_tool_call",
            Self::UnnamedInBatch { .. } => "unnamed_tool_call",
            Self::EmptyBatch { .. } => "empty_batch",
            Self::NotCancellable { .. } => "not_cancellable",
            Self::AmbiguousRun { .. } => "ambiguous_run",
            Self::ThreadBusy { .. } => "thread_busy",
            Self::NotAQuestion { .. } => "not_a_question",
            Self::InvalidId(_) => "invalid_id",
            Self::Store(_) => "store_error",
        }
    }
}

/// An error and its causes on one line, each cause once: `outer: cause: root cause`. A cause
/// whose text the line already holds is skipped, so an error that repeats its source's text is
/// not printed twice.
pub fn error_chain_text(error: &(dyn std::error::Error + 'static)) -> String {
    let mut line = error.to_string();
    let mut cause = error.source();
    while let Some(current) = cause {
        let text = current.to_string();
        if !text.is_empty() && !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        cause = current.source();
    }
    line.replace(['\n', '\r'], " ")
}

fn join_resources(resources: &[Option<ResourceId>]) -> String {
    resources
        .iter()
        .map(|resource| resource.as_ref().map_or("no resource", ResourceId::as_str))
        .collect::<Vec<_>>()
        .join(", ")
}

fn join_ids(ids: &[ToolCallId]) -> String {
    ids.iter()
        .map(ToolCallId::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[derive(Debug, thiserror::Error)]
    #[error("outer: {0}")]
    struct Repeating(#[source] std::io::Error);

    #[test]
    fn every_cause_is_printed_once() {
        let io = || std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        assert_eq!(error_chain_text(&Outer(io())), "outer: no such file");
        assert_eq!(error_chain_text(&Repeating(io())), "outer: no such file");
    }
}
