//! Constrained decoding: the grammar that makes every step plain text or one schema-valid call.
//!
//! For a request with tools, the model's output must match
//!
//! ```text
//! start: TEXT | tool_call                  (tool choice auto; required/named: tool_call only)
//! TEXT: /[^<](?s:.)*/                       any text that does not open with "<"
//! tool_call: "<tool_call>\n" (call_0 | call_1 | …) "\n</tool_call>"
//! call_0: "{\"name\": \"ask_user\", \"arguments\": " args_0 "}"
//! args_0: %json { …the tool's decoding schema… }
//! ```
//!
//! For Qwen2.5 ([`ChatFormat::Qwen`]), which usually writes its calls as bare JSON, a call may
//! also come without the tag, and plain text may not start with `{`, `<`, whitespace or a code
//! fence (so every output is one or the other from its first character):
//!
//! ```text
//! TEXT: /([^{<`\s]|`[^`]|``[^`])(?s:.)*/
//! tool_call: "<tool_call>\n" (call_0 | …) "\n</tool_call>" | (call_0 | …)
//! ```
//!
//! Without a tool to call (none offered, tool choice `none`, the question budget spent), text
//! is still constrained, so that it never opens as a tool call in disguise (issue 33: a small
//! model that has called `ask_user` before writes its call again as the answer): it may not
//! start with `{`, `<`, whitespace, or a code fence whose first line opens a JSON object or a
//! tag ([`TEXT_WITHOUT_TOOLS`]). Only the opening is constrained: a reply may still show JSON
//! after a first sentence.
//!
//! ```text
//! start: TEXT
//! TEXT: /([^{<`\s]|`[^`]|``[^`]|```[^\n{<]*\n[^{<`\s])(?s:.)*/
//! ```
//!
//! llguidance turns this into a token mask at every step, so the JSON is valid and matches the
//! schema by construction. The decoding schema is the tool's schema made finite and strict,
//! because a 135M model left free loops or invents: every string gets a `maxLength`
//! ([`MAX_STRING_LENGTH`]) and no leading or trailing whitespace, every array a `maxItems`
//! ([`MAX_ARRAY_ITEMS`]), every object `additionalProperties: false`; JSON whitespace is fixed
//! to `", "` and `": "`.

use askloop_core::model::{ToolChoice, ToolDefinition};
use serde_json::{Map, Value, json};

use crate::local::error::LocalModelError;
use crate::local::template::{ChatFormat, TOOL_CALL_CLOSE, TOOL_CALL_OPEN};

/// The longest string the model may write in a top-level tool argument, unless the schema says
/// less.
pub const MAX_STRING_LENGTH: u64 = 120;
/// The longest string the model may write inside an array (an option's label, a list entry).
pub const MAX_NESTED_STRING_LENGTH: u64 = 48;
/// The most items the model may write in an array argument, unless the schema says less.
pub const MAX_ARRAY_ITEMS: u64 = 4;

/// The regular expression of a step's text when no tool may be called: anything that does not
/// open as a tool call (see the module docs).
pub(crate) const TEXT_WITHOUT_TOOLS: &str = r"([^{<`\s]|`[^`]|``[^`]|```[^\n{<]*\n[^{<`\s])(?s:.)*";

/// How the output of one step is constrained.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum DecodingPlan {
    /// Plain text only (no tools, or tool choice `none`), under a grammar that keeps it from
    /// opening as a tool call ([`TEXT_WITHOUT_TOOLS`]).
    Text {
        /// The grammar.
        lark: String,
    },
    /// A grammar (Lark syntax for llguidance) over text and tool calls.
    Grammar {
        /// The grammar.
        lark: String,
        /// Whether plain text is allowed (tool choice `auto`).
        allow_text: bool,
        /// Whether a call may start as bare JSON (`{`) without the tag.
        bare_calls: bool,
    },
}

/// The decoding schema of a tool: its JSON Schema with length bounds, closed objects and fixed
/// whitespace (see the module docs).
pub fn decoding_schema(schema: &Value) -> Value {
    let mut schema = schema.clone();
    bound(&mut schema, MAX_STRING_LENGTH);
    if let Value::Object(object) = &mut schema {
        object.shift_remove("$schema");
        object.insert(
            "x-guidance".to_owned(),
            json!({
                "whitespace_flexible": false,
                "item_separator": ", ",
                "key_separator": ": ",
                "lenient": true,
                "coerce_one_of": true,
            }),
        );
    }
    schema
}

fn has_type(object: &Map<String, Value>, name: &str) -> bool {
    match object.get("type") {
        Some(Value::String(kind)) => kind == name,
        Some(Value::Array(kinds)) => kinds.iter().any(|kind| kind == name),
        _ => false,
    }
}

fn cap(object: &mut Map<String, Value>, key: &str, limit: u64) {
    let current = object.get(key).and_then(Value::as_u64);
    if current.is_none_or(|current| current > limit) {
        object.insert(key.to_owned(), json!(limit));
    }
}

/// Applies the bounds to one schema and every schema inside it; strings get at most
/// `string_length` characters.
fn bound(schema: &mut Value, string_length: u64) {
    let Value::Object(object) = schema else {
        return;
    };
    bound_values(object, string_length);
    bound_properties(object);
    if has_type(object, "object") || object.contains_key("properties") {
        match object.get("additionalProperties") {
            Some(Value::Object(_)) if !object.contains_key("properties") => {}
            _ => {
                object.insert("additionalProperties".to_owned(), Value::Bool(false));
            }
        }
    }
    bound_children(object, string_length);
}

/// Bounds a string schema (at most `string_length` characters, never blank or padded) and an
/// array schema (at most [`MAX_ARRAY_ITEMS`] items).
fn bound_values(object: &mut Map<String, Value>, string_length: u64) {
    let constant = object.contains_key("enum") || object.contains_key("const");
    if has_type(object, "string") && !constant {
        cap(object, "maxLength", string_length);
        if !object.contains_key("pattern") && !object.contains_key("format") {
            // No leading or trailing whitespace and no line breaks: a non-empty string is never
            // blank, and the model cannot pad forever.
            object.insert("pattern".to_owned(), json!("^(\\S(.*\\S)?)?$"));
        }
    }
    if has_type(object, "array") || object.contains_key("items") {
        cap(object, "maxItems", MAX_ARRAY_ITEMS);
    }
}

/// Makes an object schema's required strings non-empty and its optional lists, when given,
/// non-empty.
fn bound_properties(object: &mut Map<String, Value>) {
    // A required string is never empty: schema-valid, and what every tool means by it.
    let required: Vec<String> = object
        .get("required")
        .and_then(Value::as_array)
        .map(|names| {
            names
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let Some(Value::Object(properties)) = object.get_mut("properties") else {
        return;
    };
    for name in &required {
        if let Some(Value::Object(property)) = properties.get_mut(name) {
            let free = !property.contains_key("enum") && !property.contains_key("const");
            if has_type(property, "string") && free && !property.contains_key("minLength") {
                property.insert("minLength".to_owned(), json!(1));
            }
        }
    }
    // An optional list, when given, has something in it (`options: []` says nothing).
    for (name, property) in properties.iter_mut() {
        if let Value::Object(property) = property
            && !required.contains(name)
            && (has_type(property, "array") || property.contains_key("items"))
            && !property.contains_key("minItems")
        {
            property.insert("minItems".to_owned(), json!(1));
        }
    }
}

/// Applies the bounds to every schema inside `object`: nested strings (in definitions, array
/// items) get at most [`MAX_NESTED_STRING_LENGTH`] characters, the others `string_length`.
fn bound_children(object: &mut Map<String, Value>, string_length: u64) {
    // Definitions are mostly reached through arrays (schemars puts item types there).
    for (key, length) in [
        ("properties", string_length),
        ("patternProperties", string_length),
        ("$defs", MAX_NESTED_STRING_LENGTH),
        ("definitions", MAX_NESTED_STRING_LENGTH),
    ] {
        if let Some(Value::Object(children)) = object.get_mut(key) {
            children.values_mut().for_each(|child| bound(child, length));
        }
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(Value::Array(children)) = object.get_mut(key) {
            children
                .iter_mut()
                .for_each(|child| bound(child, string_length));
        }
    }
    if let Some(Value::Array(children)) = object.get_mut("prefixItems") {
        children
            .iter_mut()
            .for_each(|child| bound(child, MAX_NESTED_STRING_LENGTH));
    }
    for (key, length) in [
        ("items", MAX_NESTED_STRING_LENGTH),
        ("additionalProperties", string_length),
        ("not", string_length),
    ] {
        if let Some(child) = object.get_mut(key) {
            bound(child, length);
        }
    }
}

/// A Lark string literal.
fn literal(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_else(|_| "\"\"".to_owned())
}

/// The tools the model may call under `choice`, or `None` for plain text.
pub(crate) fn callable_tools<'a>(
    tools: &'a [ToolDefinition],
    choice: &ToolChoice,
) -> Result<Option<Vec<&'a ToolDefinition>>, LocalModelError> {
    match choice {
        ToolChoice::None => Ok(None),
        ToolChoice::Auto if tools.is_empty() => Ok(None),
        ToolChoice::Auto => Ok(Some(tools.iter().collect())),
        ToolChoice::Required if tools.is_empty() => Err(LocalModelError::NoTools),
        ToolChoice::Required => Ok(Some(tools.iter().collect())),
        ToolChoice::Tool(name) => tools
            .iter()
            .find(|tool| &tool.name == name)
            .map(|tool| Some(vec![tool]))
            .ok_or_else(|| LocalModelError::UnknownTool { tool: name.clone() }),
    }
}

/// The decoding plan of one step for a model of `format`.
///
/// # Errors
/// [`LocalModelError::NoTools`], [`LocalModelError::UnknownTool`].
pub(crate) fn plan(
    tools: &[ToolDefinition],
    choice: &ToolChoice,
    format: ChatFormat,
) -> Result<DecodingPlan, LocalModelError> {
    let Some(callable) = callable_tools(tools, choice)? else {
        return Ok(DecodingPlan::Text {
            lark: format!("%llguidance {{}}\nstart: TEXT\nTEXT: /{TEXT_WITHOUT_TOOLS}/\n"),
        });
    };
    let allow_text = matches!(choice, ToolChoice::Auto);
    let bare_calls = format == ChatFormat::Qwen;
    let mut lark = String::from("%llguidance {}\n");
    match (allow_text, bare_calls) {
        (true, false) => lark.push_str("start: TEXT | tool_call\nTEXT: /[^<](?s:.)*/\n"),
        (true, true) => {
            lark.push_str("start: TEXT | tool_call\nTEXT: /([^{<`\\s]|`[^`]|``[^`])(?s:.)*/\n")
        }
        (false, _) => lark.push_str("start: tool_call\n"),
    }
    let calls = (0..callable.len())
        .map(|index| format!("call_{index}"))
        .collect::<Vec<_>>()
        .join(" | ");
    lark.push_str(&format!(
        "tool_call: {} ({calls}) {}",
        literal(TOOL_CALL_OPEN),
        literal(TOOL_CALL_CLOSE)
    ));
    if bare_calls {
        lark.push_str(&format!(" | ({calls})"));
    }
    lark.push('\n');
    for (index, tool) in callable.iter().enumerate() {
        let head = format!(
            "{{\"name\": {}, \"arguments\": ",
            serde_json::to_string(&tool.name).unwrap_or_default()
        );
        let schema = serde_json::to_string(&decoding_schema(&tool.input_schema))
            .unwrap_or_else(|_| "{}".to_owned());
        lark.push_str(&format!(
            "call_{index}: {} args_{index} \"}}\"\nargs_{index}: %json {schema}\n",
            literal(&head)
        ));
    }
    Ok(DecodingPlan::Grammar {
        lark,
        allow_text,
        bare_calls,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_strings_arrays_and_objects_everywhere() {
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
                "question": {"type": "string", "minLength": 1},
                "options": {"type": ["array", "null"], "items": {"$ref": "#/$defs/Option"}},
                "mode": {"type": "string", "enum": ["a", "b"]},
                "short": {"type": "string", "maxLength": 5}
            },
            "$defs": {"Option": {
                "type": "object",
                "properties": {"label": {"type": "string"}},
                "required": ["label"]
            }}
        });
        let bounded = decoding_schema(&schema);
        assert_eq!(bounded["additionalProperties"], false);
        assert_eq!(
            bounded["properties"]["question"]["maxLength"],
            MAX_STRING_LENGTH
        );
        assert_eq!(
            bounded["properties"]["options"]["maxItems"],
            MAX_ARRAY_ITEMS
        );
        assert_eq!(bounded["properties"]["short"]["maxLength"], 5);
        assert!(bounded["properties"]["mode"].get("maxLength").is_none());
        assert_eq!(bounded["$defs"]["Option"]["additionalProperties"], false);
        assert_eq!(
            bounded["$defs"]["Option"]["properties"]["label"]["maxLength"],
            MAX_NESTED_STRING_LENGTH
        );
        assert_eq!(
            bounded["$defs"]["Option"]["properties"]["label"]["minLength"],
            1
        );
        assert!(bounded.get("$schema").is_none());
        assert_eq!(bounded["x-guidance"]["whitespace_flexible"], false);
    }

    #[test]
    fn issue33_text_without_tools_never_opens_as_a_tool_call() {
        let text = regex::Regex::new(&format!("^(?:{TEXT_WITHOUT_TOOLS})$")).unwrap();
        for disguised in [
            r#"{"name": "ask_user", "arguments": {"question": "Where?"}}"#,
            "<tool_call>\n{\"name\": \"ask_user\"}\n</tool_call>",
            " {\"name\": \"ask_user\"}",
            "\n<tool_call>",
            "```json\n{\"name\": \"ask_user\", \"arguments\": {}}\n```",
            "```\n{\"name\": \"ask_user\"}\n```",
            "```xml\n<tool_call>\n```",
            "```{\"name\": \"ask_user\"}```",
            "",
        ] {
            assert!(!text.is_match(disguised), "{disguised:?} is allowed");
        }
        for reply in [
            "Lisbon it is: three days of trams.",
            "Here is the config:\n```json\n{\"port\": 80}\n```",
            "```python\nprint(\"hello\")\n```",
            "`x` is the variable.",
            "1. Pack light\n2. Book early",
            "Für Maria: alles Gute!",
        ] {
            assert!(text.is_match(reply), "{reply:?} is refused");
        }
        let Ok(DecodingPlan::Text { lark }) = plan(&[], &ToolChoice::Auto, ChatFormat::Qwen) else {
            panic!("no text plan");
        };
        assert!(lark.contains(TEXT_WITHOUT_TOOLS), "{lark}");
    }

    #[test]
    fn tool_choice_decides_the_plan() {
        let tool = ToolDefinition {
            name: "ask_user".into(),
            description: "Ask".into(),
            input_schema: json!({"type": "object"}),
        };
        let tools = vec![tool];
        assert!(matches!(
            plan(&[], &ToolChoice::Auto, ChatFormat::ChatMl),
            Ok(DecodingPlan::Text { .. })
        ));
        assert!(matches!(
            plan(&tools, &ToolChoice::None, ChatFormat::Qwen),
            Ok(DecodingPlan::Text { .. })
        ));
        assert!(matches!(
            plan(&tools, &ToolChoice::Auto, ChatFormat::ChatMl),
            Ok(DecodingPlan::Grammar {
                allow_text: true,
                ..
            })
        ));
        assert!(matches!(
            plan(
                &tools,
                &ToolChoice::Tool("ask_user".into()),
                ChatFormat::ChatMl
            ),
            Ok(DecodingPlan::Grammar {
                allow_text: false,
                ..
            })
        ));
        assert!(matches!(
            plan(
                &tools,
                &ToolChoice::Tool("other".into()),
                ChatFormat::ChatMl
            ),
            Err(LocalModelError::UnknownTool { .. })
        ));
        assert!(matches!(
            plan(&[], &ToolChoice::Required, ChatFormat::ChatMl),
            Err(LocalModelError::NoTools)
        ));
    }
}
