//! [`AskUser`]: the built-in `ask_user` tool, which asks a person a free-text, single-select or
//! multi-select question by suspending the run.
//!
//! Behaviour follows the reference framework's `askUserTool` (Mastra, `@mastra/core/tools`,
//! documented in its "askUserTool" reference page): same input schema, suspend payload, result
//! texts and fallback text. askloop is stricter: answers are checked against the question before
//! the run resumes (see [`AskUser`]'s `validate_resume`), and option labels must be non-empty and
//! unique.

use std::collections::HashSet;
use std::convert::Infallible;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::text::{NON_BLANK_PATTERN, is_blank};
use crate::tool::{Execution, ResumeRejection, Suspension, Tool, ToolContext};

/// The `ask_user` tool. Stateless; add it to an agent with `.tool(AskUser)`.
#[derive(Clone, Copy, Debug, Default)]
pub struct AskUser;

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

impl AskUserQuestion {
    /// Resolves arguments into a question, or says why they cannot be asked (the text after
    /// `Failed to ask user: `).
    ///
    /// # Errors
    /// A message for: `selectionMode` without options; a blank question; an empty or duplicate
    /// option label.
    pub fn from_args(args: AskUserArgs) -> Result<Self, String> {
        let options = args.options.filter(|options| !options.is_empty());
        if args.selection_mode.is_some() && options.is_none() {
            return Err("selectionMode requires options.".into());
        }
        if is_blank(&args.question) {
            return Err("question must be non-empty.".into());
        }
        if let Some(options) = &options {
            let mut seen = HashSet::new();
            for option in options {
                if is_blank(&option.label) {
                    return Err("option labels must be non-empty.".into());
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
            question: args.question,
            options,
            selection_mode,
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
    /// a non-blank string; one of the labels; a non-empty array of distinct labels.
    pub fn resume_schema(&self) -> Value {
        match self.selection_mode {
            None => {
                json!({"$schema": DRAFT_07, "type": "string", "minLength": 1, "pattern": NON_BLANK_PATTERN})
            }
            Some(SelectionMode::SingleSelect) => {
                json!({"$schema": DRAFT_07, "type": "string", "enum": self.labels()})
            }
            Some(SelectionMode::MultiSelect) => json!({
                "$schema": DRAFT_07,
                "type": "array",
                "items": {"type": "string", "enum": self.labels()},
                "minItems": 1,
                "uniqueItems": true
            }),
        }
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
                    other => vec![format!("got {}", describe(other))],
                };
                (expected, problems)
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
                                other => problems.push(format!("an item is {}", describe(other))),
                            }
                        }
                        problems
                    }
                    other => vec![format!("got {}", describe(other))],
                };
                (expected, problems)
            }
        };
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ResumeRejection { expected, problems })
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

/// The text of an answer as the model reads it: a string as-is, an array joined with `", "`.
fn answer_text(answer: &Value) -> String {
    match answer {
        Value::String(text) => text.clone(),
        Value::Array(items) => items
            .iter()
            .map(|item| {
                item.as_str()
                    .map_or_else(|| item.to_string(), str::to_owned)
            })
            .collect::<Vec<_>>()
            .join(", "),
        other => other.to_string(),
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

    fn suspend_schema(&self) -> Option<Value> {
        Some(json!({
            "type": "object",
            "properties": {
                "question": {"type": "string"},
                "options": {"type": "array", "items": {"type": "object", "properties": {
                    "label": {"type": "string"}, "description": {"type": "string"}}, "required": ["label"]}},
                "selectionMode": {"enum": ["single_select", "multi_select"]}
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
        let question = match AskUserQuestion::from_args(args) {
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
        let schema = question.resume_schema();
        let payload = serde_json::to_value(&question).unwrap_or(Value::Null);
        Ok(context.suspend_with_schema(payload, schema))
    }
}
