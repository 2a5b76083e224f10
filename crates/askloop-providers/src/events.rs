//! genai's stream events → askloop's [`ModelEvent`]s: text as it arrives, reasoning blocks with
//! their signatures, tool calls assembled from their argument pieces, and the finish.

use askloop_core::model::{FinishReason, ModelEvent, ToolArgs, ToolCall, Usage};
use genai::chat::{ChatStreamEvent, ContentPart, StopReason, StreamEnd};
use serde_json::Value;

use crate::protocol::Protocol;
use crate::request::REDACTED_THINKING_PREFIX;

/// A reasoning block being received.
#[derive(Default)]
struct ReasoningBlock {
    text: String,
    signature: String,
}

/// A tool call being received: its argument text so far. Only the [`ModelEvent::ToolCallDelta`]s
/// come from these; the complete calls come from genai's capture (see [`EventAssembler`]).
struct PendingCall {
    id: String,
    name: String,
    arguments: String,
}

/// Turns one response's genai events into [`ModelEvent`]s. Feed it every event in order; it
/// returns what to pass on, and the [`ModelEvent::Finish`] (with the assembled tool calls before
/// it) when the response ends.
///
/// Tool calls are never told apart by id: providers may send empty ids, or the same id twice in
/// one response (issue 7, fault 1). genai's streamed tool-call events carry no stream index, but
/// its end-of-stream capture keeps one call per OpenAI `index`, per Anthropic content block and
/// per Ollama `tool_calls` entry; the complete [`ModelEvent::ToolCall`]s are taken from there,
/// one per call the provider sent, ids as sent (an empty id stays empty). The argument deltas
/// passed on while streaming are for display only: a piece continues the latest call when its
/// id and name match and its text extends that call's text, and starts a new call otherwise.
pub(crate) struct EventAssembler {
    protocol: Protocol,
    reasoning: Option<ReasoningBlock>,
    calls: Vec<PendingCall>,
    finished: bool,
    cut: bool,
}

impl EventAssembler {
    /// An assembler for one response of `protocol`.
    pub(crate) fn new(protocol: Protocol) -> Self {
        Self {
            protocol,
            reasoning: None,
            calls: Vec::new(),
            finished: false,
            cut: false,
        }
    }

    /// Whether the response's end has been seen.
    pub(crate) fn is_finished(&self) -> bool {
        self.finished
    }

    /// Whether the response ended without its protocol's last message. genai's Ollama adapter
    /// reports the end of the body as an end event even when the final `"done": true` line never
    /// came; that line is what carries the usage, so an end without usage is a cut stream.
    pub(crate) fn is_cut(&self) -> bool {
        self.cut
    }

    /// The events to pass on for one genai event.
    pub(crate) fn push(&mut self, event: ChatStreamEvent) -> Vec<ModelEvent> {
        let mut out = Vec::new();
        if self.finished {
            return out;
        }
        match event {
            ChatStreamEvent::Start | ChatStreamEvent::Heartbeat => {}
            ChatStreamEvent::Chunk(chunk) => {
                self.close_reasoning(&mut out);
                if !chunk.content.is_empty() {
                    out.push(ModelEvent::TextDelta(chunk.content));
                }
            }
            ChatStreamEvent::ReasoningChunk(chunk) => {
                // A signature ends its block: reasoning after it starts the next block.
                if self
                    .reasoning
                    .as_ref()
                    .is_some_and(|block| !block.signature.is_empty())
                {
                    self.close_reasoning(&mut out);
                }
                if !chunk.content.is_empty() {
                    self.reasoning
                        .get_or_insert_with(ReasoningBlock::default)
                        .text
                        .push_str(&chunk.content);
                    out.push(ModelEvent::ReasoningDelta(chunk.content));
                }
            }
            ChatStreamEvent::ThoughtSignatureChunk(chunk) => {
                self.reasoning
                    .get_or_insert_with(ReasoningBlock::default)
                    .signature
                    .push_str(&chunk.content);
            }
            ChatStreamEvent::ToolCallChunk(chunk) => {
                self.close_reasoning(&mut out);
                let call = chunk.tool_call;
                let arguments = argument_text(call.fn_arguments);
                self.tool_call_piece(call.call_id, call.fn_name, arguments, &mut out);
            }
            ChatStreamEvent::End(end) => {
                self.close_reasoning(&mut out);
                self.finish(end, &mut out);
            }
        }
        out
    }

    /// Ends the reasoning block being received, passing on its signature.
    fn close_reasoning(&mut self, out: &mut Vec<ModelEvent>) {
        if let Some(block) = self.reasoning.take()
            && !block.signature.is_empty()
        {
            out.push(ModelEvent::Reasoning {
                text: block.text,
                signature: Some(block.signature),
            });
        }
    }

    /// Records a piece of a tool call. genai gives each call's argument text so far (or, for
    /// providers that send whole calls, the whole arguments); the new part is passed on.
    fn tool_call_piece(
        &mut self,
        id: String,
        name: String,
        arguments: String,
        out: &mut Vec<ModelEvent>,
    ) {
        let continues_last = self.calls.last().is_some_and(|call| {
            call.id == id
                && (name.is_empty() || call.name == name)
                && arguments.starts_with(call.arguments.as_str())
        });
        if !continues_last {
            self.calls.push(PendingCall {
                id,
                name,
                arguments: String::new(),
            });
        }
        let Some(call) = self.calls.last_mut() else {
            return;
        };
        let delta = match arguments.strip_prefix(call.arguments.as_str()) {
            Some(delta) => delta.to_owned(),
            None => arguments.clone(),
        };
        call.arguments = arguments;
        if !delta.is_empty() {
            out.push(ModelEvent::ToolCallDelta {
                id: call.id.clone(),
                name: call.name.clone(),
                args_delta: delta,
            });
        }
    }

    fn finish(&mut self, end: StreamEnd, out: &mut Vec<ModelEvent>) {
        if self.protocol == Protocol::Ollama && end.captured_usage.is_none() {
            self.cut = true;
            return;
        }
        self.finished = true;
        let content = end.captured_content.as_ref();
        // Redacted thinking arrives whole, at the end only.
        for part in content
            .map(|content| content.parts().as_slice())
            .unwrap_or_default()
        {
            if let ContentPart::Custom(custom) = part
                && custom.data.get("type").and_then(Value::as_str) == Some("redacted_thinking")
                && let Some(data) = custom.data.get("data").and_then(Value::as_str)
            {
                out.push(ModelEvent::Reasoning {
                    text: String::new(),
                    signature: Some(format!("{REDACTED_THINKING_PREFIX}{data}")),
                });
            }
        }
        // The complete calls: genai's capture, one per call the provider sent (by stream index
        // or content block), in order. The streamed pieces only stand in if there is none.
        let captured: Vec<PendingCall> = content
            .map(|content| content.tool_calls())
            .unwrap_or_default()
            .into_iter()
            .map(|call| PendingCall {
                id: call.call_id.clone(),
                name: call.fn_name.clone(),
                arguments: argument_text(call.fn_arguments.clone()),
            })
            .collect();
        let calls = if captured.is_empty() {
            std::mem::take(&mut self.calls)
        } else {
            self.calls.clear();
            captured
        };
        let has_calls = !calls.is_empty();
        for call in calls {
            out.push(ModelEvent::ToolCall(ToolCall {
                id: call.id.into(),
                name: call.name,
                args: ToolArgs::parse(&call.arguments),
            }));
        }
        let reason = match end.captured_stop_reason {
            _ if has_calls => FinishReason::ToolCalls,
            Some(StopReason::Completed(_) | StopReason::StopSequence(_)) | None => {
                FinishReason::Stop
            }
            Some(StopReason::ToolCall(_)) => FinishReason::Stop,
            Some(StopReason::MaxTokens(_)) => FinishReason::Length,
            Some(StopReason::ContentFilter(_)) => FinishReason::ContentFilter,
            Some(StopReason::Other(_)) => FinishReason::Other,
        };
        let usage = end
            .captured_usage
            .map(|usage| Usage {
                input_tokens: tokens(usage.prompt_tokens),
                output_tokens: tokens(usage.completion_tokens),
            })
            .unwrap_or_default();
        out.push(ModelEvent::Finish { reason, usage });
    }
}

/// A call's argument text: genai gives streamed arguments as a JSON string of the text so far,
/// and whole arguments (Ollama) as JSON.
fn argument_text(arguments: Value) -> String {
    match arguments {
        Value::String(text) => text,
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn tokens(count: Option<i32>) -> u64 {
    count
        .and_then(|count| u64::try_from(count).ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use genai::chat::{MessageContent, StreamChunk, Usage as GenaiUsage};
    use serde_json::json;

    use super::*;

    fn chunk(content: &str) -> StreamChunk {
        StreamChunk {
            content: content.to_owned(),
        }
    }

    fn end(content: Option<MessageContent>, usage: Option<GenaiUsage>) -> ChatStreamEvent {
        ChatStreamEvent::End(StreamEnd {
            captured_content: content,
            captured_usage: usage,
            ..StreamEnd::default()
        })
    }

    #[test]
    fn back_to_back_thinking_blocks_keep_their_own_signatures() {
        let mut assembler = EventAssembler::new(Protocol::Anthropic);
        let mut events = Vec::new();
        for event in [
            ChatStreamEvent::ReasoningChunk(chunk("first")),
            ChatStreamEvent::ThoughtSignatureChunk(chunk("sig-")),
            ChatStreamEvent::ThoughtSignatureChunk(chunk("1")),
            ChatStreamEvent::ReasoningChunk(chunk("second")),
            ChatStreamEvent::ThoughtSignatureChunk(chunk("sig-2")),
            ChatStreamEvent::Chunk(chunk("Answer.")),
            end(None, Some(GenaiUsage::default())),
        ] {
            events.extend(assembler.push(event));
        }
        assert_eq!(
            events,
            [
                ModelEvent::ReasoningDelta("first".into()),
                ModelEvent::Reasoning {
                    text: "first".into(),
                    signature: Some("sig-1".into())
                },
                ModelEvent::ReasoningDelta("second".into()),
                ModelEvent::Reasoning {
                    text: "second".into(),
                    signature: Some("sig-2".into())
                },
                ModelEvent::TextDelta("Answer.".into()),
                ModelEvent::Finish {
                    reason: FinishReason::Stop,
                    usage: Usage::default()
                },
            ]
        );
    }

    #[test]
    fn redacted_thinking_arrives_at_the_end_in_the_signature_slot() {
        let mut assembler = EventAssembler::new(Protocol::Anthropic);
        let content = MessageContent::from_parts(vec![ContentPart::from_custom(
            json!({"type": "redacted_thinking", "data": "EmwKAhgB"}),
            None,
        )]);
        let events = assembler.push(end(Some(content), None));
        assert_eq!(
            events[0],
            ModelEvent::Reasoning {
                text: String::new(),
                signature: Some(format!("{REDACTED_THINKING_PREFIX}EmwKAhgB")),
            }
        );
        assert!(assembler.is_finished());
    }

    #[test]
    fn ollama_end_without_its_done_line_is_a_cut() {
        let mut assembler = EventAssembler::new(Protocol::Ollama);
        assert_eq!(
            assembler.push(ChatStreamEvent::Chunk(chunk("Hel"))),
            [ModelEvent::TextDelta("Hel".into())]
        );
        assert!(assembler.push(end(None, None)).is_empty());
        assert!(assembler.is_cut());
        assert!(!assembler.is_finished());
    }

    #[test]
    fn malformed_arguments_are_kept_verbatim() {
        let mut assembler = EventAssembler::new(Protocol::OpenAi);
        let call = |arguments: &str| {
            ChatStreamEvent::ToolCallChunk(genai::chat::ToolChunk {
                tool_call: genai::chat::ToolCall {
                    call_id: "c1".into(),
                    fn_name: "ask_user".into(),
                    fn_arguments: Value::String(arguments.into()),
                    thought_signatures: None,
                },
            })
        };
        assembler.push(call("{\"question\": "));
        let events = assembler.push(end(None, Some(GenaiUsage::default())));
        assert_eq!(
            events[0],
            ModelEvent::ToolCall(ToolCall {
                id: "c1".into(),
                name: "ask_user".into(),
                args: ToolArgs::Malformed("{\"question\": ".into()),
            })
        );
        assert!(matches!(
            events[1],
            ModelEvent::Finish {
                reason: FinishReason::ToolCalls,
                ..
            }
        ));
    }
}
