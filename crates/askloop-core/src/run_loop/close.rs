//! Closing a step and finishing a run: the one place a step becomes suspended (commit, then
//! announce) or complete (its results join the conversation), and a run completes.

use crate::chunk::Chunk;
use crate::error::AgentError;
use crate::message::{FinishReason, Message, Usage};
use crate::run::{PendingStep, RunState, RunStatus};
use crate::run_loop::ActiveRun;
use crate::run_loop::emit::Emitter;
use crate::run_loop::model_step::StepResponse;

/// How a step closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum StepEnd {
    /// Calls wait for answers: the run is suspended and committed, the stream ends.
    Suspended,
    /// Every call has its result: the loop goes on with the next model step.
    Continue,
}

/// Closes a step. If any call waits, the run is committed as suspended and one
/// `tool-call-suspended` (or `tool-call-approval`) is emitted per waiting call, every one of
/// them, also those an earlier stream announced, so each stream lists everything the run waits
/// for. Otherwise the results, in call order, join the conversation and `step-finish` is
/// emitted with the step's `usage`.
///
/// # Errors
/// [`AgentError::Store`] if the suspension cannot be committed (nothing is announced then).
pub(super) async fn close_step(
    run: &mut ActiveRun,
    step: PendingStep,
    usage: Usage,
    out: &mut Emitter,
) -> Result<StepEnd, AgentError> {
    let Some(results) = step.results() else {
        run.state.status = RunStatus::Suspended;
        run.state.pending_step = Some(step);
        run.commit().await?;
        for chunk in waiting_chunks(&run.state) {
            out.emit(chunk).await;
        }
        return Ok(StepEnd::Suspended);
    };
    run.state.messages.push(Message::Tool { results });
    out.emit(Chunk::StepFinish {
        reason: FinishReason::ToolCalls,
        usage,
        is_continued: true,
    })
    .await;
    Ok(StepEnd::Continue)
}

/// One `tool-call-suspended` or `tool-call-approval` chunk per call `state` waits for, in call
/// order (an approval's with the votes a quorum recorded so far; a sub-agent's call as each of
/// its child's waiting calls, [`RunState::pending_tool_calls`]).
pub(super) fn waiting_chunks(state: &RunState) -> Vec<Chunk> {
    state
        .pending_tool_calls()
        .into_iter()
        .map(Chunk::waiting)
        .collect()
}

/// The model answered without tool calls: the run completes (committed, its messages join its
/// thread), then `step-finish` and `finish`.
///
/// # Errors
/// [`AgentError::Store`] if the completion cannot be committed.
pub(super) async fn complete(
    run: &mut ActiveRun,
    response: StepResponse,
    out: &mut Emitter,
) -> Result<(), AgentError> {
    let reason = match response.reason {
        FinishReason::ToolCalls => FinishReason::Stop,
        other => other,
    };
    finish(run, reason).await?;
    out.emit(Chunk::StepFinish {
        reason,
        usage: response.usage,
        is_continued: false,
    })
    .await;
    out.emit(Chunk::Finish {
        reason,
        usage: run.state.usage,
        text: response.text,
    })
    .await;
    Ok(())
}

/// The run took its last allowed step and the model still called tools: it completes with
/// [`FinishReason::MaxSteps`] and no final text.
///
/// # Errors
/// [`AgentError::Store`] if the completion cannot be committed.
pub(super) async fn finish_at_step_limit(
    run: &mut ActiveRun,
    out: &mut Emitter,
) -> Result<(), AgentError> {
    finish(run, FinishReason::MaxSteps).await?;
    out.emit(Chunk::Finish {
        reason: FinishReason::MaxSteps,
        usage: run.state.usage,
        text: String::new(),
    })
    .await;
    Ok(())
}

async fn finish(run: &mut ActiveRun, reason: FinishReason) -> Result<(), AgentError> {
    run.state.status = RunStatus::Completed;
    run.state.finish_reason = Some(reason);
    run.state.error = None;
    run.commit().await?;
    Ok(())
}
