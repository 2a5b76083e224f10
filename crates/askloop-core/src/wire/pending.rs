//! A pending call as JSON: the one object every route of askloop's own API shows a call that
//! waits for a person as ([`PendingCall`]).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::form::Field;
use crate::ids::{RunId, ToolCallId};
use crate::message::{ToolArgs, ToolCall};
use crate::run::{ApprovalVote, PendingKind, PendingToolCall, SubagentOrigin};
use crate::tool::Suspension;
use crate::wire::field::field_to_json;

/// A call that waits for a person, as askloop's own API shows it everywhere: `GET /api/runs`
/// and `GET /api/runs/{runId}` (`pendingToolCalls[]`), the inbox's `question-raised` events,
/// the `data` of the `/chat` stream's `data-askloop-question` part, and the page.
///
/// As JSON (camelCase; `docs/wire-format.md`, "Pending calls"):
///
/// ```json
/// {
///   "runId": "R", "toolCallId": "c1", "toolName": "ask_user", "kind": "answer",
///   "args": {"question": "Which repo?", "options": [{"label": "main"}]},
///   "payload": {"question": "Which repo?", "options": [{"label": "main", "description": "…"}],
///               "selectionMode": "single_select", "expiresAt": "2026-12-05T14:00:00.000Z"},
///   "resumeSchema": {"type": "string", "enum": ["main"]},
///   "form": {"kind": "select", "choices": [{"value": "main", "label": "main", "description": "…"}], …},
///   "expiresAt": "2026-12-05T14:00:00.000Z"
/// }
/// ```
///
/// `resumeSchema`, `form` and `expiresAt` are absent when the call has none. An approval that
/// needs several approvers also has `"quorum": 2` and, once some approved,
/// `"approvals": [{"by": "ops-key", "at": "…"}]` (a vote that edited the arguments also has
/// `"args": {…}`, what it approved). Not this shape:
/// the `tool-call-suspended` and `tool-call-approval` chunks and the suspended-runs list, which
/// keep the reference framework's names (`suspendPayload`, `requiresApproval`).
///
/// # Example
///
/// ```
/// use askloop_core::wire::PendingCall;
/// use askloop_core::model::{ToolArgs, ToolCall};
/// use askloop_core::{PendingToolCall, RunId, Suspension};
/// use serde_json::json;
///
/// let call = ToolCall {
///     id: "c1".into(),
///     name: "confirm".into(),
///     args: ToolArgs::Json(json!({})),
/// };
/// let mut suspension = Suspension::new(json!({"question": "Ship it?"}));
/// suspension.resume_schema = Some(json!({"type": "boolean"}));
/// let pending = PendingCall::of(&RunId::from("R"), &PendingToolCall::new(&call, &suspension));
/// let json = serde_json::to_value(&pending)?;
/// assert_eq!(json["payload"]["question"], "Ship it?");
/// assert_eq!(json["form"]["kind"], "confirm");
/// assert!(json.get("expiresAt").is_none());
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(
    feature = "openapi",
    schema(description = "A call that waits for a person (a question or an \
    approval), the same object everywhere askloop's API shows one: `pendingToolCalls[]` of the runs \
    routes, the inbox's `question-raised` events, the `data` of the `/chat` stream's \
    `data-askloop-question` part. `resumeSchema`, `form` and `expiresAt` are absent when the call has \
    none (docs/wire-format.md, \"Pending calls\").")
)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct PendingCall {
    /// The run the call belongs to.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub run_id: RunId,
    /// The call's id: answer it with this.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub tool_call_id: ToolCallId,
    /// The tool.
    pub tool_name: String,
    /// What the call waits for: `answer` (a question) or `approval`.
    pub kind: PendingKind,
    /// The call's arguments (a JSON string when the model wrote arguments that are not JSON).
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub args: Value,
    /// What the tool asked, any JSON: for `ask_user` `{question, options?: [{label,
    /// description?}], selectionMode, allowOther?, expiresAt?}`; for an approval `{toolName,
    /// args, expiresAt?}`.
    pub payload: Value,
    /// JSON Schema of accepted answers; absent when any JSON is accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub resume_schema: Option<Value>,
    /// The resume schema read as a form field, as `askloop_core::wire::field_to_json` writes it
    /// (`{kind, title, description, hint, …}`): what a front end renders the answer form from.
    /// Absent without a resume schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub form: Option<Value>,
    /// When the call expires unheard (RFC 3339, UTC with milliseconds, e.g.
    /// `2026-12-05T14:00:00.000Z`): a question's deadline, or an approval's (the agent's
    /// approval timeout). Absent without a deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub expires_at: Option<String>,
    /// For an approval that needs several approvers (`quorum`): the approvals recorded so far,
    /// in order. Absent when there are none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approvals: Vec<ApprovalJson>,
    /// For an approval that needs several approvers: how many. Absent for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quorum: Option<u32>,
    /// Where the call comes from when a sub-agent asked it: `{"path": ["researcher", …],
    /// "runId", "toolCallId"}` (the agents from this run's child to the asking run, that run,
    /// and the call's id there; `toolCallId` above is `PARENT_CALL~CHILD_CALL`). Absent for the
    /// run's own calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub subagent: Option<SubagentOrigin>,
}

/// One approval of a call that needs several, as JSON: `{"by": "ops-key", "at":
/// "2026-12-05T14:00:00.000Z", "args": {…}}` (`by` absent when the approver was not named,
/// `args` when the approver approved the model's arguments unedited).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ApprovalJson {
    /// The approver's actor id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// When (RFC 3339, UTC with milliseconds).
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub at: String,
    /// The arguments this approver approved, when they edited them (differ from the call's
    /// `args`); absent for the model's. Later approvers must approve the same ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub args: Option<Value>,
}

/// The JSON of a quorum's votes.
pub(crate) fn approvals_json(votes: &[ApprovalVote]) -> Vec<ApprovalJson> {
    votes
        .iter()
        .map(|vote| ApprovalJson {
            by: vote.by.clone(),
            at: crate::time::rfc3339(vote.at_ms),
            args: vote.args.clone(),
        })
        .collect()
}

/// The votes of a chunk's or a pending call's `approvals` JSON.
fn votes_of(approvals: Option<&Value>) -> Vec<ApprovalVote> {
    let Some(Value::Array(approvals)) = approvals else {
        return Vec::new();
    };
    approvals
        .iter()
        .filter_map(|vote| {
            Some(ApprovalVote {
                by: vote.get("by").and_then(Value::as_str).map(str::to_owned),
                at_ms: crate::time::parse_rfc3339(vote.get("at")?.as_str()?)?,
                args: vote.get("args").filter(|args| !args.is_null()).cloned(),
            })
        })
        .collect()
}

impl PendingCall {
    /// The pending call `call` of run `run_id`.
    pub fn of(run_id: &RunId, call: &PendingToolCall) -> Self {
        Self {
            run_id: run_id.clone(),
            tool_call_id: call.tool_call_id.clone(),
            tool_name: call.tool_name.clone(),
            kind: call.kind,
            args: call.args.clone(),
            payload: call.suspend_payload.clone(),
            resume_schema: call.resume_schema.clone(),
            form: call
                .resume_schema
                .as_ref()
                .map(|schema| field_to_json(&Field::from_schema(schema))),
            expires_at: call.expires_at_ms.map(crate::time::rfc3339),
            approvals: approvals_json(&call.approvals),
            quorum: call.quorum,
            subagent: call.subagent.clone(),
        }
    }

    /// The pending call a `tool-call-suspended` or `tool-call-approval` chunk announces, read
    /// from the chunk's wire JSON ([`crate::wire::chunk_to_json`]): the same object
    /// [`PendingCall::of`] makes of the call the run stored. `None` for any other chunk.
    ///
    /// A question's deadline is read from its payload's `expiresAt` (tools that set a deadline
    /// put it there), an approval's from the chunk's.
    pub fn of_chunk(chunk: &Value) -> Option<Self> {
        let run_id = RunId::from(chunk.get("runId")?.as_str()?);
        let payload = chunk.get("payload")?;
        let call = ToolCall {
            id: ToolCallId::from(payload.get("toolCallId")?.as_str()?),
            name: payload.get("toolName")?.as_str()?.to_owned(),
            args: ToolArgs::Json(payload.get("args").cloned().unwrap_or(Value::Null)),
        };
        let deadline = |holder: Option<&Value>| {
            holder
                .and_then(|holder| holder.get("expiresAt"))
                .and_then(Value::as_str)
                .and_then(crate::time::parse_rfc3339)
        };
        let pending = match chunk.get("type")?.as_str()? {
            "tool-call-suspended" => {
                let suspend_payload = payload.get("suspendPayload").cloned();
                let suspension = Suspension {
                    expires_at_ms: deadline(suspend_payload.as_ref()),
                    payload: suspend_payload.unwrap_or(Value::Null),
                    // The chunk carries the schema as a JSON string, as the reference does.
                    resume_schema: match payload.get("resumeSchema") {
                        Some(Value::String(text)) => serde_json::from_str(text).ok(),
                        Some(Value::Null) | None => None,
                        Some(other) => Some(other.clone()),
                    },
                };
                PendingToolCall::new(&call, &suspension)
            }
            "tool-call-approval" => PendingToolCall::approval(&call, deadline(Some(payload)))
                .with_votes(
                    votes_of(payload.get("approvals")),
                    payload
                        .get("quorum")
                        .and_then(Value::as_u64)
                        .and_then(|quorum| u32::try_from(quorum).ok()),
                ),
            _ => return None,
        };
        let mut pending = pending;
        pending.subagent = payload
            .get("subagent")
            .and_then(|origin| serde_json::from_value(origin.clone()).ok());
        Some(Self::of(&run_id, &pending))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::chunk::Chunk;
    use crate::ids::RunId;
    use crate::message::{ToolArgs, ToolCall};
    use crate::run::PendingToolCall;
    use crate::tool::Suspension;
    use crate::wire::{PendingCall, chunk_to_json};

    fn call(name: &str, args: Value) -> ToolCall {
        ToolCall {
            id: "c1".into(),
            name: name.into(),
            args: ToolArgs::Json(args),
        }
    }

    fn question() -> (ToolCall, Suspension) {
        let args = json!({"question": "Which repo?", "options": [{"label": "main", "description": "the default"}]});
        let mut suspension = Suspension::new(json!({
            "question": "Which repo?",
            "options": [{"label": "main", "description": "the default"}],
            "selectionMode": "single_select",
            "expiresAt": "2026-12-05T14:00:00.000Z",
        }));
        suspension.resume_schema = Some(json!({"type": "string", "enum": ["main"]}));
        suspension.expires_at_ms = Some(1_796_479_200_000);
        (call("ask_user", args), suspension)
    }

    #[test]
    fn a_question_is_the_documented_shape() {
        let (call, suspension) = question();
        let pending = PendingCall::of(&RunId::from("R"), &PendingToolCall::new(&call, &suspension));
        let json = serde_json::to_value(&pending).unwrap();
        let mut keys: Vec<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "args",
                "expiresAt",
                "form",
                "kind",
                "payload",
                "resumeSchema",
                "runId",
                "toolCallId",
                "toolName"
            ]
        );
        assert_eq!(json["runId"], "R");
        assert_eq!(json["kind"], "answer");
        assert_eq!(json["payload"]["options"][0]["description"], "the default");
        assert_eq!(json["form"]["kind"], "select");
        assert_eq!(json["expiresAt"], "2026-12-05T14:00:00.000Z");
    }

    #[test]
    fn what_a_call_has_not_is_absent() {
        let call = call("note", json!({}));
        let pending = PendingCall::of(
            &RunId::from("R"),
            &PendingToolCall::new(&call, &Suspension::new(Value::Null)),
        );
        let json = serde_json::to_value(&pending).unwrap();
        assert_eq!(json["payload"], Value::Null);
        for key in ["resumeSchema", "form", "expiresAt"] {
            assert!(json.get(key).is_none(), "{key} in {json}");
        }
    }

    #[test]
    fn a_suspended_chunk_reads_back_as_the_stored_call() {
        let (call, suspension) = question();
        let chunk = chunk_to_json(
            &RunId::from("R"),
            &Chunk::ToolCallSuspended {
                call: call.clone(),
                suspension: suspension.clone(),
                subagent: None,
            },
        );
        let stored = PendingCall::of(&RunId::from("R"), &PendingToolCall::new(&call, &suspension));
        assert_eq!(PendingCall::of_chunk(&chunk), Some(stored));
    }

    #[test]
    fn an_approval_chunk_reads_back_as_the_stored_call() {
        let call = call("delete", json!({"path": "/tmp/x"}));
        for deadline in [None, Some(1_796_479_200_000)] {
            let chunk = chunk_to_json(
                &RunId::from("R"),
                &Chunk::ToolCallApproval {
                    call: call.clone(),
                    resume_schema: crate::run::approval_schema(),
                    expires_at_ms: deadline,
                    approvals: Vec::new(),
                    quorum: None,
                    subagent: None,
                },
            );
            let stored = PendingCall::of(
                &RunId::from("R"),
                &PendingToolCall::approval(&call, deadline),
            );
            let read = PendingCall::of_chunk(&chunk);
            assert_eq!(read, Some(stored));
            let json = serde_json::to_value(read).unwrap();
            assert_eq!(json["kind"], "approval");
            assert_eq!(json["form"]["kind"], "object");
            assert_eq!(json["expiresAt"].is_string(), deadline.is_some());
        }
    }

    #[test]
    fn other_chunks_announce_no_call() {
        let chunk = chunk_to_json(
            &RunId::from("R"),
            &Chunk::TextDelta {
                text: "hello".into(),
            },
        );
        assert_eq!(PendingCall::of_chunk(&chunk), None);
    }
}
