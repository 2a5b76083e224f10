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
//! because a 135M model left free loops or invents: every array gets a `maxItems`
//! ([`MAX_ARRAY_ITEMS`]), every object `additionalProperties: false`, JSON whitespace is fixed
//! to `", "` and `": "`, and every free string (no `enum`, `const`, `pattern` or `format` of its
//! own) is a run of bounded words ([`words_pattern`]):
//!
//! ```text
//! ^(W( W){0,N-2}|W( W){N-1} ?)?$        W = \S{1,32}; N = MAX_WORDS (24) at the top level,
//!                                        MAX_NESTED_WORDS (20) inside arrays and definitions
//! ```
//!
//! Words are separated by one space, so a string has no leading or doubled whitespace and no
//! line break, and it may close only after a complete word; a trailing space only after the
//! last word allowed (where the model meant to go on: it writes its space and must stop, rather
//! than glue its next word to the last one). A character cap
//! (`maxLength`) would instead force the string shut wherever the count runs out, often
//! mid-word (issue 33: an option's description ending in `…views and a h`); with bounded words
//! the model may always finish the word it is writing (up to [`MAX_WORD_LENGTH`] characters),
//! and only the word count is bounded. A `maxLength` the schema sets itself is kept.
//!
//! An object inside an array or a definition (an `ask_user` option) loses its optional
//! `description` property: a small model's option descriptions restate the label at length
//! (`Alice` — "Her full name."), doubled the question's tokens (so its time on screen), and
//! ran into the length cap; the label is what the person picks. A required `description`
//! stays.

use askloop_core::model::{ToolChoice, ToolDefinition};
use serde_json::{Map, Value, json};

use crate::local::error::LocalModelError;
use crate::local::template::{ChatFormat, TOOL_CALL_CLOSE, TOOL_CALL_OPEN};

/// The most words the model may write in a top-level string argument (a question).
pub const MAX_WORDS: u64 = 24;
/// The most words the model may write in a string inside an array or a definition (an
/// option's label or description, a list entry).
pub const MAX_NESTED_WORDS: u64 = 20;
/// The longest word (run of non-whitespace characters) the model may write in a string.
pub const MAX_WORD_LENGTH: u64 = 32;
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
    bound(&mut schema, MAX_WORDS);
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

/// The pattern of a free string of at most `words` words of at most [`MAX_WORD_LENGTH`]
/// characters, one space apart (see the module docs): it closes only after a complete word.
/// After the last word it allows, one space may follow before the string closes: the model that
/// wants to go on writes the space it meant and stops there, instead of gluing its next word
/// to the last one (`push-ups andPull-ups`); `ask_user` trims it from what it shows.
pub fn words_pattern(words: u64) -> String {
    let word = format!("\\S{{1,{MAX_WORD_LENGTH}}}");
    let Some(more) = words.checked_sub(1) else {
        return "^$".to_owned();
    };
    match more.checked_sub(1) {
        None => format!("^({word} ?)?$"),
        Some(fewer) => {
            format!("^({word}( {word}){{0,{fewer}}}|{word}( {word}){{{more}}} ?)?$")
        }
    }
}

/// Applies the bounds to one schema and every schema inside it; free strings get at most
/// `words` words.
fn bound(schema: &mut Value, words: u64) {
    let Value::Object(object) = schema else {
        return;
    };
    bound_values(object, words);
    bound_properties(object);
    if has_type(object, "object") || object.contains_key("properties") {
        match object.get("additionalProperties") {
            Some(Value::Object(_)) if !object.contains_key("properties") => {}
            _ => {
                object.insert("additionalProperties".to_owned(), Value::Bool(false));
            }
        }
    }
    bound_children(object, words);
}

/// Bounds a free string schema (at most `words` words, never blank or padded, closing only
/// after a complete word) and an array schema (at most [`MAX_ARRAY_ITEMS`] items).
fn bound_values(object: &mut Map<String, Value>, words: u64) {
    let constant = object.contains_key("enum") || object.contains_key("const");
    if has_type(object, "string")
        && !constant
        && !object.contains_key("pattern")
        && !object.contains_key("format")
    {
        object.insert("pattern".to_owned(), json!(words_pattern(words)));
    } else if has_type(object, "string") && !constant {
        // A string of the schema's own pattern or format is still finite.
        cap(object, "maxLength", words * (MAX_WORD_LENGTH + 1));
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
/// items) get at most [`MAX_NESTED_WORDS`] words, the others `words`.
fn bound_children(object: &mut Map<String, Value>, words: u64) {
    // Definitions are mostly reached through arrays (schemars puts item types there).
    for (key, length) in [
        ("properties", words),
        ("patternProperties", words),
        ("$defs", MAX_NESTED_WORDS),
        ("definitions", MAX_NESTED_WORDS),
    ] {
        if let Some(Value::Object(children)) = object.get_mut(key) {
            for child in children.values_mut() {
                if length == MAX_NESTED_WORDS {
                    omit_description(child);
                }
                bound(child, length);
            }
        }
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(Value::Array(children)) = object.get_mut(key) {
            children.iter_mut().for_each(|child| bound(child, words));
        }
    }
    if let Some(Value::Array(children)) = object.get_mut("prefixItems") {
        children
            .iter_mut()
            .for_each(|child| bound(child, MAX_NESTED_WORDS));
    }
    if let Some(items) = object.get_mut("items") {
        omit_description(items);
    }
    for (key, length) in [
        ("items", MAX_NESTED_WORDS),
        ("additionalProperties", words),
        ("not", words),
    ] {
        if let Some(child) = object.get_mut(key) {
            bound(child, length);
        }
    }
}

/// Leaves out the optional `description` property of an object in an array or a definition
/// (an option's description, see the module docs).
fn omit_description(schema: &mut Value) {
    let Value::Object(object) = schema else {
        return;
    };
    let required = object
        .get("required")
        .and_then(Value::as_array)
        .is_some_and(|names| names.iter().any(|name| name == "description"));
    if let (false, Some(Value::Object(properties))) = (required, object.get_mut("properties")) {
        properties.shift_remove("description");
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
                "short": {"type": "string", "maxLength": 5},
                "when": {"type": "string", "format": "date-time"}
            },
            "$defs": {"Option": {
                "type": "object",
                "properties": {"label": {"type": "string"}, "description": {"type": "string"}},
                "required": ["label"]
            }}
        });
        let bounded = decoding_schema(&schema);
        assert_eq!(bounded["additionalProperties"], false);
        assert_eq!(
            bounded["properties"]["question"]["pattern"],
            words_pattern(MAX_WORDS)
        );
        assert!(bounded["properties"]["question"].get("maxLength").is_none());
        assert_eq!(
            bounded["properties"]["options"]["maxItems"],
            MAX_ARRAY_ITEMS
        );
        assert_eq!(bounded["properties"]["short"]["maxLength"], 5);
        assert!(bounded["properties"]["mode"].get("maxLength").is_none());
        assert!(bounded["properties"]["mode"].get("pattern").is_none());
        assert_eq!(bounded["$defs"]["Option"]["additionalProperties"], false);
        assert_eq!(
            bounded["$defs"]["Option"]["properties"]["label"]["pattern"],
            words_pattern(MAX_NESTED_WORDS)
        );
        assert_eq!(
            bounded["$defs"]["Option"]["properties"]["label"]["minLength"],
            1
        );
        assert!(
            bounded["$defs"]["Option"]["properties"]
                .get("description")
                .is_none()
        );
        assert_eq!(
            bounded["properties"]["when"]["maxLength"],
            MAX_WORDS * (MAX_WORD_LENGTH + 1)
        );
        assert!(bounded.get("$schema").is_none());
        assert_eq!(bounded["x-guidance"]["whitespace_flexible"], false);
    }

    #[test]
    fn issue33_strings_close_only_after_a_complete_word() {
        let nested = regex::Regex::new(&words_pattern(MAX_NESTED_WORDS)).unwrap();
        let top = regex::Regex::new(&words_pattern(MAX_WORDS)).unwrap();
        // Issue 33's description, cut at 48 characters by the old cap: now it may finish.
        let description = "Historic center, museum views and a harbour walk at sunset";
        assert!(description.len() > 48);
        for text in [
            description,
            "Lisbon",
            "Beach vacation",
            "C++",
            "数据科学",
            "Say \"hi\" first",
            "",
        ] {
            assert!(nested.is_match(text), "{text:?} is refused");
        }
        // The cap: as many words as allowed, one more.
        let words_of = |count: u64| {
            (1..=count)
                .map(|word| format!("w{word}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let full = words_of(MAX_NESTED_WORDS);
        let over = words_of(MAX_NESTED_WORDS + 1);
        for text in [
            " Lisbon",
            "Lisbon ",
            "Beach  vacation",
            "two\nlines",
            "tab\there",
            over.as_str(),
            "Pneumonoultramicroscopicsilicovolcanoconiosis-and-more",
        ] {
            assert!(!nested.is_match(text), "{text:?} is allowed");
        }
        assert!(top.is_match(&over));
        // At the cap, the space the model meant is allowed, then only the end.
        assert!(nested.is_match(&full));
        assert!(nested.is_match(&format!("{full} ")));
        assert!(!nested.is_match(&format!("{full}  ")));
        assert!(!top.is_match("one two "));
        let single = regex::Regex::new(&words_pattern(1)).unwrap();
        assert!(single.is_match("Lisbon") && single.is_match("Lisbon ") && !single.is_match("a b"));
        // Every word can be completed: a prefix that ends inside a word of an allowed string
        // is never the end of the longest allowed string (nothing but the word count forces
        // the string to close, and only after a word).
        let words: Vec<&str> = description.split(' ').collect();
        for count in 1..=words.len() {
            let prefix = words[..count].join(" ");
            assert!(nested.is_match(&prefix), "{prefix:?} is refused");
        }
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
