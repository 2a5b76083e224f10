//! The stored state of a run ([`RunState`]): its status, its conversation and the tool calls it
//! waits on. Stores keep it as opaque JSON text ([`crate::store::codec`]); only the loop changes
//! it.
//!
//! Format 2 (what [`crate::store::codec`] writes; stores keep the head — everything but
//! `messages` — apart from the messages, one by one):
//!
//! ```json
//! {
//!   "formatVersion": 2,
//!   "runId": "0193…", "threadId": "0193…", "resourceId": null,
//!   "agentId": "assistant", "model": "scripted:demo.json",
//!   "status": "suspended",
//!   "historyThrough": 7,
//!   "steps": 1,
//!   "pendingStep": {"calls": [{"call": {"id": "c1", "name": "ask_user", "args": {"json": {"question": "Which repo?"}}},
//!                              "state": {"status": "suspended", "suspension": {"payload": {"question": "Which repo?"}, "resumeSchema": {"type": "string"}}}}]},
//!   "usage": {"inputTokens": 10, "outputTokens": 5},
//!   "error": null,
//!   "createdAtMs": 1796007590064, "updatedAtMs": 1796007590140,
//!   "messages": [{"role": "user", "text": "Summarize my project"},
//!                {"role": "assistant", "parts": [{"type": "tool-call", "id": "c1", "name": "ask_user", "args": {"json": {"question": "Which repo?"}}}]}]
//! }
//! ```
//!
//! - `messages` holds the run's **own** messages only (its user input first). The thread's
//!   earlier messages are not copied: `historyThrough` is the highest thread completion
//!   sequence included in the run's history (absent or `null`: the thread had no completed run
//!   when the run started, so the history is empty), and the loop rebuilds the prompt from
//!   `RunStore::thread_history(thread, historyThrough)` followed by the own messages.
//! - `forkedFrom` (optional, absent unless the run is a fork): `{"runId", "toolCallId"}`, the
//!   run and question it was forked from ([`crate::Agent::fork`]). Added without a version bump:
//!   older builds of format 2 ignore it (and drop it if they rewrite the head). A fork's
//!   `messages` start with a copy of the original's thread history (its `historyThrough` is
//!   `null`), because its thread is new: the fork's later turns see that history through it.
//! - `startedBy` (optional, absent when unknown): the [`crate::Actor`] who started the run
//!   (`{"id", "resource"?, "roles"?, "route"?}`; for a fork, who forked it), which a policy
//!   forbidding self-approval compares approvers with. Added without a version bump, as
//!   `forkedFrom`: runs stored before it read as started by an unknown party.
//! - In `messages`, a tool result may carry `suspension` (optional): the question a call asked
//!   before it got this result, kept so that it can be forked.
//! - `legacyHistory` (only in states upgraded from format 1): the thread history format 1 had
//!   copied into the state, used instead of `thread_history`.
//! - `pendingStep.calls[].state.status` is `completed` (`result`), `suspended` (`suspension`),
//!   `awaitingApproval` (`expiresAtMs`, absent without a deadline; `quorum`, absent for one
//!   approver — additive), `resuming` (`suspension`,
//!   `resumeData`: an answer claimed, its result not yet recorded) or `running` (`startedAtMs`:
//!   a non-idempotent tool was started and has no recorded result).
//! - `pendingStep.calls[].audit[]` and a tool result's `audit[]` are the call's audit records
//!   (`{"action", "by"?, "resource"?, "roles"?, "route"?, "atMs", "argsEdit"?}`: who — the
//!   actor's id, resource and roles —, from which entry point, when; `resource`, `roles` and
//!   `route` are additive, absent in older records). While a call awaits an approval that
//!   needs several approvers, each approval so far is an `approve` record on its slot (a
//!   vote). `argsEdit` (`{"original", "edited"}`, both the
//!   arguments' JSON) is on an `approve` record whose person edited the arguments: the call
//!   (and the assistant message) keeps the model's arguments, the tool runs with `edited`. An
//!   additive optional field of format 2, not a new version: records without it (every run
//!   stored before it existed) read as approvals without an edit, and a build that predates it
//!   ignores it.
//!
//! Format 1 (read, upgraded by `codec::upgrade_v1`) copied the thread's history into
//! `messages`, counted it in `historyLen`, and named one field `resume_data`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::actor::Actor;
use crate::ids::{AgentId, ResourceId, RunId, RunKey, ThreadId, ThreadKey, ToolCallId};
use crate::message::Suspension;
use crate::message::{
    AuditAction, AuditRecord, FinishReason, Message, ToolCall, ToolResult, Usage,
};
use crate::time::now_ms;

/// The stored run format this build writes and reads.
pub(crate) const RUN_FORMAT_VERSION: u32 = 2;

/// Where a run is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum RunStatus {
    /// A process is working on it (calling the model or running tools).
    Running,
    /// Waiting for answers to one or more suspended tool calls.
    Suspended,
    /// Finished: the model gave its final answer (or the step limit was reached).
    Completed,
    /// Stopped by an error; `continue_stream` (`askloop runs continue`) retries the step that
    /// failed.
    Failed,
    /// Ended by a cancel ([`crate::Agent::cancel_run`], `askloop runs cancel`): its pending
    /// calls were resolved as cancelled; it refuses resumes and continues.
    Cancelled,
}

impl RunStatus {
    /// Every status, in life order.
    pub const ALL: [RunStatus; 5] = [
        Self::Running,
        Self::Suspended,
        Self::Completed,
        Self::Failed,
        Self::Cancelled,
    ];

    /// The status's name (`"running"`, `"suspended"`, `"completed"`, `"failed"`,
    /// `"cancelled"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Suspended => "suspended",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.as_str())
    }
}

/// A run status name that is not one of [`RunStatus::ALL`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown run status {given:?}; expected running, suspended, completed, failed or cancelled"
)]
pub struct UnknownRunStatus {
    /// The text given.
    pub given: String,
}

impl std::str::FromStr for RunStatus {
    type Err = UnknownRunStatus;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|status| status.as_str() == text)
            .ok_or_else(|| UnknownRunStatus {
                given: text.to_owned(),
            })
    }
}

/// The whole state of one run: enough to continue it in any process.
///
/// Read it through its accessors; only the agent loop changes it, and stores keep it as the
/// text of [`crate::store::codec`].
#[derive(Clone, Debug, PartialEq)]
pub struct RunState {
    pub(crate) format_version: u32,
    pub(crate) run_id: RunId,
    pub(crate) thread_id: ThreadId,
    pub(crate) resource_id: Option<ResourceId>,
    pub(crate) agent_id: AgentId,
    /// The model SPEC the run was started with (e.g. `scripted:PATH`).
    pub(crate) model: Option<String>,
    pub(crate) status: RunStatus,
    /// The run's own messages (its user input first); append-only.
    pub(crate) messages: Vec<Message>,
    /// The highest thread completion sequence included in the run's history (`None`: the
    /// thread had no completed run when the run started).
    pub(crate) history_through: Option<u64>,
    /// The history copied into a format-1 state, used instead of the thread's.
    pub(crate) legacy_history: Option<Vec<Message>>,
    pub(crate) steps: u32,
    /// The tool calls of the last assistant message, while any of them lacks a result.
    pub(crate) pending_step: Option<PendingStep>,
    pub(crate) usage: Usage,
    pub(crate) error: Option<RunFailure>,
    /// Why the run finished, once completed.
    pub(crate) finish_reason: Option<FinishReason>,
    pub(crate) created_at_ms: u64,
    pub(crate) updated_at_ms: u64,
    /// The run and question this run was forked from ([`crate::Agent::fork`]); `None` for a
    /// run that was started, not forked. Set at the insert, never changed.
    pub(crate) forked_from: Option<ForkedFrom>,
    /// Who started the run ([`crate::RunOptions::actor`]; for a fork, who forked it); `None`
    /// when unknown (runs stored before askloop recorded it, runs started with no actor, `by`
    /// or resource). Set at the insert, never changed.
    pub(crate) started_by: Option<Actor>,
    /// The run and call that started this run as a sub-agent's child run
    /// ([`crate::AgentBuilder::subagent`]); `None` for a run started on its own. Set at the
    /// insert, never changed.
    pub(crate) parent: Option<ParentRun>,
}

/// Where a child run sits in its tree: the run and the tool call (of the sub-agent's tool) that
/// started it, the tree's root run and how deep it is (a root's child is at depth 1). The wire
/// form is `{"runId", "toolCallId", "rootRunId", "depth"}` (also in the stored head as
/// `parent`); the API shows it as `parentRunId`, `parentToolCallId` and `rootRunId`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ParentRun {
    /// The parent run (in the same resource as the child).
    pub run_id: RunId,
    /// The parent's call of the sub-agent's tool that this run answers.
    pub tool_call_id: ToolCallId,
    /// The root of the tree: the run a person started.
    pub root_run_id: RunId,
    /// 1 for a root's child, 2 for its grandchild, ….
    pub depth: u32,
}

/// What a sub-agent's call waits for: its child run and, copied from it when the call
/// suspended, the child's waiting calls (with ids relative to the child; a grandchild's are
/// already expanded in them). Stored with the call; [`RunState::pending_tool_calls`] shows each
/// of them as a waiting call of this run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SubagentWait {
    pub(crate) agent_id: AgentId,
    pub(crate) run_id: RunId,
    pub(crate) pending: Vec<PendingToolCall>,
}

/// Where a waiting call of a tree of runs comes from, when a sub-agent asked it: the agents from
/// this run's child down to the run that asked (`path`), that run and the call's own id there.
/// The wire form is `{"path": ["researcher", …], "runId", "toolCallId"}`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct SubagentOrigin {
    /// The agents from this run's child to the asking run, in order.
    pub path: Vec<AgentId>,
    /// The run that asked.
    pub run_id: RunId,
    /// The call's id in the run that asked.
    pub tool_call_id: ToolCallId,
}

/// What separates a sub-agent's call id from its child's call ids in the ids of the calls a
/// tree of runs waits for: the root announces its child's call `c7`, made under its own call
/// `c1`, as `c1~c7` (`~` needs no escaping in URLs).
pub const SUBAGENT_CALL_SEPARATOR: char = '~';

/// The id under which a parent announces its sub-agent's child's call `child`, made under its
/// own call `parent`: `PARENT~CHILD` ([`SUBAGENT_CALL_SEPARATOR`]).
pub fn nested_call_id(parent: &str, child: &str) -> String {
    format!("{parent}{SUBAGENT_CALL_SEPARATOR}{child}")
}

/// The child's call id in `id` when `id` names a call of the child under the parent's call
/// `parent` (`PARENT~CHILD`, [`nested_call_id`]); `None` otherwise, also for `parent` itself.
pub fn child_call_id<'a>(id: &'a str, parent: &str) -> Option<&'a str> {
    id.strip_prefix(parent)?
        .strip_prefix(SUBAGENT_CALL_SEPARATOR)
        .filter(|child| !child.is_empty())
}

/// The text of the last assistant message of `messages` (its text parts, joined): a completed
/// run's answer.
pub(crate) fn last_text(messages: &[Message]) -> String {
    messages
        .iter()
        .rev()
        .find_map(|message| match message {
            Message::Assistant { parts } => Some(
                parts
                    .iter()
                    .filter_map(|part| match part {
                        crate::message::AssistantPart::Text { text } => Some(text.as_str()),
                        _ => None,
                    })
                    .collect::<String>(),
            ),
            _ => None,
        })
        .unwrap_or_default()
}

/// Where a forked run comes from: the run and the question (a tool call of that run) at which
/// a person gave another answer ([`crate::Agent::fork`]). The wire form is
/// `{"runId": "…", "toolCallId": "…"}` (also in the stored head as `forkedFrom`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ForkedFrom {
    /// The original run (in the same resource as the fork).
    pub run_id: RunId,
    /// The question of the original run that the fork answered anew.
    pub tool_call_id: ToolCallId,
}

impl ForkedFrom {
    /// The fork of run `run_id` at its call `tool_call_id`.
    pub fn new(run_id: RunId, tool_call_id: ToolCallId) -> Self {
        Self {
            run_id,
            tool_call_id,
        }
    }
}

/// Why a run failed, as recorded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct RunFailure {
    /// A stable code (`"model_error"`, `"cancelled"`, `"store_error"`, …), the code of the
    /// [`crate::AgentError`] that ended the run.
    pub code: String,
    /// The error and its causes, one line.
    pub message: String,
}

/// The tool calls of one step that do not all have results yet.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PendingStep {
    /// One slot per tool call, in the order the model made them.
    pub(crate) calls: Vec<CallSlot>,
}

/// One tool call of a pending step and where it stands.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CallSlot {
    pub(crate) call: ToolCall,
    pub(crate) state: CallState,
    /// Who answered, approved, declined, expired or cancelled this call, and when, in order;
    /// copied into the call's result when it completes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) audit: Vec<AuditRecord>,
}

/// Where one tool call of a pending step stands.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(
    rename_all = "camelCase",
    rename_all_fields = "camelCase",
    tag = "status"
)]
pub(crate) enum CallState {
    /// Finished with this result.
    Completed { result: ToolResult },
    /// Waiting for an answer. A sub-agent's call (`subagent`) waits for its child run's calls,
    /// a copy of which it keeps ([`SubagentWait`]): answers reach them through this call.
    Suspended {
        suspension: Suspension,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        subagent: Option<Box<SubagentWait>>,
    },
    /// Waiting for a person to approve or decline the call before its tool runs (the agent
    /// requires approval for it). Approved, it becomes `running`; declined, `completed` with
    /// an error result giving the reason; once `expires_at_ms` (ms since the Unix epoch) has
    /// passed, a sweep completes it with an error result saying the tool did not run.
    AwaitingApproval {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        expires_at_ms: Option<u64>,
        /// The approvers the call needs, when more than one (the agent's policy when the call
        /// started waiting); its votes so far are the slot's `approve` audit records.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        quorum: Option<u32>,
    },
    /// An answer was accepted and claimed; the tool's resume path is running (or was, when a
    /// process died: `continue_stream` runs it again with the recorded answer if the tool is
    /// idempotent, else gives the model an outcome-unknown error result).
    Resuming {
        suspension: Suspension,
        resume_data: Value,
    },
    /// A non-idempotent tool was started at `started_at_ms` (ms since the Unix epoch) and has
    /// no recorded result yet (journal entry written before `execute`).
    Running { started_at_ms: u64 },
}

impl PendingStep {
    /// The ids of the calls still waiting for a person (an answer or an approval), in call
    /// order.
    pub(crate) fn suspended_ids(&self) -> Vec<ToolCallId> {
        self.calls
            .iter()
            .filter(|slot| slot.state.is_waiting())
            .map(|slot| slot.call.id.clone())
            .collect()
    }

    /// Every result, in call order, if all are complete; each carries its slot's audit.
    pub(crate) fn results(&self) -> Option<Vec<ToolResult>> {
        self.calls
            .iter()
            .map(|slot| match &slot.state {
                CallState::Completed { result } => {
                    let mut result = result.clone();
                    if result.audit.is_empty() {
                        result.audit.clone_from(&slot.audit);
                    }
                    Some(result)
                }
                _ => None,
            })
            .collect()
    }
}

impl CallSlot {
    /// The call as its tool runs it: the model's, with the arguments a person edited when
    /// approving it, if they did (the last approval of the slot's audit that carries an edit).
    pub(crate) fn call_to_run(&self) -> std::borrow::Cow<'_, ToolCall> {
        match crate::message::args_edit_of(&self.audit) {
            Some(edit) => std::borrow::Cow::Owned(ToolCall {
                args: crate::message::ToolArgs::Json(edit.edited.clone()),
                ..self.call.clone()
            }),
            None => std::borrow::Cow::Borrowed(&self.call),
        }
    }

    /// The approvals recorded on the call while it awaits approval (a quorum's votes so far),
    /// each with the arguments it approved when a person edited them.
    pub(crate) fn votes(&self) -> Vec<ApprovalVote> {
        let model_args = self.call.args.to_value();
        crate::approvers::votes(&self.audit, &model_args)
            .map(|(record, approved)| ApprovalVote {
                by: record.by.clone(),
                at_ms: record.at_ms,
                args: (*approved != model_args).then(|| approved.clone()),
            })
            .collect()
    }

    /// The answer the result of an approved call records (so a repeated approval is recognised
    /// as the same answer): `{"approved": true}`, with the edited `args` if a person edited
    /// them. `None` unless the slot's last audit record is an approval.
    pub(crate) fn approval_answer(&self) -> Option<Value> {
        let record = self
            .audit
            .last()
            .filter(|record| record.action == AuditAction::Approve)?;
        Some(match &record.args_edit {
            Some(edit) => serde_json::json!({"approved": true, "args": edit.edited}),
            None => serde_json::json!({"approved": true}),
        })
    }
}

impl CallState {
    /// Whether the call waits for a person: an answer (`suspended`) or an approval.
    pub(crate) fn is_waiting(&self) -> bool {
        matches!(self, Self::Suspended { .. } | Self::AwaitingApproval { .. })
    }

    /// The question of a call that suspended and has no result yet (`suspended`, or
    /// `resuming` with its answer).
    pub(crate) fn suspension(&self) -> Option<&Suspension> {
        match self {
            Self::Suspended { suspension, .. } | Self::Resuming { suspension, .. } => {
                Some(suspension)
            }
            _ => None,
        }
    }

    /// `result`, keeping the question this call (in this state) asked
    /// ([`ToolResult::suspension`]).
    pub(crate) fn result_with_question(&self, mut result: ToolResult) -> ToolResult {
        if result.suspension.is_none() {
            result.suspension = self.suspension().cloned().map(Box::new);
        }
        result
    }
}

/// A pending question of a suspended run: what `generate` returns, what run summaries list.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct PendingToolCall {
    /// The suspended call's id: pass it to `resume_stream` to answer this call.
    pub tool_call_id: ToolCallId,
    /// The tool's name.
    pub tool_name: String,
    /// The call's arguments.
    pub args: Value,
    /// What the tool asked.
    pub suspend_payload: Value,
    /// JSON Schema of accepted answers, if any.
    pub resume_schema: Option<Value>,
    /// What the call waits for: an answer, or an approval.
    #[serde(default)]
    pub kind: PendingKind,
    /// When the call expires unheard (ms since the Unix epoch), if it has a deadline: a
    /// question's ([`Suspension::expires_at_ms`]) or an approval's
    /// ([`crate::AgentBuilder::approval_timeout`]). From then on answers and decisions are
    /// refused ([`crate::ResumeError::Expired`]) and a sweep resolves the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<u64>,
    /// For an approval that needs several approvers: the approvals recorded so far, in order
    /// (empty otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approvals: Vec<ApprovalVote>,
    /// For an approval that needs several approvers ([`crate::ApproverPolicy::quorum`]): how
    /// many; `None` for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quorum: Option<u32>,
    /// Where the call comes from when a sub-agent asked it (its id is then
    /// `PARENT_CALL~CHILD_CALL`, [`SUBAGENT_CALL_SEPARATOR`]); `None` for this run's own calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent: Option<SubagentOrigin>,
}

/// One decision on one call of a run ([`RunState::decisions`]): who did what, when, from where.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct Decision<'a> {
    /// The call.
    pub tool_call_id: &'a ToolCallId,
    /// Its tool.
    pub tool_name: &'a str,
    /// The audit record.
    pub record: &'a AuditRecord,
}

/// One approval of a call that needs several ([`crate::ApproverPolicy::quorum`]): who, when,
/// and what it approved when that is not the model's arguments.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ApprovalVote {
    /// The approver's actor id, as its audit record keeps it.
    pub by: Option<String>,
    /// When, ms since the Unix epoch.
    pub at_ms: u64,
    /// The arguments the approver approved, when they edited them (differ from the model's);
    /// `None` for the model's. Later approvers must approve these.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Value>,
}

/// What a pending call waits for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum PendingKind {
    /// An answer: the tool suspended itself (`tool-call-suspended`).
    #[default]
    Answer,
    /// An approval: the agent requires one before the tool runs (`tool-call-approval`);
    /// answered with [`crate::Agent::approve_tool_call`] or [`crate::Agent::decline_tool_call`],
    /// or with an answer `{"approved": true|false, "reason"?: "…"}`.
    Approval,
}

/// JSON Schema of the answer an approval accepts, as the reference framework's
/// `tool-call-approval` chunk gives it: `{"approved": boolean}` (askloop also reads an
/// optional `reason` text for a decline, and optional `args`, an object: the arguments a person
/// edited, for an approval — [`crate::CallResponse::ApproveWith`]).
pub fn approval_schema() -> Value {
    serde_json::json!({
        "type": "object",
        "properties": {
            "approved": {"type": "boolean"},
            "reason": {"type": "string"},
            "args": {"type": "object"}
        },
        "required": ["approved"],
        "additionalProperties": false
    })
}

impl PendingToolCall {
    /// The pending call `call`, suspended with `suspension`.
    pub fn new(call: &ToolCall, suspension: &Suspension) -> Self {
        Self {
            tool_call_id: call.id.clone(),
            tool_name: call.name.clone(),
            args: call.args.to_value(),
            suspend_payload: suspension.payload.clone(),
            resume_schema: suspension.resume_schema.clone(),
            kind: PendingKind::Answer,
            expires_at_ms: suspension.expires_at_ms,
            approvals: Vec::new(),
            quorum: None,
            subagent: None,
        }
    }

    /// This pending approval, with the approvals recorded so far and the quorum it needs
    /// (`None`: one approver).
    #[must_use]
    pub fn with_votes(mut self, approvals: Vec<ApprovalVote>, quorum: Option<u32>) -> Self {
        self.approvals = approvals;
        self.quorum = quorum;
        self
    }

    /// The pending approval of `call`, due by `expires_at_ms` (ms since the Unix epoch; `None`:
    /// no deadline): its payload is `{toolName, args, expiresAt?}` (`expiresAt` in RFC 3339,
    /// as a question's), its schema [`approval_schema`].
    pub fn approval(call: &ToolCall, expires_at_ms: Option<u64>) -> Self {
        let args = call.args.to_value();
        let mut payload = serde_json::json!({"toolName": call.name, "args": args});
        if let (Some(at), Value::Object(fields)) = (expires_at_ms, &mut payload) {
            fields.insert("expiresAt".into(), Value::String(crate::time::rfc3339(at)));
        }
        Self {
            tool_call_id: call.id.clone(),
            tool_name: call.name.clone(),
            suspend_payload: payload,
            args,
            resume_schema: Some(approval_schema()),
            kind: PendingKind::Approval,
            expires_at_ms,
            approvals: Vec::new(),
            quorum: None,
            subagent: None,
        }
    }

    /// This call of the child run `wait` (agent `wait.agent_id`), as the parent's call
    /// `parent_call` announces it: its id prefixed with the parent's call id and
    /// [`SUBAGENT_CALL_SEPARATOR`], its origin with the child's agent ahead of the path.
    pub(crate) fn nested_under(mut self, parent_call: &ToolCallId, wait: &SubagentWait) -> Self {
        let own_id = self.tool_call_id.clone();
        self.tool_call_id = ToolCallId::new(nested_call_id(parent_call.as_str(), own_id.as_str()));
        self.subagent = Some(match self.subagent.take() {
            Some(mut origin) => {
                origin.path.insert(0, wait.agent_id.clone());
                origin
            }
            None => SubagentOrigin {
                path: vec![wait.agent_id.clone()],
                run_id: wait.run_id.clone(),
                tool_call_id: own_id,
            },
        });
        self
    }
}

/// A tool call a run started (or a resume claimed) whose result was never recorded: the
/// process driving the run stopped while it ran. See [`RunState::unfinished_calls`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct UnfinishedCall {
    /// The call.
    pub tool_call_id: ToolCallId,
    /// Its tool.
    pub tool_name: String,
    /// The answer a resume recorded for it (kept; `None` for a started tool call).
    pub answer: Option<Value>,
    /// When a non-idempotent tool was started (ms since the Unix epoch).
    pub started_at_ms: Option<u64>,
}

/// The most characters of a run's first message that its summary carries
/// ([`RunSummary::first_message`]).
pub const FIRST_MESSAGE_CHARS: usize = 200;

/// A run's [`RunSummary::first_message`] from its own messages.
fn first_message(messages: &[Message]) -> Option<String> {
    match messages.first()? {
        Message::User { text } => Some(text.chars().take(FIRST_MESSAGE_CHARS).collect()),
        _ => None,
    }
}

/// What a run listing shows of one run: ids, status, times and the pending questions, without
/// the conversation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct RunSummary {
    /// The run (its id within its resource).
    pub run_id: RunId,
    /// The agent that runs it.
    pub agent_id: AgentId,
    /// Its thread (within its resource).
    pub thread_id: ThreadId,
    /// Its owner, if given: with `run_id`, the run's identity ([`RunSummary::key`]).
    pub resource_id: Option<ResourceId>,
    /// Where it is.
    pub status: RunStatus,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_at_ms: u64,
    /// Last change, milliseconds since the Unix epoch.
    pub updated_at_ms: u64,
    /// The calls waiting for an answer (empty unless suspended).
    pub pending: Vec<PendingToolCall>,
    /// What the run was asked: its first message when that is a user message (the text that
    /// started it), cut to its first [`FIRST_MESSAGE_CHARS`] characters (Unicode scalar
    /// values), white space as written. `None` for a run whose first message is not a user
    /// message. Every store fills it in its listing, from the run's first stored message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_message: Option<String>,
    /// The store's change sequence of the run's last commit that
    /// [`notifies`](crate::store::notifies) (see [`crate::store::RunFilter::changed_after`]);
    /// `None` in a summary made from a state ([`RunState::summary`]) and for a run no such
    /// commit has stamped yet (one inserted running). A store's bookkeeping, not part of the
    /// summary's JSON form.
    #[serde(skip)]
    pub change_seq: Option<u64>,
    /// The run and question this run was forked from, if it is a fork
    /// ([`RunState::forked_from`]); absent from the JSON form otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<ForkedFrom>,
    /// The run and call that started this run as a sub-agent's child run
    /// ([`RunState::parent`]); absent from the JSON form for a run started on its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ParentRun>,
}

impl RunSummary {
    /// The run's identity: its resource and its id.
    pub fn key(&self) -> RunKey {
        RunKey::new(self.resource_id.clone(), self.run_id.clone())
    }

    /// Its thread's identity.
    pub fn thread_key(&self) -> ThreadKey {
        ThreadKey::new(self.resource_id.clone(), self.thread_id.clone())
    }
}

impl RunState {
    /// A new running run with its own first messages, whose history is the thread's through
    /// completion sequence `history_through`.
    pub(crate) fn new(
        run_id: RunId,
        thread_id: ThreadId,
        resource_id: Option<ResourceId>,
        agent_id: AgentId,
        model: Option<String>,
        messages: Vec<Message>,
        history_through: Option<u64>,
    ) -> Self {
        let now = now_ms();
        Self {
            format_version: RUN_FORMAT_VERSION,
            run_id,
            thread_id,
            resource_id,
            agent_id,
            model,
            status: RunStatus::Running,
            messages,
            history_through,
            legacy_history: None,
            steps: 0,
            pending_step: None,
            usage: Usage::default(),
            error: None,
            finish_reason: None,
            created_at_ms: now,
            updated_at_ms: now,
            forked_from: None,
            started_by: None,
            parent: None,
        }
    }

    /// Who started the run ([`crate::RunOptions::actor`]), if known: `None` for runs stored
    /// before askloop recorded it and runs started with no actor, `by` or resource.
    pub fn started_by(&self) -> Option<&Actor> {
        self.started_by.as_ref()
    }

    /// Every decision recorded on the run's calls, in call order, each call's records in
    /// order: the results' audit trails, then those of the calls still waiting (an approval
    /// quorum's votes so far). Each with its call's id and tool.
    pub fn decisions(&self) -> Vec<Decision<'_>> {
        let recorded = self.messages.iter().flat_map(|message| match message {
            Message::Tool { results } => results
                .iter()
                .flat_map(|result| {
                    result.audit.iter().map(|record| Decision {
                        tool_call_id: &result.tool_call_id,
                        tool_name: &result.tool_name,
                        record,
                    })
                })
                .collect::<Vec<_>>(),
            _ => Vec::new(),
        });
        let pending = self
            .pending_step
            .iter()
            .flat_map(|step| &step.calls)
            .flat_map(|slot| {
                let audit = match &slot.state {
                    CallState::Completed { result } if !result.audit.is_empty() => &result.audit,
                    _ => &slot.audit,
                };
                audit.iter().map(|record| Decision {
                    tool_call_id: &slot.call.id,
                    tool_name: &slot.call.name,
                    record,
                })
            });
        recorded.chain(pending).collect()
    }

    /// The run and question this run was forked from, if it is a fork ([`crate::Agent::fork`]).
    pub fn forked_from(&self) -> Option<&ForkedFrom> {
        self.forked_from.as_ref()
    }

    /// The run and call that started this run as a sub-agent's child run, if it is one
    /// ([`crate::AgentBuilder::subagent`]).
    pub fn parent(&self) -> Option<&ParentRun> {
        self.parent.as_ref()
    }

    /// The text of the run's last assistant message (its text parts, joined; empty without
    /// one): a completed run's answer.
    pub fn final_text(&self) -> String {
        last_text(&self.messages)
    }

    /// The run's id.
    pub fn run_id(&self) -> &RunId {
        &self.run_id
    }

    /// The thread the run belongs to.
    pub fn thread_id(&self) -> &ThreadId {
        &self.thread_id
    }

    /// The user or tenant owning the run, if given.
    pub fn resource_id(&self) -> Option<&ResourceId> {
        self.resource_id.as_ref()
    }

    /// The run's identity: its resource and its id.
    pub fn key(&self) -> RunKey {
        RunKey::new(self.resource_id.clone(), self.run_id.clone())
    }

    /// Its thread's identity: its resource and the thread id.
    pub fn thread_key(&self) -> ThreadKey {
        ThreadKey::new(self.resource_id.clone(), self.thread_id.clone())
    }

    /// Whether the run is `key`.
    pub fn is(&self, key: &RunKey) -> bool {
        self.run_id == key.run_id && self.resource_id == key.resource_id
    }

    /// The agent that runs it.
    pub fn agent_id(&self) -> &AgentId {
        &self.agent_id
    }

    /// The model SPEC the run was started with (e.g. `openai:gpt-4o-mini`), so a resume in
    /// another process can rebuild the same model; `None` when the agent was built without one.
    pub fn model_spec(&self) -> Option<&str> {
        self.model.as_deref()
    }

    /// Where the run is.
    pub fn status(&self) -> RunStatus {
        self.status
    }

    /// The run's own messages (its user input first), without its thread's earlier
    /// messages: those are the thread's ([`crate::RunStore::thread_history`] through
    /// [`RunState::history_through`]), or [`RunState::legacy_history`].
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// The highest thread completion sequence included in the run's history; `None` when the
    /// thread had no completed run when the run started (empty history).
    pub fn history_through(&self) -> Option<u64> {
        self.history_through
    }

    /// The thread history a format-1 state had copied into itself (kept when it was upgraded),
    /// used instead of the thread's; `None` for runs stored in format 2.
    pub fn legacy_history(&self) -> Option<&[Message]> {
        self.legacy_history.as_deref()
    }

    /// The call of the pending step that was claimed by a resume (or started, for a
    /// non-idempotent tool) and has no recorded result, with its recorded answer if any: what
    /// a crash left unfinished.
    pub fn unfinished_calls(&self) -> Vec<UnfinishedCall> {
        let Some(step) = &self.pending_step else {
            return Vec::new();
        };
        step.calls
            .iter()
            .filter_map(|slot| match &slot.state {
                CallState::Resuming { resume_data, .. } => Some(UnfinishedCall {
                    tool_call_id: slot.call.id.clone(),
                    tool_name: slot.call.name.clone(),
                    answer: Some(resume_data.clone()),
                    started_at_ms: None,
                }),
                CallState::Running { started_at_ms } => Some(UnfinishedCall {
                    tool_call_id: slot.call.id.clone(),
                    tool_name: slot.call.name.clone(),
                    answer: None,
                    started_at_ms: Some(*started_at_ms),
                }),
                _ => None,
            })
            .collect()
    }

    /// Model steps taken so far.
    pub fn steps(&self) -> u32 {
        self.steps
    }

    /// Tokens used by every model call of the run.
    pub fn usage(&self) -> crate::message::Usage {
        self.usage
    }

    /// Why the run failed, when its status is [`RunStatus::Failed`].
    pub fn failure(&self) -> Option<&RunFailure> {
        self.error.as_ref()
    }

    /// Why the run finished, once [`RunStatus::Completed`]: [`FinishReason::MaxSteps`] when it
    /// reached the agent's step limit while the model was still calling tools.
    pub fn finish_reason(&self) -> Option<FinishReason> {
        self.finish_reason
    }

    /// Creation time, milliseconds since the Unix epoch.
    pub fn created_at_ms(&self) -> u64 {
        self.created_at_ms
    }

    /// Last change, milliseconds since the Unix epoch.
    pub fn updated_at_ms(&self) -> u64 {
        self.updated_at_ms
    }

    /// The calls waiting for a person (an answer or an approval), with their questions, in
    /// call order.
    pub fn pending_tool_calls(&self) -> Vec<PendingToolCall> {
        let Some(step) = &self.pending_step else {
            return Vec::new();
        };
        step.calls
            .iter()
            .flat_map(|slot| match &slot.state {
                CallState::Suspended {
                    subagent: Some(wait),
                    ..
                } => wait
                    .pending
                    .iter()
                    .map(|pending| pending.clone().nested_under(&slot.call.id, wait))
                    .collect(),
                CallState::Suspended { suspension, .. } => {
                    vec![PendingToolCall::new(&slot.call, suspension)]
                }
                CallState::AwaitingApproval {
                    expires_at_ms,
                    quorum,
                } => vec![
                    PendingToolCall::approval(&slot.call, *expires_at_ms)
                        .with_votes(slot.votes(), *quorum),
                ],
                _ => Vec::new(),
            })
            .collect()
    }

    /// The run's listing entry.
    pub fn summary(&self) -> RunSummary {
        RunSummary {
            run_id: self.run_id.clone(),
            agent_id: self.agent_id.clone(),
            thread_id: self.thread_id.clone(),
            resource_id: self.resource_id.clone(),
            status: self.status,
            created_at_ms: self.created_at_ms,
            updated_at_ms: self.updated_at_ms,
            pending: self.pending_tool_calls(),
            first_message: first_message(&self.messages),
            change_seq: None,
            forked_from: self.forked_from.clone(),
            parent: self.parent.clone(),
        }
    }

    /// Every tool call id of the conversation's assistant messages.
    #[cfg(test)]
    pub(crate) fn tool_call_ids(&self) -> impl Iterator<Item = &ToolCallId> {
        self.messages.iter().flat_map(|message| match message {
            Message::Assistant { parts } => parts
                .iter()
                .filter_map(|part| match part {
                    crate::message::AssistantPart::ToolCall(call) => Some(&call.id),
                    _ => None,
                })
                .collect::<Vec<_>>(),
            _ => Vec::new(),
        })
    }

    /// When the call `tool_call_id` expired, if its deadline passed and a sweep gave it its
    /// "no answer came in time" result: the deadline that result records (ms since the Unix
    /// epoch). `None` for a call that was answered or decided, one that still waits (even past
    /// its deadline, until a sweep), and a call this run did not make.
    pub fn expired_at_ms(&self, tool_call_id: &ToolCallId) -> Option<u64> {
        let slot = self
            .pending_step
            .as_ref()
            .and_then(|step| step.calls.iter().find(|slot| &slot.call.id == tool_call_id));
        match slot {
            Some(slot) => match &slot.state {
                CallState::Completed { result } => expired_at(result, &slot.audit),
                _ => None,
            },
            None => self
                .result_for(tool_call_id)
                .and_then(|result| expired_at(result, &[])),
        }
    }

    /// The question call `tool_call_id` of this run asked, as it was asked: the waiting call's
    /// (pending, or claimed by an answer), else the one its recorded result keeps
    /// ([`ToolResult::suspension`]). `None` for a call that never suspended, one this run did
    /// not make, and results recorded before askloop kept questions.
    pub fn question(&self, tool_call_id: &ToolCallId) -> Option<&Suspension> {
        let waiting = self.pending_step.as_ref().and_then(|step| {
            step.calls
                .iter()
                .find(|slot| &slot.call.id == tool_call_id)
                .and_then(|slot| slot.state.suspension())
        });
        waiting.or_else(|| {
            self.result_for(tool_call_id)
                .and_then(|result| result.suspension.as_deref())
        })
    }

    /// The result this run (not its thread's history) recorded for this call, if any.
    pub(crate) fn result_for(&self, tool_call_id: &ToolCallId) -> Option<&ToolResult> {
        self.messages
            .iter()
            .rev()
            .find_map(|message| match message {
                Message::Tool { results } => results
                    .iter()
                    .find(|result| &result.tool_call_id == tool_call_id),
                _ => None,
            })
    }

    /// Marks the state changed now.
    pub(crate) fn touch(&mut self) {
        self.updated_at_ms = now_ms().max(self.updated_at_ms);
    }
}

/// When a completed call expired, if a sweep completed it as expired (its last audit record is
/// an expiry): the deadline its result records (`expiredAt`), else the time of that record.
/// `slot_audit` is the audit of its pending slot, for a result that does not carry its own yet.
pub(crate) fn expired_at(result: &ToolResult, slot_audit: &[AuditRecord]) -> Option<u64> {
    let audit = if result.audit.is_empty() {
        slot_audit
    } else {
        &result.audit
    };
    let record = audit
        .last()
        .filter(|record| record.action == AuditAction::Expire)?;
    let deadline = result
        .result
        .get("expiredAt")
        .and_then(Value::as_str)
        .and_then(crate::time::parse_rfc3339);
    Some(deadline.unwrap_or(record.at_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_parse_from_their_names_only() {
        for status in RunStatus::ALL {
            assert_eq!(status.as_str().parse::<RunStatus>(), Ok(status));
        }
        let error = "done".parse::<RunStatus>().unwrap_err();
        assert_eq!(
            error.to_string(),
            "unknown run status \"done\"; expected running, suspended, completed, failed or cancelled"
        );
    }
}
