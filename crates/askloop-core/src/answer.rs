//! Answer forms, one set for every front end (CLI flags, `chat` lines, HTTP): what a person
//! types, turned into the JSON answer a suspension's resume schema asks for.
//!
//! The forms, for a select ([`FieldKind::Select`]) and each item of a multi-select:
//! - the exact label;
//! - the option's number as listed, from 1;
//! - a label matched ignoring case (and surrounding spaces) when exactly one label matches,
//!   normalised to that label — the model always receives the exact labels.
//!
//! A multi-select takes several inputs (one label each: `--answer` repeated), or one input that
//! is a label, a JSON array of labels, or labels separated by commas. Other fields take one
//! input: `yes`/`no` (or `y`, `n`, `true`, `false`) for a confirm, the text itself for a text, a
//! number for a number, JSON for anything else. A suspension without a resume schema takes the
//! text as a JSON string.
//!
//! A select that also takes the person's own words (its schema accepts `{"other": "…"}`,
//! `ask_user`'s `allow_other`; see [`Field::takes_own_words`]) reads input that names no label
//! as those words: `{"other": "<input, trimmed>"}` for a pick-one; for a pick-several, each
//! input of several, or each part of a comma-separated line that names a label when some do
//! (the others are own words), or else the whole line as one answer in the person's words.
//!
//! Ambiguous and unknown labels are refused with the labels listed ([`AnswerError`]); an answer
//! that breaks the schema's limits is refused with each problem.

use serde_json::Value;

use crate::ask_user::{AskUser, AskUserArgs, AskUserQuestion};
use crate::form::{Choice, Field, FieldKind};
use crate::ids::ToolCallId;
use crate::message::{AssistantPart, Message};
use crate::run::RunState;
use crate::text::is_blank;
use crate::tool::Tool as _;

/// Why typed input does not make an answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AnswerError {
    /// No input was given.
    #[error("no answer given")]
    Empty,
    /// Several inputs for a question that takes one.
    #[error("this question takes one answer; got {count}")]
    TooMany {
        /// How many inputs were given.
        count: usize,
    },
    /// The input is no label, no label's number, and no label ignoring case.
    #[error("{input:?} is not one of the labels {} or their numbers 1 to {}{}", quoted(labels), labels.len(), own_words_welcome(*own_words))]
    UnknownLabel {
        /// The input.
        input: String,
        /// Every label, in order.
        labels: Vec<String>,
        /// Whether the question also takes the person's own words (`{"other": "…"}`).
        own_words: bool,
    },
    /// The input is a bare whole number that is no option's number (nor a label): a number is
    /// read as an option's number, never silently as the person's own words.
    #[error("there is no option {input}: the options are 1 to {count}{}", number_as_own_words(input, *own_words))]
    NoSuchOption {
        /// The input, trimmed (ASCII digits only).
        input: String,
        /// How many options there are.
        count: usize,
        /// Whether the question also takes the person's own words (`{"other": "…"}`).
        own_words: bool,
    },
    /// The input for a select is blank (empty or only whitespace).
    #[error("the answer is empty; choose a label or its number{}", own_words_welcome(*own_words))]
    Blank {
        /// Whether the question also takes the person's own words (`{"other": "…"}`).
        own_words: bool,
    },
    /// The input matches several labels ignoring case.
    #[error(
        "{input:?} matches several labels ({}); give one exactly: {}{}",
        quoted(matches),
        quoted(labels),
        own_words_welcome(*own_words)
    )]
    AmbiguousLabel {
        /// The input.
        input: String,
        /// The labels it matches.
        matches: Vec<String>,
        /// Every label, in order.
        labels: Vec<String>,
        /// Whether the question also takes the person's own words (`{"other": "…"}`).
        own_words: bool,
    },
    /// A multi-select names the same choice twice.
    #[error("{label:?} is chosen twice; name each label once")]
    Repeated {
        /// The label chosen twice.
        label: String,
    },
    /// A multi-select with nothing chosen.
    #[error("select at least one label")]
    NothingSelected,
    /// The input does not have the field's shape (not a number, not yes or no, not JSON).
    #[error("{input:?} is not {expected}")]
    Malformed {
        /// The input.
        input: String,
        /// What was expected, e.g. `an integer`, `yes or no`, `JSON (expected value at line 1
        /// column 1)`.
        expected: String,
    },
    /// The answer breaks the schema's limits; one entry per problem.
    #[error("{}", problems.join("; "))]
    Invalid {
        /// Each problem, in words.
        problems: Vec<String>,
    },
}

/// The end of a refusal of a question that takes the person's own words: they are welcome.
fn own_words_welcome(own_words: bool) -> &'static str {
    if own_words {
        "; your own words are welcome too (any text that names no label)"
    } else {
        ""
    }
}

/// The end of [`AnswerError::NoSuchOption`]: how to give the number as the person's own words,
/// when the question takes them.
fn number_as_own_words(input: &str, own_words: bool) -> String {
    if own_words {
        format!(
            "; to give {input:?} as your own words, answer {}",
            serde_json::json!({"other": input})
        )
    } else {
        String::new()
    }
}

fn quoted(labels: &[String]) -> String {
    labels
        .iter()
        .map(|label| format!("{label:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The answer that `inputs` (what a person typed: one `--answer` each, one line, one form
/// field) give to a suspension whose resume schema is `resume_schema` (see the module's forms).
///
/// # Errors
/// [`AnswerError`]: no input, several inputs for one answer, an unknown or ambiguous label, a
/// label chosen twice, input of the wrong shape, or an answer breaking the schema's limits.
pub fn answer_from_inputs<S: AsRef<str>>(
    resume_schema: Option<&Value>,
    inputs: &[S],
) -> Result<Value, AnswerError> {
    let Some(schema) = resume_schema else {
        return match inputs {
            [] => Err(AnswerError::Empty),
            [input] => Ok(Value::String(input.as_ref().to_owned())),
            _ => Err(AnswerError::TooMany {
                count: inputs.len(),
            }),
        };
    };
    Field::from_schema(schema).answer_from_inputs(inputs)
}

/// The resume schema of `ask_user` call `tool_call_id` of `state`'s messages, read from the
/// call's arguments: what its question accepted, for a call that is no longer pending (so a
/// repeat by a label's number or in another case reads as the label it was), with the person's
/// own words taken too (the arguments do not say whether they were allowed; the answer is only
/// compared with the one given). `None` for another tool's call, one the run does not hold, or
/// arguments that make no question.
pub fn answered_question_schema(state: &RunState, tool_call_id: &ToolCallId) -> Option<Value> {
    let call = state.messages().iter().find_map(|message| match message {
        Message::Assistant { parts } => parts.iter().find_map(|part| match part {
            AssistantPart::ToolCall(call) if &call.id == tool_call_id => Some(call),
            _ => None,
        }),
        _ => None,
    })?;
    if call.name != AskUser::NAME {
        return None;
    }
    let args: AskUserArgs = serde_json::from_value(call.args.to_value()).ok()?;
    let mut question = AskUserQuestion::from_args(args).ok()?;
    question.allow_other = true;
    Some(question.resume_schema())
}

/// Whether `state`'s messages hold a result of call `tool_call_id` that a resume gave `answer`
/// (exactly: normalise `answer` first, e.g. with [`answered_question_schema`]).
pub fn answered_with(state: &RunState, tool_call_id: &ToolCallId, answer: &Value) -> bool {
    state.messages().iter().any(|message| match message {
        Message::Tool { results } => results.iter().any(|result| {
            &result.tool_call_id == tool_call_id && result.answer.as_ref() == Some(answer)
        }),
        _ => false,
    })
}

/// Whether `answer` to call `tool_call_id`, which is no longer pending, repeats the answer the
/// run recorded for it: the same JSON, or the same once read as its question reads answers (a
/// label's number or a label in another case is that label: [`normalize_answer`] with
/// [`answered_question_schema`]; a string, or an array of strings, read as typed input is the
/// same too, so a plain string equal to the recorded own words `{"other": "…"}` repeats them).
/// The one rule for repeats of every front end: a repeat is a harmless note, a different
/// answer is refused.
pub fn repeats_recorded_answer(
    state: &RunState,
    tool_call_id: &ToolCallId,
    answer: &Value,
) -> bool {
    if answered_with(state, tool_call_id, answer) {
        return true;
    }
    let schema = answered_question_schema(state, tool_call_id);
    let same = |read: Result<Value, AnswerError>| {
        read.is_ok_and(|normalized| answered_with(state, tool_call_id, &normalized))
    };
    if same(normalize_answer(schema.as_ref(), answer.clone())) {
        return true;
    }
    // The recorded own words, given as a plain string (even one that reads as an option's
    // number, e.g. own words "99").
    if let Value::String(text) = answer
        && answered_with(
            state,
            tool_call_id,
            &serde_json::json!({"other": text.trim()}),
        )
    {
        return true;
    }
    let typed: Option<Vec<&str>> = match answer {
        Value::String(text) => Some(vec![text.as_str()]),
        Value::Array(items) => items.iter().map(Value::as_str).collect(),
        _ => None,
    };
    typed.is_some_and(|inputs| same(answer_from_inputs(schema.as_ref(), &inputs)))
}

/// `answer` (JSON given as such, e.g. `--answer-json`) with every string it holds for a select
/// normalised to the exact label, as [`answer_from_inputs`] does (a label matched ignoring
/// case, or a label's number as a string); anything else is left as it is, for the schema
/// check.
///
/// # Errors
/// [`AnswerError::UnknownLabel`], [`AnswerError::AmbiguousLabel`], [`AnswerError::Repeated`].
pub fn normalize_answer(
    resume_schema: Option<&Value>,
    answer: Value,
) -> Result<Value, AnswerError> {
    match resume_schema {
        Some(schema) => Field::from_schema(schema).normalize(answer),
        None => Ok(answer),
    }
}

impl Field {
    /// The answer `inputs` give to this field; see [`answer_from_inputs`].
    ///
    /// # Errors
    /// As [`answer_from_inputs`].
    pub fn answer_from_inputs<S: AsRef<str>>(&self, inputs: &[S]) -> Result<Value, AnswerError> {
        let answer = match (&self.kind, inputs) {
            (_, []) => return Err(AnswerError::Empty),
            (FieldKind::MultiSelect { choices }, [_, _, ..]) => {
                let own_words = self.takes_own_words();
                let mut picked = Vec::with_capacity(inputs.len());
                for input in inputs {
                    picked.push(item(choices, input.as_ref(), own_words)?);
                }
                selection(choices, picked)?
            }
            (_, [input]) => self.parse(input.as_ref())?,
            (_, _) => {
                return Err(AnswerError::TooMany {
                    count: inputs.len(),
                });
            }
        };
        let problems = self.problems(&answer);
        if problems.is_empty() {
            Ok(answer)
        } else {
            Err(AnswerError::Invalid { problems })
        }
    }

    /// One input as this field's answer, before the limits are checked.
    fn parse(&self, input: &str) -> Result<Value, AnswerError> {
        match &self.kind {
            FieldKind::Select { choices } => item(choices, input, self.takes_own_words()),
            FieldKind::MultiSelect { choices } => self.parse_selection(choices, input),
            FieldKind::Confirm => match input.trim().to_lowercase().as_str() {
                "y" | "yes" | "true" => Ok(Value::Bool(true)),
                "n" | "no" | "false" => Ok(Value::Bool(false)),
                _ => Err(malformed(input, "yes or no")),
            },
            FieldKind::Text { .. } => Ok(Value::String(input.to_owned())),
            FieldKind::Number { integer, .. } => {
                let expected = if *integer { "an integer" } else { "a number" };
                match serde_json::from_str::<Value>(input.trim()) {
                    Ok(Value::Number(number))
                        if !integer || number.as_f64().is_some_and(|n| n.fract() == 0.0) =>
                    {
                        Ok(Value::Number(number))
                    }
                    _ => Err(malformed(input, expected)),
                }
            }
            FieldKind::Object { .. } | FieldKind::Json => {
                match serde_json::from_str::<Value>(input) {
                    Ok(value) => self.normalize(value),
                    Err(error) => Err(malformed(input, &format!("JSON ({error})"))),
                }
            }
        }
    }

    /// Whether this select or multi-select also takes the person's own words,
    /// `{"other": "…"}` (its schema accepts them: `ask_user` with `allow_other`); false for
    /// every other kind of field.
    pub fn takes_own_words(&self) -> bool {
        let own = serde_json::json!({"other": "own words"});
        match &self.kind {
            FieldKind::Select { .. } => self.problems(&own).is_empty(),
            FieldKind::MultiSelect { .. } => self.problems(&Value::Array(vec![own])).is_empty(),
            _ => false,
        }
    }

    /// One line as a multi-select's answer: a label as a whole; a JSON array; labels separated
    /// by commas. When the field takes the person's own words, a part that names no label is
    /// such words, and a line none of whose parts names a label is one answer in them.
    fn parse_selection(&self, choices: &[Choice], input: &str) -> Result<Value, AnswerError> {
        let own_words = self.takes_own_words();
        if let Ok(choice) = resolve(choices, input, own_words) {
            return selection(choices, vec![choice.value.clone()]);
        }
        if let Ok(Value::Array(items)) = serde_json::from_str::<Value>(input) {
            return self.normalize(Value::Array(items));
        }
        let parts: Vec<&str> = input
            .split(',')
            .filter(|part| !part.trim().is_empty())
            .collect();
        if own_words
            && !parts
                .iter()
                .any(|part| resolve(choices, part, own_words).is_ok())
        {
            return item(choices, input, true).map(|value| Value::Array(vec![value]));
        }
        let mut picked = Vec::with_capacity(parts.len());
        for part in parts {
            picked.push(item(choices, part, own_words)?);
        }
        selection(choices, picked)
    }

    /// `value` with the labels of its selects normalised; see [`normalize_answer`].
    ///
    /// # Errors
    /// As [`normalize_answer`].
    pub fn normalize(&self, value: Value) -> Result<Value, AnswerError> {
        match (&self.kind, value) {
            (FieldKind::Select { choices }, value) => {
                Ok(pick(choices, value, self.takes_own_words())?)
            }
            (FieldKind::MultiSelect { choices }, Value::Array(items)) => {
                let own_words = self.takes_own_words();
                let mut picked = Vec::with_capacity(items.len());
                for item in items {
                    let value = pick(choices, item, own_words)?;
                    if picked.contains(&value) {
                        return Err(AnswerError::Repeated {
                            label: label_of(choices, &value),
                        });
                    }
                    picked.push(value);
                }
                Ok(Value::Array(picked))
            }
            (FieldKind::Object { properties }, Value::Object(mut object)) => {
                for property in properties {
                    if let Some(value) = object.remove(&property.name) {
                        object.insert(property.name.clone(), property.field.normalize(value)?);
                    }
                }
                Ok(Value::Object(object))
            }
            (_, value) => Ok(value),
        }
    }
}

/// A JSON value given for a select: a choice's value as it is, else a string resolved as typed
/// input; anything else (a number too: JSON says what it means) is left for the schema check.
/// `own_words`: whether the question takes the person's own words (said in refusals).
fn pick(choices: &[Choice], value: Value, own_words: bool) -> Result<Value, AnswerError> {
    if choices.iter().any(|choice| choice.value == value) {
        return Ok(value);
    }
    match &value {
        Value::String(input) => Ok(resolve(choices, input, own_words)?.value.clone()),
        _ => Ok(value),
    }
}

fn label_of(choices: &[Choice], value: &Value) -> String {
    if let Some(text) = value.get("other").and_then(Value::as_str) {
        return text.to_owned();
    }
    choices
        .iter()
        .find(|choice| &choice.value == value)
        .map_or_else(|| value.to_string(), |choice| choice.label.clone())
}

/// The chosen values (of `choices`, or own words) as a multi-select's answer: refused when
/// empty or when one repeats.
fn selection(choices: &[Choice], picked: Vec<Value>) -> Result<Value, AnswerError> {
    if picked.is_empty() {
        return Err(AnswerError::NothingSelected);
    }
    let mut values: Vec<Value> = Vec::with_capacity(picked.len());
    for value in picked {
        if values.contains(&value) {
            return Err(AnswerError::Repeated {
                label: label_of(choices, &value),
            });
        }
        values.push(value);
    }
    Ok(Value::Array(values))
}

/// The value `input` gives one item of a select: the choice it names; else, with `own_words`,
/// the person's own words `{"other": "<input, trimmed>"}` (never a blank input or a bare
/// number: [`resolve`] refuses those).
///
/// # Errors
/// As [`resolve`] (an unknown label only without `own_words`).
fn item(choices: &[Choice], input: &str, own_words: bool) -> Result<Value, AnswerError> {
    match resolve(choices, input, own_words) {
        Ok(choice) => Ok(choice.value.clone()),
        Err(AnswerError::UnknownLabel { .. }) if own_words => {
            Ok(serde_json::json!({"other": input.trim()}))
        }
        Err(error) => Err(error),
    }
}

/// The choice `input` names: its exact label; else its label ignoring surrounding spaces; else
/// its number (from 1); else its label ignoring case, when only one matches.
///
/// # Errors
/// [`AnswerError::Blank`] for blank input that is no label, [`AnswerError::NoSuchOption`] for
/// a bare whole number that is no option's number, [`AnswerError::AmbiguousLabel`],
/// [`AnswerError::UnknownLabel`]; each says whether `own_words` are welcome.
fn resolve<'a>(
    choices: &'a [Choice],
    input: &str,
    own_words: bool,
) -> Result<&'a Choice, AnswerError> {
    if let Some(choice) = choices.iter().find(|choice| choice.label == input) {
        return Ok(choice);
    }
    if is_blank(input) {
        return Err(AnswerError::Blank { own_words });
    }
    let trimmed = input.trim();
    let same: Vec<&Choice> = choices
        .iter()
        .filter(|choice| choice.label.trim() == trimmed)
        .collect();
    if let [choice] = same.as_slice() {
        return Ok(choice);
    }
    if let Ok(number) = trimmed.parse::<usize>()
        && let Some(choice) = number.checked_sub(1).and_then(|index| choices.get(index))
    {
        return Ok(choice);
    }
    let lower = trimmed.to_lowercase();
    let matches: Vec<&Choice> = choices
        .iter()
        .filter(|choice| choice.label.trim().to_lowercase() == lower)
        .collect();
    let labels = || choices.iter().map(|choice| choice.label.clone()).collect();
    match matches.as_slice() {
        [choice] => Ok(choice),
        [] if trimmed.bytes().all(|byte| byte.is_ascii_digit()) => Err(AnswerError::NoSuchOption {
            input: trimmed.to_owned(),
            count: choices.len(),
            own_words,
        }),
        [] => Err(AnswerError::UnknownLabel {
            input: trimmed.to_owned(),
            labels: labels(),
            own_words,
        }),
        several => Err(AnswerError::AmbiguousLabel {
            input: trimmed.to_owned(),
            matches: several.iter().map(|choice| choice.label.clone()).collect(),
            labels: labels(),
            own_words,
        }),
    }
}

fn malformed(input: &str, expected: &str) -> AnswerError {
    AnswerError::Malformed {
        input: input.to_owned(),
        expected: expected.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn single() -> Value {
        json!({"type": "string", "enum": ["Main", "docs", "DOCS", "2"]})
    }

    fn multi() -> Value {
        json!({"type": "array", "items": {"type": "string", "enum": ["eu", "us", "a, b"]},
               "minItems": 1, "uniqueItems": true})
    }

    fn answer(schema: &Value, inputs: &[&str]) -> Result<Value, AnswerError> {
        answer_from_inputs(Some(schema), inputs)
    }

    #[test]
    fn a_label_its_number_or_a_unique_label_ignoring_case() {
        let schema = json!({"type": "string", "enum": ["Main", "docs"]});
        assert_eq!(answer(&schema, &["Main"]), Ok(json!("Main")));
        assert_eq!(answer(&schema, &["2"]), Ok(json!("docs")));
        assert_eq!(answer(&schema, &[" main "]), Ok(json!("Main")));
        assert_eq!(answer(&schema, &["DOCS"]), Ok(json!("docs")));
        let error = answer(&schema, &["3"]).unwrap_err();
        assert_eq!(
            error.to_string(),
            "there is no option 3: the options are 1 to 2"
        );
        assert_eq!(
            answer(&schema, &["a", "b"]),
            Err(AnswerError::TooMany { count: 2 })
        );
    }

    #[test]
    fn an_exact_label_wins_and_an_ambiguous_one_is_refused() {
        // "2" is a label: it means that label, not the second option.
        assert_eq!(answer(&single(), &["2"]), Ok(json!("2")));
        assert_eq!(answer(&single(), &["1"]), Ok(json!("Main")));
        assert_eq!(answer(&single(), &["DOCS"]), Ok(json!("DOCS")));
        let error = answer(&single(), &["Docs"]).unwrap_err();
        assert!(
            matches!(&error, AnswerError::AmbiguousLabel { matches, .. } if matches == &["docs", "DOCS"]),
            "{error:?}"
        );
        assert!(error.to_string().contains(r#""Main", "docs", "DOCS", "2""#));
    }

    #[test]
    fn multi_select_takes_repeated_inputs_a_json_array_or_commas() {
        assert_eq!(answer(&multi(), &["US", "1"]), Ok(json!(["us", "eu"])));
        assert_eq!(
            answer(&multi(), &[r#"["EU","us"]"#]),
            Ok(json!(["eu", "us"]))
        );
        assert_eq!(answer(&multi(), &["us, 1"]), Ok(json!(["us", "eu"])));
        // A label holding a comma matches as a whole.
        assert_eq!(answer(&multi(), &["a, b"]), Ok(json!(["a, b"])));
        assert_eq!(
            answer(&multi(), &["eu", "EU"]),
            Err(AnswerError::Repeated { label: "eu".into() })
        );
        assert_eq!(
            answer(&multi(), &[" , "]),
            Err(AnswerError::NothingSelected)
        );
        assert!(matches!(
            answer(&multi(), &["eu", "mars"]),
            Err(AnswerError::UnknownLabel { .. })
        ));
        assert_eq!(
            normalize_answer(Some(&multi()), json!(["US", "1"])),
            Ok(json!(["us", "eu"]))
        );
        // A JSON number is not a label's number: the schema check refuses it.
        assert_eq!(normalize_answer(Some(&single()), json!(1)), Ok(json!(1)));
    }

    #[test]
    fn issue33_input_naming_no_label_is_the_persons_own_words_where_they_are_taken() {
        let own = |label_schema: Value| {
            json!({"anyOf": [label_schema, {"type": "object",
                "properties": {"other": {"type": "string", "minLength": 1}},
                "required": ["other"], "additionalProperties": false}]})
        };
        let single = own(json!({"type": "string", "enum": ["Alice", "Bob"]}));
        assert!(Field::from_schema(&single).takes_own_words());
        assert_eq!(answer(&single, &["bob"]), Ok(json!("Bob")));
        assert_eq!(answer(&single, &["2"]), Ok(json!("Bob")));
        assert_eq!(answer(&single, &[" Maria "]), Ok(json!({"other": "Maria"})));
        assert_eq!(
            answer(&single, &["  "]),
            Err(AnswerError::Blank { own_words: true })
        );
        let several = json!({"type": "array", "items": own(json!({"type": "string",
            "enum": ["food", "hiking"]})), "minItems": 1, "uniqueItems": true});
        assert!(Field::from_schema(&several).takes_own_words());
        assert_eq!(
            answer(&several, &["food", "surfing"]),
            Ok(json!(["food", {"other": "surfing"}]))
        );
        assert_eq!(
            answer(&several, &["2, surfing"]),
            Ok(json!(["hiking", {"other": "surfing"}]))
        );
        assert_eq!(
            answer(&several, &["somewhere warm, not too far"]),
            Ok(json!([{"other": "somewhere warm, not too far"}]))
        );
        assert_eq!(
            answer(&several, &["surfing", "surfing"]),
            Err(AnswerError::Repeated {
                label: "surfing".into()
            })
        );
        // Without them, an unknown label is refused as before.
        let labels_only = json!({"type": "string", "enum": ["Alice", "Bob"]});
        assert!(!Field::from_schema(&labels_only).takes_own_words());
        assert!(matches!(
            answer(&labels_only, &["Maria"]),
            Err(AnswerError::UnknownLabel { .. })
        ));
        assert!(matches!(
            answer(&multi(), &["eu, mars"]),
            Err(AnswerError::UnknownLabel { .. })
        ));
    }

    /// A pick-one schema taking the person's own words, as `ask_user` with `allow_other` makes.
    fn own_words_question(labels: &[&str]) -> Value {
        json!({"anyOf": [{"type": "string", "enum": labels}, {"type": "object",
            "properties": {"other": {"type": "string", "minLength": 1}},
            "required": ["other"], "additionalProperties": false}]})
    }

    #[test]
    fn issue33_a_bare_number_is_an_options_number_never_silently_own_words() {
        let seven = own_words_question(&["a", "b", "c", "d", "e", "f", "g"]);
        let error = answer(&seven, &["99"]).unwrap_err();
        assert_eq!(
            error.to_string(),
            r#"there is no option 99: the options are 1 to 7; to give "99" as your own words, answer {"other":"99"}"#
        );
        assert!(matches!(
            answer(&seven, &[" 0 "]),
            Err(AnswerError::NoSuchOption { .. })
        ));
        assert_eq!(answer(&seven, &["7"]), Ok(json!("g")));
        // Own words holding a number are still own words.
        assert_eq!(
            answer(&seven, &["99 red balloons"]),
            Ok(json!({"other": "99 red balloons"}))
        );
        // A label that is literally the number wins.
        let literal = own_words_question(&["1", "99"]);
        assert_eq!(answer(&literal, &["99"]), Ok(json!("99")));
        // Without own words the refusal is the same kind, without the hint.
        let labels_only = json!({"type": "string", "enum": ["Main", "docs"]});
        assert_eq!(
            answer(&labels_only, &["3"]).unwrap_err().to_string(),
            "there is no option 3: the options are 1 to 2"
        );
        // In a pick-several too, item by item.
        let several = json!({"type": "array", "items": own_words_question(&["food", "hiking"]),
            "minItems": 1, "uniqueItems": true});
        assert!(matches!(
            answer(&several, &["food, 99"]),
            Err(AnswerError::NoSuchOption { .. })
        ));
        assert!(matches!(
            answer(&several, &["99"]),
            Err(AnswerError::NoSuchOption { .. })
        ));
    }

    #[test]
    fn issue33_a_blank_answer_to_a_pick_one_is_empty_and_own_words_are_welcome() {
        let question = own_words_question(&["alpha", "beta", "gamma", "GAMMA"]);
        for blank in ["", "   ", "\t"] {
            assert_eq!(
                answer(&question, &[blank]).unwrap_err().to_string(),
                "the answer is empty; choose a label or its number; your own words are welcome \
                 too (any text that names no label)",
                "{blank:?}"
            );
        }
        let ambiguous = answer(&question, &["Gamma"]).unwrap_err().to_string();
        assert!(
            ambiguous.ends_with("your own words are welcome too (any text that names no label)"),
            "{ambiguous}"
        );
        let labels_only = json!({"type": "string", "enum": ["Main", "docs"]});
        assert_eq!(
            answer(&labels_only, &[" "]).unwrap_err().to_string(),
            "the answer is empty; choose a label or its number"
        );
        assert_eq!(
            answer(&labels_only, &["x"]).unwrap_err().to_string(),
            r#""x" is not one of the labels "Main", "docs" or their numbers 1 to 2"#
        );
    }

    #[test]
    fn other_fields_parse_their_shape_and_check_limits() {
        let confirm = json!({"type": "boolean"});
        assert_eq!(answer(&confirm, &["Yes"]), Ok(json!(true)));
        assert_eq!(answer(&confirm, &["n"]), Ok(json!(false)));
        assert!(matches!(
            answer(&confirm, &["maybe"]),
            Err(AnswerError::Malformed { .. })
        ));
        let amount = json!({"type": "integer", "minimum": 1, "maximum": 100});
        assert_eq!(answer(&amount, &["42"]), Ok(json!(42)));
        assert!(matches!(
            answer(&amount, &["4.5"]),
            Err(AnswerError::Malformed { .. })
        ));
        let Err(AnswerError::Invalid { problems }) = answer(&amount, &["400"]) else {
            panic!("400 is above the maximum")
        };
        assert!(problems[0].contains("100"), "{problems:?}");
        let text = json!({"type": "string", "maxLength": 3});
        assert_eq!(answer(&text, &[" ab"]), Ok(json!(" ab")));
        assert!(matches!(
            answer(&text, &["abcd"]),
            Err(AnswerError::Invalid { .. })
        ));
        let object = json!({"type": "object", "properties": {
            "plan": {"enum": ["basic", "pro"]}, "seats": {"type": "integer"}}});
        assert_eq!(
            answer(&object, &[r#"{"plan": "PRO", "seats": 2}"#]),
            Ok(json!({"plan": "pro", "seats": 2}))
        );
        assert!(matches!(
            answer(&object, &["{plan"]),
            Err(AnswerError::Malformed { .. })
        ));
        assert_eq!(
            answer_from_inputs(None, &["42"]),
            Ok(json!("42")),
            "without a schema, text is a string"
        );
    }
}
