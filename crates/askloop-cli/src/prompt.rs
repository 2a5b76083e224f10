//! Asking a pending question inline: with inquire on a terminal (text, select, multi-select), or
//! line by line from a non-terminal stdin (`askloop chat` fed by a pipe). Every prompt names the
//! tool call it answers, and the answer is sent for that call only.

use std::io::BufRead;

use askloop_core::{AskUserOption, PendingToolCall, SelectionMode, is_blank};
use inquire::validator::Validation;
use inquire::{InquireError, MultiSelect, Select, Text};
use serde_json::Value;

use crate::format::{ask_user_question, escape_controls, option_description, question_lines};
use crate::output::Output;

/// Who answers questions.
pub(crate) enum Answerer {
    /// Nobody: the run stays suspended and the command says how to answer later.
    Nobody,
    /// The person at the terminal, with inquire prompts.
    Terminal,
    /// Lines read from stdin: a label or its number, labels or numbers separated by commas, or
    /// free text.
    Lines,
}

/// What came of asking.
pub(crate) enum Asked {
    /// The answer to resume with.
    Answer(Value),
    /// Nobody can answer now (no terminal, or stdin ended).
    Unanswered,
    /// The person stopped the prompt (Ctrl-C or Esc).
    Stopped,
}

impl Answerer {
    /// Asks `call`'s question; `show_question` false when it was just shown and an answer was
    /// refused (a prompt on the terminal shows it again anyway).
    ///
    /// # Errors
    /// The terminal or stdin failed.
    pub(crate) fn ask(
        &self,
        call: &PendingToolCall,
        output: &mut Output,
        show_question: bool,
    ) -> anyhow::Result<Asked> {
        match self {
            Self::Nobody => Ok(Asked::Unanswered),
            Self::Terminal => {
                output.end_line()?;
                let asked = if call.kind == askloop_core::PendingKind::Approval {
                    ask_approval_on_terminal(call)
                } else {
                    ask_on_terminal(call)
                };
                match asked {
                    Ok(answer) => Ok(Asked::Answer(answer)),
                    Err(InquireError::OperationCanceled | InquireError::OperationInterrupted) => {
                        Ok(Asked::Stopped)
                    }
                    Err(error) => Err(error.into()),
                }
            }
            Self::Lines => ask_by_lines(call, output, show_question),
        }
    }
}

/// One option as a select prompt shows it: `label - description`, control characters
/// escaped.
struct Choice(AskUserOption);

impl std::fmt::Display for Choice {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let label = escape_controls(&self.0.label);
        match option_description(&self.0.description) {
            Some(description) => write!(formatter, "{label} - {}", escape_controls(description)),
            None => formatter.write_str(&label),
        }
    }
}

/// The help line under a prompt: inquire's keys, and the call the answer goes to.
fn help(keys: Option<&str>, call: &PendingToolCall) -> String {
    let id = escape_controls(call.tool_call_id.as_str());
    match keys {
        Some(keys) => format!("{keys}; answers tool call {id}"),
        None => format!("answers tool call {id}"),
    }
}

fn ask_on_terminal(call: &PendingToolCall) -> Result<Value, InquireError> {
    let Some(question) = ask_user_question(call) else {
        let message = format!(
            "{} asks {} - answer as JSON:",
            escape_controls(&call.tool_name),
            escape_controls(&call.suspend_payload.to_string())
        );
        let help = help(None, call);
        let text = Text::new(&message)
            .with_help_message(&help)
            .with_validator(|input: &str| {
                Ok(match serde_json::from_str::<Value>(input) {
                    Ok(_) => Validation::Valid,
                    Err(error) => Validation::Invalid(format!("not JSON: {error}").into()),
                })
            })
            .prompt()?;
        return serde_json::from_str(&text).map_err(|error| InquireError::Custom(error.into()));
    };
    let choices = || {
        question
            .options
            .iter()
            .flatten()
            .cloned()
            .map(Choice)
            .collect::<Vec<_>>()
    };
    let message = escape_controls(&question.question);
    match question.selection_mode {
        None => {
            let help = help(None, call);
            let text = Text::new(&message)
                .with_help_message(&help)
                .with_validator(|input: &str| {
                    Ok(if is_blank(input) {
                        Validation::Invalid("the answer is empty".into())
                    } else {
                        Validation::Valid
                    })
                })
                .prompt()?;
            Ok(Value::String(text))
        }
        Some(SelectionMode::SingleSelect) => {
            let help = help(Select::<Choice>::DEFAULT_HELP_MESSAGE, call);
            let choice = Select::new(&message, choices())
                .with_help_message(&help)
                .with_formatter(&|option| escape_controls(&option.value.0.label).into_owned())
                .prompt()?;
            Ok(Value::String(choice.0.label))
        }
        Some(SelectionMode::MultiSelect) => {
            let help = help(MultiSelect::<Choice>::DEFAULT_HELP_MESSAGE, call);
            let chosen = MultiSelect::new(&message, choices())
                .with_help_message(&help)
                .with_formatter(&|options| {
                    options
                        .iter()
                        .map(|option| escape_controls(&option.value.0.label).into_owned())
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .with_validator(|selected: &[inquire::list_option::ListOption<&Choice>]| {
                    Ok(if selected.is_empty() {
                        Validation::Invalid(
                            "select at least one (space selects, enter confirms)".into(),
                        )
                    } else {
                        Validation::Valid
                    })
                })
                .prompt()?;
            Ok(Value::Array(
                chosen
                    .into_iter()
                    .map(|choice| Value::String(choice.0.label))
                    .collect(),
            ))
        }
    }
}

fn ask_by_lines(
    call: &PendingToolCall,
    output: &mut Output,
    show_question: bool,
) -> anyhow::Result<Asked> {
    if show_question {
        for line in question_lines(call) {
            output.line(&line)?;
        }
    }
    output.line(&line_prompt(call))?;
    let stdin = std::io::stdin();
    loop {
        let mut line = String::new();
        if stdin.lock().read_line(&mut line)? == 0 {
            return Ok(Asked::Unanswered);
        }
        match parse_line_answer(call, line.trim()) {
            Ok(answer) => return Ok(Asked::Answer(answer)),
            Err(problem) => output.note(&format!("{problem}; try again"))?,
        }
    }
}

/// The line that asks for the answer of `call` on stdin, naming the call.
fn line_prompt(call: &PendingToolCall) -> String {
    let id = &call.tool_call_id;
    let Some(question) = ask_user_question(call) else {
        return format!("answer tool call {id} (JSON, or text):");
    };
    match question.selection_mode {
        None => format!("answer tool call {id}:"),
        Some(SelectionMode::SingleSelect) => {
            format!("answer tool call {id} with a label or its number:")
        }
        Some(SelectionMode::MultiSelect) => format!(
            "answer tool call {id} with one or more labels or numbers, separated by commas:"
        ),
    }
}

/// Reads one typed line as an answer to `call`: the whole line is matched against the labels
/// first (a label may hold a comma), then, for a multi-select question, its comma-separated
/// parts, each once.
fn parse_line_answer(call: &PendingToolCall, line: &str) -> Result<Value, String> {
    let Some(question) = ask_user_question(call) else {
        return Ok(serde_json::from_str(line).unwrap_or_else(|_| Value::String(line.to_owned())));
    };
    let labels: Vec<&str> = question
        .options
        .iter()
        .flatten()
        .map(|option| option.label.as_str())
        .collect();
    let find = |word: &str| -> Option<&str> {
        let word = word.trim();
        if let Some(found) = labels.iter().find(|label| label.trim() == word) {
            return Some(found);
        }
        match word.parse::<usize>() {
            Ok(number) if (1..=labels.len()).contains(&number) => Some(labels[number - 1]),
            _ => None,
        }
    };
    let not_a_label = |word: &str| {
        format!(
            "{:?} is not one of the labels {} or their numbers 1 to {}",
            word.trim(),
            labels
                .iter()
                .map(|label| format!("{label:?}"))
                .collect::<Vec<_>>()
                .join(", "),
            labels.len()
        )
    };
    match question.selection_mode {
        None if is_blank(line) => Err("the answer is empty".to_owned()),
        None => Ok(Value::String(line.to_owned())),
        Some(SelectionMode::SingleSelect) => find(line)
            .map(|label| Value::String(label.to_owned()))
            .ok_or_else(|| not_a_label(line)),
        Some(SelectionMode::MultiSelect) => {
            if let Some(label) = find(line) {
                return Ok(Value::Array(vec![Value::String(label.to_owned())]));
            }
            let mut chosen: Vec<&str> = Vec::new();
            for word in line.split(',').filter(|word| !is_blank(word)) {
                let label = find(word).ok_or_else(|| not_a_label(word))?;
                if chosen.contains(&label) {
                    return Err(format!("{label:?} is chosen twice; name each label once"));
                }
                chosen.push(label);
            }
            if chosen.is_empty() {
                return Err("select at least one label".to_owned());
            }
            Ok(Value::Array(
                chosen
                    .into_iter()
                    .map(|label| Value::String(label.to_owned()))
                    .collect(),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn call(payload: Value) -> PendingToolCall {
        PendingToolCall::new(
            &askloop_core::model::ToolCall {
                id: "c1".into(),
                name: "ask_user".into(),
                args: askloop_core::model::ToolArgs::Json(json!({})),
            },
            &askloop_core::Suspension::new(payload),
        )
    }

    #[test]
    fn lines_take_labels_or_numbers() {
        let single = call(
            json!({"question": "Q", "options": [{"label": "main"}, {"label": "docs"}], "selectionMode": "single_select"}),
        );
        assert_eq!(parse_line_answer(&single, "docs"), Ok(json!("docs")));
        assert_eq!(parse_line_answer(&single, "1"), Ok(json!("main")));
        assert!(
            parse_line_answer(&single, "3")
                .unwrap_err()
                .contains(r#""main", "docs""#)
        );
        let multi = call(
            json!({"question": "Q", "options": [{"label": "a"}, {"label": "b"}], "selectionMode": "multi_select"}),
        );
        assert_eq!(parse_line_answer(&multi, "b, 1"), Ok(json!(["b", "a"])));
        assert!(parse_line_answer(&multi, " , ").is_err());
        let text = call(json!({"question": "Q"}));
        assert_eq!(parse_line_answer(&text, "Lisbon"), Ok(json!("Lisbon")));
        assert!(parse_line_answer(&text, "").is_err());
        assert!(parse_line_answer(&text, "\u{200b}").is_err());
    }

    #[test]
    fn issue7_fault2_a_label_with_a_comma_matches_as_a_whole() {
        let multi = call(
            json!({"question": "Q", "options": [{"label": "a, b"}, {"label": "c"}], "selectionMode": "multi_select"}),
        );
        assert_eq!(parse_line_answer(&multi, "a, b"), Ok(json!(["a, b"])));
        assert_eq!(parse_line_answer(&multi, "c"), Ok(json!(["c"])));
        assert_eq!(parse_line_answer(&multi, "c, 1"), Ok(json!(["c", "a, b"])));
        let single = call(
            json!({"question": "Q", "options": [{"label": "x, y"}, {"label": "z"}], "selectionMode": "single_select"}),
        );
        assert_eq!(parse_line_answer(&single, " x, y "), Ok(json!("x, y")));
    }

    #[test]
    fn issue7_fault3_a_duplicate_selection_is_refused_with_a_reason() {
        let multi = call(
            json!({"question": "Q", "options": [{"label": "eu"}, {"label": "us"}], "selectionMode": "multi_select"}),
        );
        let problem = parse_line_answer(&multi, "eu, eu").unwrap_err();
        assert!(problem.contains(r#""eu" is chosen twice"#), "{problem}");
        let problem = parse_line_answer(&multi, "eu, 1").unwrap_err();
        assert!(problem.contains("twice"), "{problem}");
    }

    #[test]
    fn issue7_fault12_the_line_prompt_names_the_call() {
        let single = call(
            json!({"question": "Q", "options": [{"label": "a"}], "selectionMode": "single_select"}),
        );
        assert!(line_prompt(&single).contains("tool call c1"));
        assert!(help(Some("keys"), &single).ends_with("answers tool call c1"));
    }
}

/// An approval on a terminal: `y` runs the tool; `n` asks for an optional reason for the model.
/// The answer is the reference framework's approval data, `{"approved": …, "reason"?: …}`.
fn ask_approval_on_terminal(call: &PendingToolCall) -> Result<Value, InquireError> {
    let message = crate::session::approval_line(call);
    let approved = inquire::Confirm::new(&format!("{message} - allow it?"))
        .with_help_message(&help(Some("y/n"), call))
        .prompt()?;
    if approved {
        return Ok(serde_json::json!({"approved": true}));
    }
    let reason = inquire::Text::new("Reason for the model (optional):")
        .with_help_message(&help(Some("enter to skip"), call))
        .prompt()?;
    Ok(if reason.trim().is_empty() {
        serde_json::json!({"approved": false})
    } else {
        serde_json::json!({"approved": false, "reason": reason})
    })
}
