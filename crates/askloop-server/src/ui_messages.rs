//! A run's stored messages as the AI SDK's UI messages (what the chat's messages route sends):
//! the person's message, then one assistant message with every step, its results and its
//! pending calls, so a reloaded page shows them again.

use askloop_core::PendingKind;
use askloop_core::model::{AssistantPart, Message, ToolResult};
use askloop_core::store::RunState;
use askloop_core::wire::PendingCall;
use serde_json::{Value, json};

use crate::ui_stream::error_text;

/// The UI messages of one run: the person's message, then one assistant message with every
/// step (a `step-start` part, text, reasoning and tool parts), its results, the work of its
/// sub-agents (`subagents`: the child runs' `data-askloop-subagent` parts, [`subagent_part`]),
/// and its pending calls. A fork's messages begin with the history it copied (several person's messages): each
/// earlier exchange is a pair of its own (`user-RUN-N`, `msg-RUN-N`), the last one keeps the
/// run's ids (`user-RUN` when it is the only one, `msg-RUN`).
pub(crate) fn ui_messages(run: &RunState, subagents: Vec<Value>) -> Vec<Value> {
    let run_id = run.run_id().as_str();
    let metadata = json!({
        "runId": run_id,
        "threadId": run.thread_id().as_str(),
        "agentId": run.agent_id().as_str(),
    });
    let assistant = |id: String, parts: Vec<Value>| json!({"id": id, "role": "assistant", "metadata": metadata.clone(), "parts": parts});
    let mut out = Vec::new();
    let mut parts: Vec<Value> = Vec::new();
    let mut exchange = 0;
    for message in run.messages() {
        match message {
            Message::User { text } => {
                if exchange > 0 && !parts.is_empty() {
                    out.push(assistant(
                        format!("msg-{run_id}-{exchange}"),
                        std::mem::take(&mut parts),
                    ));
                }
                exchange += 1;
                let id = if exchange == 1 {
                    format!("user-{run_id}")
                } else {
                    format!("user-{run_id}-{exchange}")
                };
                out.push(
                    json!({"id": id, "role": "user", "parts": [{"type": "text", "text": text}]}),
                );
            }
            Message::Assistant { parts: assistant } => push_step(&mut parts, assistant),
            Message::Tool { results } => apply_results(&mut parts, results),
        }
    }
    parts.extend(subagents);
    push_pending(&mut parts, run);
    if !parts.is_empty() {
        out.push(assistant(format!("msg-{run_id}"), parts));
    }
    out
}

/// The `data-askloop-subagent` part of child run `child` as the chat stream last sends it
/// ([`crate::ui_stream`]): `parent_run_id` the run whose call started it, `started_by` that call
/// as the root names it (`s1`, a grandchild's `s1~c5`), `path` the sub-agents from the root's
/// child down to it; its text is its steps' texts, a line break between two, its status the
/// run's.
pub(crate) fn subagent_part(
    child: &RunState,
    parent_run_id: &str,
    started_by: &str,
    path: &[String],
) -> Value {
    let steps: Vec<String> = child
        .messages()
        .iter()
        .filter_map(|message| match message {
            Message::Assistant { parts } => Some(
                parts
                    .iter()
                    .filter_map(|part| match part {
                        AssistantPart::Text { text } => Some(text.as_str()),
                        _ => None,
                    })
                    .collect::<String>(),
            ),
            _ => None,
        })
        .filter(|text| !text.is_empty())
        .collect();
    let text = steps.join("\n");
    let run_id = child.run_id().as_str();
    json!({
        "type": "data-askloop-subagent",
        "id": run_id,
        "data": {
            "runId": run_id,
            "agentId": child.agent_id().as_str(),
            "parentRunId": parent_run_id,
            "toolCallId": started_by,
            "path": path,
            "text": text,
            "status": child.status().to_string(),
        },
    })
}

/// The parts of one model step: `step-start`, then its text, reasoning and tool parts (a tool
/// part `input-available` until its result comes).
fn push_step(parts: &mut Vec<Value>, assistant: &[AssistantPart]) {
    parts.push(json!({"type": "step-start"}));
    for part in assistant {
        match part {
            AssistantPart::Text { text } => {
                parts.push(json!({"type": "text", "text": text, "state": "done"}));
            }
            AssistantPart::Reasoning { text, .. } => {
                parts.push(json!({"type": "reasoning", "text": text, "state": "done"}));
            }
            AssistantPart::ToolCall(call) => parts.push(json!({
                "type": format!("tool-{}", call.name),
                "toolCallId": call.id.as_str(),
                "state": "input-available",
                "input": call.args.to_value(),
            })),
            _ => {}
        }
    }
}

/// The tool part of `tool_call_id`, the latest one.
fn tool_part<'parts>(parts: &'parts mut [Value], tool_call_id: &str) -> Option<&'parts mut Value> {
    parts
        .iter_mut()
        .rev()
        .find(|part| part.get("toolCallId").and_then(Value::as_str) == Some(tool_call_id))
}

/// Results into their tool parts: `output-available` with the output, or `output-error`.
fn apply_results(parts: &mut [Value], results: &[ToolResult]) {
    for result in results {
        let Some(part) = tool_part(parts, result.tool_call_id.as_str()) else {
            continue;
        };
        if result.is_error {
            part["state"] = json!("output-error");
            part["errorText"] = json!(error_text(&result.result));
        } else {
            part["state"] = json!("output-available");
            part["output"] = result.result.clone();
        }
    }
}

/// The run's pending calls: an approval's tool part `approval-requested`, and per call a
/// `data-askloop-question` part whose `data` is the [`PendingCall`]; a sub-agent's waiting
/// call (which no step of this run made) gets its tool part first.
fn push_pending(parts: &mut Vec<Value>, run: &RunState) {
    for pending in run.pending_tool_calls() {
        let id = pending.tool_call_id.as_str();
        // A sub-agent's waiting call (`PARENT_CALL~CHILD_CALL`) has no step of this run: its
        // tool part is added here, as the live stream announces it.
        if pending.subagent.is_some() && tool_part(parts, id).is_none() {
            parts.push(json!({
                "type": format!("tool-{}", pending.tool_name),
                "toolCallId": id,
                "state": "input-available",
                "input": pending.args,
            }));
        }
        if pending.kind == PendingKind::Approval
            && let Some(part) = tool_part(parts, id)
        {
            part["state"] = json!("approval-requested");
            part["approval"] = json!({"id": id});
        }
        let question = PendingCall::of(run.run_id(), &pending);
        parts.push(json!({"type": "data-askloop-question", "id": id, "data": question}));
    }
}

#[cfg(test)]
mod tests {
    use askloop_core::RunId;
    use askloop_core::store::codec;
    use serde_json::json;

    use super::ui_messages;

    /// A fork's messages begin with the history it copied: each exchange is a pair of its own,
    /// the last keeps the run's ids (issue 34).
    #[test]
    fn issue34_a_forks_copied_history_shows_as_its_own_exchanges() {
        let state = json!({
            "formatVersion": 2, "runId": "f1", "threadId": "t2", "resourceId": null,
            "agentId": "assistant", "model": null, "status": "completed", "historyThrough": null,
            "steps": 2, "pendingStep": null, "usage": {"inputTokens": 0, "outputTokens": 0},
            "error": null, "createdAtMs": 1, "updatedAtMs": 2,
            "forkedFrom": {"runId": "r1", "toolCallId": "c1"},
            "messages": [
                {"role": "user", "text": "hello"},
                {"role": "assistant", "parts": [{"type": "text", "text": "Hi."}]},
                {"role": "user", "text": "go"},
                {"role": "assistant", "parts": [{"type": "text", "text": "Done."}]}
            ]
        });
        let state = codec::decode_state(&RunId::new("f1"), &state.to_string()).unwrap();
        let messages = ui_messages(&state, Vec::new());
        let ids: Vec<&str> = messages
            .iter()
            .map(|message| message["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["user-f1", "msg-f1-1", "user-f1-2", "msg-f1"]);
        assert_eq!(messages[1]["parts"][1]["text"], "Hi.");
        assert_eq!(messages[3]["parts"][1]["text"], "Done.");
        assert_eq!(messages[3]["metadata"]["runId"], "f1");
    }
}
