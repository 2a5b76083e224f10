//! The chat templates: a [`ModelRequest`] as the text a model was tuned on ([`ChatFormat`]).
//!
//! [`ChatFormat::Qwen`] is Qwen2.5's own template with tools: the tools' JSON signatures in a
//! `# Tools` section of the system prompt, calls as `<tool_call>` JSON, results as
//! `<tool_response>`s in a user turn:
//!
//! ```text
//! <|im_start|>system
//! {system}
//!
//! # Tools
//!
//! You may call one or more functions to assist with the user query.
//!
//! You are provided with function signatures within <tools></tools> XML tags:
//! <tools>
//! {"type": "function", "function": {"name": "ask_user", "description": …, "parameters": …}}
//! </tools>
//!
//! For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
//! <tool_call>
//! {"name": <function-name>, "arguments": <args-json-object>}
//! </tool_call><|im_end|>
//! <|im_start|>user
//! Help me plan a trip<|im_end|>
//! <|im_start|>assistant
//! <tool_call>
//! {"name": "ask_user", "arguments": {"question": "Where to?"}}
//! </tool_call><|im_end|>
//! <|im_start|>user
//! <tool_response>
//! User answered: Lisbon
//! </tool_response><|im_end|>
//! <|im_start|>assistant
//! ```
//!
//! [`ChatFormat::ChatMl`] is plain ChatML, what SmolLM2 was tuned on, with a short tool list of
//! our own (SmolLM2 has no tool format):
//!
//! ```text
//! <|im_start|>system
//! {system}{tools}<|im_end|>
//! <|im_start|>user
//! {text}<|im_end|>
//! <|im_start|>assistant
//! <tool_call>
//! {"name": "ask_user", "arguments": {"question": "Where to?"}}
//! </tool_call><|im_end|>
//! <|im_start|>tool
//! User answered: Lisbon<|im_end|>
//! <|im_start|>assistant
//! ```
//!
//! Without instructions the model's own default system prompt is used, as its template does.
//! Tools are listed in the system prompt; a tool call is written exactly as the constrained
//! decoder makes the model write it ([`format_tool_call`]), so the history reads back as the
//! model produced it.

use std::fmt::Write as _;
use std::io;

use askloop_core::model::{AssistantPart, Message, ModelRequest, ToolArgs, ToolDefinition};
use serde::Serialize;
use serde_json::{Map, Value};

/// The system prompt SmolLM2's template uses when the conversation has none.
pub(crate) const DEFAULT_SYSTEM: &str =
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

/// The system prompt Qwen2.5's template uses when the conversation has none.
pub(crate) const QWEN_DEFAULT_SYSTEM: &str =
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

/// The chat format of a model, chosen by its architecture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ChatFormat {
    /// ChatML with askloop's own tool list (SmolLM2).
    ChatMl,
    /// Qwen2.5's template with tools, whose calls the model also writes as bare JSON.
    Qwen,
}

/// What opens a tool call in the model's output.
pub(crate) const TOOL_CALL_OPEN: &str = "<tool_call>\n";
/// What closes a tool call.
pub(crate) const TOOL_CALL_CLOSE: &str = "\n</tool_call>";

/// serde_json output with `", "` and `": "` separators on one line: the JSON style the
/// constrained decoder enforces, so histories and prompts read the same.
struct SpacedFormatter;

impl serde_json::ser::Formatter for SpacedFormatter {
    fn begin_array_value<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> io::Result<()> {
        if first {
            Ok(())
        } else {
            writer.write_all(b", ")
        }
    }

    fn begin_object_key<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> io::Result<()> {
        if first {
            Ok(())
        } else {
            writer.write_all(b", ")
        }
    }

    fn begin_object_value<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        writer.write_all(b": ")
    }
}

/// A JSON value on one line with `", "` and `": "` separators.
pub(crate) fn spaced_json(value: &impl Serialize) -> String {
    let mut out = Vec::new();
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, SpacedFormatter);
    match value.serialize(&mut serializer) {
        Ok(()) => String::from_utf8(out).unwrap_or_default(),
        Err(_) => String::new(),
    }
}

/// The text between [`TOOL_CALL_OPEN`] and [`TOOL_CALL_CLOSE`] for one call.
pub(crate) fn format_tool_call(name: &str, args: &ToolArgs) -> String {
    let arguments = match args {
        ToolArgs::Json(value) => spaced_json(value),
        ToolArgs::Malformed(raw) => raw.clone(),
    };
    format!(
        "{{\"name\": {}, \"arguments\": {arguments}}}",
        spaced_json(&name)
    )
}

/// The tools section appended to the system prompt: each tool with its description and its
/// arguments, one line each with type and description. This is far shorter than the JSON
/// Schema, which the constrained decoder enforces anyway.
pub(crate) fn tools_section(tools: &[&ToolDefinition]) -> String {
    let mut section = String::from("\n\nYou can call these tools:\n");
    for tool in tools {
        let _ = writeln!(section, "- {}: {}", tool.name, tool.description.trim());
        describe_arguments(&mut section, &tool.input_schema, &tool.input_schema, 1);
    }
    section.push_str(
        "To call a tool, answer with only:\n<tool_call>\n{\"name\": \"TOOL\", \"arguments\": {ARGUMENTS}}\n</tool_call>",
    );
    section
}

/// Follows a local `$ref`.
fn resolve<'a>(schema: &'a Value, root: &'a Value) -> &'a Value {
    let mut schema = schema;
    for _ in 0..8 {
        let Some(reference) = schema.get("$ref").and_then(Value::as_str) else {
            break;
        };
        let target = reference
            .strip_prefix("#/")
            .and_then(|path| path.split('/').try_fold(root, |node, key| node.get(key)));
        match target {
            Some(target) => schema = target,
            None => break,
        }
    }
    schema
}

/// One line per property: `  name (type, required): description`, nested objects indented.
fn describe_arguments(out: &mut String, schema: &Value, root: &Value, depth: usize) {
    let schema = resolve(schema, root);
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for (name, property) in properties {
        let kind = argument_shape(property, root, 0);
        let kind = match &kind {
            Value::String(text) => text.clone(),
            Value::Array(items) if items.first().is_some_and(Value::is_object) => {
                "list of objects".to_owned()
            }
            Value::Array(items) => format!(
                "list of {}",
                items.first().and_then(Value::as_str).unwrap_or("values")
            ),
            Value::Object(_) => "object".to_owned(),
            other => other.to_string(),
        };
        let description = resolve(property, root)
            .get("description")
            .or_else(|| property.get("description"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .replace('\n', " ");
        let marker = if required.contains(&name.as_str()) {
            ", required"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "{}{name} ({kind}{marker}): {description}",
            "  ".repeat(depth)
        );
        let inner = resolve(property, root);
        let nested = inner
            .get("items")
            .map_or(inner, |items| resolve(items, root));
        if depth < 3 {
            describe_arguments(out, nested, root, depth + 1);
        }
    }
}

/// The shape of the values a schema accepts, as an example JSON value: an object of its
/// properties' shapes (optional ones marked with `?`), `[shape]` for an array, `"a | b"` for an
/// enum, the type name for a scalar. `$ref`s into `$defs`/`definitions` are followed.
pub(crate) fn argument_shape(schema: &Value, root: &Value, depth: usize) -> Value {
    let Value::Object(object) = schema else {
        return Value::String("any".to_owned());
    };
    if depth > 6 {
        return Value::String("any".to_owned());
    }
    if let Some(Value::String(reference)) = object.get("$ref") {
        let target = reference
            .strip_prefix("#/")
            .and_then(|path| path.split('/').try_fold(root, |node, key| node.get(key)));
        return match target {
            Some(target) => argument_shape(target, root, depth + 1),
            None => Value::String("any".to_owned()),
        };
    }
    if let Some(constant) = object.get("const") {
        return constant.clone();
    }
    if let Some(Value::Array(values)) = object.get("enum") {
        let names: Vec<String> = values
            .iter()
            .map(|value| match value {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            })
            .collect();
        return Value::String(names.join(" | "));
    }
    if let Some(shape) = choice_shape(object, root, depth) {
        return shape;
    }
    let kind = match object.get("type") {
        Some(Value::String(kind)) => kind.as_str(),
        Some(Value::Array(kinds)) => kinds
            .iter()
            .filter_map(Value::as_str)
            .find(|kind| *kind != "null")
            .unwrap_or("null"),
        _ if object.contains_key("properties") => "object",
        _ if object.contains_key("items") => "array",
        _ => "any",
    };
    match kind {
        "object" => object_shape(object, root, depth),
        "array" => {
            let item = object
                .get("items")
                .map_or(Value::String("any".to_owned()), |items| {
                    argument_shape(items, root, depth + 1)
                });
            Value::Array(vec![item])
        }
        other => Value::String(other.to_owned()),
    }
}

/// The shape of an `anyOf` / `oneOf` schema (`null` left out): `"a | b"` when every choice is a
/// name, else the first choice's shape; `None` when the schema has no choices.
fn choice_shape(object: &Map<String, Value>, root: &Value, depth: usize) -> Option<Value> {
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(choices)) = object.get(key) {
            let shapes: Vec<Value> = choices
                .iter()
                .filter(|choice| choice.get("type").and_then(Value::as_str) != Some("null"))
                .map(|choice| argument_shape(choice, root, depth + 1))
                .collect();
            if shapes.iter().all(Value::is_string) && shapes.len() > 1 {
                let names: Vec<&str> = shapes.iter().filter_map(Value::as_str).collect();
                return Some(Value::String(names.join(" | ")));
            }
            if let Some(first) = shapes.into_iter().next() {
                return Some(first);
            }
        }
    }
    None
}

/// The shape of an object schema: its properties' shapes, optional ones marked with `?`.
fn object_shape(object: &Map<String, Value>, root: &Value, depth: usize) -> Value {
    let required: Vec<&str> = object
        .get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut shape = serde_json::Map::new();
    if let Some(Value::Object(properties)) = object.get("properties") {
        for (name, property) in properties {
            let key = if required.contains(&name.as_str()) {
                name.clone()
            } else {
                format!("{name}?")
            };
            shape.insert(key, argument_shape(property, root, depth + 1));
        }
    }
    Value::Object(shape)
}

/// The `# Tools` section Qwen2.5's template appends to the system prompt: each tool's JSON
/// signature on one line, then how to call.
pub(crate) fn qwen_tools_section(tools: &[&ToolDefinition]) -> String {
    let mut section = String::from(
        "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n\
         You are provided with function signatures within <tools></tools> XML tags:\n<tools>",
    );
    for tool in tools {
        let mut parameters = tool.input_schema.clone();
        if let Value::Object(object) = &mut parameters {
            // Noise to the model: the dialect and the Rust type's name.
            object.shift_remove("$schema");
            object.shift_remove("title");
        }
        // Written by hand to keep the template's key order whatever serde_json's map keeps.
        let _ = write!(
            section,
            "\n{{\"type\": \"function\", \"function\": {{\"name\": {}, \"description\": {}, \"parameters\": {}}}}}",
            spaced_json(&tool.name),
            spaced_json(&tool.description.trim()),
            spaced_json(&parameters)
        );
    }
    section.push_str(
        "\n</tools>\n\nFor each function call, return a json object with function name and \
         arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n\
         {\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>",
    );
    section
}

/// The whole prompt in `format`, ending with the open assistant turn.
pub(crate) fn render_for(
    format: ChatFormat,
    request: &ModelRequest,
    tools_section: Option<&str>,
) -> String {
    match format {
        ChatFormat::ChatMl => render(request, tools_section),
        ChatFormat::Qwen => render_qwen(request, tools_section),
    }
}

/// The whole prompt in Qwen2.5's template.
fn render_qwen(request: &ModelRequest, tools_section: Option<&str>) -> String {
    let mut prompt = String::new();
    let system = request.system.as_deref().unwrap_or(QWEN_DEFAULT_SYSTEM);
    let _ = write!(
        prompt,
        "<|im_start|>system\n{system}{}<|im_end|>\n",
        tools_section.unwrap_or("")
    );
    for message in &request.messages {
        match message {
            Message::User { text } => {
                let _ = write!(prompt, "<|im_start|>user\n{text}<|im_end|>\n");
            }
            Message::Assistant { parts } => {
                prompt.push_str("<|im_start|>assistant");
                let text: String = parts
                    .iter()
                    .filter_map(|part| match part {
                        AssistantPart::Text { text } => Some(text.as_str()),
                        _ => None,
                    })
                    .collect();
                if !text.is_empty() {
                    prompt.push('\n');
                    prompt.push_str(&text);
                }
                for part in parts {
                    if let AssistantPart::ToolCall(call) = part {
                        prompt.push('\n');
                        prompt.push_str(TOOL_CALL_OPEN);
                        prompt.push_str(&format_tool_call(&call.name, &call.args));
                        prompt.push_str(TOOL_CALL_CLOSE);
                    }
                }
                prompt.push_str("<|im_end|>\n");
            }
            Message::Tool { results } => {
                prompt.push_str("<|im_start|>user");
                for result in results {
                    let _ = write!(
                        prompt,
                        "\n<tool_response>\n{}\n</tool_response>",
                        result.content_text()
                    );
                }
                prompt.push_str("<|im_end|>\n");
            }
        }
    }
    prompt.push_str("<|im_start|>assistant\n");
    prompt
}

/// The whole prompt: every message in ChatML, ending with the open assistant turn.
pub(crate) fn render(request: &ModelRequest, tools_section: Option<&str>) -> String {
    let mut prompt = String::new();
    let system = request.system.as_deref().unwrap_or(DEFAULT_SYSTEM);
    let _ = write!(
        prompt,
        "<|im_start|>system\n{system}{}<|im_end|>\n",
        tools_section.unwrap_or("")
    );
    for message in &request.messages {
        match message {
            Message::User { text } => {
                let _ = write!(prompt, "<|im_start|>user\n{text}<|im_end|>\n");
            }
            Message::Assistant { parts } => {
                prompt.push_str("<|im_start|>assistant\n");
                let mut first = true;
                for part in parts {
                    match part {
                        AssistantPart::Text { text } => {
                            prompt.push_str(text);
                            first = false;
                        }
                        AssistantPart::ToolCall(call) => {
                            if !first {
                                prompt.push('\n');
                            }
                            prompt.push_str(TOOL_CALL_OPEN);
                            prompt.push_str(&format_tool_call(&call.name, &call.args));
                            prompt.push_str(TOOL_CALL_CLOSE);
                            first = false;
                        }
                        // Reasoning, and kinds of parts added later, are not in this model's
                        // prompt.
                        _ => {}
                    }
                }
                prompt.push_str("<|im_end|>\n");
            }
            Message::Tool { results } => {
                for result in results {
                    let _ = write!(
                        prompt,
                        "<|im_start|>tool\n{}<|im_end|>\n",
                        result.content_text()
                    );
                }
            }
        }
    }
    prompt.push_str("<|im_start|>assistant\n");
    prompt
}

#[cfg(test)]
mod tests {
    use askloop_core::model::{ModelSettings, ToolCall, ToolResult};
    use serde_json::json;

    use super::*;

    #[test]
    fn renders_every_role_in_chatml() {
        let call = ToolCall {
            id: "c1".into(),
            name: "ask_user".into(),
            args: ToolArgs::Json(
                json!({"question": "Where to?", "options": [{"label": "Lisbon"}]}),
            ),
        };
        let request = ModelRequest::new(vec![
            Message::user("Help me plan a trip"),
            Message::Assistant {
                parts: vec![AssistantPart::ToolCall(call.clone())],
            },
            Message::Tool {
                results: vec![ToolResult {
                    tool_call_id: "c1".into(),
                    tool_name: "ask_user".into(),
                    result: json!("User answered: Lisbon"),
                    is_error: false,
                    answer: None,
                    audit: Vec::new(),
                    suspension: None,
                }],
            },
        ])
        .with_tools(vec![])
        .with_settings(ModelSettings::default());
        assert_eq!(
            render(&request, None),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n\
             <|im_start|>user\nHelp me plan a trip<|im_end|>\n\
             <|im_start|>assistant\n<tool_call>\n{\"name\": \"ask_user\", \"arguments\": {\"question\": \"Where to?\", \"options\": [{\"label\": \"Lisbon\"}]}}\n</tool_call><|im_end|>\n\
             <|im_start|>tool\nUser answered: Lisbon<|im_end|>\n\
             <|im_start|>assistant\n"
        );
    }

    #[test]
    fn issue8_renders_qwen_s_own_template_with_tools() {
        let call = ToolCall {
            id: "c1".into(),
            name: "ask_user".into(),
            args: ToolArgs::Json(json!({"question": "Where to?"})),
        };
        let tool = ToolDefinition {
            name: "ask_user".into(),
            description: "Ask the user.".into(),
            // Keys in sorted order: serde_json's map may or may not keep insertion order.
            input_schema: json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "properties": {"question": {"type": "string"}},
                "required": ["question"],
                "title": "AskUserArgs",
                "type": "object"
            }),
        };
        let request = ModelRequest::new(vec![
            Message::user("Help me plan a trip"),
            Message::Assistant {
                parts: vec![AssistantPart::ToolCall(call)],
            },
            Message::Tool {
                results: vec![ToolResult {
                    tool_call_id: "c1".into(),
                    tool_name: "ask_user".into(),
                    result: json!("User answered: Lisbon"),
                    is_error: false,
                    answer: None,
                    audit: Vec::new(),
                    suspension: None,
                }],
            },
        ])
        .with_settings(ModelSettings::default());
        let section = qwen_tools_section(&[&tool]);
        assert_eq!(
            render_for(ChatFormat::Qwen, &request, Some(&section)),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.\n\n\
             # Tools\n\nYou may call one or more functions to assist with the user query.\n\n\
             You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n\
             {\"type\": \"function\", \"function\": {\"name\": \"ask_user\", \"description\": \"Ask the user.\", \
             \"parameters\": {\"properties\": {\"question\": {\"type\": \"string\"}}, \"required\": [\"question\"], \"type\": \"object\"}}}\n\
             </tools>\n\nFor each function call, return a json object with function name and arguments within \
             <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n\
             <|im_start|>user\nHelp me plan a trip<|im_end|>\n\
             <|im_start|>assistant\n<tool_call>\n{\"name\": \"ask_user\", \"arguments\": {\"question\": \"Where to?\"}}\n</tool_call><|im_end|>\n\
             <|im_start|>user\n<tool_response>\nUser answered: Lisbon\n</tool_response><|im_end|>\n\
             <|im_start|>assistant\n"
        );
    }
}
