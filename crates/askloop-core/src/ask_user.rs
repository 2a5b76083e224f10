//! [`AskUser`]: the built-in `ask_user` tool, which asks a person a free-text, single-select or
//! multi-select question by suspending the run.
//!
//! Behaviour follows the reference framework's `askUserTool` (Mastra, `@mastra/core/tools`,
//! documented in its "askUserTool" reference page): same input schema, suspend payload, result
//! texts and fallback text. askloop is stricter: answers are checked against the question before
//! the run resumes (see [`AskUser`]'s `validate_resume`), and option labels must be non-empty,
//! unique and free of NUL characters.

use std::collections::HashSet;
use std::convert::Infallible;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::text::{NON_BLANK_PATTERN, is_blank};
use crate::tool::{Execution, ResumeRejection, Suspension, Tool, ToolContext};

/// The `ask_user` tool; add it to an agent with `.tool(AskUser::new())`.
///
/// Settings, all set by the application (never by the model):
/// - [`AskUser::allow_other`]: a select question also accepts the person's own words,
///   `{"other": "…"}` (off by default);
/// - [`AskUser::timeout`]: each question's deadline, from when it is asked (none by default);
/// - [`AskUser::model_timeout`]: lets the model give a question's deadline itself
///   (`timeoutSeconds`), capped at this; without it the argument is not offered.
///
/// A question with a deadline carries `expiresAt` (RFC 3339) in its payload; once it passes,
/// a sweep ([`crate::Agent::expire_due`], `askloop runs sweep`) resolves the call with a result
/// telling the model no answer came in time.
#[derive(Clone, Copy, Debug, Default)]
pub struct AskUser {
    allow_other: bool,
    timeout: Option<std::time::Duration>,
    model_timeout: Option<std::time::Duration>,
}

impl AskUser {
    /// Instructions for an agent that asks with this tool before it answers: one short
    /// question about what the request most needs, in the request's own words, then the
    /// answer built on what the person said. askloop's built-in `assistant` agent uses them
    /// (the CLI's `askloop run`), and `askloop-bench local` sends the same text, so what the
    /// bench measures is what `askloop run` sends. Written for small local models too, which
    /// otherwise ask about something else, copy an example into their options (issue 33: a
    /// trip example's "where to" asked of "fix my python script"), ask the same question
    /// again, or keep asking; so they name no topic of their own.
    pub const ASK_FIRST_INSTRUCTIONS: &'static str = "You are a helpful assistant. When the \
user's request depends on something only they know, do not guess: call the ask_user tool once, \
with one short question about the one thing you most need to know to help with it, in the \
request's own words. Offer two to four short options, labels only, when the likely answers are \
a known set; otherwise ask a free-text question. Use multi_select only when several answers go \
together. Once the user has answered, do not ask again: answer their request in full, naming \
their answer and building on it.";

    /// The tool with its defaults: select questions take only their labels, no deadlines.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether a select question also accepts the person's own words (`{"other": "text"}`);
    /// the model is then told the answer is the person's own text, not an option.
    pub fn allow_other(mut self, allow: bool) -> Self {
        self.allow_other = allow;
        self
    }

    /// Every question expires this long after it is asked unless the model gives a shorter
    /// or longer one within [`AskUser::model_timeout`].
    pub fn timeout(mut self, timeout: std::time::Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Offers the model a `timeoutSeconds` argument, capped at `max`.
    pub fn model_timeout(mut self, max: std::time::Duration) -> Self {
        self.model_timeout = Some(max);
        self
    }

    /// A question's deadline (ms since the Unix epoch, on the clock leases use, so tests with
    /// a paused tokio clock move it) from now, if it has one.
    fn deadline_ms(&self, asked_seconds: Option<u64>) -> Option<u64> {
        let asked = match (asked_seconds, self.model_timeout) {
            (Some(seconds), Some(max)) => Some(std::time::Duration::from_secs(seconds).min(max)),
            _ => None,
        };
        let timeout = asked.or(self.timeout)?;
        Some(crate::time::lease_now_ms().saturating_add(crate::time::millis(timeout)))
    }
}

/// `ask_user`'s arguments, as the model sends them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AskUserArgs {
    /// The question to ask the user. Must be non-empty.
    #[schemars(length(min = 1))]
    pub question: String,
    /// Structured choices for the user. When omitted, the prompt is free-text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<Vec<AskUserOption>>,
    /// Controls how many options the user can select. Defaults to 'single_select' when options
    /// are provided. Requires options.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection_mode: Option<SelectionMode>,
    /// Seconds the user has to answer; afterwards you get a result saying no answer came.
    /// Offered only when the application allows it, and capped by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<u64>,
}

/// One choice of a select question.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AskUserOption {
    /// Short display text for this option. This value is returned to the model when selected.
    pub label: String,
    /// Explanation of what this option means.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// How many options the user may pick.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SelectionMode {
    /// Exactly one.
    SingleSelect,
    /// One or more, distinct.
    MultiSelect,
}

impl SelectionMode {
    /// `"single_select"` or `"multi_select"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SingleSelect => "single_select",
            Self::MultiSelect => "multi_select",
        }
    }
}

/// The question as suspended: the suspend payload `{question, options?, selectionMode?}`, with
/// `selectionMode` resolved and absent for free text.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AskUserQuestion {
    /// The question.
    pub question: String,
    /// The choices (absent for free text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<Vec<AskUserOption>>,
    /// The resolved mode (absent for free text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection_mode: Option<SelectionMode>,
    /// Whether the person may answer a select question in their own words, `{"other": "…"}`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_other: bool,
    /// When the question expires unanswered (RFC 3339), if it has a deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
}

/// `ask_user`'s result, in the reference's shape: `{"content": "...", "isError": false}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AskUserResult {
    /// The text the model reads.
    pub content: String,
    /// Whether asking failed.
    pub is_error: bool,
}

const DRAFT_07: &str = "http://json-schema.org/draft-07/schema#";

/// `text` without trailing whitespace (reusing its allocation).
fn trimmed_end(mut text: String) -> String {
    text.truncate(text.trim_end().len());
    text
}

impl AskUserQuestion {
    /// Resolves arguments into a question, or says why they cannot be asked (the text after
    /// `Failed to ask user: `).
    ///
    /// # Errors
    /// A message for: `selectionMode` without options; a blank question; an empty or duplicate
    /// option label; a label with a NUL character (stores and the server refuse answers with
    /// NUL, so such a label could be offered but never chosen; other control characters are
    /// allowed and escaped where they are shown). Trailing whitespace of the question, labels
    /// and descriptions is dropped (a small model's grammar lets it end a capped string with
    /// the space it meant to write on; see the local provider's `words_pattern`).
    pub fn from_args(args: AskUserArgs) -> Result<Self, String> {
        let options = args
            .options
            .filter(|options| !options.is_empty())
            .map(|options| {
                options
                    .into_iter()
                    .map(|option| AskUserOption {
                        label: trimmed_end(option.label),
                        description: option.description.map(trimmed_end),
                    })
                    .collect::<Vec<_>>()
            });
        let question = trimmed_end(args.question);
        if args.selection_mode.is_some() && options.is_none() {
            return Err("selectionMode requires options.".into());
        }
        if is_blank(&question) {
            return Err("question must be non-empty.".into());
        }
        if let Some(options) = &options {
            let mut seen = HashSet::new();
            for option in options {
                if is_blank(&option.label) {
                    return Err("option labels must be non-empty.".into());
                }
                if option.label.contains('\0') {
                    return Err(format!(
                        "option labels must not contain NUL characters; {:?} does.",
                        option.label
                    ));
                }
                if !seen.insert(option.label.as_str()) {
                    return Err(format!(
                        "option labels must be unique; {:?} appears more than once.",
                        option.label
                    ));
                }
            }
        }
        let selection_mode = options
            .as_ref()
            .map(|_| args.selection_mode.unwrap_or(SelectionMode::SingleSelect));
        Ok(Self {
            question,
            options,
            selection_mode,
            allow_other: false,
            expires_at: None,
        })
    }

    fn labels(&self) -> Vec<&str> {
        self.options
            .iter()
            .flatten()
            .map(|option| option.label.as_str())
            .collect()
    }

    fn quoted_labels(&self) -> String {
        self.labels()
            .iter()
            .map(|label| format!("{label:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// JSON Schema (draft-07, like the reference's) of exactly the answers this question accepts:
    /// a non-blank string; one of the labels; a non-empty array of distinct labels. With
    /// [`AskUserQuestion::allow_other`], a label may also be `{"other": "<non-blank text>"}`.
    pub fn resume_schema(&self) -> Value {
        let label = json!({"type": "string", "enum": self.labels()});
        let choice = if self.allow_other {
            json!({"anyOf": [label, {
                "type": "object",
                "properties": {"other": {"type": "string", "minLength": 1, "pattern": NON_BLANK_PATTERN}},
                "required": ["other"],
                "additionalProperties": false
            }]})
        } else {
            label
        };
        match self.selection_mode {
            None => {
                json!({"$schema": DRAFT_07, "type": "string", "minLength": 1, "pattern": NON_BLANK_PATTERN})
            }
            Some(SelectionMode::SingleSelect) => {
                let mut schema = choice;
                if let Some(object) = schema.as_object_mut() {
                    object.insert("$schema".into(), json!(DRAFT_07));
                }
                schema
            }
            Some(SelectionMode::MultiSelect) => json!({
                "$schema": DRAFT_07,
                "type": "array",
                "items": choice,
                "minItems": 1,
                "uniqueItems": true
            }),
        }
    }

    /// The person's own words in an answer item, if it is `{"other": "text"}` and this
    /// question allows them.
    fn other_text<'a>(&self, item: &'a Value) -> Option<&'a str> {
        if !self.allow_other {
            return None;
        }
        let object = item.as_object()?;
        if object.len() != 1 {
            return None;
        }
        object.get("other")?.as_str().filter(|text| !is_blank(text))
    }

    /// The text the tool returns outside an agent run.
    pub fn fallback_text(&self) -> String {
        let mut text = format!("[Question for user]: {}", self.question);
        if let Some(mode) = self.selection_mode {
            text.push_str(&format!("\nOptions: {}", self.labels().join(", ")));
            text.push_str(&format!("\nSelection mode: {}", mode.as_str()));
        }
        text
    }

    /// Checks an answer, reporting what was expected and every problem.
    ///
    /// # Errors
    /// A [`ResumeRejection`] for a wrong shape, a blank text, an unknown or repeated label.
    pub fn check_answer(&self, answer: &Value) -> Result<(), ResumeRejection> {
        let (expected, problems) = match self.selection_mode {
            None => {
                let expected = "a non-empty text answer (a JSON string)".to_owned();
                let problems = match answer {
                    Value::String(text) if !is_blank(text) => vec![],
                    Value::String(_) => vec!["the answer is blank".to_owned()],
                    other => vec![format!("got {}", describe(other))],
                };
                (expected, problems)
            }
            Some(SelectionMode::SingleSelect) => {
                let expected = format!(
                    "exactly one of the labels {} (a JSON string)",
                    self.quoted_labels()
                );
                let labels = self.labels();
                let problems = match answer {
                    Value::String(label) if labels.contains(&label.as_str()) => vec![],
                    Value::String(label) => vec![format!("{label:?} is not one of the labels")],
                    other if self.other_text(other).is_some() => vec![],
                    other => vec![format!("got {}", describe(other))],
                };
                (self.with_other(expected), problems)
            }
            Some(SelectionMode::MultiSelect) => {
                let expected = format!(
                    "a non-empty array of distinct labels from {} (a JSON array of strings)",
                    self.quoted_labels()
                );
                let labels = self.labels();
                let problems = match answer {
                    Value::Array(items) if items.is_empty() => {
                        vec!["no label was selected".to_owned()]
                    }
                    Value::Array(items) => {
                        let mut problems = Vec::new();
                        let mut seen = HashSet::new();
                        for item in items {
                            match item {
                                Value::String(label) if !labels.contains(&label.as_str()) => {
                                    problems.push(format!("{label:?} is not one of the labels"));
                                }
                                Value::String(label) if !seen.insert(label.as_str()) => {
                                    problems.push(format!("{label:?} is selected more than once"));
                                }
                                Value::String(_) => {}
                                other if self.other_text(other).is_some() => {}
                                other => problems.push(format!("an item is {}", describe(other))),
                            }
                        }
                        problems
                    }
                    other => vec![format!("got {}", describe(other))],
                };
                (self.with_other(expected), problems)
            }
        };
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ResumeRejection { expected, problems })
        }
    }
}

impl AskUserQuestion {
    fn with_other(&self, expected: String) -> String {
        if self.allow_other {
            format!("{expected}, or the person's own words as {{\"other\": \"…\"}}")
        } else {
            expected
        }
    }
}

fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(_) => "a boolean".into(),
        Value::Number(_) => "a number".into(),
        Value::String(text) => format!("the string {text:?}"),
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
    }
}

/// The text of an answer as the model reads it: a string as-is, an array joined with `", "`,
/// the person's own words (`{"other": …}`) marked as such.
fn answer_text(answer: &Value) -> String {
    let item_text = |item: &Value| match item {
        Value::String(text) => text.clone(),
        Value::Object(object) => match object.get("other").and_then(Value::as_str) {
            Some(text) => format!("{text} (in their own words, not one of the options)"),
            None => item.to_string(),
        },
        other => other.to_string(),
    };
    match answer {
        Value::Array(items) => items.iter().map(item_text).collect::<Vec<_>>().join(", "),
        other => item_text(other),
    }
}

#[async_trait]
impl Tool for AskUser {
    const NAME: &'static str = "ask_user";
    type Args = AskUserArgs;
    type Output = AskUserResult;
    type Error = Infallible;

    fn description(&self) -> String {
        "Ask the user a question and wait for their answer. Use it when the request is ambiguous or \
         you need information only the user has. Give `options` (with `selectionMode` \
         `single_select` or `multi_select`) for a choice, or omit them for a free-text answer."
            .to_owned()
    }

    fn input_schema(&self) -> Value {
        let mut schema = crate::schema::schema_of::<AskUserArgs>();
        if self.model_timeout.is_none()
            && let Some(properties) = schema.get_mut("properties").and_then(Value::as_object_mut)
        {
            properties.remove("timeoutSeconds");
        }
        schema
    }

    fn suspend_schema(&self) -> Option<Value> {
        Some(json!({
            "type": "object",
            "properties": {
                "question": {"type": "string"},
                "options": {"type": "array", "items": {"type": "object", "properties": {
                    "label": {"type": "string"}, "description": {"type": "string"}}, "required": ["label"]}},
                "selectionMode": {"enum": ["single_select", "multi_select"]},
                "allowOther": {"type": "boolean"},
                "expiresAt": {"type": "string", "format": "date-time"}
            },
            "required": ["question"]
        }))
    }

    fn resume_schema(&self) -> Option<Value> {
        Some(json!({
            "$schema": DRAFT_07,
            "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]
        }))
    }

    fn asks_user(&self) -> bool {
        true
    }

    fn idempotent(&self) -> bool {
        true
    }

    fn validate_resume(
        &self,
        suspension: &Suspension,
        resume_data: &Value,
    ) -> Result<(), ResumeRejection> {
        match serde_json::from_value::<AskUserQuestion>(suspension.payload.clone()) {
            Ok(question) => question.check_answer(resume_data),
            Err(error) => Err(ResumeRejection {
                expected: "an answer to a stored ask_user question".into(),
                problems: vec![format!("the stored question is unreadable: {error}")],
            }),
        }
    }

    async fn execute(
        &self,
        args: AskUserArgs,
        context: &ToolContext,
    ) -> Result<Execution<AskUserResult>, Infallible> {
        if let Some(answer) = context.resume_data() {
            return Ok(Execution::Complete(AskUserResult {
                content: format!("User answered: {}", answer_text(answer)),
                is_error: false,
            }));
        }
        let asked_seconds = args.timeout_seconds;
        let mut question = match AskUserQuestion::from_args(args) {
            Ok(question) => question,
            Err(message) => {
                return Ok(Execution::Complete(AskUserResult {
                    content: format!("Failed to ask user: {message}"),
                    is_error: true,
                }));
            }
        };
        if !context.can_suspend() {
            return Ok(Execution::Complete(AskUserResult {
                content: question.fallback_text(),
                is_error: false,
            }));
        }
        question.allow_other = self.allow_other && question.selection_mode.is_some();
        let deadline = self.deadline_ms(asked_seconds);
        question.expires_at = deadline.map(crate::time::rfc3339);
        let schema = question.resume_schema();
        let payload = serde_json::to_value(&question).unwrap_or(Value::Null);
        Ok(Execution::Suspend(Suspension {
            payload,
            resume_schema: Some(schema),
            expires_at_ms: deadline,
        }))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn args(labels: &[&str]) -> AskUserArgs {
        serde_json::from_value(json!({
            "question": "Which one?",
            "options": labels.iter().map(|label| json!({"label": label})).collect::<Vec<_>>(),
        }))
        .unwrap()
    }

    #[test]
    fn labels_with_nul_are_refused() {
        let error = AskUserQuestion::from_args(args(&["SQLite", "Post\u{0}greSQL"])).unwrap_err();
        assert!(error.contains("must not contain NUL"), "{error}");
        // Other control characters can be chosen (they are escaped where shown).
        for label in ["Postgre SQL ✓", "two\nlines", "bold\u{1b}[1m"] {
            assert!(
                AskUserQuestion::from_args(args(&["SQLite", label])).is_ok(),
                "{label:?}"
            );
        }
    }

    #[test]
    fn issue33_trailing_whitespace_is_not_part_of_a_label() {
        let question = AskUserQuestion::from_args(args(&["Beach ", "City"])).unwrap();
        assert_eq!(question.labels(), ["Beach", "City"]);
        // Trimmed labels that meet are one label twice.
        let error = AskUserQuestion::from_args(args(&["City ", "City"])).unwrap_err();
        assert!(error.contains("unique"), "{error}");
    }
}
