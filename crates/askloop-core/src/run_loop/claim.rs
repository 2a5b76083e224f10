//! Claims: a resume or a continue takes a stored run for this process with one compare-and-swap,
//! before any stream exists, any tool runs or any model is called. A refusal changes nothing.
//!
//! A run that is `running` belongs to the process holding its lease: while the lease is live,
//! every claim is refused ([`ResumeError::InProgress`]); once it expired (the holder died), a
//! continue takes the run over, applying the journal's recovery rules in the same
//! compare-and-swap, and a resume says what happened ([`ResumeError::Interrupted`]).

use serde_json::Value;

use crate::definition::AgentDefinition;
use crate::error::ResumeError;
use crate::ids::{RunId, ToolCallId};
use crate::message::ToolResult;
use crate::run::{CallState, PendingStep, RunState, RunStatus};
use crate::run_loop::clock::lease_now_ms;
use crate::store::{Lease, StoreError, StoredRun};

/// The error result a call gets when the process running it stopped before its result was
/// recorded and its tool is not idempotent.
pub(crate) const OUTCOME_UNKNOWN: &str =
    "outcome unknown: the process stopped while this tool was running";

/// A run this process has claimed: its state and the store version its next commit must name.
pub(crate) struct Claim {
    state: RunState,
    version: u64,
}

impl Claim {
    pub(super) fn into_parts(self) -> (RunState, u64) {
        (self.state, self.version)
    }
}

/// How many times a claim re-reads the run after losing a compare-and-swap to a commit that
/// did not touch the targeted call.
const CLAIM_ATTEMPTS: usize = 3;

fn map_load_error(error: StoreError) -> ResumeError {
    match error {
        StoreError::NotFound { run_id } => ResumeError::RunNotFound { run_id },
        other => ResumeError::Store(other),
    }
}

/// Loads a run and checks that it belongs to `agent`.
async fn load_own_run(agent: &AgentDefinition, run_id: &RunId) -> Result<StoredRun, ResumeError> {
    let stored = agent.store.load_run(run_id).await.map_err(map_load_error)?;
    if stored.state.agent_id != agent.id {
        return Err(ResumeError::WrongAgent {
            run_id: run_id.clone(),
            expected: stored.state.agent_id.clone(),
            actual: agent.id.clone(),
        });
    }
    Ok(stored)
}

/// The live lease of a running run, if another driver holds one now.
fn live_lease(stored: &StoredRun) -> Option<&Lease> {
    if stored.state.status != RunStatus::Running {
        return None;
    }
    stored
        .lease
        .as_ref()
        .filter(|lease| lease.is_live_at(lease_now_ms()))
}

fn in_progress(run_id: &RunId, lease: &Lease) -> ResumeError {
    ResumeError::InProgress {
        run_id: run_id.clone(),
        lease_expires_at_ms: lease.expires_at_ms,
    }
}

/// Checks a resume against the stored run and claims the call (compare-and-swap): the slot
/// becomes `resuming` with the answer, the run `running` under this agent's lease. Nothing
/// changes unless it returns `Ok`.
pub(crate) async fn claim_resume(
    agent: &AgentDefinition,
    resume_data: Value,
    run_id: &RunId,
    tool_call_id: Option<&ToolCallId>,
) -> Result<Claim, ResumeError> {
    let mut lost_race = false;
    for _ in 0..CLAIM_ATTEMPTS {
        let stored = load_own_run(agent, run_id).await?;
        let index = match pick_call(&stored, tool_call_id, &resume_data) {
            Ok(index) => index,
            // A lost compare-and-swap means another resume won: say so, unless the second read
            // shows this very answer recorded (then the resume is idempotent).
            Err(
                error @ ResumeError::AlreadyAnswered {
                    same_answer: true, ..
                },
            ) if lost_race => return Err(error),
            Err(_) if lost_race => {
                return Err(ResumeError::Conflict {
                    run_id: run_id.clone(),
                });
            }
            Err(error) => return Err(error),
        };
        let version = stored.version;
        let mut state = stored.state;
        let Some(slot) = state
            .pending_step
            .as_mut()
            .and_then(|step| step.calls.get_mut(index))
        else {
            return Err(ResumeError::NotSuspended {
                run_id: run_id.clone(),
                status: state.status,
            });
        };
        let CallState::Suspended { suspension } = &slot.state else {
            return Err(ResumeError::Conflict {
                run_id: run_id.clone(),
            });
        };
        let Some(tool) = agent.tool(&slot.call.name) else {
            return Err(ResumeError::ToolUnavailable {
                run_id: run_id.clone(),
                tool_name: slot.call.name.clone(),
            });
        };
        if let Err(rejection) = tool.tool().validate_resume(suspension, &resume_data) {
            return Err(ResumeError::InvalidAnswer {
                run_id: run_id.clone(),
                tool_call_id: slot.call.id.clone(),
                tool_name: slot.call.name.clone(),
                rejection,
            });
        }
        slot.state = CallState::Resuming {
            suspension: suspension.clone(),
            resume_data: resume_data.clone(),
        };
        state.status = RunStatus::Running;
        state.touch();
        let lease = agent.new_lease();
        match agent.store.update_run(&state, version, Some(&lease)).await {
            Ok(version) => return Ok(Claim { state, version }),
            Err(StoreError::Conflict { .. }) => lost_race = true,
            Err(error) => return Err(map_load_error(error)),
        }
    }
    Err(ResumeError::Conflict {
        run_id: run_id.clone(),
    })
}

/// Which slot of the pending step a resume targets: the call named by `tool_call_id`, or the
/// only pending one. Refuses (changing nothing) when the call has its answer, when the run is
/// driven by a live process, or when the process that drove it stopped mid-way.
fn pick_call(
    stored: &StoredRun,
    tool_call_id: Option<&ToolCallId>,
    answer: &Value,
) -> Result<usize, ResumeError> {
    let state = &stored.state;
    let run_id = &state.run_id;
    let step = state.pending_step.as_ref();
    let not_suspended = || ResumeError::NotSuspended {
        run_id: run_id.clone(),
        status: state.status,
    };
    let already_answered =
        |id: &ToolCallId, recorded: Option<&Value>| ResumeError::AlreadyAnswered {
            run_id: run_id.clone(),
            tool_call_id: id.clone(),
            same_answer: recorded == Some(answer),
        };
    let slot = tool_call_id.and_then(|id| {
        step.and_then(|step| {
            step.calls
                .iter()
                .enumerate()
                .find(|(_, slot)| &slot.call.id == id)
        })
    });
    // A call that has its answer says so first, whoever drives the run.
    if let (Some(id), Some((_, slot))) = (tool_call_id, slot) {
        match &slot.state {
            CallState::Completed { result } => {
                return Err(already_answered(id, result.answer.as_ref()));
            }
            CallState::Resuming { resume_data, .. } if resume_data == answer => {
                return Err(already_answered(id, Some(resume_data)));
            }
            // Another answer to this call was claimed first.
            CallState::Resuming { .. } if live_lease(stored).is_some() => {
                return Err(ResumeError::Conflict {
                    run_id: run_id.clone(),
                });
            }
            CallState::Resuming { .. } => {
                return Err(ResumeError::Interrupted {
                    run_id: run_id.clone(),
                    tool_call_id: id.clone(),
                });
            }
            _ => {}
        }
    }
    if let (Some(id), None) = (tool_call_id, slot)
        && let Some(result) = state.result_for(id)
    {
        return Err(already_answered(id, result.answer.as_ref()));
    }
    if state.status == RunStatus::Running {
        if let Some(lease) = live_lease(stored) {
            // "The call pending now" is being answered by another resume.
            let being_resumed = step.is_some_and(|step| {
                step.calls
                    .iter()
                    .any(|slot| matches!(slot.state, CallState::Resuming { .. }))
            });
            if tool_call_id.is_none() && being_resumed {
                return Err(ResumeError::Conflict {
                    run_id: run_id.clone(),
                });
            }
            return Err(in_progress(run_id, lease));
        }
        // The driver stopped (its lease expired): name the call it left unfinished.
        let unfinished = step.and_then(|step| {
            step.calls.iter().find(|slot| {
                matches!(
                    slot.state,
                    CallState::Resuming { .. } | CallState::Running { .. }
                )
            })
        });
        if let Some(slot) = unfinished {
            return Err(ResumeError::Interrupted {
                run_id: run_id.clone(),
                tool_call_id: slot.call.id.clone(),
            });
        }
        return Err(not_suspended());
    }
    let Some(id) = tool_call_id else {
        if state.status != RunStatus::Suspended {
            return Err(not_suspended());
        }
        let pending = step.map(PendingStep::suspended_ids).unwrap_or_default();
        return match pending.as_slice() {
            [only] => step
                .and_then(|step| step.calls.iter().position(|slot| &slot.call.id == only))
                .ok_or_else(not_suspended),
            [] => Err(not_suspended()),
            _ => Err(ResumeError::Ambiguous {
                run_id: run_id.clone(),
                pending,
            }),
        };
    };
    match slot {
        Some(_) if state.status != RunStatus::Suspended => Err(not_suspended()),
        Some((index, _)) => Ok(index),
        None if state.status != RunStatus::Suspended => Err(not_suspended()),
        None => Err(ResumeError::UnknownToolCall {
            run_id: run_id.clone(),
            tool_call_id: id.clone(),
            pending: step.map(PendingStep::suspended_ids).unwrap_or_default(),
        }),
    }
}

/// Claims a failed run, or a running one whose driver stopped (no live lease), so its
/// unfinished step can be retried. In the same compare-and-swap, the calls the dead driver left
/// unfinished are settled by the journal's rules: a `resuming` or `running` call of an
/// idempotent tool stays, to run again; one of another tool gets the [`OUTCOME_UNKNOWN`] error
/// result (keeping a resume's answer), and never runs again.
pub(crate) async fn claim_continue(
    agent: &AgentDefinition,
    run_id: &RunId,
) -> Result<Claim, ResumeError> {
    let stored = load_own_run(agent, run_id).await?;
    if !matches!(stored.state.status, RunStatus::Failed | RunStatus::Running) {
        return Err(ResumeError::NotContinuable {
            run_id: run_id.clone(),
            status: stored.state.status,
        });
    }
    if let Some(lease) = live_lease(&stored) {
        return Err(in_progress(run_id, lease));
    }
    let mut state = stored.state;
    settle_unfinished(agent, &mut state);
    state.status = RunStatus::Running;
    state.error = None;
    state.touch();
    let lease = agent.new_lease();
    match agent
        .store
        .update_run(&state, stored.version, Some(&lease))
        .await
    {
        Ok(version) => Ok(Claim { state, version }),
        Err(StoreError::Conflict { .. }) => Err(ResumeError::Conflict {
            run_id: run_id.clone(),
        }),
        Err(error) => Err(map_load_error(error)),
    }
}

/// Applies the recovery rules to the calls a stopped driver left `resuming` or `running`.
fn settle_unfinished(agent: &AgentDefinition, state: &mut RunState) {
    let Some(step) = state.pending_step.as_mut() else {
        return;
    };
    for slot in &mut step.calls {
        let answer = match &slot.state {
            CallState::Resuming { resume_data, .. } => Some(resume_data.clone()),
            CallState::Running { .. } => None,
            _ => continue,
        };
        let idempotent = agent
            .tool(&slot.call.name)
            .is_some_and(|tool| tool.tool().idempotent());
        if idempotent {
            continue;
        }
        tracing::warn!(
            run_id = %state.run_id,
            tool_call_id = %slot.call.id,
            tool = %slot.call.name,
            "a tool call's outcome is unknown: its process stopped while it ran"
        );
        let mut result = ToolResult::error(&slot.call, OUTCOME_UNKNOWN);
        result.answer = answer;
        slot.state = CallState::Completed { result };
    }
}
