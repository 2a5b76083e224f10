//! Forking a run at a question: a new run (new id, new thread) whose conversation is the
//! original's up to the assistant message that asked, with that question waiting again exactly
//! as it was asked, claimed at once with another answer. The original is only read.
//!
//! The fork is built and its answer checked in memory, by the claim's own rules
//! ([`crate::run_loop::claim`]'s `apply`), before anything is written; then one insert stores it
//! already claimed (`running`, the question `resuming` with the new answer, under this agent's
//! lease), with the events of that insert: each call that waits in the fork is announced
//! (`question.raised`, `approval.requested`) once; the question forked is answered at once and
//! is not. A call of the step still awaiting approval starts in the fork with no votes: the
//! original's votes stay the original's. A refusal creates nothing. From there the fork streams as any claimed resume:
//! the question's resume path runs with the new answer, the other calls of its step keep the
//! results the original recorded (they do not run again), and the model goes on. Tools the
//! original ran after the question are not in the fork's conversation: they run again only if
//! the model calls them again.
//!
//! The fork's thread is new, so the original thread's turn is not taken; its messages start
//! with a copy of the history the original saw (its thread's earlier turns), followed by the
//! original's own messages up to the question (`historyThrough` is `null`): a later message in
//! the fork's thread sees all of it.

use serde_json::Value;

use crate::actor::Actor;
use crate::definition::AgentDefinition;
use crate::error::ResumeError;
use crate::ids::{RunId, RunRef, ThreadId, ToolCallId};
use crate::message::{AssistantPart, AuditAction, Message, ToolCall, ToolResult};
use crate::response::CallResponse;
use crate::run::{CallSlot, CallState, ForkedFrom, PendingStep, RunState, RunStatus};
use crate::run_loop::claim::{
    Claim, Resolution, apply, live_lease, load_own_run, map_store_error, resolve,
};
use crate::run_loop::{commit_insert, history_of};
use crate::store::StoredRun;
use crate::tool::Suspension;

/// Builds the fork of `run` at its question `tool_call_id`, answered with `answer` (recorded
/// as given by `actor`, the fork's starter), checks the answer as a resume would, and inserts the fork already claimed.
///
/// # Errors
/// Before anything is written: [`ResumeError::InvalidId`], [`ResumeError::RunNotFound`],
/// [`ResumeError::AmbiguousRun`], [`ResumeError::WrongAgent`], [`ResumeError::NotAQuestion`],
/// [`ResumeError::InProgress`] / [`ResumeError::Interrupted`] (another call of the question's
/// step is running in the original), [`ResumeError::InvalidAnswer`],
/// [`ResumeError::ToolUnavailable`], [`ResumeError::Store`].
pub(crate) async fn claim_fork(
    agent: &AgentDefinition,
    run: &RunRef,
    tool_call_id: &ToolCallId,
    answer: Value,
    actor: Option<Actor>,
) -> Result<Claim, ResumeError> {
    let key = resolve(agent.store.as_ref(), run).await?;
    let stored = load_own_run(agent, &key).await?;
    let step = fork_step(&stored, tool_call_id)?;
    let history = history_of(agent.store.as_ref(), &stored.state)
        .await
        .map_err(|error| map_store_error(&key, error))?;
    let mut fork = fork_state(&stored.state, tool_call_id, history, step);
    if actor.is_some() {
        fork.started_by.clone_from(&actor);
    }
    let items = vec![(
        Some(tool_call_id.clone()),
        Resolution::Respond(CallResponse::Answer(answer)),
    )];
    let (state, resolved, _) = apply(
        agent,
        &StoredRun::new(fork, 0, None),
        &items,
        actor.as_ref(),
    )?;
    let lease = agent.new_lease();
    // With its events: each call that waits in the fork is announced (the question forked is
    // answered at once, so it never waits there).
    let version = commit_insert(agent.store.as_ref(), &state, Some(&lease))
        .await
        .map_err(|error| map_store_error(&state.key(), error))?;
    tracing::info!(
        run_id = %state.run_id,
        forked_from = %key.run_id,
        %tool_call_id,
        "forked a run at a question"
    );
    Ok(Claim::new(state, version, resolved))
}

/// Where the question is in the original: the index of the assistant message that asked it,
/// and the fork's pending step (the question waiting again, the step's other calls as the
/// original left them).
struct ForkStep {
    message_index: usize,
    step: PendingStep,
}

/// The fork's step at `tool_call_id`, from the original's recorded results (a step that
/// completed) or its pending step (the question's step is the one it is on).
fn fork_step(stored: &StoredRun, tool_call_id: &ToolCallId) -> Result<ForkStep, ResumeError> {
    let state = &stored.state;
    let not_a_question = || ResumeError::NotAQuestion {
        run_id: state.run_id.clone(),
        tool_call_id: tool_call_id.clone(),
    };
    let (message_index, calls) = state
        .messages
        .iter()
        .enumerate()
        .find_map(|(index, message)| {
            let calls = calls_of(message);
            calls
                .iter()
                .any(|call| &call.id == tool_call_id)
                .then_some((index, calls))
        })
        .ok_or_else(not_a_question)?;
    let recorded = match state.messages.get(message_index + 1) {
        Some(Message::Tool { results }) => Some(results.as_slice()),
        _ => None,
    };
    let pending = match (recorded, &state.pending_step) {
        (None, Some(step)) if message_index + 1 == state.messages.len() => Some(step),
        _ => None,
    };
    let mut slots = Vec::with_capacity(calls.len());
    for call in calls {
        let slot = match (recorded, pending) {
            (Some(results), _) => recorded_slot(&call, results),
            (None, Some(step)) => pending_slot(stored, &call, step)?,
            (None, None) => None,
        };
        let Some(mut slot) = slot else {
            return Err(not_a_question());
        };
        if &call.id == tool_call_id {
            let question = question_of(&slot).ok_or_else(not_a_question)?;
            slot.state = CallState::Suspended {
                suspension: question,
                subagent: None,
            };
            slot.audit = Vec::new();
        }
        slots.push(slot);
    }
    Ok(ForkStep {
        message_index,
        step: PendingStep { calls: slots },
    })
}

/// The tool calls of an assistant message (none for another message).
fn calls_of(message: &Message) -> Vec<ToolCall> {
    match message {
        Message::Assistant { parts } => parts
            .iter()
            .filter_map(|part| match part {
                AssistantPart::ToolCall(call) => Some(call.clone()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// The slot of `call` in a step that completed: its recorded result.
fn recorded_slot(call: &ToolCall, results: &[ToolResult]) -> Option<CallSlot> {
    let result = results
        .iter()
        .find(|result| result.tool_call_id == call.id)?;
    Some(CallSlot {
        call: call.clone(),
        state: CallState::Completed {
            result: result.clone(),
        },
        audit: Vec::new(),
    })
}

/// The slot of `call` in the step the original is on: as it stands, except that an answer
/// claimed in the original waits again in the fork, and a call awaiting approval starts with
/// no votes (the original's approvers approved the original's run, not the fork: a quorum's
/// votes are the original's alone); a call whose tool is running in the original refuses the
/// fork (its outcome is the original's).
fn pending_slot(
    stored: &StoredRun,
    call: &ToolCall,
    step: &PendingStep,
) -> Result<Option<CallSlot>, ResumeError> {
    let Some(slot) = step.calls.iter().find(|slot| slot.call.id == call.id) else {
        return Ok(None);
    };
    let mut slot = slot.clone();
    match &slot.state {
        CallState::Resuming { suspension, .. } => {
            slot.state = CallState::Suspended {
                suspension: suspension.clone(),
                subagent: None,
            };
        }
        CallState::AwaitingApproval { .. } => {
            slot.audit
                .retain(|record| record.action != AuditAction::Approve);
        }
        CallState::Running { .. } => {
            let run_id = stored.state.run_id.clone();
            return Err(match live_lease(stored) {
                Some(lease) => ResumeError::InProgress {
                    run_id,
                    lease_expires_at_ms: lease.expires_at_ms,
                },
                None => ResumeError::Interrupted {
                    run_id,
                    tool_call_id: call.id.clone(),
                },
            });
        }
        _ => {}
    }
    Ok(Some(slot))
}

/// The question a call asked, as it was asked, without its deadline (the fork answers it now):
/// from its result ([`ToolResult::suspension`]) or from the slot that still waits.
fn question_of(slot: &CallSlot) -> Option<Suspension> {
    let question = match &slot.state {
        CallState::Completed { result } => result.suspension.as_deref().cloned(),
        other => other.suspension().cloned(),
    };
    question.map(|question| Suspension {
        expires_at_ms: None,
        ..question
    })
}

/// The fork's state, suspended at the question: a new run and thread of the original's
/// resource and agent, `history` then the original's messages up to the question's assistant
/// message, and `forkedFrom`.
fn fork_state(
    original: &RunState,
    tool_call_id: &ToolCallId,
    history: Vec<Message>,
    fork: ForkStep,
) -> RunState {
    let own = original.messages.iter().take(fork.message_index + 1);
    let steps = own.clone().filter(|message| message.is_assistant()).count();
    let mut messages = history;
    messages.extend(own.cloned());
    let mut state = RunState::new(
        RunId::generate(),
        ThreadId::generate(),
        original.resource_id.clone(),
        original.agent_id.clone(),
        original.model.clone(),
        messages,
        None,
    );
    state.status = RunStatus::Suspended;
    state.steps = u32::try_from(steps).unwrap_or(u32::MAX);
    state.pending_step = Some(fork.step);
    state.started_by.clone_from(&original.started_by);
    state.forked_from = Some(ForkedFrom::new(
        original.run_id.clone(),
        tool_call_id.clone(),
    ));
    state
}
