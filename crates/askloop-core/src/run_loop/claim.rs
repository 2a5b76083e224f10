//! Claims: a resume or a continue takes a stored run for this process with one compare-and-swap,
//! before any stream exists, any tool runs or any model is called. A refusal changes nothing.

use serde_json::Value;

use crate::definition::AgentDefinition;
use crate::error::ResumeError;
use crate::ids::{RunId, ToolCallId};
use crate::run::{CallState, PendingStep, RunState, RunStatus};
use crate::store::{StoreError, StoredRun};

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

/// Checks a resume against the stored run and claims the call (compare-and-swap): the slot
/// becomes `resuming` with the answer, the run `running`. Nothing changes unless it returns `Ok`.
pub(crate) async fn claim_resume(
    agent: &AgentDefinition,
    resume_data: Value,
    run_id: &RunId,
    tool_call_id: Option<&ToolCallId>,
) -> Result<Claim, ResumeError> {
    let mut lost_race = false;
    for _ in 0..CLAIM_ATTEMPTS {
        let stored = load_own_run(agent, run_id).await?;
        let mut state = stored.state;
        let index = match pick_call(&state, tool_call_id) {
            Ok(index) => index,
            // Whatever the second read says, a lost compare-and-swap means another resume won.
            Err(_) if lost_race => {
                return Err(ResumeError::Conflict {
                    run_id: run_id.clone(),
                });
            }
            Err(error) => return Err(error),
        };
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
        match agent.store.update_run(&state, stored.version).await {
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
/// only pending one.
fn pick_call(state: &RunState, tool_call_id: Option<&ToolCallId>) -> Result<usize, ResumeError> {
    let run_id = &state.run_id;
    let step = state.pending_step.as_ref();
    let not_suspended = || ResumeError::NotSuspended {
        run_id: run_id.clone(),
        status: state.status,
    };
    let being_resumed = step.is_some_and(|step| {
        step.calls
            .iter()
            .any(|slot| matches!(slot.state, CallState::Resuming { .. }))
    });
    if state.status == RunStatus::Running && being_resumed {
        return Err(ResumeError::Conflict {
            run_id: run_id.clone(),
        });
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
    let slot = step.and_then(|step| {
        step.calls
            .iter()
            .enumerate()
            .find(|(_, slot)| &slot.call.id == id)
    });
    match slot {
        Some((_, slot)) if matches!(slot.state, CallState::Completed { .. }) => {
            Err(ResumeError::AlreadyAnswered {
                run_id: run_id.clone(),
                tool_call_id: id.clone(),
            })
        }
        Some((_, slot)) if matches!(slot.state, CallState::Resuming { .. }) => {
            Err(ResumeError::Conflict {
                run_id: run_id.clone(),
            })
        }
        Some(_) if state.status != RunStatus::Suspended => Err(not_suspended()),
        Some((index, _)) => Ok(index),
        None if state.has_result_for(id) => Err(ResumeError::AlreadyAnswered {
            run_id: run_id.clone(),
            tool_call_id: id.clone(),
        }),
        None if state.status != RunStatus::Suspended => Err(not_suspended()),
        None => Err(ResumeError::UnknownToolCall {
            run_id: run_id.clone(),
            tool_call_id: id.clone(),
            pending: step.map(PendingStep::suspended_ids).unwrap_or_default(),
        }),
    }
}

/// Claims a failed (or abandoned running) run so its unfinished step can be retried.
pub(crate) async fn claim_continue(
    agent: &AgentDefinition,
    run_id: &RunId,
) -> Result<Claim, ResumeError> {
    let stored = load_own_run(agent, run_id).await?;
    let mut state = stored.state;
    if !matches!(state.status, RunStatus::Failed | RunStatus::Running) {
        return Err(ResumeError::NotContinuable {
            run_id: run_id.clone(),
            status: state.status,
        });
    }
    state.status = RunStatus::Running;
    state.error = None;
    state.touch();
    match agent.store.update_run(&state, stored.version).await {
        Ok(version) => Ok(Claim { state, version }),
        Err(StoreError::Conflict { .. }) => Err(ResumeError::Conflict {
            run_id: run_id.clone(),
        }),
        Err(error) => Err(map_load_error(error)),
    }
}
