//! The agent loop: stream → step → tool calls → suspend → commit → resume → next step.
//!
//! Every chunk that announces stored state is emitted after the commit that stores it. The
//! loop commits before each model call (so results recorded by a step are never redone after a
//! crash), when it suspends, when it finishes and when it fails.

use std::sync::Arc;

use futures::StreamExt;
use futures::future::join_all;
use serde_json::Value;

use crate::agent::{AgentInner, RunOptions};
use crate::cancel::CancelHandle;
use crate::chunk::Chunk;
use crate::error::{AgentError, ResumeError};
use crate::ids::{RunId, ThreadId, ToolCallId};
use crate::message::{AssistantPart, FinishReason, Message, ToolCall, ToolResult, Usage};
use crate::model::{ModelError, ModelEvent, ModelRequest};
use crate::run::{CallSlot, CallState, PendingStep, RunFailure, RunState, RunStatus};
use crate::store::StoreError;
use crate::stream::AgentStream;
use crate::tool::{Execution, Suspension, ToolContext};

/// A run this process holds: its state and the store version its next commit must name.
pub(crate) struct Claim {
    state: RunState,
    version: u64,
}

struct ActiveRun {
    agent: Arc<AgentInner>,
    state: RunState,
    version: u64,
    cancel: CancelHandle,
}

impl ActiveRun {
    async fn commit(&mut self) -> Result<(), StoreError> {
        self.state.touch();
        self.version = self
            .agent
            .store
            .update_run(&self.state, self.version)
            .await?;
        Ok(())
    }

    /// Records the failure (best effort: the store may be what failed) and hands the error back.
    async fn fail(&mut self, error: AgentError) -> AgentError {
        self.state.status = RunStatus::Failed;
        self.state.error = Some(RunFailure {
            code: error.code().to_owned(),
            message: error.to_string(),
        });
        if let Err(commit_error) = self.commit().await {
            tracing::warn!(run_id = %self.state.run_id, %commit_error, "could not record the run's failure");
        }
        error
    }
}

/// Starts a new run.
pub(crate) fn start(agent: Arc<AgentInner>, input: String, options: RunOptions) -> AgentStream {
    let run_id = RunId::generate();
    let stream_run_id = run_id.clone();
    let cancel = CancelHandle::new();
    let run_cancel = cancel.clone();
    let stream = async_stream::stream! {
        let (thread_id, mut messages) = match options.thread_id {
            Some(thread_id) => match agent.store.thread_messages(&thread_id).await {
                Ok(history) => (thread_id, history),
                Err(error) => {
                    yield Err(AgentError::Store(error));
                    return;
                }
            },
            None => (ThreadId::generate(), Vec::new()),
        };
        let history_len = messages.len();
        messages.push(Message::user(input));
        let state = RunState::new(
            run_id,
            thread_id,
            options.resource_id,
            agent.id.clone(),
            agent.model_spec.clone(),
            messages,
            history_len,
        );
        let version = match agent.store.insert_run(&state).await {
            Ok(version) => version,
            Err(error) => {
                yield Err(AgentError::Store(error));
                return;
            }
        };
        yield Ok(Chunk::Start { agent_id: agent.id.clone() });
        let mut steps = std::pin::pin!(drive(ActiveRun { agent, state, version, cancel: run_cancel }));
        while let Some(item) = steps.next().await {
            yield item;
        }
    };
    AgentStream::new(stream_run_id, cancel, Box::pin(stream))
}

/// Streams a run that a resume or continue has claimed.
pub(crate) fn resume(agent: Arc<AgentInner>, claim: Claim) -> AgentStream {
    let run_id = claim.state.run_id.clone();
    let cancel = CancelHandle::new();
    let run = ActiveRun {
        agent,
        state: claim.state,
        version: claim.version,
        cancel: cancel.clone(),
    };
    AgentStream::new(run_id, cancel, Box::pin(drive(run)))
}

/// The loop proper, on a run whose state in memory equals the stored one.
fn drive(mut run: ActiveRun) -> impl futures::Stream<Item = Result<Chunk, AgentError>> + Send {
    async_stream::stream! {
        // 1. Settle a pending step: run the resume paths of claimed calls. Their results must be
        //    committed before the next model call unless every resume path is idempotent.
        let mut needs_commit = false;
        if let Some(mut step) = run.state.pending_step.take() {
            let run_id = run.state.run_id.clone();
            let resuming: Vec<usize> = step
                .calls
                .iter()
                .enumerate()
                .filter(|(_, slot)| matches!(slot.state, CallState::Resuming { .. }))
                .map(|(index, _)| index)
                .collect();
            needs_commit = resuming.iter().any(|&index| {
                run.agent.tool(&step.calls[index].call.name).is_none_or(|tool| !tool.tool().idempotent_resume())
            });
            let outcomes = join_all(resuming.iter().map(|&index| {
                let slot = &step.calls[index];
                let resume_data = match &slot.state {
                    CallState::Resuming { resume_data, .. } => Some(resume_data.clone()),
                    _ => None,
                };
                execute_call(&run.agent, &run_id, &slot.call, resume_data)
            }))
            .await;
            let mut resuspended = Vec::new();
            for (&index, outcome) in resuming.iter().zip(outcomes) {
                if let CallState::Completed { result } = &outcome {
                    yield Ok(Chunk::ToolResult { call: step.calls[index].call.clone(), result: result.clone() });
                } else {
                    resuspended.push(index);
                }
                step.calls[index].state = outcome;
            }
            if !step.is_complete() {
                run.state.status = RunStatus::Suspended;
                run.state.pending_step = Some(step);
                if let Err(error) = run.commit().await {
                    yield Err(AgentError::Store(error));
                    return;
                }
                for item in suspended_chunks(&run.state, Some(&resuspended)) {
                    yield Ok(item);
                }
                return;
            }
            let results = step.results().unwrap_or_default();
            run.state.messages.push(Message::Tool { results });
            yield Ok(Chunk::StepFinish { reason: FinishReason::ToolCalls, usage: Usage::default(), is_continued: true });
        }

        // 2. Model steps. A new run was just inserted; a claimed one was just committed.
        loop {
            if run.state.steps >= run.agent.max_steps {
                run.state.status = RunStatus::Completed;
                if let Err(error) = run.commit().await {
                    yield Err(AgentError::Store(error));
                    return;
                }
                yield Ok(Chunk::Finish { reason: FinishReason::MaxSteps, usage: run.state.usage, text: String::new() });
                return;
            }
            if needs_commit {
                run.state.status = RunStatus::Running;
                run.state.error = None;
                if let Err(error) = run.commit().await {
                    yield Err(AgentError::Store(error));
                    return;
                }
            }
            needs_commit = true;
            if run.cancel.is_cancelled() {
                yield Err(run.fail(AgentError::Model(ModelError::Cancelled)).await);
                return;
            }
            yield Ok(Chunk::StepStart { step: run.state.steps + 1 });

            let request = build_request(&run.agent, &run.state);
            let started = until_cancelled(&run.cancel, run.agent.model.stream(request)).await;
            let mut events = match started.unwrap_or(Err(ModelError::Cancelled)) {
                Ok(events) => events,
                Err(error) => {
                    yield Err(run.fail(AgentError::Model(error)).await);
                    return;
                }
            };
            let mut parts: Vec<AssistantPart> = Vec::new();
            let mut finish: Option<(FinishReason, Usage)> = None;
            let mut failure: Option<ModelError> = None;
            while let Some(event) = until_cancelled(&run.cancel, events.next()).await.unwrap_or(Some(Err(ModelError::Cancelled))) {
                match event {
                    Ok(ModelEvent::TextDelta(text)) => {
                        if text.is_empty() {
                            continue;
                        }
                        match parts.last_mut() {
                            Some(AssistantPart::Text { text: existing }) => existing.push_str(&text),
                            _ => parts.push(AssistantPart::Text { text: text.clone() }),
                        }
                        yield Ok(Chunk::TextDelta { text });
                    }
                    Ok(ModelEvent::ReasoningDelta(text)) => {
                        match parts.last_mut() {
                            Some(AssistantPart::Reasoning { text: existing, signature: None }) => existing.push_str(&text),
                            _ => parts.push(AssistantPart::Reasoning { text: text.clone(), signature: None }),
                        }
                        yield Ok(Chunk::ReasoningDelta { text });
                    }
                    Ok(ModelEvent::Reasoning { text, signature }) => match parts.last_mut() {
                        Some(AssistantPart::Reasoning { text: existing, signature: slot @ None }) if *existing == text || text.is_empty() => {
                            *slot = signature;
                        }
                        _ => parts.push(AssistantPart::Reasoning { text, signature }),
                    },
                    Ok(ModelEvent::ToolCallDelta { .. }) => {}
                    Ok(ModelEvent::ToolCall(mut call)) => {
                        // Answers are routed by id, so every call of a step needs its own: a
                        // missing or repeated id gets a fresh one.
                        let taken = parts.iter().any(|part| {
                            matches!(part, AssistantPart::ToolCall(existing) if existing.id == call.id)
                        });
                        if call.id.as_str().is_empty() || taken {
                            call.id = ToolCallId::new(format!("call_{}", uuid::Uuid::now_v7().simple()));
                        }
                        parts.push(AssistantPart::ToolCall(call));
                    }
                    Ok(ModelEvent::Finish { reason, usage }) => finish = Some((reason, usage)),
                    Err(error) => {
                        failure = Some(error);
                        break;
                    }
                }
            }
            drop(events);
            let (reason, usage) = match (failure, finish) {
                (Some(error), _) => {
                    yield Err(run.fail(AgentError::Model(error)).await);
                    return;
                }
                (None, None) => {
                    let error = ModelError::InvalidResponse {
                        model: run.agent.model.model_id().to_owned(),
                        message: "the response ended without a finish event".into(),
                    };
                    yield Err(run.fail(AgentError::Model(error)).await);
                    return;
                }
                (None, Some(finish)) => finish,
            };
            run.state.steps += 1;
            run.state.usage.add(usage);
            let calls: Vec<ToolCall> = parts
                .iter()
                .filter_map(|part| match part {
                    AssistantPart::ToolCall(call) => Some(call.clone()),
                    _ => None,
                })
                .collect();
            let text: String = parts
                .iter()
                .filter_map(|part| match part {
                    AssistantPart::Text { text } => Some(text.as_str()),
                    _ => None,
                })
                .collect();
            run.state.messages.push(Message::Assistant { parts });

            if calls.is_empty() {
                run.state.status = RunStatus::Completed;
                if let Err(error) = run.commit().await {
                    yield Err(AgentError::Store(error));
                    return;
                }
                let reason = if reason == FinishReason::ToolCalls { FinishReason::Stop } else { reason };
                yield Ok(Chunk::StepFinish { reason, usage, is_continued: false });
                yield Ok(Chunk::Finish { reason, usage: run.state.usage, text });
                return;
            }

            for call in &calls {
                yield Ok(Chunk::ToolCall { call: call.clone() });
            }
            let run_id = run.state.run_id.clone();
            let outcomes = join_all(calls.iter().map(|call| execute_call(&run.agent, &run_id, call, None))).await;
            let step = PendingStep {
                calls: calls
                    .into_iter()
                    .zip(outcomes)
                    .map(|(call, state)| CallSlot { call, state })
                    .collect(),
            };
            for slot in &step.calls {
                if let CallState::Completed { result } = &slot.state {
                    yield Ok(Chunk::ToolResult { call: slot.call.clone(), result: result.clone() });
                }
            }
            if !step.is_complete() {
                run.state.status = RunStatus::Suspended;
                run.state.pending_step = Some(step);
                if let Err(error) = run.commit().await {
                    yield Err(AgentError::Store(error));
                    return;
                }
                for item in suspended_chunks(&run.state, None) {
                    yield Ok(item);
                }
                return;
            }
            let results = step.results().unwrap_or_default();
            run.state.messages.push(Message::Tool { results });
            yield Ok(Chunk::StepFinish { reason: FinishReason::ToolCalls, usage, is_continued: true });
        }
    }
}

/// Runs `future` unless `cancel` fires first (`None` then).
async fn until_cancelled<F: std::future::Future>(
    cancel: &CancelHandle,
    future: F,
) -> Option<F::Output> {
    let future = std::pin::pin!(future);
    let cancelled = std::pin::pin!(cancel.cancelled());
    match futures::future::select(future, cancelled).await {
        futures::future::Either::Left((output, _)) => Some(output),
        futures::future::Either::Right(_) => None,
    }
}

/// `tool-call-suspended` chunks for the suspended calls (only those at `only` indices, if given).
fn suspended_chunks(state: &RunState, only: Option<&[usize]>) -> Vec<Chunk> {
    let Some(step) = &state.pending_step else {
        return Vec::new();
    };
    step.calls
        .iter()
        .enumerate()
        .filter(|(index, _)| only.is_none_or(|only| only.contains(index)))
        .filter_map(|(_, slot)| match &slot.state {
            CallState::Suspended { suspension } => Some(Chunk::ToolCallSuspended {
                call: slot.call.clone(),
                suspension: suspension.clone(),
            }),
            _ => None,
        })
        .collect()
}

fn build_request(agent: &AgentInner, state: &RunState) -> ModelRequest {
    let mut settings = agent.settings.clone();
    let first_step = settings.first_step_tool_choice.take();
    if let Some(first) = first_step.filter(|_| state.steps == 0) {
        settings.tool_choice = first;
    }
    settings.first_step_tool_choice = None;
    ModelRequest {
        system: agent.instructions.clone(),
        messages: state.messages.clone(),
        tools: agent.tool_definitions.clone(),
        settings,
    }
}

/// Runs one call (or its resume path, with `resume_data`) and says where it stands. Never fails:
/// every problem becomes an error result the model sees.
async fn execute_call(
    agent: &AgentInner,
    run_id: &RunId,
    call: &ToolCall,
    resume_data: Option<Value>,
) -> CallState {
    let Some(tool) = agent.tool(&call.name) else {
        let available: Vec<&str> = agent
            .tool_definitions
            .iter()
            .map(|tool| tool.name.as_str())
            .collect();
        let message = format!(
            "unknown tool {}; available tools: {}",
            call.name,
            available.join(", ")
        );
        return CallState::Completed {
            result: ToolResult::error(call, message),
        };
    };
    let args = match tool.check_args(&call.args) {
        Ok(args) => args,
        Err(error) => {
            return CallState::Completed {
                result: ToolResult::error(call, error.to_string()),
            };
        }
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
        Err(error) => CallState::Completed {
            result: ToolResult::error(call, error.to_string()),
        },
    }
}

fn map_load_error(error: StoreError) -> ResumeError {
    match error {
        StoreError::NotFound { run_id } => ResumeError::RunNotFound { run_id },
        other => ResumeError::Store(other),
    }
}

/// How many times a claim re-reads the run after losing a compare-and-swap to a commit that
/// did not touch the targeted call.
const CLAIM_ATTEMPTS: usize = 3;

/// Checks a resume against the stored run and claims the call (compare-and-swap). Nothing
/// changes unless it returns `Ok`.
pub(crate) async fn claim_resume(
    agent: &AgentInner,
    resume_data: Value,
    run_id: &RunId,
    tool_call_id: Option<&ToolCallId>,
) -> Result<Claim, ResumeError> {
    let mut lost_race = false;
    for _ in 0..CLAIM_ATTEMPTS {
        let stored = agent.store.load_run(run_id).await.map_err(map_load_error)?;
        let mut state = stored.state;
        if state.agent_id != agent.id {
            return Err(ResumeError::WrongAgent {
                run_id: run_id.clone(),
                expected: state.agent_id.to_string(),
                actual: agent.id.to_string(),
            });
        }
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
        let Some(step) = state.pending_step.as_mut() else {
            return Err(ResumeError::NotSuspended {
                run_id: run_id.clone(),
                status: state.status,
            });
        };
        let slot = &mut step.calls[index];
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
        let suspension: Suspension = suspension.clone();
        slot.state = CallState::Resuming {
            suspension,
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

/// Which slot of the pending step a resume targets.
fn pick_call(state: &RunState, tool_call_id: Option<&ToolCallId>) -> Result<usize, ResumeError> {
    let run_id = &state.run_id;
    let step = state.pending_step.as_ref();
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
    match tool_call_id {
        Some(id) => {
            let position =
                step.and_then(|step| step.calls.iter().position(|slot| &slot.call.id == id));
            match (position, step) {
                (Some(index), Some(step)) => match &step.calls[index].state {
                    CallState::Completed { .. } => Err(ResumeError::AlreadyAnswered {
                        run_id: run_id.clone(),
                        tool_call_id: id.clone(),
                    }),
                    CallState::Resuming { .. } => Err(ResumeError::Conflict {
                        run_id: run_id.clone(),
                    }),
                    CallState::Suspended { .. } if state.status != RunStatus::Suspended => {
                        Err(ResumeError::NotSuspended {
                            run_id: run_id.clone(),
                            status: state.status,
                        })
                    }
                    CallState::Suspended { .. } => Ok(index),
                },
                _ => {
                    let answered_earlier = state.messages.iter().any(|message| match message {
                        Message::Tool { results } => {
                            results.iter().any(|result| &result.tool_call_id == id)
                        }
                        _ => false,
                    });
                    if answered_earlier {
                        Err(ResumeError::AlreadyAnswered {
                            run_id: run_id.clone(),
                            tool_call_id: id.clone(),
                        })
                    } else if state.status != RunStatus::Suspended {
                        Err(ResumeError::NotSuspended {
                            run_id: run_id.clone(),
                            status: state.status,
                        })
                    } else {
                        Err(ResumeError::UnknownToolCall {
                            run_id: run_id.clone(),
                            tool_call_id: id.clone(),
                            pending: step.map(PendingStep::suspended_ids).unwrap_or_default(),
                        })
                    }
                }
            }
        }
        None => {
            if state.status != RunStatus::Suspended {
                return Err(ResumeError::NotSuspended {
                    run_id: run_id.clone(),
                    status: state.status,
                });
            }
            let pending = step.map(PendingStep::suspended_ids).unwrap_or_default();
            match pending.as_slice() {
                [only] => step
                    .and_then(|step| step.calls.iter().position(|slot| &slot.call.id == only))
                    .ok_or_else(|| ResumeError::NotSuspended {
                        run_id: run_id.clone(),
                        status: state.status,
                    }),
                [] => Err(ResumeError::NotSuspended {
                    run_id: run_id.clone(),
                    status: state.status,
                }),
                _ => Err(ResumeError::Ambiguous {
                    run_id: run_id.clone(),
                    pending,
                }),
            }
        }
    }
}

/// Claims a failed (or abandoned running) run so its unfinished step can be retried.
pub(crate) async fn claim_continue(
    agent: &AgentInner,
    run_id: &RunId,
) -> Result<Claim, ResumeError> {
    let stored = agent.store.load_run(run_id).await.map_err(map_load_error)?;
    let mut state = stored.state;
    if state.agent_id != agent.id {
        return Err(ResumeError::WrongAgent {
            run_id: run_id.clone(),
            expected: state.agent_id.to_string(),
            actual: agent.id.to_string(),
        });
    }
    if !matches!(state.status, RunStatus::Failed | RunStatus::Running) {
        return Err(ResumeError::NotSuspended {
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
