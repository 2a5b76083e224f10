//! Text for people: questions, resume commands, times, shell quoting, short JSON.

use askloop_core::{AskUserQuestion, PendingToolCall, SelectionMode, ToolResult};
use serde_json::Value;

/// The `ask_user` question of a pending call, if it is one.
pub(crate) fn ask_user_question(call: &PendingToolCall) -> Option<AskUserQuestion> {
    if call.tool_name != "ask_user" {
        return None;
    }
    serde_json::from_value(call.suspend_payload.clone()).ok()
}

/// A pending question as lines of text: the question, then its numbered options.
pub(crate) fn question_lines(call: &PendingToolCall) -> Vec<String> {
    let Some(question) = ask_user_question(call) else {
        return vec![
            format!("{} asks:", call.tool_name),
            format!("  {}", compact_json(&call.suspend_payload, 400)),
        ];
    };
    let hint = match question.selection_mode {
        None => "",
        Some(SelectionMode::SingleSelect) => " (choose one)",
        Some(SelectionMode::MultiSelect) => " (choose one or more)",
    };
    let mut lines = vec![format!("{}{hint}", question.question)];
    for (index, option) in question.options.iter().flatten().enumerate() {
        match &option.description {
            Some(description) => {
                lines.push(format!("  {}. {} - {description}", index + 1, option.label));
            }
            None => lines.push(format!("  {}. {}", index + 1, option.label)),
        }
    }
    lines
}

/// The `--answer …` / `--answer-json …` part of a command that answers `call`, with an example
/// answer.
pub(crate) fn answer_example(call: &PendingToolCall) -> String {
    let Some(question) = ask_user_question(call) else {
        return "--answer-json 'JSON'".to_owned();
    };
    let first_label = question
        .options
        .iter()
        .flatten()
        .next()
        .map(|option| option.label.clone())
        .unwrap_or_default();
    match question.selection_mode {
        None => "--answer 'your answer'".to_owned(),
        Some(SelectionMode::SingleSelect) => format!("--answer {}", shell_quote(&first_label)),
        Some(SelectionMode::MultiSelect) => {
            let labels = Value::from(vec![first_label]);
            format!("--answer-json {}", shell_quote(&labels.to_string()))
        }
    }
}

/// Quotes a word for a POSIX shell when it needs it.
pub(crate) fn shell_quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=@%+,".contains(c));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// JSON on one line, cut to about `max` characters.
pub(crate) fn compact_json(value: &Value, max: usize) -> String {
    truncate(&value.to_string(), max)
}

/// The text cut to `max` characters, with `…` when cut; newlines become spaces.
pub(crate) fn truncate(text: &str, max: usize) -> String {
    let flat = text.replace('\n', " ");
    if flat.chars().count() <= max {
        flat
    } else {
        let mut cut: String = flat.chars().take(max.saturating_sub(1)).collect();
        cut.push('…');
        cut
    }
}

/// Milliseconds since the Unix epoch as `YYYY-MM-DD HH:MM:SS` (UTC).
/// A tool result in one line, for people: its `content` text (or compact JSON), and whether
/// it failed, e.g. `ask_user: User answered: main` or `count failed: …`.
pub(crate) fn result_summary(result: &ToolResult) -> String {
    let content = result
        .result
        .get("content")
        .and_then(Value::as_str)
        .map_or_else(
            || compact_json(&result.result, 200),
            |text| truncate(text, 200),
        );
    let verb = if result.is_error { " failed" } else { "" };
    format!("{}{verb}: {content}", result.tool_name)
}

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
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(r#"["a"]"#), r#"'["a"]'"#);
    }

    #[test]
    fn examples_match_the_question() {
        let call = |payload: Value| PendingToolCall {
            tool_call_id: "c1".into(),
            tool_name: "ask_user".into(),
            args: json!({}),
            suspend_payload: payload,
            resume_schema: None,
        };
        let single = call(
            json!({"question": "Q", "options": [{"label": "a b"}], "selectionMode": "single_select"}),
        );
        assert_eq!(answer_example(&single), "--answer 'a b'");
        let multi = call(
            json!({"question": "Q", "options": [{"label": "x"}], "selectionMode": "multi_select"}),
        );
        assert_eq!(answer_example(&multi), r#"--answer-json '["x"]'"#);
        let text = call(json!({"question": "Q"}));
        assert_eq!(answer_example(&text), "--answer 'your answer'");
    }
}
