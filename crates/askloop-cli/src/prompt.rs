//! Asking a pending question inline: with inquire on a terminal (text, select, multi-select), or
//! line by line from a non-terminal stdin (`askloop chat` fed by a pipe). Every prompt names the
//! tool call it answers, and the answer is sent for that call only.

use std::io::BufRead;

use askloop_core::PendingToolCall;
use askloop_core::answer::answer_from_inputs;
use askloop_core::form::{Choice, Field, FieldKind, Property};
use inquire::list_option::ListOption;
use inquire::ui::{Color, RenderConfig, Styled};
use inquire::validator::Validation;
use inquire::{Confirm, CustomUserError, InquireError, MultiSelect, Select, Text};
use serde_json::Value;

use crate::format::{
    SHOW_LIMIT, approval_line, asked_by, cut, escape_controls, option_description, question_lines,
    question_of,
};
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
    /// Nobody answers now: no terminal, stdin ended, or the person left the question for
    /// later (Esc). The run keeps waiting; the command says how to answer it later.
    Unanswered,
    /// The person stopped the prompt with Ctrl-C (exit status 130).
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
                crate::status::hide();
                let asked = if call.kind == askloop_core::PendingKind::Approval {
                    ask_approval_on_terminal(call).map_err(anyhow::Error::from)
                } else {
                    ask_on_terminal(call, output)
                };
                match asked {
                    Ok(answer) => Ok(Asked::Answer(answer)),
                    Err(error) => match error.downcast_ref::<InquireError>() {
                        Some(InquireError::OperationCanceled) => Ok(Asked::Unanswered),
                        Some(InquireError::OperationInterrupted) => Ok(Asked::Stopped),
                        _ => Err(error),
                    },
                }
            }
            Self::Lines => ask_by_lines(call, output, show_question),
        }
    }
}

/// The last item of a pick-one or pick-several list whose question takes the person's own
/// words: picking it opens a text prompt.
pub(crate) const OWN_ANSWER_ITEM: &str = "Type my own answer";

/// One item of a select prompt: a choice, shown as `label - description` with control
/// characters escaped, or [`OWN_ANSWER_ITEM`].
enum Shown {
    Choice(Choice),
    OwnWords,
}

impl Shown {
    /// What the answer line shows once the item is picked.
    fn picked(&self) -> String {
        match self {
            Self::Choice(choice) => escape_controls(&choice.label).into_owned(),
            Self::OwnWords => "(your own words)".to_owned(),
        }
    }
}

impl std::fmt::Display for Shown {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Self::Choice(choice) = self else {
            return formatter.write_str(OWN_ANSWER_ITEM);
        };
        let label = escape_controls(&choice.label);
        match option_description(&choice.description) {
            Some(description) => write!(formatter, "{label} - {}", escape_controls(description)),
            None => formatter.write_str(&label),
        }
    }
}

/// The help line under a prompt: inquire's keys or what the answer must be, and the call the
/// answer goes to.
fn help(keys: Option<&str>, call: &PendingToolCall) -> String {
    let id = escape_controls(call.tool_call_id.as_str());
    let asked = asked_by(call).map_or_else(String::new, |asked| format!(", {asked}"));
    match keys {
        Some(keys) => format!("{keys}; answers tool call {id}{asked}"),
        None => format!("answers tool call {id}{asked}"),
    }
}

/// Asks `call`'s question with the prompts its resume schema calls for (JSON input when it
/// has none). An object's heading (the question, or the tool and its payload) is printed
/// first, then one prompt per property.
fn ask_on_terminal(call: &PendingToolCall, output: &mut Output) -> anyhow::Result<Value> {
    set_prompt_look();
    let question = question_of(call);
    let field = question
        .field
        .unwrap_or_else(|| Field::from_schema(&Value::Bool(true)));
    let message = question.text.map_or_else(
        || {
            format!(
                "{} asks {}",
                call.tool_name,
                cut(&call.suspend_payload.to_string(), SHOW_LIMIT)
            )
        },
        |text| cut(&text, SHOW_LIMIT),
    );
    let message = escape_controls(&message);
    if let FieldKind::Object { .. } = &field.kind {
        output.line(&message)?;
    }
    Ok(ask_field(&message, &field, call)?)
}

/// Sets how inquire draws every prompt of askloop: Esc shows `<left for later>` after the
/// question (the question waits for a later answer; inquire's `<canceled>` reads as if the run
/// was cancelled).
fn set_prompt_look() {
    inquire::set_global_render_config(RenderConfig::default().with_canceled_prompt_indicator(
        Styled::new("<left for later>").with_fg(Color::DarkYellow),
    ));
}

/// Asks for `field` with `message`: a select, a multi-select, a confirm, a text input that
/// checks the schema's limits (asking again with the reason), one prompt per property of an
/// object (required ones first), or JSON.
fn ask_field(message: &str, field: &Field, call: &PendingToolCall) -> Result<Value, InquireError> {
    match &field.kind {
        FieldKind::Select { choices } => {
            let help = help(Select::<Shown>::DEFAULT_HELP_MESSAGE, call);
            let picked = Select::new(message, shown(choices, field.takes_own_words()))
                .with_help_message(&help)
                .with_formatter(&|option| option.value.picked())
                .prompt()?;
            match picked {
                Shown::Choice(choice) => Ok(choice.value),
                Shown::OwnWords => ask_own_words(field, call, Vec::new()),
            }
        }
        FieldKind::MultiSelect { choices } => ask_several(message, field, choices, call),
        FieldKind::Confirm => {
            let help = help(Some("y or n"), call);
            Ok(Value::Bool(
                Confirm::new(message).with_help_message(&help).prompt()?,
            ))
        }
        FieldKind::Object { properties } => {
            let mut object = serde_json::Map::new();
            for property in properties {
                let name = escape_controls(&property.name);
                let label = match &property.field.description {
                    Some(description) => format!("{name} ({})", escape_controls(description)),
                    None => name.into_owned(),
                };
                if let Some(value) = ask_property(&label, property, call)? {
                    object.insert(property.name.clone(), value);
                }
            }
            Ok(Value::Object(object))
        }
        _ => {
            let hint = field.hint();
            let help = help(Some(&escape_controls(&hint)), call);
            let text = Text::new(message)
                .with_help_message(&help)
                .with_validator(text_validator(field, false))
                .prompt()?;
            field
                .answer_from_inputs(&[text])
                .map_err(|error| InquireError::Custom(error.into()))
        }
    }
}

/// A pick-several prompt; with [`OWN_ANSWER_ITEM`] picked, then the person's own words.
fn ask_several(
    message: &str,
    field: &Field,
    choices: &[Choice],
    call: &PendingToolCall,
) -> Result<Value, InquireError> {
    let help = help(MultiSelect::<Shown>::DEFAULT_HELP_MESSAGE, call);
    let chosen = MultiSelect::new(message, shown(choices, field.takes_own_words()))
        .with_help_message(&help)
        .with_formatter(&|options| {
            options
                .iter()
                .map(|option| option.value.picked())
                .collect::<Vec<_>>()
                .join(", ")
        })
        .with_validator({
            let field = field.clone();
            move |selected: &[ListOption<&Shown>]| {
                if selected.is_empty() {
                    return Ok(Validation::Invalid(
                        "select at least one (space selects, enter confirms)".into(),
                    ));
                }
                // The own words are checked once typed; a stand-in takes their place here.
                let values = selected.iter().map(|o| item_value(o.value)).collect();
                Ok(validation(field.problems(&Value::Array(values))))
            }
        })
        .prompt()?;
    let mut values = Vec::with_capacity(chosen.len());
    let mut own_words = false;
    for item in chosen {
        match item {
            Shown::Choice(choice) => values.push(choice.value),
            Shown::OwnWords => own_words = true,
        }
    }
    if own_words {
        ask_own_words(field, call, values)
    } else {
        Ok(Value::Array(values))
    }
}

/// The value a picked item stands for in an answer: a choice's value, or own words (a
/// stand-in text).
fn item_value(item: &Shown) -> Value {
    match item {
        Shown::Choice(choice) => choice.value.clone(),
        Shown::OwnWords => own_words_value("own words"),
    }
}

/// The person's own words as an answer item, `{"other": "<text>"}`: what `ask_user` takes
/// from a select question that allows them ([`askloop_core::AskUserQuestion`]).
fn own_words_value(text: &str) -> Value {
    serde_json::json!({"other": text})
}

/// Asks for the person's own words after [`OWN_ANSWER_ITEM`] was picked: a text that is not
/// blank, trimmed. The answer is `{"other": text}` for a pick-one (`picked` empty), or the
/// labels `picked` followed by it for a pick-several; the field's schema checks it, and a
/// refusal asks again with the reason.
fn ask_own_words(
    field: &Field,
    call: &PendingToolCall,
    picked: Vec<Value>,
) -> Result<Value, InquireError> {
    let several = matches!(field.kind, FieldKind::MultiSelect { .. });
    let answer_with = {
        let picked = picked.clone();
        move |text: &str| {
            let own = own_words_value(text.trim());
            if several {
                let mut items = picked.clone();
                items.push(own);
                Value::Array(items)
            } else {
                own
            }
        }
    };
    let check = {
        let field = field.clone();
        let answer_with = answer_with.clone();
        move |input: &str| -> Result<Validation, CustomUserError> {
            if askloop_core::is_blank(input) {
                return Ok(Validation::Invalid("type your answer (it is empty)".into()));
            }
            Ok(validation(field.problems(&answer_with(input))))
        }
    };
    let text = Text::new("Your answer:")
        .with_help_message(&help(Some("in your own words, enter sends it"), call))
        .with_validator(check)
        .prompt()?;
    Ok(answer_with(&text))
}

/// Asks for one property of an object; an optional one may be left out (an empty text, or
/// "no" to a first question for other kinds).
fn ask_property(
    label: &str,
    property: &Property,
    call: &PendingToolCall,
) -> Result<Option<Value>, InquireError> {
    let field = &property.field;
    if property.required {
        return ask_field(label, field, call).map(Some);
    }
    match &field.kind {
        FieldKind::Text { .. } | FieldKind::Number { .. } | FieldKind::Json => {
            let hint = format!("{}, optional: enter leaves it out", field.hint());
            let help = help(Some(&escape_controls(&hint)), call);
            let text = Text::new(label)
                .with_help_message(&help)
                .with_validator(text_validator(field, true))
                .prompt()?;
            if text.is_empty() {
                return Ok(None);
            }
            field
                .answer_from_inputs(&[text])
                .map(Some)
                .map_err(|error| InquireError::Custom(error.into()))
        }
        _ => {
            let give = Confirm::new(&format!("Give {label}? (optional)"))
                .with_default(false)
                .with_help_message(&help(None, call))
                .prompt()?;
            if give {
                ask_field(label, field, call).map(Some)
            } else {
                Ok(None)
            }
        }
    }
}

/// A text prompt's check: the input must make an answer to `field` (in the answer forms of
/// [`askloop_core::answer`], within the schema's limits), or be empty when `optional`; a
/// refusal shows the reason and the prompt stays.
fn text_validator(
    field: &Field,
    optional: bool,
) -> impl Fn(&str) -> Result<Validation, CustomUserError> + Clone + 'static {
    let field = field.clone();
    move |input: &str| {
        if optional && input.is_empty() {
            return Ok(Validation::Valid);
        }
        Ok(match field.answer_from_inputs(&[input]) {
            Ok(_) => Validation::Valid,
            Err(error) => Validation::Invalid(validation_message(&error.to_string())),
        })
    }
}

fn validation_message(text: &str) -> inquire::validator::ErrorMessage {
    escape_controls(text).into_owned().into()
}

/// The items of a select prompt: the choices, and [`OWN_ANSWER_ITEM`] last when the question
/// takes the person's own words.
fn shown(choices: &[Choice], own_words: bool) -> Vec<Shown> {
    let mut items: Vec<Shown> = choices.iter().cloned().map(Shown::Choice).collect();
    if own_words {
        items.push(Shown::OwnWords);
    }
    items
}

fn validation(problems: Vec<String>) -> Validation {
    if problems.is_empty() {
        Validation::Valid
    } else {
        Validation::Invalid(validation_message(&problems.join("; ")))
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
    let Some(field) = question_of(call).field else {
        return format!("answer tool call {id}:");
    };
    let own = if field.takes_own_words() {
        ", or in your own words"
    } else {
        ""
    };
    match &field.kind {
        FieldKind::Select { .. } => {
            format!("answer tool call {id} with a label or its number{own}:")
        }
        FieldKind::MultiSelect { .. } => format!(
            "answer tool call {id} with one or more labels or numbers, separated by commas{own}:"
        ),
        FieldKind::Text { .. } => format!("answer tool call {id}:"),
        FieldKind::Object { .. } => format!("answer tool call {id} with one line of JSON:"),
        _ => format!("answer tool call {id} with {}:", field.hint()),
    }
}

/// Reads one typed line as an answer to `call`, in the answer forms every front end takes
/// ([`askloop_core::answer`]): a label, its number or the label in any case; for a
/// multi-select the whole line as one label first (a label may hold a comma), then a JSON
/// array, then labels separated by commas, each once.
fn parse_line_answer(call: &PendingToolCall, line: &str) -> Result<Value, String> {
    answer_from_inputs(call.resume_schema.as_ref(), &[line]).map_err(|error| error.to_string())
}

/// The choices of an approval on a terminal, in the order shown.
const APPROVAL_CHOICES: [&str; 3] = ["Allow", "Edit the arguments, then allow", "Decline"];

/// An approval on a terminal: allow (the tool runs); edit the arguments, then allow (one line of
/// JSON, prefilled with the call's arguments, that must be an object; the claim checks it
/// against the tool's input schema, and a refusal asks again); or decline (then an optional
/// reason for the model). The answer is the reference framework's approval data,
/// `{"approved": …, "reason"?: …}`, with askloop's `args` for edited arguments.
fn ask_approval_on_terminal(call: &PendingToolCall) -> Result<Value, InquireError> {
    set_prompt_look();
    let message = approval_line(call);
    let choice = Select::new(&format!("{message} - allow it?"), APPROVAL_CHOICES.to_vec())
        .with_help_message(&help(Select::<&str>::DEFAULT_HELP_MESSAGE, call))
        .prompt()?;
    if choice == APPROVAL_CHOICES[0] {
        return Ok(serde_json::json!({"approved": true}));
    }
    if choice == APPROVAL_CHOICES[1] {
        let original = call.args.to_string();
        let edited = Text::new("Arguments (JSON), approved as edited:")
            .with_initial_value(&original)
            .with_help_message(&help(Some("one line of JSON, an object"), call))
            .with_validator(|text: &str| -> Result<Validation, CustomUserError> {
                Ok(match serde_json::from_str::<Value>(text) {
                    Ok(Value::Object(_)) => Validation::Valid,
                    Ok(_) => Validation::Invalid(validation_message(
                        "the arguments must be a JSON object",
                    )),
                    Err(error) => {
                        Validation::Invalid(validation_message(&format!("not JSON: {error}")))
                    }
                })
            })
            .prompt()?;
        let args: Value = serde_json::from_str(&edited).unwrap_or(Value::Null);
        return Ok(serde_json::json!({"approved": true, "args": args}));
    }
    let reason = Text::new("Reason for the model (optional):")
        .with_help_message(&help(Some("enter to skip"), call))
        .prompt()?;
    Ok(if reason.trim().is_empty() {
        serde_json::json!({"approved": false})
    } else {
        serde_json::json!({"approved": false, "reason": reason})
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    use crate::format::{ask_user_call as call, custom_call};

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
                .contains("there is no option 3: the options are 1 to 2")
        );
        assert!(
            parse_line_answer(&single, "master")
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
    fn issue33_a_line_naming_no_label_is_the_persons_own_words_where_allowed() {
        let single = call(
            json!({"question": "Her name?", "options": [{"label": "Alice"},
            {"label": "Bob"}], "selectionMode": "single_select", "allowOther": true}),
        );
        assert_eq!(parse_line_answer(&single, "2"), Ok(json!("Bob")));
        assert_eq!(
            parse_line_answer(&single, "Maria"),
            Ok(json!({"other": "Maria"}))
        );
        assert!(line_prompt(&single).ends_with("its number, or in your own words:"));
        let closed = call(
            json!({"question": "Her name?", "options": [{"label": "Alice"}],
            "selectionMode": "single_select"}),
        );
        assert!(parse_line_answer(&closed, "Maria").is_err());
        assert!(line_prompt(&closed).ends_with("with a label or its number:"));
        let field = Field::from_schema(single.resume_schema.as_ref().unwrap());
        let items: Vec<String> = shown(field.choices(), true)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(items, ["Alice", "Bob", OWN_ANSWER_ITEM]);
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

    #[test]
    fn lines_answer_custom_tools_from_their_schema() {
        let confirm = custom_call(json!({"type": "boolean"}));
        assert_eq!(parse_line_answer(&confirm, "YES"), Ok(json!(true)));
        assert!(line_prompt(&confirm).ends_with("with yes or no:"));
        let amount = custom_call(json!({"type": "integer", "minimum": 1}));
        assert_eq!(parse_line_answer(&amount, "12"), Ok(json!(12)));
        let problem = parse_line_answer(&amount, "0").unwrap_err();
        assert!(problem.contains("minimum of 1"), "{problem}");
        let object = custom_call(json!({"type": "object", "properties": {
            "plan": {"enum": ["basic", "pro"]}}, "required": ["plan"]}));
        assert_eq!(
            parse_line_answer(&object, r#"{"plan": "Pro"}"#),
            Ok(json!({"plan": "pro"}))
        );
        assert!(line_prompt(&object).ends_with("one line of JSON:"));
    }
}
