//! Claims: a resume or a continue takes a stored run for this process with one compare-and-swap,
//! before any stream exists, any tool runs or any model is called. A refusal changes nothing.
//!
//! A run that is `running` belongs to the process holding its lease: while the lease is live,
//! every claim is refused ([`ResumeError::InProgress`]); once it expired (the holder died), a
//! continue takes the run over, applying the journal's recovery rules in the same
//! compare-and-swap, and a resume says what happened ([`ResumeError::Interrupted`]).
//!
//! An approval moves its call to `running` in the claim's compare-and-swap: that is the call's
//! journal entry, so an approved side effect is never asked for again nor silently repeated after a
//! crash. A response to a call whose deadline passed is refused as `Expired`, whether or not a
//! sweep has resolved it yet, and so is one to a call a sweep expired (its `expire` audit record,
//! on the slot or on the result, tells it from an answered one).
//!
//! Who may decide is checked here too, for every front end: the call's approver policy
//! ([`crate::ApproverPolicy`]: roles, self-approval, quorum) against the responding
//! [`crate::Actor`] and the run's starter ([`ResumeError::NotPermitted`]). An approval that a
//! quorum still waits beyond is a vote: it is committed on the call's audit and the run stays
//! suspended, unclaimed (two voters at once: the compare-and-swap makes one re-read and land
//! its vote on top of the other's, so the quorum is reached exactly once).

use std::time::Duration;

use serde_json::{Value, json};

use crate::actor::Actor;
use crate::approvers::{ApproverPolicy, Decision, Verdict};
use crate::definition::AgentDefinition;
use crate::error::ResumeError;
use crate::event::EventBasis;
use crate::ids::{IdKind, RunId, RunKey, RunRef, ToolCallId};
use crate::message::{ArgsEdit, AuditAction, AuditRecord};
use crate::message::{ToolArgs, ToolCall, ToolResult};
use crate::response::CallResponse;
use crate::run::{
    CallSlot, CallState, PendingStep, RunState, RunStatus, SubagentWait, child_call_id,
    nested_call_id,
};
use crate::store::{Lease, ListedRun, RunFilter, RunStore, StoreError, StoredRun};
use crate::time::{lease_now_ms, now_ms};
use crate::tool::{ResumeRejection, ToolError};

/// The error result a call gets when the process running it stopped before its result was
/// recorded and its tool is not idempotent.
pub(crate) const OUTCOME_UNKNOWN: &str =
    "outcome unknown: the process stopped while this tool was running";

/// A run this process has claimed: its state and the store version its next commit must name.
pub(crate) struct Claim {
    state: RunState,
    version: u64,
    /// The calls the claim itself completed (declined, expired): the stream announces their
    /// results first.
    resolved: Vec<usize>,
}

impl Claim {
    /// A run just claimed at `version`, with the calls the claim completed itself.
    pub(super) fn new(state: RunState, version: u64, resolved: Vec<usize>) -> Self {
        Self {
            state,
            version,
            resolved,
        }
    }

    pub(super) fn into_parts(self) -> (RunState, u64, Vec<usize>) {
        (self.state, self.version, self.resolved)
    }
}

/// How many times a claim re-reads the run after losing a compare-and-swap to a commit that
/// did not touch the targeted call.
pub(super) const CLAIM_ATTEMPTS: usize = 3;

/// A store error of an operation on `run` as a [`ResumeError`].
pub(super) fn map_store_error(run: &RunKey, error: StoreError) -> ResumeError {
    match error {
        StoreError::NotFound { run_id } => ResumeError::RunNotFound { run_id },
        StoreError::ThreadBusy {
            thread_id,
            running_run_id,
        } => ResumeError::ThreadBusy {
            run_id: run.run_id.clone(),
            thread_id,
            running_run_id,
        },
        other => ResumeError::Store(other),
    }
}

/// The exact run a [`RunRef`] names: a key as given (its ids checked), a bare id resolved in
/// the store, which must hold exactly one run with it.
///
/// # Errors
/// [`ResumeError::InvalidId`], [`ResumeError::RunNotFound`], [`ResumeError::AmbiguousRun`],
/// [`ResumeError::Store`].
pub(crate) async fn resolve(store: &dyn RunStore, run: &RunRef) -> Result<RunKey, ResumeError> {
    IdKind::Run.check(run.run_id().as_str())?;
    let run_id = match run {
        RunRef::Key(key) => {
            if let Some(resource_id) = &key.resource_id {
                IdKind::Resource.check(resource_id.as_str())?;
            }
            return Ok(key.clone());
        }
        RunRef::Id(run_id) => run_id,
    };
    let mut keys = store
        .keys_of_run(run_id)
        .await
        .map_err(ResumeError::Store)?;
    match keys.len() {
        0 => Err(ResumeError::RunNotFound {
            run_id: run_id.clone(),
        }),
        1 => Ok(keys.remove(0)),
        _ => Err(ResumeError::AmbiguousRun {
            run_id: run_id.clone(),
            resources: keys.into_iter().map(|key| key.resource_id).collect(),
        }),
    }
}

/// Loads a run and checks that it belongs to `agent`.
pub(super) async fn load_own_run(
    agent: &AgentDefinition,
    run: &RunKey,
) -> Result<StoredRun, ResumeError> {
    let stored = agent
        .store
        .load_run(run)
        .await
        .map_err(|error| map_store_error(run, error))?;
    own_run(agent, &run.run_id, stored)
}

/// `stored` if it belongs to `agent`.
fn own_run(
    agent: &AgentDefinition,
    run_id: &RunId,
    stored: StoredRun,
) -> Result<StoredRun, ResumeError> {
    if stored.state.agent_id != agent.id {
        return Err(ResumeError::WrongAgent {
            run_id: run_id.clone(),
            expected: stored.state.agent_id.clone(),
            actual: agent.id.clone(),
        });
    }
    Ok(stored)
}

/// The live lease of a running run, if a driver holds one now (for the sub-agent's tool).
pub(crate) fn live_lease_of(stored: &StoredRun) -> Option<&Lease> {
    live_lease(stored)
}

/// The live lease of a running run, if another driver holds one now.
pub(super) fn live_lease(stored: &StoredRun) -> Option<&Lease> {
    if stored.state.status != RunStatus::Running {
        return None;
    }
    stored.lease.as_ref().filter(|lease| lease.is_live())
}

fn in_progress(run_id: &RunId, lease: &Lease) -> ResumeError {
    ResumeError::InProgress {
        run_id: run_id.clone(),
        lease_expires_at_ms: lease.expires_at_ms,
    }
}

/// How long a claim waits while another process settles a claim on a *different* call of the
/// same step (the run is `running` under its live lease, the targeted call still waits): that
/// process re-suspends the run in a moment, and then this claim lands too.
const BUSY_WAIT: Duration = Duration::from_secs(10);

/// What a claim does to one waiting call.
#[derive(Clone, Debug)]
pub(crate) enum Resolution {
    /// A person's response: an answer, an approval or a decline.
    Respond(CallResponse),
    /// The call's deadline passed (applied by a sweep).
    Expire,
    /// Responses to the waiting calls of the child run under a sub-agent's call, already
    /// checked against the child ([`route`]): the sub-agent's call resumes with this
    /// envelope (`subagent.rs`). Never built from outside.
    Nested(Value),
}

/// Checks responses against the stored run and claims their calls in one compare-and-swap:
/// an answered call becomes `resuming` with its answer, an approved one `running`, a declined
/// or expired one `completed` with its error result; the run becomes `running` under this
/// agent's lease. Every response is checked before anything changes: one invalid response
/// refuses them all. Nothing changes unless it returns `Ok`.
///
/// `loaded` is the run as the caller just read it: the first attempt starts from it instead of
/// reading the store. Anything that copy alone would decide (a refusal, a lost
/// compare-and-swap, a busy run) is decided again on a fresh read, so the outcome is the one a
/// fresh read gives; a copy of another run is ignored.
pub(crate) async fn claim_resume(
    agent: &AgentDefinition,
    run: &RunRef,
    items: Vec<(Option<ToolCallId>, Resolution)>,
    actor: Option<Actor>,
    loaded: Option<StoredRun>,
) -> Result<Claim, ResumeError> {
    claim_resume_as(agent, run, items, actor, loaded, false).await
}

/// [`claim_resume`] of a sub-agent's child run, by its parent's call (`subagent.rs`): the one
/// way a child run is claimed with answers.
pub(crate) async fn claim_resume_child(
    agent: &AgentDefinition,
    run: &RunRef,
    items: Vec<(Option<ToolCallId>, Resolution)>,
    actor: Option<Actor>,
    loaded: Option<StoredRun>,
) -> Result<Claim, ResumeError> {
    claim_resume_as(agent, run, items, actor, loaded, true).await
}

/// Refuses to claim a sub-agent's child run from outside its tree (`by_parent` false).
pub(super) fn refuse_child(stored: &StoredRun, by_parent: bool) -> Result<(), ResumeError> {
    match &stored.state.parent {
        Some(parent) if !by_parent => Err(ResumeError::ChildRun {
            run_id: stored.state.run_id.clone(),
            root_run_id: parent.root_run_id.clone(),
        }),
        _ => Ok(()),
    }
}

async fn claim_resume_as(
    agent: &AgentDefinition,
    run: &RunRef,
    items: Vec<(Option<ToolCallId>, Resolution)>,
    actor: Option<Actor>,
    loaded: Option<StoredRun>,
    by_parent: bool,
) -> Result<Claim, ResumeError> {
    check_items(run.run_id(), &items)?;
    let key = resolve(agent.store.as_ref(), run).await?;
    let run_id = &key.run_id;
    let mut loaded = loaded.filter(|stored| stored.state.is(&key));
    let mut lost_race = false;
    let mut attempts = 0;
    let busy_until = tokio::time::Instant::now() + BUSY_WAIT;
    let mut pause = Duration::from_millis(2);
    loop {
        let (stored, preloaded) = match loaded.take() {
            Some(stored) => (own_run(agent, run_id, stored)?, true),
            None => (load_own_run(agent, &key).await?, false),
        };
        refuse_child(&stored, by_parent)?;
        if busy_with_another_call(&stored, &items) && tokio::time::Instant::now() < busy_until {
            if !preloaded {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(100));
            }
            continue;
        }
        let applied = match route(agent, &stored, &items, actor.as_ref()).await {
            Ok(routed) => apply(agent, &stored, &routed, actor.as_ref()),
            Err(error) => Err(error),
        };
        let (state, resolved, votes_only) = match applied {
            Ok(applied) => applied,
            Err(error) => match refusal(error, preloaded, lost_race, run_id) {
                Some(error) => return Err(error),
                None => continue,
            },
        };
        // Votes alone (approvals a quorum still waits beyond) leave the run suspended: it is
        // not claimed, only its calls' audit grows.
        let lease = (!votes_only).then(|| agent.new_lease());
        match super::commit_update(
            agent.store.as_ref(),
            &EventBasis::of(&stored.state),
            &state,
            stored.version,
            lease.as_ref(),
        )
        .await
        {
            Ok(version) => {
                return Ok(Claim {
                    state,
                    version,
                    resolved,
                });
            }
            // The caller's copy was stale: not a race lost to another resume.
            Err(StoreError::Conflict { .. }) if preloaded => {}
            Err(StoreError::Conflict { .. }) => {
                lost_race = true;
                attempts += 1;
                if attempts >= CLAIM_ATTEMPTS {
                    return Err(ResumeError::Conflict {
                        run_id: run_id.clone(),
                    });
                }
            }
            Err(error) => return Err(map_store_error(&key, error)),
        }
    }
}

/// One batch of a claim: each response with the call it names (`None`: the only waiting one).
type Items = Vec<(Option<ToolCallId>, Resolution)>;

/// The batch with every response to a sub-agent's child's waiting call (named
/// `PARENT_CALL~CHILD_CALL`, or unnamed when it is the run's only waiting call) turned into one
/// [`Resolution::Nested`] per sub-agent call, after checking the responses against the child
/// run as its own claim would (answers, deadlines, approver policies; deeper children the same
/// way): a refusal there refuses the batch, and nothing changes anywhere.
///
/// # Errors
/// Whatever the child's claim would refuse with, [`ResumeError::ToolUnavailable`] for a
/// sub-agent the agent no longer has, [`ResumeError::Store`].
async fn route(
    agent: &AgentDefinition,
    stored: &StoredRun,
    items: &[(Option<ToolCallId>, Resolution)],
    actor: Option<&Actor>,
) -> Result<Items, ResumeError> {
    let Some(step) = stored.state.pending_step.as_ref() else {
        return Ok(items.to_vec());
    };
    if agent.subagents.is_empty() {
        return Ok(items.to_vec());
    }
    let mut routed = Vec::with_capacity(items.len());
    let mut nested: Vec<(usize, Items)> = Vec::new();
    for (id, resolution) in items {
        let target = match id {
            Some(id) => nested_target(step, id),
            None => only_nested(&stored.state, step),
        };
        match target {
            Some((index, child_call)) if !matches!(resolution, Resolution::Nested(_)) => {
                let item = (Some(child_call), resolution.clone());
                match nested.iter_mut().find(|(at, _)| *at == index) {
                    Some((_, group)) => group.push(item),
                    None => nested.push((index, vec![item])),
                }
            }
            _ => routed.push((id.clone(), resolution.clone())),
        }
    }
    for (index, child_items) in nested {
        let Some(slot) = step.calls.get(index) else {
            continue;
        };
        let CallState::Suspended {
            subagent: Some(wait),
            ..
        } = &slot.state
        else {
            continue;
        };
        let Some(child) = agent.subagent(&slot.call.name) else {
            return Err(ResumeError::ToolUnavailable {
                run_id: stored.state.run_id.clone(),
                tool_name: slot.call.name.clone(),
            });
        };
        let key = RunKey::new(stored.state.resource_id.clone(), wait.run_id.clone());
        let child_stored = load_own_run(child, &key).await?;
        let child_routed = Box::pin(route(child, &child_stored, &child_items, actor)).await?;
        apply(child, &child_stored, &child_routed, actor)?;
        let envelope = super::Envelope::new(&child_items, actor);
        let envelope = serde_json::to_value(envelope).map_err(|error| {
            ResumeError::Store(StoreError::Corrupt {
                run_id: stored.state.run_id.clone(),
                source: error,
            })
        })?;
        routed.push((Some(slot.call.id.clone()), Resolution::Nested(envelope)));
    }
    Ok(routed)
}

/// The sub-agent call of `step` whose child waits for the call `id` names
/// (`PARENT_CALL~CHILD_CALL`), and the child's call id.
fn nested_target(step: &PendingStep, id: &ToolCallId) -> Option<(usize, ToolCallId)> {
    step.calls.iter().enumerate().find_map(|(index, slot)| {
        let CallState::Suspended {
            subagent: Some(_), ..
        } = &slot.state
        else {
            return None;
        };
        let rest = child_call_id(id.as_str(), slot.call.id.as_str())?;
        Some((index, ToolCallId::new(rest)))
    })
}

/// The run's only waiting call, when a sub-agent's child waits for it (an unnamed response
/// answers it).
fn only_nested(state: &RunState, step: &PendingStep) -> Option<(usize, ToolCallId)> {
    let pending = state.pending_tool_calls();
    match pending.as_slice() {
        [only] if only.subagent.is_some() => nested_target(step, &only.tool_call_id),
        _ => None,
    }
}

/// Whether the id a response names is the call `slot_id` or one its sub-agent's child waits
/// for.
fn names_slot(id: &ToolCallId, slot_id: &ToolCallId) -> bool {
    id == slot_id || child_call_id(id.as_str(), slot_id.as_str()).is_some()
}

/// The ids under which a sub-agent's call `slot_id` announces its child's waiting calls.
fn nested_ids(slot_id: &ToolCallId, wait: &SubagentWait) -> String {
    wait.pending
        .iter()
        .map(|pending| nested_call_id(slot_id.as_str(), pending.tool_call_id.as_str()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What a refusal of an attempt's responses means: `None` to decide again on a fresh read (the
/// caller's copy, `preloaded`, may be stale), else the error to return — after a lost
/// compare-and-swap (`lost_race`) a [`ResumeError::Conflict`], unless the fresh read shows this
/// very answer recorded (then the resume is idempotent) or says who may not decide.
fn refusal(
    error: ResumeError,
    preloaded: bool,
    lost_race: bool,
    run_id: &RunId,
) -> Option<ResumeError> {
    match error {
        _ if preloaded => None,
        error @ ResumeError::NotPermitted { .. } => Some(error),
        error @ ResumeError::AlreadyAnswered {
            same_answer: true, ..
        } if lost_race => Some(error),
        _ if lost_race => Some(ResumeError::Conflict {
            run_id: run_id.clone(),
        }),
        error => Some(error),
    }
}

/// Refuses a batch that names a call twice, or leaves a call unnamed beside others.
fn check_items(
    run_id: &RunId,
    items: &[(Option<ToolCallId>, Resolution)],
) -> Result<(), ResumeError> {
    if items.is_empty() {
        return Err(ResumeError::EmptyBatch {
            run_id: run_id.clone(),
        });
    }
    if items.len() > 1 && items.iter().any(|(id, _)| id.is_none()) {
        return Err(ResumeError::UnnamedInBatch {
            run_id: run_id.clone(),
        });
    }
    let mut seen = std::collections::HashSet::new();
    for (id, _) in items {
        if let Some(id) = id
            && !seen.insert(id)
        {
            return Err(ResumeError::DuplicateToolCall {
                run_id: run_id.clone(),
                tool_call_id: id.clone(),
            });
        }
    }
    Ok(())
}

/// Whether another process is settling a claim on other calls of this run's step while every
/// call named here still waits: the run will be suspended again in a moment.
fn busy_with_another_call(stored: &StoredRun, items: &[(Option<ToolCallId>, Resolution)]) -> bool {
    let state = &stored.state;
    if state.status != RunStatus::Running || live_lease(stored).is_none() {
        return false;
    }
    let Some(step) = &state.pending_step else {
        return false;
    };
    let in_flight = step.calls.iter().any(|slot| {
        matches!(
            slot.state,
            CallState::Resuming { .. } | CallState::Running { .. }
        )
    });
    in_flight
        && items.iter().all(|(id, _)| {
            id.as_ref().is_some_and(|id| {
                step.calls
                    .iter()
                    .any(|slot| names_slot(id, &slot.call.id) && slot.state.is_waiting())
            })
        })
}

/// The canonical answer of a resolution, as recorded with the call's result: the answer
/// itself, or `{"approved": …, "reason"?: …}`; `None` for an expiry.
fn recorded_answer(resolution: &Resolution) -> Option<Value> {
    match resolution {
        Resolution::Respond(CallResponse::Answer(answer)) => Some(answer.clone()),
        Resolution::Respond(CallResponse::Approve) => Some(json!({"approved": true})),
        Resolution::Respond(CallResponse::ApproveWith { args }) => {
            Some(json!({"approved": true, "args": args}))
        }
        Resolution::Respond(CallResponse::Decline { reason: None }) => {
            Some(json!({"approved": false}))
        }
        Resolution::Respond(CallResponse::Decline {
            reason: Some(reason),
        }) => Some(json!({"approved": false, "reason": reason})),
        Resolution::Expire => None,
        Resolution::Nested(envelope) => Some(envelope.clone()),
    }
}

/// The state after applying every resolution to the stored run by `actor`, the indexes of the
/// calls it completed (declined, expired), and whether every resolution was a vote of a quorum
/// that still waits for more (then the run stays suspended); or why nothing may change.
pub(super) fn apply(
    agent: &AgentDefinition,
    stored: &StoredRun,
    items: &[(Option<ToolCallId>, Resolution)],
    actor: Option<&Actor>,
) -> Result<(RunState, Vec<usize>, bool), ResumeError> {
    let run_id = &stored.state.run_id;
    let starter = stored.state.started_by.as_ref();
    let mut state = stored.state.clone();
    let mut resolved = Vec::new();
    let mut votes_only = true;
    for (tool_call_id, resolution) in items {
        let answer = recorded_answer(resolution).unwrap_or(Value::Null);
        let index = pick_call(stored, tool_call_id.as_ref(), &answer)?;
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
        let by = Party { actor, starter };
        let (action, edit, vote) = resolve_call(agent, run_id, slot, resolution, by)?;
        votes_only &= vote;
        if matches!(slot.state, CallState::Completed { .. }) {
            resolved.push(index);
        }
        let record = AuditRecord::by_actor(action, actor);
        slot.audit.push(match edit {
            Some(edit) => record.with_args_edit(edit),
            None => record,
        });
    }
    if !votes_only {
        state.status = RunStatus::Running;
    }
    state.touch();
    Ok((state, resolved, votes_only))
}

/// Who decides on a call, and who started its run.
#[derive(Clone, Copy)]
struct Party<'a> {
    actor: Option<&'a Actor>,
    starter: Option<&'a Actor>,
}

/// Checks `decision` on the call in `slot` against the policy of its tool (`policy`, with the
/// quorum that counts) by `party`: what it may do, or [`ResumeError::NotPermitted`].
fn permit(
    run_id: &RunId,
    slot: &CallSlot,
    policy: &ApproverPolicy,
    quorum: u32,
    party: Party<'_>,
    decision: &Decision<'_>,
) -> Result<Verdict, ResumeError> {
    let model_args = slot.call.args.to_value();
    crate::approvers::check(
        policy,
        quorum,
        party.actor,
        party.starter,
        decision,
        &slot.audit,
        &model_args,
    )
    .map_err(|reason| {
        tracing::info!(
            %run_id,
            tool_call_id = %slot.call.id,
            actor = party.actor.map(|actor| actor.id.as_str()),
            reason = reason.code(),
            "a decision was refused by the call's approver policy"
        );
        ResumeError::NotPermitted {
            run_id: run_id.clone(),
            tool_call_id: slot.call.id.clone(),
            tool_name: slot.call.name.clone(),
            actor: party.actor.map(|actor| actor.id.clone()),
            reason: Box::new(reason),
        }
    })
}

/// Applies one resolution to the waiting call in `slot` of run `run_id`: an answer claims it
/// (`resuming`), an approval starts it (`running`), a decline or an expiry completes it with an
/// error result. Returns what the audit records (the action, and the arguments a person edited
/// when approving) and whether it was a vote of a quorum that still waits (the call keeps
/// waiting); refuses a response past the call's deadline, one that does not fit what the call
/// waits for, and one the call's approver policy does not permit `party`.
fn resolve_call(
    agent: &AgentDefinition,
    run_id: &RunId,
    slot: &mut CallSlot,
    resolution: &Resolution,
    party: Party<'_>,
) -> Result<(AuditAction, Option<ArgsEdit>, bool), ResumeError> {
    let invalid = |rejection: ResumeRejection| ResumeError::InvalidAnswer {
        run_id: run_id.clone(),
        tool_call_id: slot.call.id.clone(),
        tool_name: slot.call.name.clone(),
        rejection,
    };
    refuse_past_deadline(run_id, slot, resolution)?;
    if let Some(next) = nested_call_state(run_id, slot, resolution) {
        slot.state = next.map_err(|rejection| match rejection {
            Some(rejection) => invalid(rejection),
            None => ResumeError::Conflict {
                run_id: run_id.clone(),
            },
        })?;
        return Ok((AuditAction::Answer, None, false));
    }
    let (next, action) = match (&slot.state, resolution) {
        // (A sub-agent's call was decided above: this one waits for its own answer.)
        (
            CallState::Suspended { suspension, .. },
            Resolution::Respond(CallResponse::Answer(answer)),
        ) => {
            let Some(tool) = agent.tool(&slot.call.name) else {
                return Err(ResumeError::ToolUnavailable {
                    run_id: run_id.clone(),
                    tool_name: slot.call.name.clone(),
                });
            };
            tool.tool()
                .validate_resume(suspension, answer)
                .map_err(invalid)?;
            if let Some(policy) = agent.tool_approvers(&slot.call.name) {
                permit(run_id, slot, policy, 1, party, &Decision::Answer)?;
            }
            let resuming = CallState::Resuming {
                suspension: suspension.clone(),
                resume_data: answer.clone(),
            };
            (resuming, (AuditAction::Answer, None))
        }
        (CallState::Suspended { .. }, Resolution::Respond(_)) => {
            return Err(invalid(ResumeRejection {
                expected: "an answer: this call asks a question, it does not wait for an approval"
                    .into(),
                problems: Vec::new(),
            }));
        }
        (
            state @ (CallState::Suspended { .. } | CallState::AwaitingApproval { .. }),
            Resolution::Expire,
        ) => (
            expire(state, &slot.call).map_err(invalid)?,
            (AuditAction::Expire, None),
        ),
        (CallState::AwaitingApproval { quorum, .. }, Resolution::Respond(response)) => {
            let approval = resolve_approval(agent, run_id, slot, *quorum, response, party)?;
            match approval {
                Approval::Vote { edit } => return Ok((AuditAction::Approve, edit, true)),
                Approval::Decided { decision, edit } => {
                    let (next, action) = decide(&slot.call, &decision, resolution);
                    (next, (action, edit))
                }
            }
        }
        _ => {
            return Err(ResumeError::Conflict {
                run_id: run_id.clone(),
            });
        }
    };
    slot.state = next;
    Ok((action.0, action.1, false))
}

/// Refuses a response to a call whose deadline passed, whether or not a sweep has given the
/// call its result yet (the sweep will; this refusal changes nothing).
fn refuse_past_deadline(
    run_id: &RunId,
    slot: &CallSlot,
    resolution: &Resolution,
) -> Result<(), ResumeError> {
    if let Resolution::Respond(_) = resolution
        && let Some(at) = deadline_of(&slot.state).filter(|at| *at <= lease_now_ms())
    {
        return Err(ResumeError::Expired {
            run_id: run_id.clone(),
            tool_call_id: slot.call.id.clone(),
            expired_at_ms: at,
        });
    }
    Ok(())
}

/// What a response does to a sub-agent's call (one that waits for its child's calls), or a
/// nested resolution to any call: the envelope claims the call (`resuming`); a direct response
/// is refused, saying which ids to answer (`Some` rejection); a nested resolution for a call
/// that waits for no child is a stale read (`None`: a conflict). `None` for every other case.
fn nested_call_state(
    run_id: &RunId,
    slot: &CallSlot,
    resolution: &Resolution,
) -> Option<Result<CallState, Option<ResumeRejection>>> {
    match (&slot.state, resolution) {
        (
            CallState::Suspended {
                suspension,
                subagent: Some(_),
            },
            Resolution::Nested(envelope),
        ) => Some(Ok(CallState::Resuming {
            suspension: suspension.clone(),
            resume_data: envelope.clone(),
        })),
        (
            CallState::Suspended {
                subagent: Some(wait),
                ..
            },
            Resolution::Respond(_),
        ) => Some(Err(Some(ResumeRejection {
            expected: format!(
                "answers to the sub-agent's waiting calls, by their ids: {}",
                nested_ids(&slot.call.id, wait)
            ),
            problems: Vec::new(),
        }))),
        (_, Resolution::Nested(_)) => {
            tracing::debug!(%run_id, tool_call_id = %slot.call.id, "a nested answer found no sub-agent call waiting");
            Some(Err(None))
        }
        _ => None,
    }
}

/// What an approval or decline of a call awaiting approval comes to.
enum Approval {
    /// A vote of a quorum that still waits: the call keeps waiting.
    Vote {
        /// The arguments the voter edited, if any.
        edit: Option<ArgsEdit>,
    },
    /// The decision that ends the wait (the last vote of a quorum, a lone approval, a decline).
    Decided {
        /// The response as a decision ([`approval_of`]).
        decision: CallResponse,
        /// The arguments a person edited, if any.
        edit: Option<ArgsEdit>,
    },
}

/// Checks `response` to the call in `slot`, which awaits approval with the quorum recorded when
/// it started waiting (`recorded_quorum`): its form, edited arguments against the tool's input
/// schema, and the call's approver policy for `party`.
fn resolve_approval(
    agent: &AgentDefinition,
    run_id: &RunId,
    slot: &CallSlot,
    recorded_quorum: Option<u32>,
    response: &CallResponse,
    party: Party<'_>,
) -> Result<Approval, ResumeError> {
    let decision = approval_of(response).map_err(|rejection| ResumeError::InvalidAnswer {
        run_id: run_id.clone(),
        tool_call_id: slot.call.id.clone(),
        tool_name: slot.call.name.clone(),
        rejection,
    })?;
    let edit = match &decision {
        CallResponse::ApproveWith { args } => checked_edit(agent, run_id, &slot.call, args)?,
        _ => None,
    };
    let policy = agent
        .approvers(&slot.call.name)
        .cloned()
        .unwrap_or_default();
    // The quorum recorded with the call when it started waiting counts, unless the agent's is
    // larger now.
    let needed = policy.quorum.max(recorded_quorum.unwrap_or(1));
    let model_args = slot.call.args.to_value();
    let checked = match &decision {
        CallResponse::Decline { .. } => Decision::Decline,
        _ => Decision::Approve {
            args: edit.as_ref().map_or(&model_args, |edit| &edit.edited),
        },
    };
    if let Verdict::Vote { recorded, quorum } =
        permit(run_id, slot, &policy, needed, party, &checked)?
    {
        tracing::info!(
            %run_id,
            tool_call_id = %slot.call.id,
            recorded,
            quorum,
            "an approval was recorded; the call waits for more"
        );
        return Ok(Approval::Vote { edit });
    }
    Ok(Approval::Decided { decision, edit })
}

/// The edit of `call`'s arguments into `args`, which a person approved (run `run_id`): `None`
/// when they equal the model's (a plain approval). Checked against the tool's input schema
/// before anything changes.
///
/// # Errors
/// [`ResumeError::InvalidArgs`] with every problem; [`ResumeError::ToolUnavailable`].
fn checked_edit(
    agent: &AgentDefinition,
    run_id: &RunId,
    call: &ToolCall,
    args: &Value,
) -> Result<Option<ArgsEdit>, ResumeError> {
    let Some(tool) = agent.tool(&call.name) else {
        return Err(ResumeError::ToolUnavailable {
            run_id: run_id.clone(),
            tool_name: call.name.clone(),
        });
    };
    let original = call.args.to_value();
    if *args == original {
        return Ok(None);
    }
    match tool.check_args(&ToolArgs::Json(args.clone())) {
        Ok(_) => Ok(Some(ArgsEdit::new(original, args.clone()))),
        Err(error) => Err(ResumeError::InvalidArgs {
            run_id: run_id.clone(),
            tool_call_id: call.id.clone(),
            tool_name: call.name.clone(),
            problems: match error {
                ToolError::InvalidArguments { problems, .. } => problems,
                other => vec![crate::error::error_chain_text(&other)],
            },
        }),
    }
}

/// The state of a waiting call (`state`) that expires: completed with the error result of
/// [`expired_result`]. Only a call whose deadline has passed expires.
fn expire(state: &CallState, call: &ToolCall) -> Result<CallState, ResumeRejection> {
    let deadline = deadline_of(state);
    let Some(at) = deadline.filter(|at| *at <= lease_now_ms()) else {
        return Err(ResumeRejection {
            expected: "an expired call".into(),
            problems: vec![match deadline {
                Some(at) => format!("this one expires at {}", crate::time::rfc3339(at)),
                None => "this one has no deadline".into(),
            }],
        });
    };
    let approval = matches!(state, CallState::AwaitingApproval { .. });
    Ok(CallState::Completed {
        result: state.result_with_question(expired_result(call, approval, at)),
    })
}

/// The state of a call awaiting approval after a person's `decision` (an approval, with edited
/// arguments or not, or a decline, as [`approval_of`] reads it; recorded as `resolution`), and
/// its audit action: approved, it is committed as started (`running`: the approval is the
/// journal entry, and the call is never asked for approval again) before its tool runs (with
/// the edited arguments, which the audit keeps); declined, it completes with an error result
/// giving the reason.
fn decide(
    call: &ToolCall,
    decision: &CallResponse,
    resolution: &Resolution,
) -> (CallState, AuditAction) {
    let CallResponse::Decline { reason } = decision else {
        let running = CallState::Running {
            started_at_ms: now_ms(),
        };
        return (running, AuditAction::Approve);
    };
    let mut result = ToolResult::error(call, declined_text(reason.as_deref()));
    result.answer = recorded_answer(resolution);
    (CallState::Completed { result }, AuditAction::Decline)
}

/// The deadline of a waiting call (a question's or an approval's), if it has one.
fn deadline_of(state: &CallState) -> Option<u64> {
    match state {
        CallState::Suspended { suspension, .. } => suspension.expires_at_ms,
        CallState::AwaitingApproval { expires_at_ms, .. } => *expires_at_ms,
        _ => None,
    }
}

/// The result a call gets when its deadline `at` (ms since the Unix epoch) passed while it
/// waited: an error result the model reads, `{"content": "no answer came in time: …" |
/// "no decision came in time: …; the tool did not run", "isError": true, "expiredAt": RFC 3339}`.
fn expired_result(call: &ToolCall, approval: bool, at: u64) -> ToolResult {
    let when = crate::time::rfc3339(at);
    let text = if approval {
        format!(
            "no decision came in time: the approval of this tool call expired at {when}; the tool did not run"
        )
    } else {
        format!("no answer came in time: the question expired at {when}")
    };
    let mut result = ToolResult::error(call, text);
    if let Value::Object(fields) = &mut result.result {
        fields.insert("expiredAt".into(), Value::String(when));
    }
    result
}

/// The error text a declined call gets: the person's reason, or a default.
fn declined_text(reason: Option<&str>) -> String {
    match reason.map(str::trim).filter(|reason| !reason.is_empty()) {
        Some(reason) => {
            format!("the person declined this tool call; it did not run. Reason: {reason}")
        }
        None => "the person declined this tool call; it did not run".to_owned(),
    }
}

/// Reads an approval response as a decision ([`CallResponse::Approve`],
/// [`CallResponse::ApproveWith`] or [`CallResponse::Decline`]): itself, or an answer
/// `{"approved": bool, "reason"?: string, "args"?: object}` read by
/// [`CallResponse::from_approval`].
fn approval_of(response: &CallResponse) -> Result<CallResponse, ResumeRejection> {
    match response {
        CallResponse::Answer(answer) => CallResponse::from_approval(answer),
        decision => Ok(decision.clone()),
    }
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
    let step = state.pending_step.as_ref();
    // A cancelled run says so, whatever became of the call.
    if state.status == RunStatus::Cancelled {
        return Err(not_suspended(state));
    }
    let slot = tool_call_id.and_then(|id| {
        step.and_then(|step| {
            step.calls
                .iter()
                .enumerate()
                .find(|(_, slot)| &slot.call.id == id)
        })
    });
    if let Some(id) = tool_call_id {
        refuse_answered(stored, id, slot.map(|(_, slot)| slot), answer)?;
    }
    if state.status == RunStatus::Running {
        return Err(running_refusal(stored, tool_call_id));
    }
    let Some(id) = tool_call_id else {
        return only_pending(state);
    };
    match slot {
        Some(_) if state.status != RunStatus::Suspended => Err(not_suspended(state)),
        Some((index, _)) => Ok(index),
        None if state.status != RunStatus::Suspended => Err(not_suspended(state)),
        None => Err(ResumeError::UnknownToolCall {
            run_id: state.run_id.clone(),
            tool_call_id: id.clone(),
            pending: waiting_ids(state),
        }),
    }
}

/// [`ResumeError::NotSuspended`] for `state`.
fn not_suspended(state: &RunState) -> ResumeError {
    ResumeError::NotSuspended {
        run_id: state.run_id.clone(),
        status: state.status,
    }
}

/// Refuses a response to call `id` (its pending `slot`, if it is of the pending step) when the
/// call has its answer, whoever drives the run: it was answered or expired (its result says
/// which), or an answer to it was claimed (the same `answer`, another one while the claimer
/// lives, or one whose claimer stopped mid-way).
fn refuse_answered(
    stored: &StoredRun,
    id: &ToolCallId,
    slot: Option<&CallSlot>,
    answer: &Value,
) -> Result<(), ResumeError> {
    let state = &stored.state;
    let run_id = &state.run_id;
    let already_answered = |recorded: Option<&Value>| ResumeError::AlreadyAnswered {
        run_id: run_id.clone(),
        tool_call_id: id.clone(),
        // The same JSON, or the recorded answer read as its question reads answers (a number,
        // another case, own words as a plain string).
        same_answer: recorded.is_some_and(|recorded| {
            recorded == answer || crate::answer::repeats_recorded_answer(state, id, answer)
        }),
    };
    // A call that has its result says how it got it: expired, or answered.
    let completed = |recorded: Option<&Value>| match state.expired_at_ms(id) {
        Some(at) => ResumeError::Expired {
            run_id: run_id.clone(),
            tool_call_id: id.clone(),
            expired_at_ms: at,
        },
        None => already_answered(recorded),
    };
    let Some(slot) = slot else {
        return match state.result_for(id) {
            Some(result) => Err(completed(result.answer.as_ref())),
            None => Ok(()),
        };
    };
    match &slot.state {
        CallState::Completed { result } => Err(completed(result.answer.as_ref())),
        CallState::Resuming { resume_data, .. } if resume_data == answer => {
            Err(already_answered(Some(resume_data)))
        }
        // Another answer to this call was claimed first.
        CallState::Resuming { .. } if live_lease(stored).is_some() => Err(ResumeError::Conflict {
            run_id: run_id.clone(),
        }),
        CallState::Resuming { .. } => Err(ResumeError::Interrupted {
            run_id: run_id.clone(),
            tool_call_id: id.clone(),
        }),
        _ => Ok(()),
    }
}

/// Why a resume of a running run is refused: its driver lives ([`ResumeError::InProgress`], or
/// [`ResumeError::Conflict`] when "the call pending now" is being answered by another resume),
/// or it stopped and left a call unfinished ([`ResumeError::Interrupted`]).
fn running_refusal(stored: &StoredRun, tool_call_id: Option<&ToolCallId>) -> ResumeError {
    let state = &stored.state;
    let run_id = &state.run_id;
    let step = state.pending_step.as_ref();
    if let Some(lease) = live_lease(stored) {
        let being_resumed = step.is_some_and(|step| {
            step.calls
                .iter()
                .any(|slot| matches!(slot.state, CallState::Resuming { .. }))
        });
        if tool_call_id.is_none() && being_resumed {
            return ResumeError::Conflict {
                run_id: run_id.clone(),
            };
        }
        return in_progress(run_id, lease);
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
    match unfinished {
        Some(slot) => ResumeError::Interrupted {
            run_id: run_id.clone(),
            tool_call_id: slot.call.id.clone(),
        },
        None => not_suspended(state),
    }
}

/// The slot of the only call a suspended run waits on, for a resume that names no call;
/// [`ResumeError::Ambiguous`] when it waits on several.
fn only_pending(state: &RunState) -> Result<usize, ResumeError> {
    if state.status != RunStatus::Suspended {
        return Err(not_suspended(state));
    }
    let step = state.pending_step.as_ref();
    let pending = step.map(PendingStep::suspended_ids).unwrap_or_default();
    match pending.as_slice() {
        [only] => step
            .and_then(|step| step.calls.iter().position(|slot| &slot.call.id == only))
            .ok_or_else(|| not_suspended(state)),
        [] => Err(not_suspended(state)),
        _ => Err(ResumeError::Ambiguous {
            run_id: state.run_id.clone(),
            pending: waiting_ids(state),
        }),
    }
}

/// The ids a person answers the run's waiting calls by: a sub-agent's child's as
/// `PARENT_CALL~CHILD_CALL`.
fn waiting_ids(state: &RunState) -> Vec<ToolCallId> {
    state
        .pending_tool_calls()
        .into_iter()
        .map(|pending| pending.tool_call_id)
        .collect()
}

/// Claims a failed run, or a running one whose driver stopped (no live lease), so its
/// unfinished step can be retried. In the same compare-and-swap, the calls the dead driver left
/// unfinished are settled by the journal's rules: a `resuming` or `running` call of an
/// idempotent tool stays, to run again; one of another tool gets the [`OUTCOME_UNKNOWN`] error
/// result (keeping a resume's answer), and never runs again.
pub(crate) async fn claim_continue(
    agent: &AgentDefinition,
    run: &RunRef,
) -> Result<Claim, ResumeError> {
    claim_continue_as(agent, run, false).await
}

/// [`claim_continue`] of a sub-agent's child run, by its parent's call (`subagent.rs`).
pub(crate) async fn claim_continue_child(
    agent: &AgentDefinition,
    run: &RunRef,
) -> Result<Claim, ResumeError> {
    claim_continue_as(agent, run, true).await
}

async fn claim_continue_as(
    agent: &AgentDefinition,
    run: &RunRef,
    by_parent: bool,
) -> Result<Claim, ResumeError> {
    let key = resolve(agent.store.as_ref(), run).await?;
    let run_id = &key.run_id;
    let stored = load_own_run(agent, &key).await?;
    refuse_child(&stored, by_parent)?;
    if !matches!(stored.state.status, RunStatus::Failed | RunStatus::Running) {
        return Err(ResumeError::NotContinuable {
            run_id: run_id.clone(),
            status: stored.state.status,
        });
    }
    if let Some(lease) = live_lease(&stored) {
        return Err(in_progress(run_id, lease));
    }
    if stored.state.status == RunStatus::Failed {
        refuse_if_thread_moved_on(agent.store.as_ref(), &stored.state).await?;
    }
    let before = EventBasis::of(&stored.state);
    let mut state = stored.state;
    settle_unfinished(agent, &mut state);
    state.status = RunStatus::Running;
    state.error = None;
    state.touch();
    let lease = agent.new_lease();
    match super::commit_update(
        agent.store.as_ref(),
        &before,
        &state,
        stored.version,
        Some(&lease),
    )
    .await
    {
        Ok(version) => Ok(Claim {
            state,
            version,
            resolved: Vec::new(),
        }),
        Err(StoreError::Conflict { .. }) => Err(ResumeError::Conflict {
            run_id: run_id.clone(),
        }),
        Err(error) => Err(map_store_error(&key, error)),
    }
}

/// Refuses to continue a failed run when a newer run exists in its thread
/// ([`ResumeError::ThreadMovedOn`]): the thread's history is in completion order, so a reply
/// to an old message would land after the newer turns.
async fn refuse_if_thread_moved_on(
    store: &dyn RunStore,
    state: &RunState,
) -> Result<(), ResumeError> {
    let key = state.key();
    let newest = store
        .list_runs(&RunFilter::in_thread(&state.thread_key()).limit(1))
        .await
        .map_err(|error| map_store_error(&key, error))?;
    match newest.runs.iter().find_map(ListedRun::summary) {
        Some(newer) if newer.run_id != key.run_id => Err(ResumeError::ThreadMovedOn {
            run_id: key.run_id.clone(),
            newer_run_id: newer.run_id.clone(),
        }),
        _ => Ok(()),
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
        if agent.reruns_after_crash(&slot.call.name) {
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
        let result = slot.state.result_with_question(result);
        slot.state = CallState::Completed { result };
    }
}
