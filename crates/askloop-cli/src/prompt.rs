//! Asking a pending question inline: with inquire on a terminal (text, select, multi-select), or
//! line by line from a non-terminal stdin (`askloop chat` fed by a pipe).

use std::io::BufRead;

use askloop_core::{AskUserOption, PendingToolCall, SelectionMode};
use inquire::validator::Validation;
use inquire::{InquireError, MultiSelect, Select, Text};
use serde_json::Value;

use crate::format::{ask_user_question, question_lines};
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
    /// Asks `call`'s question.
    ///
    /// # Errors
    /// The terminal or stdin failed.
    pub(crate) fn ask(&self, call: &PendingToolCall, output: &mut Output) -> anyhow::Result<Asked> {
        match self {
            Self::Nobody => Ok(Asked::Unanswered),
            Self::Terminal => {
                output.end_line()?;
                match ask_on_terminal(call) {
                    Ok(answer) => Ok(Asked::Answer(answer)),
                    Err(InquireError::OperationCanceled | InquireError::OperationInterrupted) => {
                        Ok(Asked::Stopped)
                    }
                    Err(error) => Err(error.into()),
                }
            }
            Self::Lines => ask_by_lines(call, output),
        }
    }
}

/// One option as a select prompt shows it.
struct Choice(AskUserOption);

impl std::fmt::Display for Choice {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0.description {
            Some(description) => write!(formatter, "{} - {description}", self.0.label),
            None => formatter.write_str(&self.0.label),
        }
    }
}

fn ask_on_terminal(call: &PendingToolCall) -> Result<Value, InquireError> {
    let Some(question) = ask_user_question(call) else {
        let message = format!(
            "{} asks {} - answer as JSON:",
            call.tool_name, call.suspend_payload
        );
        let text = Text::new(&message)
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
    match question.selection_mode {
        None => {
            let text = Text::new(&question.question)
                .with_validator(|input: &str| {
                    Ok(if input.trim().is_empty() {
                        Validation::Invalid("the answer is empty".into())
                    } else {
                        Validation::Valid
                    })
                })
                .prompt()?;
            Ok(Value::String(text))
        }
        Some(SelectionMode::SingleSelect) => {
            let choice = Select::new(&question.question, choices())
                .with_formatter(&|option| option.value.0.label.clone())
                .prompt()?;
            Ok(Value::String(choice.0.label))
        }
        Some(SelectionMode::MultiSelect) => {
            let chosen = MultiSelect::new(&question.question, choices())
                .with_formatter(&|options| {
                    options
                        .iter()
                        .map(|option| option.value.0.label.as_str())
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

fn ask_by_lines(call: &PendingToolCall, output: &mut Output) -> anyhow::Result<Asked> {
    for line in question_lines(call) {
        output.line(&line)?;
    }
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

/// Reads one typed line as an answer to `call`.
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
    let label = |word: &str| -> Result<Value, String> {
        let word = word.trim();
        if let Some(found) = labels.iter().find(|label| **label == word) {
            return Ok(Value::String((*found).to_owned()));
        }
        match word.parse::<usize>() {
            Ok(number) if (1..=labels.len()).contains(&number) => {
                Ok(Value::String(labels[number - 1].to_owned()))
            }
            _ => Err(format!(
                "{word:?} is not one of the labels {} or their numbers 1 to {}",
                labels
                    .iter()
                    .map(|label| format!("{label:?}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                labels.len()
            )),
        }
    };
    match question.selection_mode {
        None if line.is_empty() => Err("the answer is empty".to_owned()),
        None => Ok(Value::String(line.to_owned())),
        Some(SelectionMode::SingleSelect) => label(line),
        Some(SelectionMode::MultiSelect) => line
            .split(',')
            .filter(|word| !word.trim().is_empty())
            .map(label)
            .collect::<Result<Vec<_>, _>>()
            .and_then(|chosen| {
                if chosen.is_empty() {
                    Err("select at least one label".to_owned())
                } else {
                    Ok(Value::Array(chosen))
                }
            }),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn call(payload: Value) -> PendingToolCall {
        PendingToolCall {
            tool_call_id: "c1".into(),
            tool_name: "ask_user".into(),
            args: json!({}),
            suspend_payload: payload,
            resume_schema: None,
        }
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
    }
}
