//! The stored state of a run ([`RunState`]): its status, its conversation and the tool calls it
//! waits on. Stores keep it as opaque JSON text ([`crate::store::codec`]); only the loop changes
//! it.
//!
//! Format 1 (what [`crate::store::codec::encode_state`] writes):
//!
//! ```json
//! {
//!   "formatVersion": 1,
//!   "runId": "0193…", "threadId": "0193…", "resourceId": null,
//!   "agentId": "assistant", "model": "scripted:demo.json",
//!   "status": "suspended",
//!   "messages": [{"role": "user", "text": "Summarize my project"},
//!                {"role": "assistant", "parts": [{"type": "tool-call", "id": "c1", "name": "ask_user", "args": {"json": {"question": "Which repo?"}}}]}],
//!   "historyLen": 0,
//!   "steps": 1,
//!   "pendingStep": {"calls": [{"call": {"id": "c1", "name": "ask_user", "args": {"json": {"question": "Which repo?"}}},
//!                              "state": {"status": "suspended", "suspension": {"payload": {"question": "Which repo?"}, "resumeSchema": {"type": "string"}}}}]},
//!   "usage": {"inputTokens": 10, "outputTokens": 5},
//!   "error": null,
//!   "createdAtMs": 1796007590064, "updatedAtMs": 1796007590140
//! }
//! ```

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ids::{AgentId, ResourceId, RunId, ThreadId, ToolCallId};
use crate::message::{FinishReason, Message, ToolCall, ToolResult, Usage};
use crate::tool::Suspension;

/// The stored run format this build writes and reads.
pub(crate) const RUN_FORMAT_VERSION: u32 = 1;

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
}

impl RunStatus {
    /// Every status, in life order.
    pub const ALL: [RunStatus; 4] = [
        Self::Running,
        Self::Suspended,
        Self::Completed,
        Self::Failed,
    ];

    /// The status's name (`"running"`, `"suspended"`, `"completed"`, `"failed"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Suspended => "suspended",
            Self::Completed => "completed",
            Self::Failed => "failed",
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
#[error("unknown run status {given:?}; expected running, suspended, completed or failed")]
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
/// opaque JSON text of [`crate::store::codec`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunState {
    pub(crate) format_version: u32,
    pub(crate) run_id: RunId,
    pub(crate) thread_id: ThreadId,
    pub(crate) resource_id: Option<ResourceId>,
    pub(crate) agent_id: AgentId,
    /// The model SPEC the run was started with (e.g. `scripted:PATH`).
    pub(crate) model: Option<String>,
    pub(crate) status: RunStatus,
    /// The conversation: the thread's earlier messages, then this run's.
    pub(crate) messages: Vec<Message>,
    /// How many of `messages` came from the thread's earlier runs.
    pub(crate) history_len: usize,
    pub(crate) steps: u32,
    /// The tool calls of the last assistant message, while any of them lacks a result.
    pub(crate) pending_step: Option<PendingStep>,
    pub(crate) usage: Usage,
    pub(crate) error: Option<RunFailure>,
    /// Why the run finished, once completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) finish_reason: Option<FinishReason>,
    pub(crate) created_at_ms: u64,
    pub(crate) updated_at_ms: u64,
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
}

/// Where one tool call of a pending step stands.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "status")]
pub(crate) enum CallState {
    /// Finished with this result.
    Completed { result: ToolResult },
    /// Waiting for an answer.
    Suspended { suspension: Suspension },
    /// An answer was accepted and claimed; the tool's resume path is running (or was, when a
    /// process died: `continue_stream` runs it again with the recorded answer).
    Resuming {
        suspension: Suspension,
        resume_data: Value,
    },
}

impl PendingStep {
    /// The ids of the calls still waiting for an answer, in call order.
    pub(crate) fn suspended_ids(&self) -> Vec<ToolCallId> {
        self.calls
            .iter()
            .filter(|slot| matches!(slot.state, CallState::Suspended { .. }))
            .map(|slot| slot.call.id.clone())
            .collect()
    }

    /// Every result, in call order, if all are complete.
    pub(crate) fn results(&self) -> Option<Vec<ToolResult>> {
        self.calls
            .iter()
            .map(|slot| match &slot.state {
                CallState::Completed { result } => Some(result.clone()),
                _ => None,
            })
            .collect()
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
        }
    }
}

/// What a run listing shows of one run: ids, status, times and the pending questions, without
/// the conversation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct RunSummary {
    /// The run.
    pub run_id: RunId,
    /// The agent that runs it.
    pub agent_id: AgentId,
    /// Its thread.
    pub thread_id: ThreadId,
    /// Its owner, if given.
    pub resource_id: Option<ResourceId>,
    /// Where it is.
    pub status: RunStatus,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_at_ms: u64,
    /// Last change, milliseconds since the Unix epoch.
    pub updated_at_ms: u64,
    /// The calls waiting for an answer (empty unless suspended).
    pub pending: Vec<PendingToolCall>,
}

impl RunState {
    /// A new running run with the given conversation.
    pub(crate) fn new(
        run_id: RunId,
        thread_id: ThreadId,
        resource_id: Option<ResourceId>,
        agent_id: AgentId,
        model: Option<String>,
        messages: Vec<Message>,
        history_len: usize,
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
            history_len,
            steps: 0,
            pending_step: None,
            usage: Usage::default(),
            error: None,
            finish_reason: None,
            created_at_ms: now,
            updated_at_ms: now,
        }
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

    /// The whole conversation: the thread's earlier messages, then this run's.
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// The messages this run added to its thread (everything after the thread's history).
    pub fn run_messages(&self) -> &[Message] {
        self.messages.get(self.history_len..).unwrap_or(&[])
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

    /// The calls waiting for an answer, with their questions, in call order.
    pub fn pending_tool_calls(&self) -> Vec<PendingToolCall> {
        let Some(step) = &self.pending_step else {
            return Vec::new();
        };
        step.calls
            .iter()
            .filter_map(|slot| match &slot.state {
                CallState::Suspended { suspension } => {
                    Some(PendingToolCall::new(&slot.call, suspension))
                }
                _ => None,
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
        }
    }

    /// Every tool call id of the conversation's assistant messages.
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

    /// Whether this run (not its thread's history) recorded a result for this call.
    pub(crate) fn has_result_for(&self, tool_call_id: &ToolCallId) -> bool {
        self.run_messages().iter().any(|message| match message {
            Message::Tool { results } => results
                .iter()
                .any(|result| &result.tool_call_id == tool_call_id),
            _ => false,
        })
    }

    /// Marks the state changed now.
    pub(crate) fn touch(&mut self) {
        self.updated_at_ms = now_ms().max(self.updated_at_ms);
    }
}

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
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
            "unknown run status \"done\"; expected running, suspended, completed or failed"
        );
    }
}
