//! One model step: build the request, stream the response as chunks, and append the assistant
//! message to the run. A failed or cancelled call fails the run (recorded) and ends the stream.

use futures::StreamExt;
use tracing::Instrument;

use crate::chunk::Chunk;
use crate::definition::AgentDefinition;
use crate::error::AgentError;
use crate::ids::ToolCallId;
use crate::message::{AssistantPart, FinishReason, Message, ToolCall, Usage};
use crate::model::{ModelError, ModelEvent, ModelRequest, ToolChoice};
use crate::run::RunState;
use crate::run_loop::ActiveRun;
use crate::run_loop::emit::Emitter;

/// What the model answered in one step (its assistant message is already in the run).
pub(super) struct StepResponse {
    /// The tool calls, in the order the model made them, each with an id unique in the run.
    pub(super) calls: Vec<ToolCall>,
    /// The visible text.
    pub(super) text: String,
    /// Why the model stopped.
    pub(super) reason: FinishReason,
    /// Tokens of this call.
    pub(super) usage: Usage,
}

/// Calls the model once and streams its answer.
///
/// # Errors
/// [`AgentError::Model`] (the run is recorded as failed first) when the call fails, is cancelled
/// or ends without a finish event.
pub(super) async fn model_step(
    run: &mut ActiveRun,
    out: &mut Emitter,
) -> Result<StepResponse, AgentError> {
    // Attribute names of the OpenTelemetry GenAI semantic conventions.
    let span = tracing::info_span!(
        "model call",
        gen_ai.operation.name = "chat",
        gen_ai.provider.name = run.agent.model.provider(),
        gen_ai.request.model = run.agent.model.model_id(),
        gen_ai.usage.input_tokens = tracing::field::Empty,
        gen_ai.usage.output_tokens = tracing::field::Empty,
        gen_ai.response.finish_reasons = tracing::field::Empty,
    );
    let response = call_model(run, out).instrument(span.clone()).await?;
    span.record("gen_ai.usage.input_tokens", response.usage.input_tokens);
    span.record("gen_ai.usage.output_tokens", response.usage.output_tokens);
    span.record("gen_ai.response.finish_reasons", response.reason.as_str());
    Ok(response)
}

/// The model call of [`model_step`], in its span. A call of a tool the step did not offer
/// ([`ModelError::ToolNotOffered`]) is asked again once, if nothing of the step was streamed
/// yet; otherwise, as every other model error, it fails the run.
async fn call_model(run: &mut ActiveRun, out: &mut Emitter) -> Result<StepResponse, AgentError> {
    if run.cancel.is_cancelled() {
        return Err(run.fail(AgentError::Model(ModelError::Cancelled)).await);
    }
    out.emit(Chunk::StepStart {
        step: run.state.steps + 1,
    })
    .await;
    let mut asked_again = false;
    let draft = loop {
        match attempt(run, out).await {
            Ok(draft) => break draft,
            Err((error @ ModelError::ToolNotOffered { .. }, streamed))
                if !streamed && !asked_again =>
            {
                tracing::warn!("{error}; asking it once more");
                asked_again = true;
            }
            Err((error, _)) => return Err(run.fail(AgentError::Model(error)).await),
        }
    };
    let Some((reason, usage)) = draft.finish else {
        let error = ModelError::InvalidResponse {
            model: run.agent.model.model_id().to_owned(),
            message: "the response ended without a finish event".into(),
        };
        return Err(run.fail(AgentError::Model(error)).await);
    };
    Ok(record_step(&mut run.state, draft.parts, reason, usage))
}

/// One request of the step and its streamed response: the draft of the assistant message, or
/// the error that ended it and whether any of the response was streamed (emitted) before.
/// Nothing is recorded in the run.
async fn attempt(run: &ActiveRun, out: &mut Emitter) -> Result<Draft, (ModelError, bool)> {
    let request = build_request(
        &run.agent,
        &run.state,
        run.history.as_deref().unwrap_or_default(),
    );
    let offers_tools = request.offers_tools();
    let started = until_cancelled(run, run.agent.model.stream(request)).await;
    let mut events = started
        .unwrap_or(Err(ModelError::Cancelled))
        .map_err(|error| (error, false))?;
    let mut draft = Draft::default();
    loop {
        let event = until_cancelled(run, events.next())
            .await
            .unwrap_or(Some(Err(ModelError::Cancelled)));
        match event {
            None => return Ok(draft),
            Some(Ok(ModelEvent::ToolCall(call))) if !offers_tools => {
                let error = ModelError::ToolNotOffered {
                    model: run.agent.model.model_id().to_owned(),
                    tool: call.name,
                };
                return Err((error, draft.streamed));
            }
            Some(Ok(event)) => {
                if let Some(chunk) = draft.add(&run.state, event) {
                    draft.streamed = true;
                    out.emit(chunk).await;
                }
            }
            Some(Err(error)) => return Err((error, draft.streamed)),
        }
    }
}

/// The assistant message of a step, built as the model's events arrive.
#[derive(Default)]
struct Draft {
    parts: Vec<AssistantPart>,
    ids: CallIds,
    /// Why the model stopped and what it used, once it said so.
    finish: Option<(FinishReason, Usage)>,
    /// Whether a chunk of this response was emitted (text or reasoning streamed).
    streamed: bool,
}

impl Draft {
    /// Adds `event` to the message (a tool call gets an id unique in the run `state`); returns
    /// the chunk the step streams for it, if any.
    fn add(&mut self, state: &RunState, event: ModelEvent) -> Option<Chunk> {
        let parts = &mut self.parts;
        match event {
            ModelEvent::TextDelta(text) => {
                if text.is_empty() {
                    return None;
                }
                match parts.last_mut() {
                    Some(AssistantPart::Text { text: existing }) => existing.push_str(&text),
                    _ => parts.push(AssistantPart::Text { text: text.clone() }),
                }
                Some(Chunk::TextDelta { text })
            }
            ModelEvent::ReasoningDelta(text) => {
                match parts.last_mut() {
                    Some(AssistantPart::Reasoning {
                        text: existing,
                        signature: None,
                    }) => existing.push_str(&text),
                    _ => parts.push(AssistantPart::Reasoning {
                        text: text.clone(),
                        signature: None,
                    }),
                }
                Some(Chunk::ReasoningDelta { text })
            }
            ModelEvent::Reasoning { text, signature } => {
                match parts.last_mut() {
                    Some(AssistantPart::Reasoning {
                        text: existing,
                        signature: slot @ None,
                    }) if *existing == text || text.is_empty() => *slot = signature,
                    _ => parts.push(AssistantPart::Reasoning { text, signature }),
                }
                None
            }
            ModelEvent::ToolCall(mut call) => {
                call.id = self.ids.claim(state, call.id);
                parts.push(AssistantPart::ToolCall(call));
                None
            }
            ModelEvent::Finish { reason, usage } => {
                self.finish = Some((reason, usage));
                None
            }
            // Argument deltas are for progress displays; the complete call follows.
            _ => None,
        }
    }
}

/// Appends the step's assistant message (`parts`) to the run and counts the step and its
/// `usage`: what the model answered.
fn record_step(
    state: &mut RunState,
    parts: Vec<AssistantPart>,
    reason: FinishReason,
    usage: Usage,
) -> StepResponse {
    state.steps += 1;
    state.usage.add(usage);
    let calls: Vec<ToolCall> = parts
        .iter()
        .filter_map(|part| match part {
            AssistantPart::ToolCall(call) => Some(call.clone()),
            _ => None,
        })
        .collect();
    let text: String = parts
        .iter()
        .filter_map(|part| match part {
            AssistantPart::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    state.messages.push(Message::Assistant { parts });
    StepResponse {
        calls,
        text,
        reason,
        usage,
    }
}

/// The tool call ids of a run. Answers are routed by id, so every call needs its own within the
/// whole conversation: a missing id, or one used before, is replaced by a fresh one. The run's
/// earlier ids are looked up in its messages when a call comes (a step has few calls), not
/// copied into a set first.
#[derive(Default)]
struct CallIds {
    /// The ids given in this step so far.
    claimed: Vec<ToolCallId>,
}

impl CallIds {
    /// `id` if neither `state`'s messages nor this step used it, else a fresh id; either way
    /// taken from now on.
    fn claim(&mut self, state: &RunState, id: ToolCallId) -> ToolCallId {
        let used = |id: &ToolCallId| {
            self.claimed.contains(id)
                || state.messages.iter().any(|message| match message {
                    Message::Assistant { parts } => parts.iter().any(
                        |part| matches!(part, AssistantPart::ToolCall(call) if &call.id == id),
                    ),
                    _ => false,
                })
        };
        let id = if id.as_str().trim().is_empty() || used(&id) {
            ToolCallId::new(format!("call_{}", uuid::Uuid::now_v7().simple()))
        } else {
            id
        };
        self.claimed.push(id.clone());
        id
    }
}

/// The request of the run's next step: the agent's instructions, tools and settings, and the
/// whole conversation (the thread's `history`, then the run's own messages).
/// `first_step_tool_choice` applies to the run's first step only. Once the
/// question budget is spent, the tools that ask the user are left out, and a tool choice that
/// needs them falls back to `auto` (`none` when no tool is left).
fn build_request(agent: &AgentDefinition, state: &RunState, history: &[Message]) -> ModelRequest {
    let mut settings = agent.settings.clone();
    if let Some(first) = settings.first_step_tool_choice.take()
        && state.steps == 0
    {
        settings.tool_choice = first;
    }
    let mut tools = agent.tool_definitions.clone();
    if agent.questions_spent(state) {
        tools.retain(|tool| !agent.asks_user(&tool.name));
        let named_tool_is_gone = matches!(
            &settings.tool_choice,
            ToolChoice::Tool(name) if !tools.iter().any(|tool| &tool.name == name)
        );
        if named_tool_is_gone {
            settings.tool_choice = ToolChoice::Auto;
        }
        if tools.is_empty() && settings.tool_choice != ToolChoice::Auto {
            settings.tool_choice = ToolChoice::None;
        }
    }
    let mut messages = Vec::with_capacity(history.len() + state.messages.len());
    messages.extend_from_slice(history);
    messages.extend_from_slice(&state.messages);
    let mut request = ModelRequest::new(messages)
        .with_tools(tools)
        .with_settings(settings);
    request.system = agent.instructions.clone();
    request
}

/// Runs `future` unless the run is cancelled first (`None` then).
async fn until_cancelled<F: std::future::Future>(run: &ActiveRun, future: F) -> Option<F::Output> {
    let future = std::pin::pin!(future);
    let cancelled = std::pin::pin!(run.cancel.cancelled());
    match futures::future::select(future, cancelled).await {
        futures::future::Either::Left((output, _)) => Some(output),
        futures::future::Either::Right(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use crate::ids::{AgentId, RunId, ThreadId};
    use crate::message::ToolArgs;

    #[test]
    fn ids_are_unique_across_the_conversation() {
        let mut state = RunState::new(
            RunId::new("r"),
            ThreadId::new("t"),
            None,
            AgentId::new("a"),
            None,
            vec![Message::user("hi")],
            None,
        );
        state.messages.push(Message::Assistant {
            parts: vec![AssistantPart::ToolCall(ToolCall {
                id: "c1".into(),
                name: "ask_user".into(),
                args: ToolArgs::Json(serde_json::json!({})),
            })],
        });
        let mut ids = CallIds::default();
        let renamed = ids.claim(&state, "c1".into());
        assert_ne!(renamed.as_str(), "c1");
        assert_eq!(ids.claim(&state, "c2".into()).as_str(), "c2");
        let empty_1 = ids.claim(&state, "".into());
        let empty_2 = ids.claim(&state, " ".into());
        let again = ids.claim(&state, "c2".into());
        let all = [renamed, empty_1, empty_2, again];
        let distinct: HashSet<_> = all.iter().collect();
        assert_eq!(distinct.len(), all.len(), "{all:?}");
    }
}
