//! [`ScriptedModel`]: a [`LanguageModel`] that replays a JSON script, for tests of agents.
//!
//! Script format:
//!
//! ```json
//! {"steps": [
//!   {"toolCalls": [{"id": "c1", "name": "ask_user", "args": {"question": "Which repo?"}}]},
//!   {"text": "Done."}
//! ]}
//! ```
//!
//! A step may have `text`, `toolCalls`, or both. `args` may be a JSON object, or a string, which
//! is taken as the raw argument text (so malformed JSON can be tested). A step may instead have
//! `"error": "message"`, which makes that model call fail. The step replayed is the number of
//! assistant messages already in the request, so a run resumed in another process continues
//! the script where it stopped.

use std::path::Path;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::Value;

use crate::message::{FinishReason, Message, ToolArgs, ToolCall, Usage};
use crate::model::{LanguageModel, ModelError, ModelEvent, ModelEventStream, ModelRequest};

/// A scripted model: replays steps from a JSON script.
#[derive(Clone, Debug)]
pub struct ScriptedModel {
    source: String,
    steps: Vec<ScriptStep>,
}

/// One scripted model response.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScriptStep {
    /// Visible text.
    #[serde(default)]
    pub text: Option<String>,
    /// Tool calls, after the text.
    #[serde(default)]
    pub tool_calls: Vec<ScriptToolCall>,
    /// Makes this call fail with this message instead.
    #[serde(default)]
    pub error: Option<String>,
}

/// One scripted tool call.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptToolCall {
    /// The call id.
    pub id: String,
    /// The tool name.
    pub name: String,
    /// The arguments: JSON, or a string holding raw argument text.
    #[serde(default)]
    pub args: Value,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Script {
    steps: Vec<ScriptStep>,
}

/// Why a script could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScriptError {
    /// The file could not be read.
    #[error("cannot read script {path}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The text is not a valid script.
    #[error("invalid script {source_name}")]
    Parse {
        /// Where it came from.
        source_name: String,
        /// The parser's error.
        #[source]
        source: serde_json::Error,
    },
    /// The model was asked for a step past the end of its script (the cause of a
    /// [`ModelError::Failed`]).
    #[error("the script {script} has {steps} step(s); step {requested} was requested")]
    Exhausted {
        /// Where the script came from.
        script: String,
        /// How many steps it has.
        steps: usize,
        /// The 1-based step that was requested.
        requested: usize,
    },
}

impl ScriptedModel {
    /// Loads a script file.
    ///
    /// # Errors
    /// [`ScriptError::Read`], [`ScriptError::Parse`].
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, ScriptError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ScriptError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text, path.display().to_string())
    }

    /// Parses a script from JSON text.
    ///
    /// # Errors
    /// [`ScriptError::Parse`].
    pub fn from_json(text: &str) -> Result<Self, ScriptError> {
        Self::parse(text, "(inline)".to_owned())
    }

    /// A script from steps.
    pub fn from_steps(steps: Vec<ScriptStep>) -> Self {
        Self {
            source: "(steps)".to_owned(),
            steps,
        }
    }

    fn parse(text: &str, source_name: String) -> Result<Self, ScriptError> {
        let script: Script = serde_json::from_str(text).map_err(|source| ScriptError::Parse {
            source_name: source_name.clone(),
            source,
        })?;
        Ok(Self {
            source: source_name,
            steps: script.steps,
        })
    }

    /// The script's steps.
    pub fn steps(&self) -> &[ScriptStep] {
        &self.steps
    }
}

fn word_count(message: &Message) -> u64 {
    let words = |text: &str| text.split_whitespace().count() as u64;
    match message {
        Message::User { text } => words(text),
        Message::Assistant { parts } => parts
            .iter()
            .map(|part| match part {
                crate::message::AssistantPart::Text { text }
                | crate::message::AssistantPart::Reasoning { text, .. } => words(text),
                crate::message::AssistantPart::ToolCall(call) => match &call.args {
                    ToolArgs::Json(value) => json_words(value),
                    ToolArgs::Malformed(raw) => words(raw),
                },
            })
            .sum(),
        Message::Tool { results } => results
            .iter()
            .map(|result| match &result.result {
                Value::String(text) => words(text),
                other => json_words(other),
            })
            .sum(),
    }
}

/// The words of `value`'s compact JSON text (`value.to_string()`), counted without writing it:
/// that text has whitespace only inside strings (keys and values), where characters below
/// U+0020 are escaped, and it neither starts nor ends with whitespace, so its words are one
/// more than its runs of whitespace.
fn json_words(value: &Value) -> u64 {
    fn runs(text: &str) -> u64 {
        let mut runs = 0;
        let mut in_run = false;
        for character in text.chars() {
            let white = character >= '\u{20}' && character.is_whitespace();
            if white && !in_run {
                runs += 1;
            }
            in_run = white;
        }
        runs
    }
    fn all_runs(value: &Value) -> u64 {
        match value {
            Value::String(text) => runs(text),
            Value::Array(items) => items.iter().map(all_runs).sum(),
            Value::Object(map) => map
                .iter()
                .map(|(key, value)| runs(key) + all_runs(value))
                .sum(),
            Value::Null | Value::Bool(_) | Value::Number(_) => 0,
        }
    }
    1 + all_runs(value)
}

#[async_trait]
impl LanguageModel for ScriptedModel {
    fn provider(&self) -> &str {
        "scripted"
    }

    fn model_id(&self) -> &str {
        "scripted"
    }

    async fn stream(&self, request: ModelRequest) -> Result<ModelEventStream, ModelError> {
        let index = request
            .messages
            .iter()
            .filter(|message| message.is_assistant())
            .count();
        let Some(step) = self.steps.get(index) else {
            return Err(ModelError::Failed {
                model: "scripted".into(),
                source: Box::new(ScriptError::Exhausted {
                    script: self.source.clone(),
                    steps: self.steps.len(),
                    requested: index + 1,
                }),
            });
        };
        if let Some(message) = &step.error {
            return Err(ModelError::Request {
                model: "scripted".into(),
                message: message.clone(),
                source: None,
            });
        }
        let mut events = Vec::new();
        let mut output_tokens = 0;
        if let Some(text) = step.text.as_deref().filter(|text| !text.is_empty()) {
            output_tokens += text.split_whitespace().count() as u64;
            events.push(Ok(ModelEvent::TextDelta(text.to_owned())));
        }
        for call in &step.tool_calls {
            let args = match &call.args {
                Value::String(raw) => ToolArgs::parse(raw),
                Value::Null => ToolArgs::Json(Value::Object(Default::default())),
                other => ToolArgs::Json(other.clone()),
            };
            output_tokens += 1;
            events.push(Ok(ModelEvent::ToolCall(ToolCall {
                id: call.id.as_str().into(),
                name: call.name.clone(),
                args,
            })));
        }
        let reason = if step.tool_calls.is_empty() {
            FinishReason::Stop
        } else {
            FinishReason::ToolCalls
        };
        let input_tokens = request.messages.iter().map(word_count).sum::<u64>()
            + request
                .system
                .as_deref()
                .map_or(0, |system| system.split_whitespace().count() as u64);
        events.push(Ok(ModelEvent::Finish {
            reason,
            usage: Usage {
                input_tokens,
                output_tokens,
            },
        }));
        Ok(Box::pin(futures::stream::iter(events)))
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;

    use super::*;
    use crate::model::ModelRequest;

    #[test]
    fn json_words_are_the_words_of_the_json_text() {
        for value in [
            serde_json::json!({}),
            serde_json::json!([]),
            serde_json::json!(null),
            serde_json::json!(12.5),
            serde_json::json!("one two  three "),
            serde_json::json!({"question": "What next?  x", "options": [{"label": "a b"}, 3]}),
            serde_json::json!({"key with space": " lead\tand\nescaped \u{a0}nbsp\u{85}x", "": ""}),
            serde_json::json!([" ", "\u{2028}", "a\u{1f} b", true, {"n": null}]),
        ] {
            assert_eq!(
                json_words(&value),
                value.to_string().split_whitespace().count() as u64,
                "{value}"
            );
        }
    }

    fn request(assistant_messages: usize) -> ModelRequest {
        let mut messages = vec![Message::user("hi")];
        for _ in 0..assistant_messages {
            messages.push(Message::Assistant { parts: vec![] });
        }
        ModelRequest::new(messages)
    }

    #[tokio::test]
    async fn replays_the_step_after_the_assistant_messages_in_the_request() {
        let model =
            ScriptedModel::from_json(r#"{"steps":[{"text":"one"},{"text":"two"}]}"#).unwrap();
        let events: Vec<_> = model.stream(request(1)).await.unwrap().collect().await;
        assert_eq!(
            events[0].as_ref().unwrap(),
            &ModelEvent::TextDelta("two".into())
        );
    }

    #[tokio::test]
    async fn past_the_last_step_is_a_clear_error() {
        let model = ScriptedModel::from_json(r#"{"steps":[{"text":"one"}]}"#).unwrap();
        let error = model.stream(request(1)).await.err().unwrap();
        let ModelError::Failed { source, .. } = &error else {
            panic!("{error:?}")
        };
        let exhausted = source.downcast_ref::<ScriptError>().unwrap();
        assert!(
            matches!(
                exhausted,
                ScriptError::Exhausted {
                    steps: 1,
                    requested: 2,
                    ..
                }
            ),
            "{exhausted:?}"
        );
        assert_eq!(
            crate::error::error_chain_text(&error),
            "model scripted failed: the script (inline) has 1 step(s); step 2 was requested"
        );
    }

    #[tokio::test]
    async fn raw_string_args_are_kept_and_error_steps_fail() {
        let model = ScriptedModel::from_json(
            r#"{"steps":[{"toolCalls":[{"id":"c1","name":"t","args":"{not json"}]},{"error":"HTTP 500"}]}"#,
        )
        .unwrap();
        let events: Vec<_> = model.stream(request(0)).await.unwrap().collect().await;
        let Ok(ModelEvent::ToolCall(call)) = &events[0] else {
            panic!("{events:?}")
        };
        assert_eq!(call.args, ToolArgs::Malformed("{not json".into()));
        let error = model.stream(request(1)).await.err().unwrap();
        assert!(error.to_string().contains("HTTP 500"), "{error}");
    }

    #[test]
    fn unknown_fields_and_bad_files_are_errors() {
        let error = ScriptedModel::from_json(r#"{"steps":[{"txt":"typo"}]}"#).unwrap_err();
        let text = crate::error::error_chain_text(&error);
        assert!(text.contains("unknown field `txt`"), "{text}");
        let error = ScriptedModel::from_file("/nonexistent/script.json").unwrap_err();
        assert!(matches!(error, ScriptError::Read { .. }), "{error:?}");
    }
}
