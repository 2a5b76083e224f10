//! [`Chunk`]: what an agent's stream yields, in askloop's own terms.
//!
//! The JSON form that goes to clients (CLI `--json`, SSE) is produced in one place,
//! [`crate::wire`]; this enum is not serialized directly.

use crate::ids::{AgentId, RunId, ToolCallId};
use crate::message::Suspension;
use crate::message::{FinishReason, ToolArgs, ToolCall, ToolResult, Usage};
use crate::run::{PendingKind, PendingToolCall, SubagentOrigin, approval_schema};

/// One event of a run's stream.
///
/// A new run yields `Start`, then per step `StepStart`, `TextDelta`s, `ToolCall`s, `ToolResult`s
/// and `StepFinish`, and ends with `Finish` — or, when calls wait for a person, with one
/// `ToolCallSuspended` or `ToolCallApproval` per waiting call of the step (every one, also
/// those an earlier stream announced) and no `Finish`. A resumed run starts with the answered
/// calls' `ToolCall` and `ToolResult`.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Chunk {
    /// A new run started.
    Start {
        /// The agent running it.
        agent_id: AgentId,
    },
    /// A model step starts.
    StepStart {
        /// 1-based number of the step within the run.
        step: u32,
    },
    /// A piece of the model's visible text.
    TextDelta {
        /// The text.
        text: String,
    },
    /// A piece of the model's reasoning.
    ReasoningDelta {
        /// The text.
        text: String,
    },
    /// The model called a tool (arguments complete).
    ToolCall {
        /// The call.
        call: ToolCall,
    },
    /// A tool call has its result.
    ToolResult {
        /// The call it answers.
        call: ToolCall,
        /// The result.
        result: ToolResult,
    },
    /// A tool call suspended; the run state is already committed. The stream ends after the
    /// last of these.
    ToolCallSuspended {
        /// The suspended call.
        call: ToolCall,
        /// What it asks, and which answers it accepts.
        suspension: Suspension,
        /// Where the call comes from when a sub-agent asked it (the call's id is then
        /// `PARENT_CALL~CHILD_CALL`); `None` for the run's own calls.
        subagent: Option<SubagentOrigin>,
    },
    /// A tool call waits for a person's approval before its tool runs; the run state is
    /// already committed. Answer it with `approve_tool_call` / `decline_tool_call`.
    ToolCallApproval {
        /// The call awaiting approval.
        call: ToolCall,
        /// JSON Schema of the answer an approval accepts ([`crate::run::approval_schema`]).
        resume_schema: serde_json::Value,
        /// When the approval expires unheard (ms since the Unix epoch), if it has a deadline
        /// ([`crate::AgentBuilder::approval_timeout`]).
        expires_at_ms: Option<u64>,
        /// The approvals recorded so far, for a call that needs several
        /// ([`crate::ApproverPolicy::quorum`]); empty otherwise. A stream that only recorded an
        /// approval (not the last one a quorum needs) consists of these chunks: the approval is
        /// in this list, the call still waits.
        approvals: Vec<crate::run::ApprovalVote>,
        /// How many approvals the call needs, when more than one.
        quorum: Option<u32>,
        /// Where the call comes from when a sub-agent's run waits for the approval; `None`
        /// for the run's own calls.
        subagent: Option<SubagentOrigin>,
    },
    /// A chunk of a sub-agent's child run, streamed while the parent's call of the sub-agent
    /// runs ([`crate::AgentBuilder::subagent`]). The child's own waiting calls are not among
    /// them: the parent announces them as its own when it suspends.
    Subagent {
        /// The child run.
        run_id: RunId,
        /// The sub-agent.
        agent_id: AgentId,
        /// The parent's call of the sub-agent.
        tool_call_id: ToolCallId,
        /// The child's chunk (itself a `Subagent` chunk for a grandchild's).
        chunk: Box<Chunk>,
    },
    /// A model step finished.
    StepFinish {
        /// Why it finished.
        reason: FinishReason,
        /// Tokens used by the step's model call (zero for a step closed by a resume).
        usage: Usage,
        /// Whether the loop goes on with another step.
        is_continued: bool,
    },
    /// The run finished.
    Finish {
        /// Why it finished.
        reason: FinishReason,
        /// Tokens used by the whole run.
        usage: Usage,
        /// The text of the final step.
        text: String,
    },
}

impl Chunk {
    /// The `tool-call-suspended` or `tool-call-approval` chunk that announces the waiting call
    /// `pending` (an approval's with its votes so far; a sub-agent's child's with its origin):
    /// how a stream ends, and how a replay tells it again.
    pub fn waiting(pending: PendingToolCall) -> Self {
        let call = ToolCall {
            id: pending.tool_call_id,
            name: pending.tool_name,
            args: ToolArgs::Json(pending.args),
        };
        match pending.kind {
            PendingKind::Approval => Self::ToolCallApproval {
                call,
                resume_schema: pending.resume_schema.unwrap_or_else(approval_schema),
                expires_at_ms: pending.expires_at_ms,
                approvals: pending.approvals,
                quorum: pending.quorum,
                subagent: pending.subagent,
            },
            _ => Self::ToolCallSuspended {
                call,
                suspension: Suspension {
                    payload: pending.suspend_payload,
                    resume_schema: pending.resume_schema,
                    expires_at_ms: pending.expires_at_ms,
                },
                subagent: pending.subagent,
            },
        }
    }
}
