//! The stored form of runs, shared by every store (the format is described in `crate::run`'s
//! module docs).
//!
//! Stores keep a run as its **head** ([`encode_head`]: the state without its messages) and its
//! **messages**, one text each ([`encode_message`]), and rebuild it with [`decode_run`].
//! Messages are append-only, so an update stores the head and only the messages past those
//! already stored. [`encode_state`] / [`decode_state`] give the whole state as one text
//! (fixtures, tools).
//!
//! Decoding tells apart a state written by a newer askloop ([`StoreError::UnsupportedFormat`])
//! from damaged text ([`StoreError::Corrupt`]); encoding failures are [`StoreError::Encode`],
//! never reported as corruption. A format-1 state (whole, as format 1 stored it) is upgraded
//! on load by [`upgrade_v1`].

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::actor::Actor;
use crate::ids::{AgentId, ResourceId, RunId, ThreadId};
use crate::message::{FinishReason, Message, ToolCall, ToolResult, Usage};
use crate::run::{
    CallSlot, CallState, ForkedFrom, ParentRun, PendingStep, RUN_FORMAT_VERSION, RunFailure,
    RunState, RunStatus,
};
use crate::store::StoreError;
use crate::tool::Suspension;

/// The head as written: every field but `messages`, borrowed.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct HeadOut<'a> {
    format_version: u32,
    run_id: &'a RunId,
    thread_id: &'a ThreadId,
    resource_id: &'a Option<ResourceId>,
    agent_id: &'a AgentId,
    model: &'a Option<String>,
    status: RunStatus,
    history_through: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    legacy_history: &'a Option<Vec<Message>>,
    steps: u32,
    pending_step: &'a Option<PendingStep>,
    usage: Usage,
    error: &'a Option<RunFailure>,
    #[serde(skip_serializing_if = "Option::is_none")]
    finish_reason: Option<FinishReason>,
    created_at_ms: u64,
    updated_at_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    forked_from: &'a Option<ForkedFrom>,
    #[serde(skip_serializing_if = "Option::is_none")]
    started_by: &'a Option<Actor>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parent: &'a Option<ParentRun>,
}

impl<'a> HeadOut<'a> {
    fn of(state: &'a RunState) -> Self {
        Self {
            format_version: state.format_version,
            run_id: &state.run_id,
            thread_id: &state.thread_id,
            resource_id: &state.resource_id,
            agent_id: &state.agent_id,
            model: &state.model,
            status: state.status,
            history_through: state.history_through,
            legacy_history: &state.legacy_history,
            steps: state.steps,
            pending_step: &state.pending_step,
            usage: state.usage,
            error: &state.error,
            finish_reason: state.finish_reason,
            created_at_ms: state.created_at_ms,
            updated_at_ms: state.updated_at_ms,
            forked_from: &state.forked_from,
            started_by: &state.started_by,
            parent: &state.parent,
        }
    }
}

/// The head as read (a whole state's text reads as a head too: `messages` is ignored).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct HeadIn {
    format_version: u32,
    run_id: RunId,
    thread_id: ThreadId,
    resource_id: Option<ResourceId>,
    agent_id: AgentId,
    model: Option<String>,
    status: RunStatus,
    #[serde(default)]
    history_through: Option<u64>,
    #[serde(default)]
    legacy_history: Option<Vec<Message>>,
    steps: u32,
    pending_step: Option<PendingStep>,
    usage: Usage,
    error: Option<RunFailure>,
    #[serde(default)]
    finish_reason: Option<FinishReason>,
    created_at_ms: u64,
    updated_at_ms: u64,
    #[serde(default)]
    forked_from: Option<ForkedFrom>,
    #[serde(default)]
    started_by: Option<Actor>,
    #[serde(default)]
    parent: Option<ParentRun>,
}

impl HeadIn {
    fn into_state(self, messages: Vec<Message>) -> RunState {
        RunState {
            format_version: self.format_version,
            run_id: self.run_id,
            thread_id: self.thread_id,
            resource_id: self.resource_id,
            agent_id: self.agent_id,
            model: self.model,
            status: self.status,
            messages,
            history_through: self.history_through,
            legacy_history: self.legacy_history,
            steps: self.steps,
            pending_step: self.pending_step,
            usage: self.usage,
            error: self.error,
            finish_reason: self.finish_reason,
            created_at_ms: self.created_at_ms,
            updated_at_ms: self.updated_at_ms,
            forked_from: self.forked_from,
            started_by: self.started_by,
            parent: self.parent,
        }
    }
}

#[derive(Serialize)]
struct StateOut<'a> {
    #[serde(flatten)]
    head: HeadOut<'a>,
    messages: &'a [Message],
}

#[derive(Deserialize)]
struct StateIn {
    #[serde(flatten)]
    head: HeadIn,
    messages: Vec<Message>,
}

#[derive(Deserialize)]
struct FormatProbe {
    #[serde(rename = "formatVersion")]
    format_version: u32,
}

fn encode_error(run_id: &RunId) -> impl FnOnce(serde_json::Error) -> StoreError + '_ {
    move |source| StoreError::Encode {
        run_id: run_id.clone(),
        source,
    }
}

fn corrupt(run_id: &RunId) -> impl FnOnce(serde_json::Error) -> StoreError + '_ {
    move |source| StoreError::Corrupt {
        run_id: run_id.clone(),
        source,
    }
}

/// The state's head as stored: the JSON object of every field but `messages` (so it does not
/// grow with the conversation, except through `legacyHistory` in upgraded format-1 runs).
///
/// # Errors
/// [`StoreError::Encode`] if a value in it cannot be written as JSON.
pub fn encode_head(state: &RunState) -> Result<String, StoreError> {
    serde_json::to_string(&HeadOut::of(state)).map_err(encode_error(&state.run_id))
}

/// One message as stored (JSON object).
///
/// # Errors
/// [`StoreError::Encode`] if a value in it cannot be written as JSON; `run_id` names the run
/// in the error.
pub fn encode_message(run_id: &RunId, message: &Message) -> Result<String, StoreError> {
    serde_json::to_string(message).map_err(encode_error(run_id))
}

/// The run's messages that a store holding `stored_count` of them must append, each encoded:
/// `state.messages()[stored_count..]` (none when it holds them all).
///
/// # Errors
/// [`StoreError::Encode`].
pub fn encode_new_messages(
    state: &RunState,
    stored_count: usize,
) -> Result<Vec<String>, StoreError> {
    state
        .messages
        .get(stored_count..)
        .unwrap_or(&[])
        .iter()
        .map(|message| encode_message(&state.run_id, message))
        .collect()
}

/// Rebuilds a run from its stored head and its stored messages, in order.
///
/// A head of format 1 (a whole format-1 state, as stored before format 2) is upgraded with
/// [`upgrade_v1`] and `messages` (normally none) are appended to its own messages.
///
/// # Errors
/// [`StoreError::UnsupportedFormat`] for a `formatVersion` newer than this build reads;
/// [`StoreError::Corrupt`] for anything else that does not decode.
pub fn decode_run<I>(run_id: &RunId, head: &str, messages: I) -> Result<RunState, StoreError>
where
    I: IntoIterator,
    I::Item: AsRef<str>,
{
    decode_run_after(run_id, head, Vec::new(), messages)
}

/// [`decode_run`] for a store that already holds the run's first stored messages decoded
/// (`known`, e.g. cached from its own commits: stored messages never change): rebuilds the run
/// from its head, `known`, then `messages` — the stored messages after them, decoded here.
/// The result equals [`decode_run`] of the head and every stored message text.
///
/// # Errors
/// As [`decode_run`].
pub fn decode_run_after<I>(
    run_id: &RunId,
    head: &str,
    known: Vec<Message>,
    messages: I,
) -> Result<RunState, StoreError>
where
    I: IntoIterator,
    I::Item: AsRef<str>,
{
    let decode_messages = |messages: I| -> Result<Vec<Message>, StoreError> {
        let messages = messages.into_iter();
        let mut decoded = known;
        decoded.reserve(messages.size_hint().0);
        for text in messages {
            decoded.push(serde_json::from_str(text.as_ref()).map_err(corrupt(run_id))?);
        }
        Ok(decoded)
    };
    match serde_json::from_str::<HeadIn>(head) {
        Ok(parsed) if parsed.format_version == RUN_FORMAT_VERSION => {
            Ok(parsed.into_state(decode_messages(messages)?))
        }
        Ok(parsed) if parsed.format_version == 1 => {
            let mut state = upgrade_v1(run_id, head)?;
            state.messages.extend(decode_messages(messages)?);
            Ok(state)
        }
        Ok(parsed) if parsed.format_version > RUN_FORMAT_VERSION => {
            Err(StoreError::UnsupportedFormat {
                run_id: run_id.clone(),
                format_version: parsed.format_version,
            })
        }
        Ok(_) => Err(corrupt(run_id)(serde::de::Error::custom(
            "unknown formatVersion",
        ))),
        Err(source) => match serde_json::from_str::<FormatProbe>(head) {
            Ok(probe) if probe.format_version == 1 => {
                let mut state = upgrade_v1(run_id, head)?;
                state.messages.extend(decode_messages(messages)?);
                Ok(state)
            }
            Ok(probe) if probe.format_version > RUN_FORMAT_VERSION => {
                Err(StoreError::UnsupportedFormat {
                    run_id: run_id.clone(),
                    format_version: probe.format_version,
                })
            }
            _ => Err(corrupt(run_id)(source)),
        },
    }
}

/// The whole state (head and messages) as one JSON text.
///
/// # Errors
/// [`StoreError::Encode`] if a value in it cannot be written as JSON.
pub fn encode_state(state: &RunState) -> Result<String, StoreError> {
    serde_json::to_string(&StateOut {
        head: HeadOut::of(state),
        messages: &state.messages,
    })
    .map_err(encode_error(&state.run_id))
}

/// Reads a whole stored state back: format 2, or format 1 (upgraded by [`upgrade_v1`]).
///
/// # Errors
/// [`StoreError::UnsupportedFormat`] for a `formatVersion` newer than this build reads;
/// [`StoreError::Corrupt`] for anything else that is not a state.
pub fn decode_state(run_id: &RunId, text: &str) -> Result<RunState, StoreError> {
    let probe = serde_json::from_str::<FormatProbe>(text);
    match probe {
        Ok(probe) if probe.format_version == 1 => upgrade_v1(run_id, text),
        Ok(probe) if probe.format_version > RUN_FORMAT_VERSION => {
            Err(StoreError::UnsupportedFormat {
                run_id: run_id.clone(),
                format_version: probe.format_version,
            })
        }
        Ok(probe) if probe.format_version == RUN_FORMAT_VERSION => {
            let state: StateIn = serde_json::from_str(text).map_err(corrupt(run_id))?;
            Ok(state.head.into_state(state.messages))
        }
        Ok(_) => Err(corrupt(run_id)(serde::de::Error::custom(
            "unknown formatVersion",
        ))),
        Err(source) => Err(corrupt(run_id)(source)),
    }
}

/// Format 1, as it was stored: the thread history copied into `messages` (the first
/// `historyLen`), and `resume_data` in snake case.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct V1State {
    format_version: u32,
    run_id: RunId,
    thread_id: ThreadId,
    resource_id: Option<ResourceId>,
    agent_id: AgentId,
    model: Option<String>,
    status: RunStatus,
    messages: Vec<Message>,
    history_len: usize,
    steps: u32,
    pending_step: Option<V1PendingStep>,
    usage: Usage,
    error: Option<RunFailure>,
    #[serde(default)]
    finish_reason: Option<FinishReason>,
    created_at_ms: u64,
    updated_at_ms: u64,
}

#[derive(Deserialize)]
struct V1PendingStep {
    calls: Vec<V1CallSlot>,
}

#[derive(Deserialize)]
struct V1CallSlot {
    call: ToolCall,
    state: V1CallState,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", tag = "status")]
enum V1CallState {
    Completed {
        result: ToolResult,
    },
    Suspended {
        suspension: Suspension,
    },
    Resuming {
        suspension: Suspension,
        resume_data: Value,
    },
}

/// Reads a whole format-1 state and upgrades it to the current format: the own messages are
/// `messages[historyLen..]`, the copied history is kept in `legacyHistory` (always present
/// after an upgrade, empty when the run had no history), `historyThrough` is `None`, and
/// `resume_data` becomes `resumeData`. Shared by every store that meets format-1 rows.
///
/// # Errors
/// [`StoreError::Corrupt`] if `text` is not a format-1 state (a `historyLen` beyond the
/// messages included); [`StoreError::UnsupportedFormat`] if it says another format.
pub fn upgrade_v1(run_id: &RunId, text: &str) -> Result<RunState, StoreError> {
    let v1: V1State = serde_json::from_str(text).map_err(corrupt(run_id))?;
    if v1.format_version != 1 {
        return Err(StoreError::UnsupportedFormat {
            run_id: run_id.clone(),
            format_version: v1.format_version,
        });
    }
    if v1.history_len > v1.messages.len() {
        return Err(corrupt(run_id)(serde::de::Error::custom(
            "historyLen is beyond the messages",
        )));
    }
    let mut messages = v1.messages;
    let own = messages.split_off(v1.history_len);
    let pending_step = v1.pending_step.map(|step| PendingStep {
        calls: step
            .calls
            .into_iter()
            .map(|slot| CallSlot {
                audit: Vec::new(),
                call: slot.call,
                state: match slot.state {
                    V1CallState::Completed { result } => CallState::Completed { result },
                    V1CallState::Suspended { suspension } => CallState::Suspended {
                        suspension,
                        subagent: None,
                    },
                    V1CallState::Resuming {
                        suspension,
                        resume_data,
                    } => CallState::Resuming {
                        suspension,
                        resume_data,
                    },
                },
            })
            .collect(),
    });
    Ok(RunState {
        format_version: RUN_FORMAT_VERSION,
        run_id: v1.run_id,
        thread_id: v1.thread_id,
        resource_id: v1.resource_id,
        agent_id: v1.agent_id,
        model: v1.model,
        status: v1.status,
        messages: own,
        history_through: None,
        legacy_history: Some(messages),
        steps: v1.steps,
        pending_step,
        usage: v1.usage,
        error: v1.error,
        finish_reason: v1.finish_reason,
        created_at_ms: v1.created_at_ms,
        updated_at_ms: v1.updated_at_ms,
        forked_from: None,
        started_by: None,
        parent: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{AgentId, ThreadId};

    fn state() -> RunState {
        let mut state = RunState::new(
            RunId::new("r1"),
            ThreadId::new("t1"),
            None,
            AgentId::new("a"),
            None,
            vec![Message::user("hi"), Message::user("again")],
            Some(3),
        );
        state.pending_step = Some(PendingStep {
            calls: vec![CallSlot {
                call: ToolCall {
                    id: "c1".into(),
                    name: "gate".into(),
                    args: crate::message::ToolArgs::Json(serde_json::json!({})),
                },
                state: CallState::Resuming {
                    suspension: Suspension::new(serde_json::json!({"q": 1})),
                    resume_data: serde_json::json!("yes"),
                },
                audit: Vec::new(),
            }],
        });
        state
    }

    #[test]
    fn states_round_trip() {
        let state = state();
        let text = encode_state(&state).unwrap();
        assert!(text.contains("\"resumeData\""), "{text}");
        assert!(!text.contains("resume_data"), "{text}");
        assert_eq!(decode_state(&RunId::new("r1"), &text).unwrap(), state);
    }

    #[test]
    fn issue34_starter_votes_and_quorum_round_trip_and_old_heads_read_as_unknown() {
        let mut state = state();
        let old = encode_state(&state).unwrap();
        assert!(!old.contains("startedBy"), "{old}");
        assert_eq!(
            decode_state(&RunId::new("r1"), &old).unwrap().started_by,
            None
        );
        state.started_by = Some(
            crate::Actor::new("alice")
                .resource("t")
                .roles(["ops"])
                .route("cli run"),
        );
        let mut vote = crate::message::AuditRecord::by_actor(
            crate::message::AuditAction::Approve,
            Some(&crate::Actor::new("bob").roles(["ops"]).route("link")),
        );
        vote.at_ms = 7;
        if let Some(step) = state.pending_step.as_mut() {
            step.calls[0].state = CallState::AwaitingApproval {
                expires_at_ms: None,
                quorum: Some(2),
            };
            step.calls[0].audit.push(vote);
        }
        let text = encode_state(&state).unwrap();
        for field in [
            r#""startedBy":{"id":"alice","resource":"t","roles":["ops"],"route":"cli run"}"#,
            r#""quorum":2"#,
            r#"{"action":"approve","by":"bob","roles":["ops"],"route":"link","atMs":7}"#,
        ] {
            assert!(text.contains(field), "{field} in {text}");
        }
        assert_eq!(decode_state(&RunId::new("r1"), &text).unwrap(), state);
    }

    #[test]
    fn head_and_messages_round_trip() {
        let state = state();
        let head = encode_head(&state).unwrap();
        assert!(!head.contains("\"messages\""), "{head}");
        let messages = encode_new_messages(&state, 0).unwrap();
        assert_eq!(messages.len(), 2);
        assert_eq!(encode_new_messages(&state, 1).unwrap(), messages[1..]);
        assert!(encode_new_messages(&state, 5).unwrap().is_empty());
        assert_eq!(
            decode_run(&RunId::new("r1"), &head, &messages).unwrap(),
            state
        );
    }

    #[test]
    fn a_newer_format_is_unsupported_not_corrupt() {
        let mut value: Value = serde_json::from_str(&encode_state(&state()).unwrap()).unwrap();
        value["formatVersion"] = 3.into();
        let error = decode_state(&RunId::new("r1"), &value.to_string()).unwrap_err();
        assert!(
            matches!(
                error,
                StoreError::UnsupportedFormat {
                    format_version: 3,
                    ..
                }
            ),
            "{error:?}"
        );
        value["newField"] = serde_json::json!({"x": 1});
        value["status"] = "archived".into();
        let error = decode_state(&RunId::new("r1"), &value.to_string()).unwrap_err();
        assert!(
            matches!(error, StoreError::UnsupportedFormat { .. }),
            "{error:?}"
        );
        let error = decode_run(&RunId::new("r1"), &value.to_string(), [""; 0]).unwrap_err();
        assert!(
            matches!(error, StoreError::UnsupportedFormat { .. }),
            "{error:?}"
        );
    }

    #[test]
    fn damaged_text_is_corrupt() {
        for text in [
            "",
            "{",
            "[]",
            "{\"formatVersion\":2}",
            "{\"formatVersion\":1}",
            "null",
        ] {
            let error = decode_state(&RunId::new("r1"), text).unwrap_err();
            assert!(
                matches!(error, StoreError::Corrupt { .. }),
                "{text}: {error:?}"
            );
            let error = decode_run(&RunId::new("r1"), text, [""; 0]).unwrap_err();
            assert!(
                matches!(error, StoreError::Corrupt { .. }),
                "{text}: {error:?}"
            );
        }
        let head = encode_head(&state()).unwrap();
        let error = decode_run(&RunId::new("r1"), &head, ["{"]).unwrap_err();
        assert!(matches!(error, StoreError::Corrupt { .. }), "{error:?}");
    }
}
