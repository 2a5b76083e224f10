//! Running tool calls: every call of a new step, concurrently; or, on resume, the resume paths of
//! the calls a claim answered. A call never fails the run: every problem becomes an error result
//! the model sees.

use futures::future::join_all;
use serde_json::Value;

use crate::chunk::Chunk;
use crate::definition::AgentDefinition;
use crate::error::error_chain_text;
use crate::ids::RunId;
use crate::message::{ToolCall, ToolResult};
use crate::run::{CallSlot, CallState, PendingStep};
use crate::run_loop::ActiveRun;
use crate::run_loop::emit::Emitter;
use crate::tool::{Execution, ToolContext, ToolError};

/// Runs every call of a new step (concurrently) and emits `tool-call`s, then the `tool-result`s
/// of those that completed. Returns the step, with the suspended calls still pending.
pub(super) async fn run_calls(
    run: &ActiveRun,
    calls: Vec<ToolCall>,
    out: &mut Emitter,
) -> PendingStep {
    for call in &calls {
        out.emit(Chunk::ToolCall { call: call.clone() }).await;
    }
    let run_id = &run.state.run_id;
    let over_budget = over_question_budget(run, &calls);
    let outcomes = join_all(calls.iter().zip(&over_budget).map(|(call, over)| async move {
        match over {
            Some(budget) => CallState::Completed {
                result: ToolResult::error(
                    call,
                    format!(
                        "the question budget of this run ({budget}) is spent: answer with what you know, without asking"
                    ),
                ),
            },
            None => execute_call(&run.agent, run_id, call, None).await,
        }
    }))
    .await;
    let step = PendingStep {
        calls: calls
            .into_iter()
            .zip(outcomes)
            .map(|(call, state)| CallSlot { call, state })
            .collect(),
    };
    for slot in &step.calls {
        if let CallState::Completed { result } = &slot.state {
            out.emit(Chunk::ToolResult {
                call: slot.call.clone(),
                result: result.clone(),
            })
            .await;
        }
    }
    step
}

/// For each call of a new step, the question budget it would exceed, if it asks the user and the
/// budget (counting the questions of earlier steps and of earlier calls of this step) is spent.
fn over_question_budget(run: &ActiveRun, calls: &[ToolCall]) -> Vec<Option<u32>> {
    let Some(budget) = run.agent.max_questions else {
        return vec![None; calls.len()];
    };
    let in_this_step = calls
        .iter()
        .filter(|call| run.agent.asks_user(&call.name))
        .count();
    let in_this_step = u32::try_from(in_this_step).unwrap_or(u32::MAX);
    let mut asked = run
        .agent
        .questions_asked(&run.state)
        .saturating_sub(in_this_step);
    calls
        .iter()
        .map(|call| {
            if !run.agent.asks_user(&call.name) {
                return None;
            }
            asked = asked.saturating_add(1);
            (asked > budget).then_some(budget)
        })
        .collect()
}

/// A claimed step after its answered calls' resume paths ran.
pub(super) struct Settled {
    /// The step, its answered calls now completed (or suspended again).
    pub(super) step: PendingStep,
    /// The calls that suspended again, by index: only these are announced anew.
    pub(super) resuspended: Vec<usize>,
    /// Whether a side-effecting resume path ran, so the results must be committed before the
    /// next model call (see `Tool::idempotent_resume`).
    pub(super) needs_commit: bool,
}

/// Runs the resume paths of the step's claimed calls (concurrently), with their recorded
/// answers, and emits the `tool-result`s of those that completed.
pub(super) async fn settle_claimed(
    run: &ActiveRun,
    mut step: PendingStep,
    out: &mut Emitter,
) -> Settled {
    let run_id = &run.state.run_id;
    let claimed: Vec<(usize, Value)> = step
        .calls
        .iter()
        .enumerate()
        .filter_map(|(index, slot)| match &slot.state {
            CallState::Resuming { resume_data, .. } => Some((index, resume_data.clone())),
            _ => None,
        })
        .collect();
    let needs_commit = claimed.iter().any(|(index, _)| {
        run.agent
            .tool(&step.calls[*index].call.name)
            .is_none_or(|tool| !tool.tool().idempotent_resume())
    });
    let outcomes = join_all(claimed.iter().map(|(index, resume_data)| {
        execute_call(
            &run.agent,
            run_id,
            &step.calls[*index].call,
            Some(resume_data.clone()),
        )
    }))
    .await;
    let mut resuspended = Vec::new();
    for ((index, _), outcome) in claimed.into_iter().zip(outcomes) {
        match &outcome {
            CallState::Completed { result } => {
                out.emit(Chunk::ToolResult {
                    call: step.calls[index].call.clone(),
                    result: result.clone(),
                })
                .await;
            }
            _ => resuspended.push(index),
        }
        step.calls[index].state = outcome;
    }
    Settled {
        step,
        resuspended,
        needs_commit,
    }
}

/// Runs one call (or its resume path, with `resume_data`) and says where it stands.
async fn execute_call(
    agent: &AgentDefinition,
    run_id: &RunId,
    call: &ToolCall,
    resume_data: Option<Value>,
) -> CallState {
    let failed = |error: ToolError| CallState::Completed {
        result: ToolResult::error(call, error_chain_text(&error)),
    };
    let Some(tool) = agent.tool(&call.name) else {
        return failed(ToolError::UnknownTool {
            tool: call.name.clone(),
            available: agent.tool_names(),
        });
    };
    let args = match tool.check_args(&call.args) {
        Ok(args) => args,
        Err(error) => return failed(error),
    };
    let context = ToolContext::in_run(run_id.clone(), call.id.clone(), resume_data);
    match tool.tool().execute_json(args, &context).await {
        Ok(Execution::Complete(output)) => {
            let is_error = output
                .get("isError")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            CallState::Completed {
                result: ToolResult {
                    tool_call_id: call.id.clone(),
                    tool_name: call.name.clone(),
                    result: output,
                    is_error,
                },
            }
        }
        Ok(Execution::Suspend(mut suspension)) => {
            if suspension.resume_schema.is_none() {
                suspension.resume_schema = tool.tool().resume_schema();
            }
            CallState::Suspended { suspension }
        }
        Err(error) => failed(error),
    }
}
