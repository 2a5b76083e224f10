//! Running tool calls: every call of a new step, concurrently; or, on resume, the resume paths of
//! the calls a claim answered (and, after a takeover, the idempotent calls a stopped driver left
//! unfinished). A call never fails the run: every problem becomes an error result the model
//! sees.
//!
//! The journal: when a step has a call of a non-idempotent tool ([`crate::Tool::idempotent`]),
//! the step is committed with its calls `running` before any of them executes, and each such
//! call's outcome (result or suspension) is committed as soon as it exists. A crash then leaves
//! every side effect either recorded or visibly unfinished, never silently lost or repeated.

use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt;
use futures::channel::mpsc;
use futures::future::Either;
use futures::stream::FuturesUnordered;
use serde_json::Value;
use tracing::Instrument;

use crate::chunk::Chunk;
use crate::definition::AgentDefinition;
use crate::error::{AgentError, error_chain_text};
use crate::ids::RunId;
use crate::message::{ToolCall, ToolResult};
use crate::run::{CallSlot, CallState, PendingStep, RunStatus};
use crate::run_loop::ActiveRun;
use crate::run_loop::emit::Emitter;
use crate::time::now_ms;
use crate::tool::{CallScope, Execution, Suspension, ToolContext, ToolError};

/// How many sub-agent chunks wait for the stream before a sub-agent's child pauses.
const SUBAGENT_CHUNKS: usize = 16;

/// One call to run: its index in the step, its checked arguments, and on resume its answer and
/// the suspension that answer resolves.
type Work = (usize, Value, Option<Value>, Option<Suspension>);

/// Runs every call of a new step (concurrently) and emits `tool-call`s, then the `tool-result`s
/// of those that completed. Returns the step, with the suspended calls still pending.
///
/// # Errors
/// [`AgentError::Store`] when a journal commit fails (another process took the run over, or
/// the store is down): nothing more runs.
pub(super) async fn run_calls(
    run: &mut ActiveRun,
    calls: Vec<ToolCall>,
    out: &mut Emitter,
) -> Result<PendingStep, AgentError> {
    for call in &calls {
        out.emit(Chunk::ToolCall { call: call.clone() }).await;
    }
    let agent = Arc::clone(&run.agent);
    let over_budget = over_question_budget(run, &calls);
    let mut work = Vec::new();
    let mut slots = Vec::with_capacity(calls.len());
    for (index, (call, over)) in calls.into_iter().zip(over_budget).enumerate() {
        let state = match over {
            Some(budget) => CallState::Completed {
                result: ToolResult::error(
                    &call,
                    format!(
                        "the question budget of this run ({budget}) is spent: answer with what you know, without asking"
                    ),
                ),
            },
            None => match prepare(&agent, &call) {
                // Approval is decided here, by the agent and the tool, from the checked
                // arguments: nothing the model writes can approve a call.
                Ok(args) if agent.requires_approval(&call.name, &args) => {
                    CallState::AwaitingApproval {
                        expires_at_ms: agent.approval_deadline(&call.name),
                        quorum: agent.quorum_of(&call.name),
                    }
                }
                Ok(args) => {
                    work.push((index, args, None, None));
                    CallState::Running {
                        started_at_ms: now_ms(),
                    }
                }
                Err(result) => CallState::Completed { result: *result },
            },
        };
        slots.push(CallSlot {
            call,
            state,
            audit: Vec::new(),
        });
    }
    let mut step = PendingStep { calls: slots };
    let journaled = work
        .iter()
        .any(|(index, _, _, _)| !is_idempotent(&agent, &step.calls[*index].call));
    if journaled {
        record(run, &step).await?;
    }
    run_work(run, &agent, &mut step, work, journaled, out).await?;
    for slot in &step.calls {
        if let CallState::Completed { result } = &slot.state {
            out.emit(Chunk::ToolResult {
                call: slot.call.clone(),
                result: result.clone(),
            })
            .await;
        }
    }
    Ok(step)
}

/// Whether the call's tool runs again without harm (an unknown tool has nothing to repeat).
fn is_idempotent(agent: &AgentDefinition, call: &ToolCall) -> bool {
    agent
        .tool(&call.name)
        .is_none_or(|tool| tool.tool().idempotent())
}

/// Commits the step as it stands (the run stays `running`). On failure the step stays in the
/// state, so that recording the run's failure keeps what the journal knows.
async fn record(run: &mut ActiveRun, step: &PendingStep) -> Result<(), AgentError> {
    run.state.status = RunStatus::Running;
    run.state.pending_step = Some(step.clone());
    run.commit().await.map_err(AgentError::Store)?;
    run.state.pending_step = None;
    Ok(())
}

/// Executes `work` (call index, checked arguments, answer, the suspension it answers)
/// concurrently, putting each outcome
/// in its slot; with `journaled`, each outcome of a non-idempotent tool is committed as soon
/// as it exists.
async fn run_work(
    run: &mut ActiveRun,
    agent: &Arc<AgentDefinition>,
    step: &mut PendingStep,
    work: Vec<Work>,
    journaled: bool,
    out: &mut Emitter,
) -> Result<(), AgentError> {
    let run_id = run.state.run_id.clone();
    // Sub-agents' chunks, streamed while their calls run.
    let (sink, mut chunks) = mpsc::channel(SUBAGENT_CHUNKS);
    let mut running: FuturesUnordered<_> = work
        .into_iter()
        .map(|(index, args, answer, suspension)| {
            let call = step.calls[index].call.clone();
            let run_id = &run_id;
            let scope = Arc::new(CallScope {
                resource_id: run.state.resource_id.clone(),
                parent: run.state.parent.clone(),
                started_by: run.state.started_by.clone(),
                chunks: sink.clone(),
                wait: Mutex::new(None),
            });
            async move {
                let idempotent = is_idempotent(agent, &call);
                // Attribute names of the OpenTelemetry GenAI semantic conventions.
                let span = tracing::info_span!(
                    "tool call",
                    gen_ai.operation.name = "execute_tool",
                    gen_ai.tool.name = %call.name,
                    gen_ai.tool.call.id = %call.id,
                    resumed = answer.is_some(),
                    outcome = tracing::field::Empty,
                );
                let outcome = execute(agent, run_id, &call, args, answer, suspension, scope)
                    .instrument(span.clone())
                    .await;
                span.record("outcome", outcome_name(&outcome));
                (index, idempotent, outcome)
            }
        })
        .collect();
    drop(sink);
    let mut streaming = true;
    loop {
        let next = if streaming {
            match futures::future::select(running.next(), chunks.next()).await {
                Either::Left((next, _)) => next,
                Either::Right((Some(chunk), _)) => {
                    out.emit(chunk).await;
                    continue;
                }
                Either::Right((None, _)) => {
                    streaming = false;
                    continue;
                }
            }
        } else {
            running.next().await
        };
        let Some((index, idempotent, outcome)) = next else {
            break;
        };
        // A sub-agent's call needs no record of its outcome: its child run holds it, and after
        // a crash the call runs again and reads it there (the step's next commit records it).
        let covered = step
            .calls
            .get(index)
            .is_some_and(|slot| agent.subagent(&slot.call.name).is_some());
        put_outcome(step, index, outcome);
        if journaled && !idempotent && !covered {
            record(run, step).await?;
        }
    }
    // What a finished call sent last.
    while let Ok(chunk) = chunks.try_recv() {
        out.emit(chunk).await;
    }
    Ok(())
}

/// Puts a call's outcome in its slot. An approved call's result records its approval as its
/// answer, so a repeated approval is recognised as the same answer.
fn put_outcome(step: &mut PendingStep, index: usize, outcome: CallState) {
    if let Some(slot) = step.calls.get_mut(index) {
        slot.state = outcome;
        let approval = slot.approval_answer();
        if let CallState::Completed { result } = &mut slot.state
            && result.answer.is_none()
        {
            result.answer = approval;
        }
    }
}

/// A tool call's `outcome` span field: `result`, `error` or `suspended`.
fn outcome_name(state: &CallState) -> &'static str {
    match state {
        CallState::Completed { result } if result.is_error => "error",
        CallState::Completed { .. } => "result",
        CallState::Suspended { .. } => "suspended",
        _ => "pending",
    }
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
}

/// Runs the resume paths of the step's claimed calls (`resuming`, with their recorded answers),
/// the approved calls and, after a takeover, the idempotent calls left `running` (from the
/// start), concurrently; commits each outcome of a non-idempotent tool as soon as it exists.
/// Emits, for every call the claim touched (`resolved`: those it completed itself, declined or
/// expired), its `tool-call` again (so a client that starts listening here sees a complete
/// pair) and, once completed, its `tool-result`.
///
/// # Errors
/// [`AgentError::Store`] when a commit fails.
pub(super) async fn settle_claimed(
    run: &mut ActiveRun,
    mut step: PendingStep,
    resolved: &[usize],
    out: &mut Emitter,
) -> Result<Settled, AgentError> {
    let agent = Arc::clone(&run.agent);
    for index in resolved {
        if let Some(slot) = step.calls.get(*index)
            && let CallState::Completed { result } = &slot.state
        {
            let mut result = result.clone();
            result.audit.clone_from(&slot.audit);
            out.emit(Chunk::ToolCall {
                call: slot.call.clone(),
            })
            .await;
            out.emit(Chunk::ToolResult {
                call: slot.call.clone(),
                result,
            })
            .await;
        }
    }
    let mut work = Vec::new();
    for (index, slot) in step.calls.iter_mut().enumerate() {
        let (answer, suspension) = match &slot.state {
            CallState::Resuming {
                resume_data,
                suspension,
            } => (Some(resume_data.clone()), Some(suspension.clone())),
            CallState::Running { .. } => (None, None),
            _ => continue,
        };
        // An approved call runs with the arguments the person edited, if they did.
        match prepare(&agent, &slot.call_to_run()) {
            Ok(args) => work.push((index, args, answer, suspension)),
            Err(result) => slot.state = CallState::Completed { result: *result },
        }
    }
    let claimed: Vec<usize> = work.iter().map(|(index, _, _, _)| *index).collect();
    for index in &claimed {
        if let Some(slot) = step.calls.get(*index) {
            out.emit(Chunk::ToolCall {
                call: slot.call.clone(),
            })
            .await;
        }
    }
    run_work(run, &agent, &mut step, work, true, out).await?;
    for index in claimed {
        let Some(slot) = step.calls.get(index) else {
            continue;
        };
        if let CallState::Completed { result } = &slot.state {
            let mut result = result.clone();
            result.audit.clone_from(&slot.audit);
            out.emit(Chunk::ToolResult {
                call: slot.call.clone(),
                result,
            })
            .await;
        }
    }
    Ok(Settled { step })
}

/// Checks a call before it runs: its tool exists and its arguments fit the tool's schema.
/// Returns the arguments, or the error result the model gets instead (boxed: it is large).
fn prepare(agent: &AgentDefinition, call: &ToolCall) -> Result<Value, Box<ToolResult>> {
    let failed = |error: ToolError| Box::new(ToolResult::error(call, error_chain_text(&error)));
    let Some(tool) = agent.tool(&call.name) else {
        return Err(failed(ToolError::UnknownTool {
            tool: call.name.clone(),
            available: agent.tool_names(),
        }));
    };
    tool.check_args(&call.args).map_err(failed)
}

/// Runs one checked call (or its resume path, with `answer` to `suspension`) and says where it
/// stands. A result of a resumed call keeps its answer.
async fn execute(
    agent: &AgentDefinition,
    run_id: &RunId,
    call: &ToolCall,
    args: Value,
    answer: Option<Value>,
    suspension: Option<Suspension>,
    scope: Arc<CallScope>,
) -> CallState {
    // A resumed call's result keeps the question it answered.
    let question = suspension.clone().map(Box::new);
    let failed = |error: ToolError, answer: Option<Value>| {
        let mut result = ToolResult::error(call, error_chain_text(&error));
        result.answer = answer;
        result.suspension = question.clone();
        CallState::Completed { result }
    };
    let Some(tool) = agent.tool(&call.name) else {
        return failed(
            ToolError::UnknownTool {
                tool: call.name.clone(),
                available: agent.tool_names(),
            },
            answer,
        );
    };
    let mut context = ToolContext::in_run(run_id.clone(), call.id.clone(), answer.clone())
        .with_scope(Arc::clone(&scope));
    if let Some(suspension) = suspension {
        context = context.with_suspension(suspension);
    }
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
                    answer,
                    audit: Vec::new(),
                    suspension: question,
                },
            }
        }
        Ok(Execution::Suspend(mut suspension)) => {
            if suspension.resume_schema.is_none() {
                suspension.resume_schema = tool.tool().resume_schema();
            }
            // A sub-agent's call waits for its child's calls.
            let subagent = scope
                .wait
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take()
                .filter(|_| agent.subagent(&call.name).is_some())
                .map(Box::new);
            CallState::Suspended {
                suspension,
                subagent,
            }
        }
        Err(error) => failed(error, answer),
    }
}
