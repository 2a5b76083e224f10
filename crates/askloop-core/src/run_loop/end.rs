//! Ending a wait without answers: cancelling a run, superseding a waiting run with a new message
//! to its thread, and finding the waiting calls (questions and approvals) whose deadline passed. Each is one compare-and-swap
//! that gives every waiting call exactly one result, so the conversation stays one that every
//! provider accepts (each tool call answered by one result).

use crate::definition::AgentDefinition;
use crate::error::ResumeError;
use crate::ids::{AgentId, ResourceId, RunId, RunKey, RunRef, ThreadKey, ToolCallId};
use crate::message::{FinishReason, Message, ToolResult};
use crate::run::{AuditAction, AuditRecord, CallState, RunFailure, RunState, RunStatus};
use crate::run_loop::claim::{CLAIM_ATTEMPTS, live_lease, load_own_run, map_store_error, resolve};
use crate::store::{ListedRun, RunFilter, RunStore, StoreError};

/// The error text of a call whose run was cancelled while it waited.
const CANCELLED: &str = "the run was cancelled while this tool call waited";

/// Gives every call of the pending step that has no result `result_of(call)` with an audit
/// record, and appends the step's results to the conversation.
fn resolve_waiting(
    state: &mut RunState,
    action: AuditAction,
    by: Option<&String>,
    result_of: impl Fn(&crate::message::ToolCall) -> ToolResult,
) {
    let Some(mut step) = state.pending_step.take() else {
        return;
    };
    for slot in &mut step.calls {
        if matches!(slot.state, CallState::Completed { .. }) {
            continue;
        }
        slot.audit.push(AuditRecord::now(action, by.cloned()));
        slot.state = CallState::Completed {
            result: result_of(&slot.call),
        };
    }
    if let Some(results) = step.results() {
        state.messages.push(Message::Tool { results });
    }
}

/// Cancels a run: every call that waits (or was left unfinished by a dead process) gets an
/// error result saying the run was cancelled, and the run ends as `cancelled`, refusing
/// resumes and continues from then on. The commit gives it a completion sequence: its
/// messages join its thread's history, so the next turn sees what was cancelled.
///
/// # Errors
/// [`ResumeError::InvalidId`], [`ResumeError::RunNotFound`], [`ResumeError::AmbiguousRun`],
/// [`ResumeError::WrongAgent`], [`ResumeError::NotCancellable`] (completed or already
/// cancelled), [`ResumeError::InProgress`] (a live process drives it: stop that process
/// instead), [`ResumeError::Conflict`], [`ResumeError::Store`].
pub(crate) async fn cancel_run(
    agent: &AgentDefinition,
    run: &RunRef,
    by: Option<String>,
) -> Result<(), ResumeError> {
    let key = resolve(agent.store.as_ref(), run).await?;
    let run_id = &key.run_id;
    for _ in 0..CLAIM_ATTEMPTS {
        let stored = load_own_run(agent, &key).await?;
        let status = stored.state.status;
        if matches!(status, RunStatus::Completed | RunStatus::Cancelled) {
            return Err(ResumeError::NotCancellable {
                run_id: run_id.clone(),
                status,
            });
        }
        if let Some(lease) = live_lease(&stored) {
            return Err(ResumeError::InProgress {
                run_id: run_id.clone(),
                lease_expires_at_ms: lease.expires_at_ms,
            });
        }
        let version = stored.version;
        let mut state = stored.state;
        resolve_waiting(&mut state, AuditAction::Cancel, by.as_ref(), |call| {
            ToolResult::error(call, CANCELLED)
        });
        state.status = RunStatus::Cancelled;
        state.error = Some(RunFailure {
            code: "cancelled".into(),
            message: match &by {
                Some(by) => format!("cancelled by {by}"),
                None => "cancelled".into(),
            },
        });
        state.touch();
        match agent.store.update_run(&state, version, None).await {
            Ok(_) => return Ok(()),
            Err(StoreError::Conflict { .. }) => continue,
            Err(error) => return Err(map_store_error(&key, error)),
        }
    }
    Err(ResumeError::Conflict {
        run_id: run_id.clone(),
    })
}

/// The result text of a waiting call whose person wrote a new message instead of answering.
fn superseded_text(message: &str) -> String {
    format!("the person did not answer and wrote instead: {message:?}")
}

/// Supersedes every suspended run of `thread` once a new run was inserted there with
/// `message` (the new run holds the thread's turn, so none of them can be resumed any more):
/// each waiting call gets a result saying the person wrote `message` instead of answering, and
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
    let filter = RunFilter::in_thread(thread).status(RunStatus::Suspended);
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
            if stored.state.status != RunStatus::Suspended {
                break;
            }
            let mut state = stored.state;
            let text = superseded_text(message);
            resolve_waiting(&mut state, AuditAction::Message, by.as_ref(), |call| {
                ToolResult::text(call, text.clone())
            });
            state.status = RunStatus::Completed;
            state.finish_reason = Some(FinishReason::Superseded);
            state.touch();
            match agent.store.update_run(&state, stored.version, None).await {
                Ok(_) => break,
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
    let mut filter = RunFilter::new().status(RunStatus::Suspended).limit(PAGE);
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
