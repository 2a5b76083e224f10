//! The stored state of a run: its format, its status and the tool calls it waits on.
//!
//! This is the versioned, documented format every [`crate::RunStore`] persists (as JSON text).
//! Format 1:
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
//!
//! Readers refuse a `formatVersion` they do not know ([`RunState::check_format`]).

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ids::{AgentId, ResourceId, RunId, ThreadId, ToolCallId};
use crate::message::{Message, ToolCall, ToolResult, Usage};
use crate::tool::Suspension;

/// The stored run format this build writes and reads.
pub const RUN_FORMAT_VERSION: u32 = 1;

/// Where a run is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// A process is working on it (calling the model or running tools).
    Running,
    /// Waiting for answers to one or more suspended tool calls.
    Suspended,
    /// Finished: the model gave its final answer (or the step limit was reached).
    Completed,
    /// Stopped by an error; `runs continue` can retry the step that failed.
    Failed,
}

impl RunStatus {
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

impl std::str::FromStr for RunStatus {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "running" => Ok(Self::Running),
            "suspended" => Ok(Self::Suspended),
            "completed" => Ok(Self::Completed),
            "failed" => Ok(Self::Failed),
            other => Err(format!(
                "unknown run status {other:?}; expected running, suspended, completed or failed"
            )),
        }
    }
}

/// The whole state of one run: enough to continue it in any process.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunState {
    /// Always [`RUN_FORMAT_VERSION`] when written by this build.
    pub format_version: u32,
    /// The run.
    pub run_id: RunId,
    /// The thread the run belongs to.
    pub thread_id: ThreadId,
    /// The user or tenant owning the run, if given.
    pub resource_id: Option<ResourceId>,
    /// The agent that runs it.
    pub agent_id: AgentId,
    /// The model SPEC the run was started with (e.g. `scripted:PATH`), so a resume in another
    /// process can rebuild the same model.
    pub model: Option<String>,
    /// Where the run is.
    pub status: RunStatus,
    /// The conversation: the thread's earlier messages, then this run's.
    pub messages: Vec<Message>,
    /// How many of `messages` came from the thread's earlier runs.
    pub history_len: usize,
    /// Model steps taken so far.
    pub steps: u32,
    /// The tool calls of the last assistant message, while any of them lacks a result.
    pub pending_step: Option<PendingStep>,
    /// Tokens used by every model call of the run.
    pub usage: Usage,
    /// Why the run failed, when it did.
    pub error: Option<RunFailure>,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_at_ms: u64,
    /// Last change, milliseconds since the Unix epoch.
    pub updated_at_ms: u64,
}

/// Why a run failed, as recorded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunFailure {
    /// A stable code (`"model_error"`, `"max_steps"`, …).
    pub code: String,
    /// The error's message.
    pub message: String,
}

/// The tool calls of one step that do not all have results yet.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingStep {
    /// One slot per tool call, in the order the model made them.
    pub calls: Vec<CallSlot>,
}

/// One tool call of a pending step and where it stands.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallSlot {
    /// The call.
    pub call: ToolCall,
    /// Its state.
    pub state: CallState,
}

/// Where one tool call of a pending step stands.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "status")]
pub enum CallState {
    /// Finished with this result.
    Completed {
        /// The result.
        result: ToolResult,
    },
    /// Waiting for an answer.
    Suspended {
        /// What it asked.
        suspension: Suspension,
    },
    /// An answer was accepted and claimed; the tool's resume path is running (or was, when a
    /// process died: `runs continue` runs it again with the recorded answer).
    Resuming {
        /// What it asked.
        suspension: Suspension,
        /// The accepted answer.
        resume_data: Value,
    },
}

impl PendingStep {
    /// The ids of the calls still waiting for an answer, in call order.
    pub fn suspended_ids(&self) -> Vec<ToolCallId> {
        self.calls
            .iter()
            .filter(|slot| matches!(slot.state, CallState::Suspended { .. }))
            .map(|slot| slot.call.id.clone())
            .collect()
    }

    /// Whether every call has its result.
    pub fn is_complete(&self) -> bool {
        self.calls
            .iter()
            .all(|slot| matches!(slot.state, CallState::Completed { .. }))
    }

    /// Every result, in call order, if all are complete.
    pub fn results(&self) -> Option<Vec<ToolResult>> {
        self.calls
            .iter()
            .map(|slot| match &slot.state {
                CallState::Completed { result } => Some(result.clone()),
                _ => None,
            })
            .collect()
    }
}

/// A pending question of a suspended run, as listed by `runs show` and returned by `generate`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
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

impl RunState {
    /// A new running run with the given conversation.
    pub fn new(
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
            created_at_ms: now,
            updated_at_ms: now,
        }
    }

    /// Checks that this build understands the state's format.
    ///
    /// # Errors
    /// The unknown version, if it is not [`RUN_FORMAT_VERSION`].
    pub fn check_format(&self) -> Result<(), u32> {
        if self.format_version == RUN_FORMAT_VERSION {
            Ok(())
        } else {
            Err(self.format_version)
        }
    }

    /// The calls waiting for an answer, with their questions.
    pub fn pending_tool_calls(&self) -> Vec<PendingToolCall> {
        let Some(step) = &self.pending_step else {
            return Vec::new();
        };
        step.calls
            .iter()
            .filter_map(|slot| match &slot.state {
                CallState::Suspended { suspension } => Some(PendingToolCall {
                    tool_call_id: slot.call.id.clone(),
                    tool_name: slot.call.name.clone(),
                    args: slot.call.args.to_value(),
                    suspend_payload: suspension.payload.clone(),
                    resume_schema: suspension.resume_schema.clone(),
                }),
                _ => None,
            })
            .collect()
    }

    /// The messages this run added to its thread (everything after the history).
    pub fn run_messages(&self) -> &[Message] {
        self.messages.get(self.history_len..).unwrap_or(&[])
    }

    /// Marks the state changed now.
    pub fn touch(&mut self) {
        self.updated_at_ms = now_ms();
    }
}

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}
