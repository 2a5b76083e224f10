//! Text for people: questions, approvals, resume commands, times, shell quoting, short JSON, and
//! [`escape_controls`], which every line printed for people goes through.

use std::borrow::Cow;

use askloop_core::form::{Field, FieldKind};
use askloop_core::model::ToolResult;
use askloop_core::{AgentId, PendingToolCall, is_blank};
use serde_json::Value;
use unicode_width::{UnicodeWidthChar as _, UnicodeWidthStr as _};

/// Whether printing `c` raw could drive the terminal rather than show text: C0 controls
/// (ESC, CR, BEL, backspace, …) except newline and tab, DEL, C1 controls (U+0080 to U+009F,
/// where U+009B is a one-character CSI), and the bidirectional overrides and isolates, which
/// make text display in another order than it reads.
fn is_terminal_control(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Text from a model, a question, an id or an error made safe for a terminal: every character
/// that could drive it ([`is_terminal_control`]) is written as a Rust escape (ESC as
/// `\u{1b}`, CR as `\r`); newlines and tabs stay. The one function human output goes
/// through; `--json` output does not (JSON escapes what it must itself).
pub(crate) fn escape_controls(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_terminal_control) {
        return Cow::Borrowed(text);
    }
    let mut escaped = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if is_terminal_control(c) {
            escaped.extend(c.escape_default());
        } else {
            escaped.push(c);
        }
    }
    Cow::Owned(escaped)
}

/// The most characters of one long value that human output shows: a payload, a question, a
/// label or description, an answer, a tool's arguments or result, a message's text. A longer
/// value is cut with [`cut`], which says how much was left out; `--json` shows everything.
pub(crate) const SHOW_LIMIT: usize = 2_000;

/// What a pending call asks, for people: the question its payload states, if any, and the
/// field its resume schema asks for. The *kind* of prompt always comes from the schema; the
/// payload only gives words (`question`, and the `options`' descriptions of an `ask_user`
/// question).
pub(crate) struct Question {
    /// The payload's `question` text, if it has one.
    pub(crate) text: Option<String>,
    /// The answer's field; `None` when the suspension has no resume schema (any JSON).
    pub(crate) field: Option<Field>,
}

/// The question of `call`: its resume schema as a [`Field`], with the descriptions of the
/// payload's `options` (by label) given to choices that have none.
pub(crate) fn question_of(call: &PendingToolCall) -> Question {
    let payload = &call.suspend_payload;
    let mut field = call.resume_schema.as_ref().map(Field::from_schema);
    if let (Some(field), Some(options)) =
        (&mut field, payload.get("options").and_then(Value::as_array))
    {
        let described = |label: &str| {
            options.iter().find_map(|option| {
                (option.get("label").and_then(Value::as_str) == Some(label))
                    .then(|| option.get("description").and_then(Value::as_str))
                    .flatten()
            })
        };
        if let FieldKind::Select { choices } | FieldKind::MultiSelect { choices } = &mut field.kind
        {
            for choice in choices
                .iter_mut()
                .filter(|choice| choice.description.is_none())
            {
                choice.description = described(&choice.label).map(str::to_owned);
            }
        }
    }
    Question {
        text: payload
            .get("question")
            .and_then(Value::as_str)
            .map(str::to_owned),
        field,
    }
}

/// A pending question as lines of text: who asked it when a sub-agent did ([`asked_by`]), the
/// question (or the tool and its payload), then its numbered choices, or what the answer must
/// be.
pub(crate) fn question_lines(call: &PendingToolCall) -> Vec<String> {
    let question = question_of(call);
    let kind = question.field.as_ref().map(|field| &field.kind);
    let mut lines: Vec<String> = asked_by(call).into_iter().collect();
    lines.extend(match &question.text {
        Some(text) => {
            let hint = match kind {
                Some(FieldKind::Select { .. }) => " (choose one)",
                Some(FieldKind::MultiSelect { .. }) => " (choose one or more)",
                _ => "",
            };
            vec![format!("{}{hint}", cut(text, SHOW_LIMIT))]
        }
        None => vec![
            format!("{} asks:", call.tool_name),
            format!("  {}", cut(&call.suspend_payload.to_string(), SHOW_LIMIT)),
        ],
    });
    let Some(field) = &question.field else {
        return lines;
    };
    match &field.kind {
        FieldKind::Select { choices } | FieldKind::MultiSelect { choices } => {
            for (index, choice) in choices.iter().enumerate() {
                let label = cut(&choice.label, SHOW_LIMIT);
                match option_description(&choice.description) {
                    Some(description) => lines.push(format!(
                        "  {}. {label} - {}",
                        index + 1,
                        cut(description, SHOW_LIMIT)
                    )),
                    None => lines.push(format!("  {}. {label}", index + 1)),
                }
            }
            if field.takes_own_words() {
                lines.push("  (or answer in your own words)".to_owned());
            }
        }
        // A question's free text needs no more words.
        FieldKind::Text {
            min_length,
            max_length: None,
            pattern: None,
            ..
        } if question.text.is_some() && min_length.unwrap_or(0) <= 1 => {}
        FieldKind::Object { properties } => {
            lines.push("  answer with JSON with:".to_owned());
            for property in properties {
                let need = if property.required { "" } else { ", optional" };
                let about = property
                    .field
                    .description
                    .as_deref()
                    .map_or_else(String::new, |text| format!(" - {}", cut(text, SHOW_LIMIT)));
                lines.push(format!(
                    "    {}: {}{need}{about}",
                    property.name,
                    property.field.hint()
                ));
            }
        }
        _ => lines.push(format!("  answer with {}", field.hint())),
    }
    lines
}

/// An option's description if it shows something (an empty one is no description).
pub(crate) fn option_description(description: &Option<String>) -> Option<&str> {
    description.as_deref().filter(|text| !is_blank(text))
}

/// The `--answer …` / `--answer-json …` part of a command that answers `call`, with a
/// placeholder in angle brackets where the answer goes (never a label or text that could be
/// pasted as a real answer by mistake), after the field its resume schema asks for.
pub(crate) fn answer_example(call: &PendingToolCall) -> String {
    let Some(field) = question_of(call).field else {
        return "--answer-json '<JSON>'".to_owned();
    };
    // Input that names no label is the person's own words where the question takes them.
    let own = field.takes_own_words();
    match field.kind {
        FieldKind::Select { .. } if own => "--answer '<one label or your own words>'".to_owned(),
        FieldKind::Select { .. } => "--answer '<one label>'".to_owned(),
        // One `--answer` per choice: replaced placeholders paste and work as they are (a JSON
        // array with an ellipsis did not).
        FieldKind::MultiSelect { .. } if own => {
            "--answer '<label>' --answer '<another label or your own words>'".to_owned()
        }
        FieldKind::MultiSelect { .. } => "--answer '<label>' --answer '<another label>'".to_owned(),
        FieldKind::Confirm => "--answer '<yes or no>'".to_owned(),
        FieldKind::Text { .. } => "--answer '<your answer>'".to_owned(),
        FieldKind::Number { integer: true, .. } => "--answer '<integer>'".to_owned(),
        FieldKind::Number { .. } => "--answer '<number>'".to_owned(),
        _ => "--answer-json '<JSON>'".to_owned(),
    }
}

/// Quotes a word for a POSIX shell when it needs it: with `shlex` (single quotes), or, for a
/// word holding a character a terminal would not show as typed (a control character, newline
/// and tab included, or a bidirectional override), with `$'…'` quoting, where each such
/// character is a `\xHH` escape of its UTF-8 bytes, so the printed command shows only plain
/// text and still works when pasted (bash, zsh, ksh and POSIX.1-2024 shells read `$'…'`).
/// A NUL byte, which no command line can carry, is written as `\x00` (the shell cuts the
/// word there).
pub(crate) fn shell_quote(word: &str) -> String {
    if word
        .chars()
        .any(|c| is_terminal_control(c) || c == '\n' || c == '\t')
    {
        return ansi_c_quote(word);
    }
    match shlex::try_quote(word) {
        Ok(quoted) => quoted.into_owned(),
        Err(_) => ansi_c_quote(word),
    }
}

/// `$'…'` quoting: `\\` and `\'` for backslash and quote, `\xHH` for every byte of a
/// character a terminal would not show as typed, everything else as it is.
fn ansi_c_quote(word: &str) -> String {
    let mut quoted = String::from("$'");
    for c in word.chars() {
        match c {
            '\\' => quoted.push_str("\\\\"),
            '\'' => quoted.push_str("\\'"),
            c if is_terminal_control(c) || c == '\n' || c == '\t' => {
                let mut bytes = [0; 4];
                for byte in c.encode_utf8(&mut bytes).bytes() {
                    quoted.push_str(&format!("\\x{byte:02x}"));
                }
            }
            c => quoted.push(c),
        }
    }
    quoted.push('\'');
    quoted
}

/// JSON on one line, cut to about `max` characters.
pub(crate) fn compact_json(value: &Value, max: usize) -> String {
    truncate(&value.to_string(), max)
}

/// The text cut to `max` characters, saying how many were left out, e.g.
/// `abc… [1,234 more characters; --json shows everything]`.
pub(crate) fn cut(text: &str, max: usize) -> String {
    let count = text.chars().count();
    if count <= max {
        return text.to_owned();
    }
    let mut kept: String = text.chars().take(max).collect();
    kept.push_str(&format!(
        "… [{} more characters; --json shows everything]",
        thousands(count - max)
    ));
    kept
}

/// `1234567` as `1,234,567`.
fn thousands(number: usize) -> String {
    let digits = number.to_string();
    let mut grouped = String::new();
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            grouped.push(',');
        }
        grouped.push(digit);
    }
    grouped
}

/// The text cut to `max` columns of a terminal (display width: a wide character counts two),
/// with `…` when cut; newlines become spaces.
pub(crate) fn truncate(text: &str, max: usize) -> String {
    let flat = text.replace('\n', " ");
    if flat.width() <= max {
        return flat;
    }
    let mut cut = String::new();
    let mut used = 0;
    for c in flat.chars() {
        let width = c.width().unwrap_or(0);
        if used + width > max.saturating_sub(1) {
            break;
        }
        used += width;
        cut.push(c);
    }
    cut.push('…');
    cut
}

/// A tool result in one line, for people: its `content` text (or compact JSON), and whether
/// it failed, e.g. `ask_user: User answered: main` or `count failed: …`.
pub(crate) fn result_summary(result: &ToolResult) -> String {
    let content = result
        .result
        .get("content")
        .and_then(Value::as_str)
        .map_or_else(
            || cut(&result.result.to_string(), SHOW_LIMIT),
            |text| cut(&text.replace('\n', " "), SHOW_LIMIT),
        );
    let verb = if result.is_error { " failed" } else { "" };
    format!("{}{verb}: {content}", result.tool_name)
}

/// Milliseconds since the Unix epoch as `YYYY-MM-DD HH:MM:SS` (UTC).
pub(crate) fn format_time(ms: u64) -> String {
    let seconds = ms / 1000;
    let days = i64::try_from(seconds / 86_400).unwrap_or(i64::MAX / 2);
    let time = seconds % 86_400;
    // Howard Hinnant's civil_from_days.
    let shifted = days + 719_468;
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        time / 3600,
        time % 3600 / 60,
        time % 60
    )
}

/// A pending `ask_user` call with `payload` and the resume schema `ask_user` gives it.
/// `tool NAME wants to run with {args}` for a call waiting for approval, with its deadline if
/// it has one.
pub(crate) fn approval_line(call: &PendingToolCall) -> String {
    let by = call
        .expires_at_ms
        .map_or_else(String::new, |at| format!(" by {} UTC", format_time(at)));
    let votes = match call.quorum {
        Some(quorum) if call.approvals.is_empty() => format!("; it needs {quorum} approvers"),
        Some(quorum) => {
            let by: Vec<String> = call
                .approvals
                .iter()
                .map(|vote| {
                    let who = escape_controls(vote.by.as_deref().unwrap_or("someone"));
                    match &vote.args {
                        // A vote that edited the arguments: what it approved.
                        Some(args) => format!("{who} with {}", escape_controls(&args.to_string())),
                        None => who.into_owned(),
                    }
                })
                .collect();
            format!(
                "; approval {} of {quorum} recorded: {}",
                call.approvals.len(),
                by.join(", ")
            )
        }
        None => String::new(),
    };
    let asked = asked_by(call).map_or_else(String::new, |asked| format!("{asked}; "));
    format!(
        "tool {} wants to run with {} ({asked}approve or decline{by}{votes})",
        escape_controls(&call.tool_name),
        cut(&call.args.to_string(), SHOW_LIMIT)
    )
}

/// Who asked `call` when a sub-agent did (its question or approval waits at the root run):
/// `asked by researcher`, or `asked by researcher › analyst` from deeper down, the path from
/// the root's sub-agent to the one that asked; `None` for the run's own calls.
pub(crate) fn asked_by(call: &PendingToolCall) -> Option<String> {
    let origin = call.subagent.as_ref()?;
    Some(format!("asked by {}", agent_path(&origin.path)))
}

/// A path of sub-agents for people, their ids joined by ` › `: `researcher › analyst`.
pub(crate) fn agent_path<'a>(path: impl IntoIterator<Item = &'a AgentId>) -> String {
    let ids: Vec<&str> = path.into_iter().map(AgentId::as_str).collect();
    escape_controls(&ids.join(" › ")).into_owned()
}

#[cfg(test)]
pub(crate) fn ask_user_call(payload: Value) -> PendingToolCall {
    let question: askloop_core::AskUserQuestion = serde_json::from_value(payload.clone())
        .unwrap_or_else(|error| panic!("not an ask_user question: {error}"));
    pending_call("ask_user", payload, Some(question.resume_schema()))
}

/// A pending call of a custom tool `pay` (payload `{"amount_cents": 500}`) with `resume_schema`.
#[cfg(test)]
pub(crate) fn custom_call(resume_schema: Value) -> PendingToolCall {
    pending_call(
        "pay",
        serde_json::json!({"amount_cents": 500}),
        Some(resume_schema),
    )
}

#[cfg(test)]
fn pending_call(name: &str, payload: Value, resume_schema: Option<Value>) -> PendingToolCall {
    PendingToolCall::new(
        &askloop_core::model::ToolCall {
            id: "c1".into(),
            name: name.into(),
            args: askloop_core::model::ToolArgs::Json(serde_json::json!({})),
        },
        &askloop_core::Suspension {
            resume_schema,
            ..askloop_core::Suspension::new(payload)
        },
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn formats_utc_times() {
        assert_eq!(format_time(0), "1970-01-01 00:00:00");
        assert_eq!(format_time(951_782_400_000), "2000-02-29 00:00:00");
        assert_eq!(format_time(1_796_007_590_064), "2026-11-30 02:59:50");
    }

    #[test]
    fn quotes_only_what_needs_it() {
        assert_eq!(shell_quote("main"), "main");
        assert_eq!(shell_quote("two words"), "'two words'");
        assert_eq!(shell_quote("it's"), r#""it's""#);
        assert_eq!(shell_quote("$HOME `x`"), "'$HOME `x`'");
        assert_eq!(shell_quote(r#"["a"]"#), r#"'["a"]'"#);
    }

    #[test]
    fn words_with_control_characters_are_quoted_to_paste() {
        assert_eq!(shell_quote("a\u{1b}[2Jb"), r"$'a\x1b[2Jb'");
        assert_eq!(shell_quote("two\nlines it's"), r"$'two\x0alines it\'s'");
        assert_eq!(shell_quote("back\\slash\t"), r"$'back\\slash\x09'");
        assert_eq!(shell_quote("\u{9b}"), r"$'\xc2\x9b'");
        assert_eq!(shell_quote("nul\0"), r"$'nul\x00'");
        // What is printed is plain text: nothing left for escape_controls to change.
        let quoted = shell_quote("x\u{202e}\u{7}");
        assert_eq!(escape_controls(&quoted), quoted);
    }

    #[test]
    fn issue7_fault8_control_characters_are_escaped_and_text_kept() {
        assert_eq!(escape_controls("plain\ntext\tok"), "plain\ntext\tok");
        assert_eq!(
            escape_controls("\u{1b}]0;title\u{7}\r\u{9b}2J\u{7f}"),
            r"\u{1b}]0;title\u{7}\r\u{9b}2J\u{7f}"
        );
        assert_eq!(escape_controls("a\u{202e}b"), r"a\u{202e}b");
        assert!(matches!(escape_controls("é ✓"), Cow::Borrowed(_)));
    }

    #[test]
    fn issue7_fault14_cut_says_how_much_was_left_out() {
        assert_eq!(cut("short", 10), "short");
        assert_eq!(
            cut(&"é".repeat(1_234_567 + 3), 3),
            "ééé… [1,234,567 more characters; --json shows everything]"
        );
    }

    #[test]
    fn examples_match_the_question() {
        let single = ask_user_call(
            json!({"question": "Q", "options": [{"label": "a b"}], "selectionMode": "single_select"}),
        );
        assert_eq!(answer_example(&single), "--answer '<one label>'");
        let multi = ask_user_call(
            json!({"question": "Q", "options": [{"label": "x"}], "selectionMode": "multi_select"}),
        );
        assert_eq!(
            answer_example(&multi),
            "--answer '<label>' --answer '<another label>'"
        );
        let text = ask_user_call(json!({"question": "Q"}));
        assert_eq!(answer_example(&text), "--answer '<your answer>'");
        let own = ask_user_call(
            json!({"question": "Q", "options": [{"label": "a"}], "selectionMode": "single_select", "allowOther": true}),
        );
        assert_eq!(
            answer_example(&own),
            "--answer '<one label or your own words>'"
        );
        assert_eq!(
            question_lines(&own),
            [
                "Q (choose one)",
                "  1. a",
                "  (or answer in your own words)"
            ]
        );
        let own_multi = ask_user_call(
            json!({"question": "Q", "options": [{"label": "a"}], "selectionMode": "multi_select", "allowOther": true}),
        );
        assert_eq!(
            answer_example(&own_multi),
            "--answer '<label>' --answer '<another label or your own words>'"
        );
        let confirm = custom_call(json!({"type": "boolean"}));
        assert_eq!(answer_example(&confirm), "--answer '<yes or no>'");
        let object =
            custom_call(json!({"type": "object", "properties": {"a": {"type": "integer"}}}));
        assert_eq!(answer_example(&object), "--answer-json '<JSON>'");
    }

    #[test]
    fn a_custom_tool_is_described_from_its_schema() {
        let call = custom_call(json!({
            "type": "object",
            // In name order: the properties' order is the schema's, or the names' when
            // serde_json does not keep it.
            "properties": {
                "amount_cents": {"type": "integer", "minimum": 0},
                "confirmed": {"type": "boolean", "description": "Whether to pay"},
                "note": {"type": "string", "maxLength": 20}
            },
            "required": ["confirmed", "amount_cents"]
        }));
        assert_eq!(
            question_lines(&call),
            [
                "pay asks:",
                r#"  {"amount_cents":500}"#,
                "  answer with JSON with:",
                "    amount_cents: an integer ≥ 0",
                "    confirmed: yes or no - Whether to pay",
                "    note: text of at most 20 characters, optional",
            ]
        );
        // A select described by the schema alone, with a question in the payload.
        let mut pick = custom_call(json!({"oneOf": [
            {"const": "eu", "description": "Europe"}, {"const": "us"}]}));
        pick.suspend_payload = json!({"question": "Where?"});
        assert_eq!(
            question_lines(&pick),
            ["Where? (choose one)", "  1. eu - Europe", "  2. us"]
        );
    }

    #[test]
    fn ask_user_questions_read_as_before() {
        let call = ask_user_call(json!({"question": "Which repo?", "options": [
            {"label": "main", "description": "The app"}, {"label": "docs"}],
            "selectionMode": "single_select"}));
        assert_eq!(
            question_lines(&call),
            [
                "Which repo? (choose one)",
                "  1. main - The app",
                "  2. docs"
            ]
        );
        assert_eq!(
            question_lines(&ask_user_call(json!({"question": "Name?"}))),
            ["Name?"]
        );
    }
}
