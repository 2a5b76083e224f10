//! The JSON wire format of chunks: one object per chunk, as printed by `askloop --json` and
//! sent over SSE; and of a pending call ([`PendingCall`], with its answer form as JSON,
//! [`field_to_json`]), as askloop's own API shows one.
//!
//! The shape follows the reference framework's agent stream (Mastra's `fullStream` chunks as its
//! server sends them, captured in `shared/reference/`): `{"type", "runId", "from": "AGENT",
//! "payload"}`, with the payload fields its client (`@mastra/client-js`) reads. The full format
//! is documented in `docs/wire-format.md`; snapshot tests pin it against the captures.

mod field;
mod pending;

use serde_json::{Value, json};

pub use crate::wire::field::field_to_json;
use crate::wire::pending::approvals_json;
pub use crate::wire::pending::{ApprovalJson, PendingCall};

use crate::chunk::Chunk;
use crate::ids::RunId;
use crate::message::Suspension;
use crate::message::{FinishReason, ToolCall, Usage};
use crate::run::SubagentOrigin;

fn envelope(kind: &str, run_id: &RunId, payload: Value) -> Value {
    json!({"type": kind, "runId": run_id.as_str(), "from": "AGENT", "payload": payload})
}

fn usage_json(usage: Usage) -> Value {
    json!({
        "inputTokens": usage.input_tokens,
        "outputTokens": usage.output_tokens,
        "totalTokens": usage.total_tokens()
    })
}

fn call_fields(call: &ToolCall) -> serde_json::Map<String, Value> {
    let mut fields = serde_json::Map::new();
    fields.insert("toolCallId".into(), Value::String(call.id.to_string()));
    fields.insert("toolName".into(), Value::String(call.name.clone()));
    fields.insert("args".into(), call.args.to_value());
    fields
}

fn step_result(reason: FinishReason, is_continued: bool) -> Value {
    json!({"reason": reason.as_str(), "isContinued": is_continued})
}

/// The chunk's wire JSON.
pub fn chunk_to_json(run_id: &RunId, chunk: &Chunk) -> Value {
    match chunk {
        Chunk::Start { agent_id } => envelope("start", run_id, json!({"id": agent_id.as_str()})),
        Chunk::StepStart { step } => envelope(
            "step-start",
            run_id,
            json!({"stepNumber": step, "warnings": [], "request": {}}),
        ),
        Chunk::TextDelta { text } => envelope("text-delta", run_id, json!({"text": text})),
        Chunk::ReasoningDelta { text } => {
            envelope("reasoning-delta", run_id, json!({"text": text}))
        }
        Chunk::ToolCall { call } => envelope("tool-call", run_id, Value::Object(call_fields(call))),
        Chunk::ToolResult { call, result } => {
            let mut fields = call_fields(call);
            fields.insert("result".into(), result.result.clone());
            fields.insert("isError".into(), Value::Bool(result.is_error));
            envelope("tool-result", run_id, Value::Object(fields))
        }
        Chunk::ToolCallSuspended {
            call,
            suspension,
            subagent,
        } => {
            let mut fields = call_fields(call);
            insert_origin(&mut fields, subagent.as_ref());
            suspension_fields(&mut fields, suspension);
            envelope("tool-call-suspended", run_id, Value::Object(fields))
        }
        Chunk::ToolCallApproval {
            call,
            resume_schema,
            expires_at_ms,
            approvals,
            quorum,
            subagent,
        } => {
            let mut fields = call_fields(call);
            insert_origin(&mut fields, subagent.as_ref());
            approval_fields(
                &mut fields,
                resume_schema,
                *expires_at_ms,
                approvals,
                *quorum,
            );
            envelope("tool-call-approval", run_id, Value::Object(fields))
        }
        Chunk::StepFinish {
            reason,
            usage,
            is_continued,
        } => envelope(
            "step-finish",
            run_id,
            json!({"stepResult": step_result(*reason, *is_continued), "output": {"usage": usage_json(*usage)}}),
        ),
        Chunk::Finish {
            reason,
            usage,
            text,
        } => envelope(
            "finish",
            run_id,
            json!({"stepResult": step_result(*reason, false), "output": {"text": text, "usage": usage_json(*usage)}}),
        ),
        Chunk::Subagent {
            run_id: child,
            agent_id,
            tool_call_id,
            chunk,
        } => {
            let inner = chunk_to_json(child, chunk);
            let payload = json!({"runId": child.as_str(), "agentId": agent_id.as_str(), "toolCallId": tool_call_id.as_str(), "chunk": inner});
            envelope("subagent-chunk", run_id, payload)
        }
    }
}

/// A `tool-call-suspended` chunk's fields beyond the call's.
fn suspension_fields(fields: &mut serde_json::Map<String, Value>, suspension: &Suspension) {
    fields.insert("suspendPayload".into(), suspension.payload.clone());
    // The reference sends the resume schema as a JSON string, not an object.
    let schema = suspension
        .resume_schema
        .as_ref()
        .map_or(Value::Null, |schema| Value::String(schema.to_string()));
    fields.insert("resumeSchema".into(), schema);
}

/// A `tool-call-approval` chunk's fields beyond the call's.
fn approval_fields(
    fields: &mut serde_json::Map<String, Value>,
    resume_schema: &Value,
    expires_at_ms: Option<u64>,
    approvals: &[crate::run::ApprovalVote],
    quorum: Option<u32>,
) {
    // As for suspensions, the reference sends the schema as a JSON string.
    fields.insert(
        "resumeSchema".into(),
        Value::String(resume_schema.to_string()),
    );
    if let Some(at) = expires_at_ms {
        fields.insert("expiresAt".into(), Value::String(crate::time::rfc3339(at)));
    }
    // askloop's: a quorum's votes so far (absent for a call one approver decides).
    if let Some(quorum) = quorum {
        fields.insert("quorum".into(), json!(quorum));
    }
    if !approvals.is_empty() {
        fields.insert("approvals".into(), json!(approvals_json(approvals)));
    }
}

/// askloop's: a sub-agent's waiting call says where it comes from,
/// `"subagent": {"path": [agent ids], "runId", "toolCallId"}` (the asking run and the call's own
/// id there); absent for the run's own calls.
fn insert_origin(fields: &mut serde_json::Map<String, Value>, origin: Option<&SubagentOrigin>) {
    if let Some(origin) = origin {
        fields.insert("subagent".into(), origin_json(origin));
    }
}

/// The wire JSON of a sub-agent's waiting call's origin.
pub fn origin_json(origin: &SubagentOrigin) -> Value {
    json!({
        "path": origin.path.iter().map(|agent| agent.as_str()).collect::<Vec<_>>(),
        "runId": origin.run_id.as_str(),
        "toolCallId": origin.tool_call_id.as_str(),
    })
}

/// An `error` chunk: `{"type":"error", …, "payload":{"error":{"message","code"}}}`.
pub fn error_to_json(run_id: &RunId, code: &str, message: &str) -> Value {
    envelope(
        "error",
        run_id,
        json!({"error": {"message": message, "code": code}}),
    )
}
