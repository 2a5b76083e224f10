//! Ending a wait without answers: cancelling a run, superseding a waiting run with a new message
//! to its thread, and finding the waiting calls (questions and approvals) whose deadline passed. Each is one compare-and-swap
//! that gives every waiting call exactly one result, so the conversation stays one that every
//! provider accepts (each tool call answered by one result).

use crate::definition::AgentDefinition;
use crate::error::{ResumeError, error_chain_text};
use crate::event::EventBasis;
use crate::ids::{AgentId, ResourceId, RunId, RunKey, RunRef, ThreadKey, ToolCallId};
use crate::message::{AuditAction, AuditRecord};
use crate::message::{FinishReason, Message, ToolCall, ToolResult};
use crate::run::{CallState, RunFailure, RunState, RunStatus};
use crate::run_loop::claim::{CLAIM_ATTEMPTS, load_own_run, map_store_error, resolve};
use crate::store::{ListedRun, ResourceFilter, RunFilter, RunStore, StoreError};

/// How many times a cancel re-reads the run after losing its compare-and-swap: a running run's
/// driver commits as it goes (each side-effecting result), and the cancel must still land.
const CANCEL_ATTEMPTS: usize = 16;

/// The error text of a call whose run was cancelled while it waited for a person.
const CANCELLED_WAITING: &str = "the run was cancelled while this tool call waited";

/// The error text of a call whose run was cancelled while its tool was running (or resuming):
/// the tool was stopped, and what it did before is unknown.
const CANCELLED_RUNNING: &str = "the run was cancelled while this tool was running; the tool was stopped and its outcome is unknown";

/// The error text of a call awaiting approval whose run was cancelled: the tool never ran.
const CANCELLED_APPROVAL: &str =
    "the run was cancelled while this tool call waited for approval; the tool did not run";

/// The result a call without one gets when its run is cancelled, by the call's state: waiting
/// for a person, for approval (the tool never ran), or running (stopped mid-way).
fn cancelled_result(call: &ToolCall, state: &CallState) -> ToolResult {
    let text = match state {
        CallState::AwaitingApproval { .. } => CANCELLED_APPROVAL,
        CallState::Running { .. } | CallState::Resuming { .. } => CANCELLED_RUNNING,
        _ => CANCELLED_WAITING,
    };
    ToolResult::error(call, text)
}

/// Gives every call of the pending step that has no result `result_of(call, its state)` with
/// an audit record, and appends the step's results to the conversation.
fn resolve_waiting(
    state: &mut RunState,
    action: AuditAction,
    by: Option<&String>,
    result_of: impl Fn(&ToolCall, &CallState) -> ToolResult,
) {
    let Some(mut step) = state.pending_step.take() else {
        return;
    };
    for slot in &mut step.calls {
        if matches!(slot.state, CallState::Completed { .. }) {
            continue;
        }
        slot.audit.push(AuditRecord::now(action, by.cloned()));
        let result = slot
            .state
            .result_with_question(result_of(&slot.call, &slot.state));
        slot.state = CallState::Completed { result };
    }
    if let Some(results) = step.results() {
        state.messages.push(Message::Tool { results });
    }
}

/// Cancels a run, whatever drives it: every call of the stored step without a result — waiting
/// for a person, awaiting approval, or running right now in a live driver — gets one error
/// result saying the run was cancelled, and the run ends as `cancelled`, refusing resumes and
/// continues from then on. The commit is a compare-and-swap on the stored version that
/// overrides a live driver's lease (retried when the driver commits in between); the driver
/// learns of it from the store (`run_loop::watch`), drops its model call and tool futures, and
/// its own next commit conflicts, so it never writes over the cancelled state. The commit gives
/// the run a completion sequence: its messages join its thread's history, so the next turn
/// sees what was cancelled. What the driver had not committed yet (a model call in flight, the
/// calls of a step whose tools are idempotent and not journaled) is dropped with it.
///
/// # Errors
/// [`ResumeError::InvalidId`], [`ResumeError::RunNotFound`], [`ResumeError::AmbiguousRun`],
/// [`ResumeError::WrongAgent`], [`ResumeError::NotCancellable`] (completed or already
/// cancelled), [`ResumeError::Conflict`] (the driver committed again at every attempt),
/// [`ResumeError::Store`].
pub(crate) async fn cancel_run(
    agent: &AgentDefinition,
    run: &RunRef,
    by: Option<String>,
) -> Result<(), ResumeError> {
    cancel_in_store(agent.store.as_ref(), run, Some(agent), by).await
}

/// [`cancel_run`] on `store` alone: with `agent`, the run must be that agent's
/// ([`ResumeError::WrongAgent`]); without, any agent's run is cancelled — cancelling needs no
/// tool or model of the run's agent, so a process that does not define it can still stop it.
pub(crate) async fn cancel_in_store(
    store: &dyn RunStore,
    run: &RunRef,
    agent: Option<&AgentDefinition>,
    by: Option<String>,
) -> Result<(), ResumeError> {
    cancel_tree(store, run, agent, by, false).await
}

/// [`cancel_in_store`], of a sub-agent's child run too when `by_parent` (its parent's cancel
/// cascades); from outside its tree a child is refused ([`ResumeError::ChildRun`]: its parent's
/// call would wait for it forever — cancel the root).
async fn cancel_tree(
    store: &dyn RunStore,
    run: &RunRef,
    agent: Option<&AgentDefinition>,
    by: Option<String>,
    by_parent: bool,
) -> Result<(), ResumeError> {
    let key = resolve(store, run).await?;
    let run_id = &key.run_id;
    for _ in 0..CANCEL_ATTEMPTS {
        let stored = match agent {
            Some(agent) => load_own_run(agent, &key).await?,
            None => store
                .load_run(&key)
                .await
                .map_err(|error| map_store_error(&key, error))?,
        };
        super::claim::refuse_child(&stored, by_parent)?;
        let status = stored.state.status;
        if matches!(status, RunStatus::Completed | RunStatus::Cancelled) {
            // Its children may outlive it when the process that ended it stopped before
            // cancelling them: a cancel of the ended run finishes that (and is refused).
            cancel_children(store, &key, by.as_ref()).await;
            return Err(ResumeError::NotCancellable {
                run_id: run_id.clone(),
                status,
            });
        }
        let version = stored.version;
        let before = EventBasis::of(&stored.state);
        let mut state = stored.state;
        resolve_waiting(
            &mut state,
            AuditAction::Cancel,
            by.as_ref(),
            cancelled_result,
        );
        state.status = RunStatus::Cancelled;
        state.error = Some(RunFailure {
            code: "cancelled".into(),
            message: match &by {
                Some(by) => format!("cancelled by {by}"),
                None => "cancelled".into(),
            },
        });
        state.touch();
        match super::commit_update(store, &before, &state, version, None).await {
            Ok(_) => {
                cancel_children(store, &key, by.as_ref()).await;
                return Ok(());
            }
            Err(StoreError::Conflict { .. }) => continue,
            Err(error) => return Err(map_store_error(&key, error)),
        }
    }
    Err(ResumeError::Conflict {
        run_id: run_id.clone(),
    })
}

/// Cancels the child runs that `run` started through its sub-agents, and theirs, unless they
/// ended: a cancelled or superseded run leaves no child waiting or running. Best effort after
/// the parent's own commit (what fails is logged; a child left waiting answers to nobody, its
/// parent's call having its result already).
async fn cancel_children(store: &dyn RunStore, run: &RunKey, by: Option<&String>) {
    let filter = RunFilter::new()
        .resource_filter(ResourceFilter::exactly(run.resource_id.clone()))
        .children_of(run.run_id.clone())
        .without_change_cursor();
    let page = match store.list_runs(&filter).await {
        Ok(page) => page,
        Err(error) => {
            tracing::warn!(run_id = %run.run_id, error = %error_chain_text(&error), "could not list the run's sub-agent runs to cancel them");
            return;
        }
    };
    for listed in page.runs {
        let ListedRun::Run(child) = listed else {
            continue;
        };
        // An ended child is visited too: its own children may have outlived it.
        let key = child.key();
        let cancelled = Box::pin(cancel_tree(
            store,
            &RunRef::Key(key.clone()),
            None,
            by.cloned(),
            true,
        ))
        .await;
        match cancelled {
            Ok(()) | Err(ResumeError::NotCancellable { .. }) => {}
            Err(error) => {
                tracing::warn!(run_id = %key.run_id, error = %error_chain_text(&error), "could not cancel a sub-agent's run");
            }
        }
    }
}

/// The result of a waiting call whose person wrote a new message instead of answering: a
/// question's says the person did not answer; an approval's, an error result, says the person
/// did not decide and that the tool did not run.
fn superseded_result(call: &ToolCall, state: &CallState, message: &str) -> ToolResult {
    match state {
        CallState::AwaitingApproval { .. } => ToolResult::error(
            call,
            format!(
                "the person did not decide on this tool call and wrote instead: {message:?}; the tool did not run"
            ),
        ),
        _ => ToolResult::text(
            call,
            format!("the person did not answer and wrote instead: {message:?}"),
        ),
    }
}

/// Supersedes every suspended run of `thread` once a new run was inserted there with
/// `message` (the new run holds the thread's turn, so none of them can be resumed any more):
/// each waiting call gets a result saying the person wrote `message` instead of answering (an
/// approval's, an error result, also that the tool did not run), and
/// the run completes ([`FinishReason::Superseded`]) so that its messages join the thread's
/// history ahead of the new run.
///
/// # Errors
/// [`StoreError`] when the store fails.
pub(crate) async fn supersede_waiting_runs(
    agent: &AgentDefinition,
    thread: &ThreadKey,
    message: &str,
    by: Option<String>,
) -> Result<(), StoreError> {
    let filter = RunFilter::in_thread(thread)
        .status(RunStatus::Suspended)
        .without_change_cursor();
    let page = agent.store.list_runs(&filter).await?;
    for listed in page.runs {
        let ListedRun::Run(summary) = listed else {
            continue;
        };
        let key = summary.key();
        for _ in 0..CLAIM_ATTEMPTS {
            let stored = match agent.store.load_run(&key).await {
                Ok(stored) => stored,
                Err(StoreError::NotFound { .. }) => break,
                Err(error) => return Err(error),
            };
            // A sub-agent's child run has a thread of its own, but answers to its root only: a
            // message to that thread starts a run beside it and supersedes nothing.
            if stored.state.status != RunStatus::Suspended || stored.state.parent.is_some() {
                break;
            }
            let before = EventBasis::of(&stored.state);
            let mut state = stored.state;
            resolve_waiting(
                &mut state,
                AuditAction::Message,
                by.as_ref(),
                |call, call_state| superseded_result(call, call_state, message),
            );
            state.status = RunStatus::Completed;
            state.finish_reason = Some(FinishReason::Superseded);
            state.touch();
            match super::commit_update(agent.store.as_ref(), &before, &state, stored.version, None)
                .await
            {
                Ok(_) => {
                    cancel_children(agent.store.as_ref(), &key, by.as_ref()).await;
                    break;
                }
                Err(StoreError::Conflict { .. }) => continue,
                Err(error) => return Err(error),
            }
        }
    }
    Ok(())
}

/// A suspended run with waiting calls (questions or approvals) whose deadline has passed.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ExpiredRun {
    /// The run.
    pub run_id: RunId,
    /// Its resource (with `run_id`, its key: [`ExpiredRun::key`]).
    pub resource_id: Option<ResourceId>,
    /// Its agent (the one to expire it with).
    pub agent_id: AgentId,
    /// Its calls whose deadline passed.
    pub tool_call_ids: Vec<ToolCallId>,
}

impl ExpiredRun {
    /// The run's key.
    pub fn key(&self) -> RunKey {
        RunKey::new(self.resource_id.clone(), self.run_id.clone())
    }
}

/// The suspended runs of `store` with waiting calls (questions or approvals) whose deadline is
/// at or before `now_ms` (ms since the Unix epoch), oldest first, reading the listing's
/// summaries page by page.
///
/// # Errors
/// [`StoreError`] when the store fails.
pub(crate) async fn expired_calls(
    store: &dyn RunStore,
    now_ms: u64,
) -> Result<Vec<ExpiredRun>, StoreError> {
    const PAGE: usize = 500;
    let mut expired = Vec::new();
    // A sub-agent's child's calls are due through its root, which shows them as its own.
    let mut filter = RunFilter::new()
        .status(RunStatus::Suspended)
        .top_level()
        .without_change_cursor()
        .limit(PAGE);
    loop {
        let page = store.list_runs(&filter).await?;
        for listed in &page.runs {
            let ListedRun::Run(summary) = listed else {
                continue;
            };
            let due: Vec<ToolCallId> = summary
                .pending
                .iter()
                .filter(|call| call.expires_at_ms.is_some_and(|at| at <= now_ms))
                .map(|call| call.tool_call_id.clone())
                .collect();
            if !due.is_empty() {
                expired.push(ExpiredRun {
                    run_id: summary.run_id.clone(),
                    resource_id: summary.resource_id.clone(),
                    agent_id: summary.agent_id.clone(),
                    tool_call_ids: due,
                });
            }
        }
        match page.next_cursor {
            Some(cursor) => filter = filter.after(cursor),
            None => break,
        }
    }
    expired.reverse();
    Ok(expired)
}
