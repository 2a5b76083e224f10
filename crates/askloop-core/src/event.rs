//! What happened to a run, as events for people elsewhere (webhooks): [`RunEvent`], and the one
//! function that computes them from a commit, [`events_of_commit`].
//!
//! The loop hands a commit's events to the store with the commit itself
//! ([`crate::RunStore::insert_run_with_events`], [`crate::RunStore::update_run_with_events`]),
//! which writes them to its outbox in the same transaction: an event exists exactly when the
//! change that caused it was stored. Events are computed from the state before and after the
//! commit only, so no commit path can forget one.
//!
//! As JSON (the body a webhook receives, camelCase; `docs/webhooks.md`):
//!
//! ```json
//! {
//!   "id": "evt_0193…", "type": "question.raised", "timestamp": "2026-12-05T14:00:00.000Z",
//!   "data": {
//!     "runId": "R", "agentId": "assistant", "threadId": "T", "resourceId": "acme",
//!     "call": { …the pending call, `askloop_core::wire::PendingCall`… },
//!     "answerUrl": null
//!   }
//! }
//! ```

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ids::{AgentId, ResourceId, RunId, ThreadId, ToolCallId};
use crate::message::FinishReason;
use crate::run::{CallState, PendingKind, PendingToolCall, RunState, RunStatus};
use crate::wire::PendingCall;

/// What an event says happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[non_exhaustive]
pub enum RunEventKind {
    /// A tool call started waiting for a person's answer (`question.raised`).
    #[serde(rename = "question.raised")]
    QuestionRaised,
    /// A waiting question was answered (`question.answered`).
    #[serde(rename = "question.answered")]
    QuestionAnswered,
    /// A waiting call's deadline passed unheard and a sweep resolved it (`question.expired`;
    /// approvals too: `call.kind` tells which).
    #[serde(rename = "question.expired")]
    QuestionExpired,
    /// A tool call started waiting for a person's approval (`approval.requested`).
    #[serde(rename = "approval.requested")]
    ApprovalRequested,
    /// A waiting approval was approved or declined (`approval.decided`, `approved` says which).
    #[serde(rename = "approval.decided")]
    ApprovalDecided,
    /// The run completed (`run.completed`; also a run superseded by its thread's next message).
    #[serde(rename = "run.completed")]
    RunCompleted,
    /// The run failed (`run.failed`).
    #[serde(rename = "run.failed")]
    RunFailed,
    /// The run was cancelled (`run.cancelled`).
    #[serde(rename = "run.cancelled")]
    RunCancelled,
}

impl RunEventKind {
    /// Every kind, in the order above.
    pub const ALL: [Self; 8] = [
        Self::QuestionRaised,
        Self::QuestionAnswered,
        Self::QuestionExpired,
        Self::ApprovalRequested,
        Self::ApprovalDecided,
        Self::RunCompleted,
        Self::RunFailed,
        Self::RunCancelled,
    ];

    /// The kind's name on the wire, e.g. `question.raised`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::QuestionRaised => "question.raised",
            Self::QuestionAnswered => "question.answered",
            Self::QuestionExpired => "question.expired",
            Self::ApprovalRequested => "approval.requested",
            Self::ApprovalDecided => "approval.decided",
            Self::RunCompleted => "run.completed",
            Self::RunFailed => "run.failed",
            Self::RunCancelled => "run.cancelled",
        }
    }

    /// The kind named `name` (as [`RunEventKind::as_str`] writes it), if any.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.as_str() == name)
    }
}

impl std::fmt::Display for RunEventKind {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.as_str())
    }
}

/// One event: its id (stable across every delivery attempt: receivers dedupe by it), its kind,
/// when it happened and what it is about. The JSON shape is the module's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct RunEvent {
    /// `evt_` and a UUID v7 (time-ordered), made when the commit was prepared.
    pub id: String,
    /// What happened.
    #[serde(rename = "type")]
    pub kind: RunEventKind,
    /// When: the commit's time (the run's `updatedAt`), RFC 3339 UTC with milliseconds.
    pub timestamp: String,
    /// The run, and the call it is about.
    pub data: RunEventData,
}

/// The run an event is about and, for the call events, the call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct RunEventData {
    /// The run.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub run_id: RunId,
    /// The agent that handles it.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub agent_id: AgentId,
    /// Its thread.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub thread_id: ThreadId,
    /// Its resource (tenant); `null` for none.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub resource_id: Option<ResourceId>,
    /// The call, in the one shape of a waiting call ([`PendingCall`]), for the question and
    /// approval events (as it was while it waited); `null` for the run events.
    pub call: Option<PendingCall>,
    /// The answer given, for `question.answered`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub answer: Option<Value>,
    /// Whether the call was approved, for `approval.decided`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved: Option<bool>,
    /// A link that answers the call without a key, for `question.raised` and
    /// `approval.requested` once answer links exist; `null` until then. Filled when the event
    /// is delivered, never stored.
    pub answer_url: Option<String>,
}

impl RunEvent {
    /// The resource of the run the event is about.
    pub fn resource_id(&self) -> Option<&ResourceId> {
        self.data.resource_id.as_ref()
    }
}

/// What [`events_of_commit`] needs of the state before a commit: the run's status and the
/// calls waiting then. Keep it instead of a whole [`RunState`] between commits.
#[derive(Clone, Debug, PartialEq)]
pub struct EventBasis {
    status: RunStatus,
    waiting: Vec<PendingToolCall>,
}

impl EventBasis {
    /// The basis of `state`.
    pub fn of(state: &RunState) -> Self {
        Self {
            status: state.status,
            waiting: state.pending_tool_calls(),
        }
    }
}

/// The events of a commit from `before` (`None`: the run is new) to `after`, in this order:
/// the calls that stopped waiting (answered, decided, expired; not those a cancel or a
/// supersede settled), the calls that started waiting (in call order), then the run's end if
/// the commit ended it. Pure: the same states give the same events but for their fresh ids.
pub fn events_of_commit(before: Option<&EventBasis>, after: &RunState) -> Vec<RunEvent> {
    // A sub-agent's child run raises no question events: its root announces the child's
    // waiting calls as its own (`PARENT_CALL~CHILD_CALL`), and their events are the root's.
    let nested = after.parent.is_some();
    let waiting_before: &[PendingToolCall] = match before {
        Some(basis) if !nested => &basis.waiting,
        _ => &[],
    };
    let waiting_after = if nested {
        Vec::new()
    } else {
        after.pending_tool_calls()
    };
    let mut events = Vec::new();
    for call in waiting_before {
        if waiting_after
            .iter()
            .any(|now| now.tool_call_id == call.tool_call_id)
        {
            continue;
        }
        if let Some((kind, answer, approved)) = resolution(after, call) {
            events.push(event(after, kind, Some(call), answer, approved));
        }
    }
    for call in &waiting_after {
        if waiting_before
            .iter()
            .any(|then| then.tool_call_id == call.tool_call_id)
        {
            continue;
        }
        let kind = match call.kind {
            PendingKind::Approval => RunEventKind::ApprovalRequested,
            _ => RunEventKind::QuestionRaised,
        };
        events.push(event(after, kind, Some(call), None, None));
    }
    if before.map(|basis| basis.status) != Some(after.status) {
        let ended = match after.status {
            RunStatus::Completed => Some(RunEventKind::RunCompleted),
            RunStatus::Failed => Some(RunEventKind::RunFailed),
            RunStatus::Cancelled => Some(RunEventKind::RunCancelled),
            _ => None,
        };
        if let Some(kind) = ended {
            events.push(event(after, kind, None, None, None));
        }
    }
    events
}

/// How a call that waited before the commit was settled by it: its event kind, the answer,
/// whether it was approved. `None` when a cancel or a supersede settled it (the run's event
/// says so).
fn resolution(
    after: &RunState,
    call: &PendingToolCall,
) -> Option<(RunEventKind, Option<Value>, Option<bool>)> {
    if after.status == RunStatus::Cancelled || after.finish_reason == Some(FinishReason::Superseded)
    {
        return None;
    }
    let id = &call.tool_call_id;
    if after.expired_at_ms(id).is_some() {
        return Some((RunEventKind::QuestionExpired, None, None));
    }
    let approval = call.kind == PendingKind::Approval;
    if call.subagent.is_some() {
        return Some(nested_resolution(after, id, approval));
    }
    match slot_state(after, id) {
        Some(CallState::Resuming { resume_data, .. }) if approval => {
            let approved = resume_data
                .get("approved")
                .and_then(Value::as_bool)
                .unwrap_or(true);
            Some((RunEventKind::ApprovalDecided, None, Some(approved)))
        }
        Some(CallState::Resuming { resume_data, .. }) => Some((
            RunEventKind::QuestionAnswered,
            Some(resume_data.clone()),
            None,
        )),
        Some(CallState::Running { .. }) if approval => {
            Some((RunEventKind::ApprovalDecided, None, Some(true)))
        }
        // An approval completed without running: declined.
        Some(CallState::Completed { .. }) if approval => {
            Some((RunEventKind::ApprovalDecided, None, Some(false)))
        }
        _ if approval => Some((RunEventKind::ApprovalDecided, None, None)),
        _ => Some((RunEventKind::QuestionAnswered, None, None)),
    }
}

/// How a sub-agent's child's call (`id`: `PARENT_CALL~CHILD_CALL`) stopped waiting, read from
/// the answer its parent's call was claimed with (the claim's envelope): the answer, or the
/// decision; `None`s when the commit shows neither.
fn nested_resolution(
    after: &RunState,
    id: &ToolCallId,
    approval: bool,
) -> (RunEventKind, Option<Value>, Option<bool>) {
    let claimed = after.pending_step.as_ref().and_then(|step| {
        step.calls.iter().find_map(|slot| {
            let rest = crate::run::child_call_id(id.as_str(), slot.call.id.as_str())?;
            let CallState::Resuming { resume_data, .. } = &slot.state else {
                return None;
            };
            resume_data
                .get("items")?
                .as_array()?
                .iter()
                .find(|item| item.get("toolCallId").and_then(Value::as_str) == Some(rest))?
                .get("response")
                .cloned()
        })
    });
    let kind = claimed
        .as_ref()
        .and_then(|response| response.get("kind"))
        .and_then(Value::as_str);
    match (approval, kind) {
        (true, Some("approve")) => (RunEventKind::ApprovalDecided, None, Some(true)),
        (true, Some("decline")) => (RunEventKind::ApprovalDecided, None, Some(false)),
        (true, _) => (RunEventKind::ApprovalDecided, None, None),
        (false, Some("answer")) => (
            RunEventKind::QuestionAnswered,
            claimed.and_then(|response| response.get("value").cloned()),
            None,
        ),
        (false, _) => (RunEventKind::QuestionAnswered, None, None),
    }
}

/// The state of the pending step's slot of call `id`, if the step still holds it.
fn slot_state<'a>(state: &'a RunState, id: &ToolCallId) -> Option<&'a CallState> {
    state
        .pending_step
        .as_ref()?
        .calls
        .iter()
        .find(|slot| &slot.call.id == id)
        .map(|slot| &slot.state)
}

fn event(
    state: &RunState,
    kind: RunEventKind,
    call: Option<&PendingToolCall>,
    answer: Option<Value>,
    approved: Option<bool>,
) -> RunEvent {
    RunEvent {
        id: format!("evt_{}", uuid::Uuid::now_v7().simple()),
        kind,
        timestamp: crate::time::rfc3339(state.updated_at_ms),
        data: RunEventData {
            run_id: state.run_id.clone(),
            agent_id: state.agent_id.clone(),
            thread_id: state.thread_id.clone(),
            resource_id: state.resource_id.clone(),
            call: call.map(|call| PendingCall::of(&state.run_id, call)),
            answer,
            approved,
            answer_url: None,
        },
    }
}
