//! askloop's [`ModelRequest`] → genai's `ChatRequest` and `ChatOptions`, per [`Protocol`].
//!
//! This is the one place askloop's stored messages meet genai's types; nothing of genai is ever
//! persisted. Per protocol:
//!
//! - **Reasoning.** Anthropic gets its signed thinking blocks back verbatim (a block without a
//!   signature cannot be verified and is left out); redacted thinking travels in the signature
//!   slot as `redacted_thinking:DATA`. OpenAI-compatible servers and Ollama get no reasoning back.
//! - **Tool results.** OpenAI gets one `tool` message per result; Anthropic one `user` message of
//!   `tool_result` blocks with `is_error`; Ollama one `tool` message per result.
//! - **Tool choice.** OpenAI and Anthropic send it as the API's `tool_choice`. Ollama's API has
//!   none, so a named tool is enforced by offering only that tool, `none` by offering no tools,
//!   and `required` cannot be enforced (logged).

use askloop_core::model::{
    AssistantPart, Message, ModelRequest, ModelSettings, ToolArgs, ToolChoice, ToolResult,
};
use genai::chat::{
    ChatMessage, ChatOptions, ChatRequest, ContentPart, MessageContent, ReasoningEffort, Tool,
    ToolCall as GenaiToolCall, ToolChoice as GenaiToolChoice, ToolResponse,
};
use serde_json::{Map, Value, json};

use crate::options::ProviderOptions;
use crate::protocol::Protocol;

/// Prefix of a [`AssistantPart::Reasoning`] signature that holds an Anthropic
/// `redacted_thinking` block's `data` (such blocks have no text and no signature of their own).
pub(crate) const REDACTED_THINKING_PREFIX: &str = "redacted_thinking:";

/// The genai request for one model step.
pub(crate) fn chat_request(protocol: Protocol, request: &ModelRequest) -> ChatRequest {
    let mut chat_request = ChatRequest::new(messages(protocol, &request.messages));
    chat_request.system = request.system.clone();
    let tools: Vec<Tool> = offered_tools(protocol, request)
        .map(|tool| {
            Tool::new(tool.name.as_str())
                .with_description(tool.description.as_str())
                .with_schema(tool.input_schema.clone())
        })
        .collect();
    if !tools.is_empty() {
        chat_request = chat_request.with_tools(tools);
    }
    chat_request
}

/// The genai options for one model step: sampling, tool choice, capture flags and timeouts.
pub(crate) fn chat_options(
    protocol: Protocol,
    model: &str,
    request: &ModelRequest,
    options: &ProviderOptions,
) -> ChatOptions {
    let settings: &ModelSettings = &request.settings;
    let mut chat_options = ChatOptions::default()
        .with_capture_usage(true)
        .with_capture_tool_calls(true)
        .with_capture_reasoning_content(true)
        .with_stream_header_timeout(options.first_byte_timeout())
        .with_stream_read_timeout(options.idle_timeout());
    if let Some(temperature) = settings.temperature {
        chat_options = chat_options.with_temperature(decimal(temperature));
    }
    if let Some(top_p) = settings.top_p {
        chat_options = chat_options.with_top_p(decimal(top_p));
    }
    if let Some(max_tokens) = settings.max_tokens {
        chat_options = chat_options.with_max_tokens(max_tokens);
    }
    if let Some(seed) = settings.seed {
        chat_options = chat_options.with_seed(seed);
    }
    // genai reads a reasoning effort from a model name ending in `-low`, `-high`, `-max`, … and
    // then sends a shortened name. askloop sends the name it was given: for OpenAI a budget
    // effort is a no-op that turns this off; for Anthropic `Zero` does, and is only needed for
    // such names (it would otherwise turn off thinking where it is on by default).
    match protocol {
        Protocol::OpenAi => {
            chat_options = chat_options.with_reasoning_effort(ReasoningEffort::Budget(0));
        }
        Protocol::Anthropic if ReasoningEffort::from_model_name(model).0.is_some() => {
            chat_options = chat_options.with_reasoning_effort(ReasoningEffort::Zero);
        }
        Protocol::Anthropic | Protocol::Ollama => {}
    }
    if !request.tools.is_empty() && protocol != Protocol::Ollama {
        let choice = match &settings.tool_choice {
            ToolChoice::Auto => None,
            ToolChoice::Required => Some(GenaiToolChoice::Required),
            ToolChoice::None => Some(GenaiToolChoice::None),
            ToolChoice::Tool(name) => Some(GenaiToolChoice::tool(name.as_str())),
        };
        if let Some(choice) = choice {
            chat_options = chat_options.with_tool_choice(choice);
        }
    }
    chat_options
}

/// The tools to offer: all of them, except where Ollama's missing `tool_choice` is emulated.
fn offered_tools<'a>(
    protocol: Protocol,
    request: &'a ModelRequest,
) -> impl Iterator<Item = &'a askloop_core::model::ToolDefinition> + 'a {
    let choice = &request.settings.tool_choice;
    if protocol == Protocol::Ollama && *choice == ToolChoice::Required {
        tracing::warn!("ollama has no tool_choice; a required tool call cannot be enforced");
    }
    request.tools.iter().filter(move |tool| {
        protocol != Protocol::Ollama
            || match choice {
                ToolChoice::Auto | ToolChoice::Required => true,
                ToolChoice::None => false,
                ToolChoice::Tool(name) => tool.name == *name,
            }
    })
}

/// A sampling value as the decimal it was written as (`0.2`, not `0.20000000298023224`).
fn decimal(value: f32) -> f64 {
    value.to_string().parse().unwrap_or(f64::from(value))
}

fn messages(protocol: Protocol, messages: &[Message]) -> Vec<ChatMessage> {
    let mut converted = Vec::with_capacity(messages.len());
    for message in messages {
        match message {
            Message::User { text } => converted.push(ChatMessage::user(text.as_str())),
            Message::Assistant { parts } => {
                let parts: Vec<ContentPart> = parts
                    .iter()
                    .filter_map(|part| assistant_part(protocol, part))
                    .collect();
                // Anthropic refuses an empty assistant turn; an empty answer carries nothing.
                if parts.is_empty() && protocol == Protocol::Anthropic {
                    continue;
                }
                converted.push(ChatMessage::assistant(MessageContent::from_parts(parts)));
            }
            Message::Tool { results } => match protocol {
                Protocol::OpenAi => converted.push(ChatMessage::tool(MessageContent::from(
                    results.iter().map(tool_response).collect::<Vec<_>>(),
                ))),
                Protocol::Anthropic => {
                    let blocks: Vec<ContentPart> = results
                        .iter()
                        .map(|result| ContentPart::from_custom(anthropic_tool_result(result), None))
                        .collect();
                    converted.push(ChatMessage::tool(MessageContent::from_parts(blocks)));
                }
                Protocol::Ollama => converted.extend(
                    results
                        .iter()
                        .map(|result| ChatMessage::tool(tool_response(result))),
                ),
            },
        }
    }
    converted
}

fn assistant_part(protocol: Protocol, part: &AssistantPart) -> Option<ContentPart> {
    match part {
        AssistantPart::Text { text } if text.is_empty() => None,
        AssistantPart::Text { text } => Some(ContentPart::Text(text.clone())),
        AssistantPart::Reasoning { text, signature } => match (protocol, signature) {
            (Protocol::Anthropic, Some(signature)) => {
                let block = match signature.strip_prefix(REDACTED_THINKING_PREFIX) {
                    Some(data) => json!({"type": "redacted_thinking", "data": data}),
                    None => json!({"type": "thinking", "thinking": text, "signature": signature}),
                };
                Some(ContentPart::from_custom(block, None))
            }
            _ => None,
        },
        AssistantPart::ToolCall(call) => {
            let fn_arguments = match (&call.args, protocol) {
                (ToolArgs::Json(value @ Value::Object(_)), _) => value.clone(),
                // Anthropic and Ollama take only an object; the error result quotes the raw text.
                (_, Protocol::Anthropic | Protocol::Ollama) => Value::Object(Map::new()),
                (ToolArgs::Json(value), Protocol::OpenAi) => value.clone(),
                (ToolArgs::Malformed(raw), Protocol::OpenAi) => Value::String(raw.clone()),
            };
            Some(ContentPart::ToolCall(GenaiToolCall {
                call_id: call.id.to_string(),
                fn_name: call.name.clone(),
                fn_arguments,
                thought_signatures: None,
            }))
        }
        // Kinds of parts added later are not sent until this adapter knows them.
        _ => None,
    }
}

fn tool_response(result: &ToolResult) -> ToolResponse {
    ToolResponse::new(result.tool_call_id.to_string(), result.content_text())
        .with_fn_name(result.tool_name.as_str())
}

fn anthropic_tool_result(result: &ToolResult) -> Value {
    let mut block = json!({
        "type": "tool_result",
        "tool_use_id": result.tool_call_id.to_string(),
        "content": result.content_text(),
    });
    if result.is_error {
        block["is_error"] = Value::Bool(true);
    }
    block
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampling_values_keep_their_decimal_form() {
        assert_eq!(decimal(0.2), 0.2);
        assert_eq!(decimal(1.0), 1.0);
    }

    #[test]
    fn redacted_thinking_round_trips_through_the_signature_slot() {
        let part = AssistantPart::Reasoning {
            text: String::new(),
            signature: Some(format!("{REDACTED_THINKING_PREFIX}abc")),
        };
        let Some(ContentPart::Custom(custom)) = assistant_part(Protocol::Anthropic, &part) else {
            panic!("expected a custom part");
        };
        assert_eq!(
            custom.data,
            json!({"type": "redacted_thinking", "data": "abc"})
        );
        assert!(assistant_part(Protocol::OpenAi, &part).is_none());
    }
}
