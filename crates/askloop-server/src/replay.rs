//! A run's stream told from the store, for clients that attach to a run this server does not
//! drive from its start: where a run stands ([`settled_chunks`]), the steps it committed
//! ([`step_chunks`]), a turn this server drives from its start ([`live_turn`]), and following a
//! run another process drives until it stops running ([`follow_elsewhere`]). Everything is askloop wire chunks ([`askloop_core::wire`]), so the
//! routes that send them (`GET /api/runs/{runId}/stream`, the chat's `…/stream`) translate them
//! as they translate live chunks.

use std::sync::Arc;
use std::time::Duration;

use askloop_core::model::{
    AssistantPart, FinishReason, Message, ToolArgs, ToolCall, ToolResult, Usage,
};
use askloop_core::store::{RunChange, RunChanges, RunState, StoredRun};
use askloop_core::{Chunk, RunKey, RunStatus, wire};
use futures::StreamExt;
use serde_json::Value;

use crate::state::AppState;

/// How often a follower of a run another process drives looks at the store again, on a store
/// that does not notify.
const FOLLOW_POLL: Duration = Duration::from_millis(100);
/// On a store that notifies: how often it looks anyway (a dead driver's lease expires
/// unnotified, and a running run's own commits are not notified).
const FOLLOW_SAFETY: Duration = Duration::from_secs(1);

/// What [`follow_elsewhere`] sends while the other process drives the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Follow {
    /// Nothing: only where the run stands once it stops running.
    Outcome,
    /// The run's committed steps from its start ([`step_chunks`]), then each step as the store
    /// gets it (a step is seen once committed: at the latest [`FOLLOW_SAFETY`] later on a store
    /// that notifies, [`FOLLOW_POLL`] on one that does not), then where it stands.
    Steps,
}

/// Whether another process drives the run now: running, with a live lease.
pub(crate) fn driven_elsewhere(stored: &StoredRun) -> bool {
    stored.state.status() == RunStatus::Running
        && stored.lease.as_ref().is_some_and(|lease| lease.is_live())
}

/// Wire chunk JSON values as the texts a response sends.
pub(crate) fn texts(chunks: Vec<Value>) -> Vec<Arc<str>> {
    chunks
        .into_iter()
        .map(|chunk| Arc::from(chunk.to_string()))
        .collect()
}

/// The chunks of a run another process drives, for a client attaching here: per [`Follow`]
/// while it runs there; the live chunks from the start of this server's stream if this server
/// takes it over (a recovery by its sweep); else, once it stops running, where it stands
/// ([`settled_chunks`]). A load that fails is logged and tried again.
pub(crate) fn follow_elsewhere(
    state: Arc<AppState>,
    run: RunKey,
    mut stored: StoredRun,
    follow: Follow,
) -> impl futures::Stream<Item = Arc<str>> + Send + 'static {
    async_stream::stream! {
        // Watching before the next load: a change committed after that load is seen.
        let mut changes = state.store.watch_changes().await;
        // Messages told so far (`Follow::Steps`); none before the first load.
        let mut sent = 0;
        loop {
            // Nothing told yet: the whole turn (a claim that just went live here).
            let live = if follow == Follow::Steps && sent == 0 {
                live_turn(&state, &run).map(futures::StreamExt::boxed)
            } else {
                state.hub.subscribe(&run).map(futures::StreamExt::boxed)
            };
            if let Some(mut live) = live {
                while let Some(chunk) = live.next().await {
                    yield chunk;
                }
                return;
            }
            match state.store.load_run(&run).await {
                Ok(loaded) => stored = loaded,
                Err(error) => tracing::warn!(
                    run_id = %run,
                    error = %askloop_core::error_chain_text(&error),
                    "following a run: cannot load it; trying again"
                ),
            }
            if follow == Follow::Steps {
                for chunk in texts(step_chunks(&stored.state, sent)) {
                    yield chunk;
                }
                sent = stored.state.messages().len();
            }
            if !driven_elsewhere(&stored) {
                break;
            }
            wait_for_run(&mut changes, &run).await;
        }
        for chunk in texts(settled_chunks(&stored)) {
            yield chunk;
        }
    }
}

/// The turn of a run this server drives, from its start: the state its current stream's claim
/// started from told by [`step_chunks`] and [`pending_chunks`] (the turn before this stream;
/// nothing for a new run's stream), then the stream's chunks from its start, then live.
/// `None` if this server does not drive the run.
pub(crate) fn live_turn(
    state: &AppState,
    run: &RunKey,
) -> Option<impl futures::Stream<Item = Arc<str>> + Send + 'static> {
    let (before, live) = state.hub.subscribe_turn(run)?;
    let earlier = before.map_or_else(Vec::new, |before| {
        let mut chunks = step_chunks(&before, 0);
        chunks.extend(pending_chunks(&before));
        texts(chunks)
    });
    Some(futures::stream::iter(earlier).chain(live))
}

/// Waits until the run may have changed: without notifications, [`FOLLOW_POLL`]; with them,
/// a change of this run, a resync, or [`FOLLOW_SAFETY`]. A store that stops notifying is polled
/// from then on.
async fn wait_for_run(changes: &mut Option<RunChanges>, run: &RunKey) {
    let Some(feed) = changes else {
        tokio::time::sleep(FOLLOW_POLL).await;
        return;
    };
    let waited = tokio::time::timeout(FOLLOW_SAFETY, async {
        loop {
            match feed.next().await {
                Some(change @ RunChange::Run { .. }) if change.key().as_ref() != Some(run) => {}
                Some(_) => return true,
                None => return false,
            }
        }
    })
    .await;
    if matches!(waited, Ok(false)) {
        *changes = None;
    }
}

/// The wire chunks of the run's committed messages from index `from` on, as its stream sent
/// them: per model step `step-start`, its text, reasoning and tool calls in order, the calls'
/// results, and `step-finish` once the step closed (its results are in, or it called no
/// tool). The person's message is not a chunk. A step whose calls still wait is left open.
pub(crate) fn step_chunks(state: &RunState, from: usize) -> Vec<Value> {
    let run_id = state.run_id();
    let messages = state.messages();
    let mut step = u32::try_from(
        messages
            .iter()
            .take(from)
            .filter(|message| message.is_assistant())
            .count(),
    )
    .unwrap_or(u32::MAX);
    let mut out = Vec::new();
    for (index, message) in messages.iter().enumerate().skip(from) {
        let chunks = match message {
            Message::User { .. } => continue,
            Message::Assistant { parts } => {
                step = step.saturating_add(1);
                step_start_chunks(state, step, parts)
            }
            Message::Tool { results } => {
                let earlier = messages.get(..index).unwrap_or_default();
                result_chunks(calls_of_last_step(earlier), results)
            }
        };
        out.extend(
            chunks
                .iter()
                .map(|chunk| wire::chunk_to_json(run_id, chunk)),
        );
    }
    out
}

/// The `step-finish` chunk of a step that closed for `reason`.
fn step_finish(reason: FinishReason) -> Chunk {
    Chunk::StepFinish {
        reason,
        usage: Usage::default(),
        is_continued: reason == FinishReason::ToolCalls,
    }
}

/// The chunks of model step number `step` (an assistant message's `parts`): `step-start`, its
/// text, reasoning and tool calls in order, and its `step-finish` if it called no tool (the
/// run's finish reason).
fn step_start_chunks(state: &RunState, step: u32, parts: &[AssistantPart]) -> Vec<Chunk> {
    let mut out = vec![Chunk::StepStart { step }];
    let mut calls = false;
    for part in parts {
        out.push(match part {
            AssistantPart::Text { text } => Chunk::TextDelta { text: text.clone() },
            AssistantPart::Reasoning { text, .. } => Chunk::ReasoningDelta { text: text.clone() },
            AssistantPart::ToolCall(call) => {
                calls = true;
                Chunk::ToolCall { call: call.clone() }
            }
            _ => continue,
        });
    }
    if !calls {
        out.push(step_finish(
            state.finish_reason().unwrap_or(FinishReason::Stop),
        ));
    }
    out
}

/// The tool calls of the last assistant message of `messages`.
fn calls_of_last_step(messages: &[Message]) -> Vec<&ToolCall> {
    messages
        .iter()
        .rev()
        .find_map(|message| match message {
            Message::Assistant { parts } => Some(parts),
            _ => None,
        })
        .into_iter()
        .flatten()
        .filter_map(|part| match part {
            AssistantPart::ToolCall(call) => Some(call),
            _ => None,
        })
        .collect()
}

/// The chunks of a tool message's `results` (of `calls`; a result without its call gets a
/// call of null arguments), then the step's `step-finish`.
fn result_chunks(calls: Vec<&ToolCall>, results: &[ToolResult]) -> Vec<Chunk> {
    let mut out: Vec<Chunk> = results
        .iter()
        .map(|result| {
            let call = calls
                .iter()
                .find(|call| call.id == result.tool_call_id)
                .map_or_else(
                    || ToolCall {
                        id: result.tool_call_id.clone(),
                        name: result.tool_name.clone(),
                        args: ToolArgs::Json(Value::Null),
                    },
                    |call| (*call).clone(),
                );
            Chunk::ToolResult {
                call,
                result: result.clone(),
            }
        })
        .collect();
    out.push(step_finish(FinishReason::ToolCalls));
    out
}

/// The chunks that announce the run's waiting calls, as a suspending stream ends: per call its
/// `tool-call`, then its `tool-call-suspended` (a question) or `tool-call-approval`.
pub(crate) fn pending_chunks(state: &RunState) -> Vec<Value> {
    let run_id = state.run_id();
    state
        .pending_tool_calls()
        .into_iter()
        .flat_map(|pending| {
            let call = ToolCall {
                id: pending.tool_call_id.clone(),
                name: pending.tool_name.clone(),
                args: ToolArgs::Json(pending.args.clone()),
            };
            let announce = Chunk::ToolCall { call: call.clone() };
            let waiting = Chunk::waiting(pending.clone());
            [
                wire::chunk_to_json(run_id, &announce),
                wire::chunk_to_json(run_id, &waiting),
            ]
        })
        .collect()
}

/// The chunks that tell a client where a run not driven here stands: a suspended run's
/// waiting calls ([`pending_chunks`]), a completed run's `finish`, a failed run's `error`, a
/// cancelled run's `error` `cancelled`, a run whose driver stopped `error` `interrupted`.
pub(crate) fn settled_chunks(stored: &StoredRun) -> Vec<Value> {
    let state: &RunState = &stored.state;
    let run_id = state.run_id();
    match state.status() {
        RunStatus::Suspended => pending_chunks(state),
        RunStatus::Completed => vec![wire::chunk_to_json(
            run_id,
            &Chunk::Finish {
                reason: state.finish_reason().unwrap_or(FinishReason::Stop),
                usage: state.usage(),
                text: state.final_text(),
            },
        )],
        RunStatus::Failed => {
            let (code, message) = state.failure().map_or(
                ("run_failed".to_owned(), "the run failed".to_owned()),
                |failure| (failure.code.clone(), failure.message.clone()),
            );
            vec![wire::error_to_json(run_id, &code, &message)]
        }
        RunStatus::Cancelled => vec![wire::error_to_json(
            run_id,
            "cancelled",
            "the run was cancelled",
        )],
        _ => vec![wire::error_to_json(
            run_id,
            "interrupted",
            "the process driving this run stopped; continue it (POST /api/runs/{runId}/continue)",
        )],
    }
}

#[cfg(test)]
mod tests {
    use askloop_core::RunId;
    use askloop_core::store::codec::decode_state;

    use super::*;

    const COMPLETED: &str = r#"{"formatVersion": 2, "runId": "r1", "threadId": "t",
      "resourceId": null, "agentId": "assistant", "model": "scripted:demo.json",
      "status": "completed", "historyThrough": null, "steps": 2, "pendingStep": null,
      "usage": {"inputTokens": 14, "outputTokens": 9}, "error": null, "finishReason": "stop",
      "createdAtMs": 1, "updatedAtMs": 2, "messages": [
        {"role": "user", "text": "Which repo?"},
        {"role": "assistant", "parts": [{"type": "text", "text": "Let me ask."},
          {"type": "tool-call", "id": "c1", "name": "ask_user", "args": {"json": {"question": "Which repo?"}}}]},
        {"role": "tool", "results": [{"toolCallId": "c1", "toolName": "ask_user", "result": "main", "isError": false, "answer": "main"}]},
        {"role": "assistant", "parts": [{"type": "text", "text": "Summary of main."}]}]}"#;

    const SUSPENDED: &str = r#"{"formatVersion": 2, "runId": "r2", "threadId": "t",
      "resourceId": null, "agentId": "assistant", "model": "scripted:demo.json",
      "status": "suspended", "historyThrough": null, "steps": 1,
      "pendingStep": {"calls": [{"call": {"id": "c1", "name": "ask_user", "args": {"json": {"question": "Which repo?"}}},
        "state": {"status": "suspended", "suspension": {"payload": {"question": "Which repo?"}, "resumeSchema": {"type": "string"}}}}]},
      "usage": {"inputTokens": 10, "outputTokens": 5}, "error": null,
      "createdAtMs": 1, "updatedAtMs": 2, "messages": [
        {"role": "user", "text": "Summarize my project"},
        {"role": "assistant", "parts": [{"type": "tool-call", "id": "c1", "name": "ask_user", "args": {"json": {"question": "Which repo?"}}}]}]}"#;

    fn types(chunks: &[Value]) -> Vec<&str> {
        chunks
            .iter()
            .map(|chunk| chunk["type"].as_str().unwrap_or_default())
            .collect()
    }

    #[test]
    fn stored_steps_are_told_as_their_stream_sent_them() {
        let state = decode_state(&RunId::new("r1"), COMPLETED).unwrap();
        let chunks = step_chunks(&state, 0);
        assert_eq!(
            types(&chunks),
            [
                "step-start",
                "text-delta",
                "tool-call",
                "tool-result",
                "step-finish",
                "step-start",
                "text-delta",
                "step-finish"
            ]
        );
        assert_eq!(chunks[0]["payload"]["stepNumber"], 1);
        assert_eq!(chunks[3]["payload"]["args"]["question"], "Which repo?");
        assert_eq!(chunks[3]["payload"]["result"], "main");
        assert_eq!(chunks[4]["payload"]["stepResult"]["isContinued"], true);
        assert_eq!(chunks[7]["payload"]["stepResult"]["reason"], "stop");
        // From a later message on: the results of the step before, numbered as in the run.
        let later = step_chunks(&state, 2);
        assert_eq!(
            types(&later),
            [
                "tool-result",
                "step-finish",
                "step-start",
                "text-delta",
                "step-finish"
            ]
        );
        assert_eq!(later[2]["payload"]["stepNumber"], 2);
    }

    #[test]
    fn a_step_whose_calls_wait_stays_open_and_its_calls_are_announced() {
        let state = decode_state(&RunId::new("r2"), SUSPENDED).unwrap();
        assert_eq!(types(&step_chunks(&state, 0)), ["step-start", "tool-call"]);
        let pending = pending_chunks(&state);
        assert_eq!(types(&pending), ["tool-call", "tool-call-suspended"]);
        assert_eq!(pending[1]["payload"]["toolCallId"], "c1");
    }
}
