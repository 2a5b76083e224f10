//! `askloop runs list|show|continue`: look at stored runs and retry failed ones.

use std::process::ExitCode;

use askloop_core::{
    AskUserArgs, AssistantPart, Message, PendingToolCall, RunFailure, RunFilter, RunId, RunState,
    RunStatus, ThreadId, ToolCall,
};
use serde::Serialize;
use serde_json::Value;

use crate::cli::{ContinueArgs, GlobalArgs, ListArgs, ShowArgs};
use crate::context::{Access, Context};
use crate::exit::invalid;
use crate::format::{compact_json, cut, format_time, result_summary, shell_quote, truncate};
use crate::output::{Mode, Output};
use crate::session::{Origin, Session, print_pending};

/// The most characters `runs show` prints of one field (a payload, a message's text); `--json`
/// prints everything.
const SHOW_LIMIT: usize = 2_000;

/// One run as `runs list --json` prints it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct RunSummary<'a> {
    run_id: &'a RunId,
    status: RunStatus,
    agent_id: &'a str,
    thread_id: &'a str,
    resource_id: Option<&'a str>,
    model: Option<&'a str>,
    steps: u32,
    created_at_ms: u64,
    updated_at_ms: u64,
    error: Option<&'a RunFailure>,
    pending: Vec<PendingToolCall>,
}

impl<'a> RunSummary<'a> {
    fn of(state: &'a RunState) -> Self {
        Self {
            run_id: &state.run_id,
            status: state.status,
            agent_id: state.agent_id.as_str(),
            thread_id: state.thread_id.as_str(),
            resource_id: state.resource_id.as_ref().map(|id| id.as_str()),
            model: state.model.as_deref(),
            steps: state.steps,
            created_at_ms: state.created_at_ms,
            updated_at_ms: state.updated_at_ms,
            error: state.error.as_ref(),
            pending: state.pending_tool_calls(),
        }
    }
}

/// Runs `askloop runs list`: a table, or one JSON array with `--json`. Opens the store
/// read-only: creates nothing, and reads a database in a read-only file or folder.
///
/// # Errors
/// Store and output errors.
pub(crate) async fn list(global: &GlobalArgs, args: ListArgs) -> anyhow::Result<ExitCode> {
    let context = Context::open(global, Access::Read).await?;
    let filter = RunFilter {
        status: args.status.map(RunStatus::from),
        thread_id: args.thread.map(ThreadId::new),
        resource_id: None,
        limit: args.limit,
    };
    let runs = context.store.list_runs(&filter).await?;
    let mut output = Output::new(if args.json { Mode::Json } else { Mode::Human });
    if args.json {
        let summaries: Vec<RunSummary<'_>> = runs.iter().map(RunSummary::of).collect();
        output.text(&serde_json::to_string_pretty(&summaries)?)?;
        output.text("\n")?;
        return Ok(ExitCode::SUCCESS);
    }
    if runs.is_empty() {
        let yet = if context.store_is_missing() {
            " yet"
        } else {
            ""
        };
        output.note(&format!("no runs{yet} in {}", context.store_url))?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut rows = vec![[
        "RUN".to_owned(),
        "STATUS".to_owned(),
        "AGENT".to_owned(),
        "CREATED (UTC)".to_owned(),
        "QUESTION".to_owned(),
    ]];
    for state in &runs {
        let question = state
            .pending_tool_calls()
            .first()
            .map(|call| {
                call.suspend_payload
                    .get("question")
                    .and_then(Value::as_str)
                    .map_or_else(
                        || compact_json(&call.suspend_payload, 60),
                        |text| truncate(text, 60),
                    )
            })
            .unwrap_or_default();
        rows.push([
            state.run_id.to_string(),
            state.status.to_string(),
            state.agent_id.to_string(),
            format_time(state.created_at_ms),
            question,
        ]);
    }
    let widths: Vec<usize> = (0..4)
        .map(|column| {
            rows.iter()
                .map(|row| row[column].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in &rows {
        let mut line = String::new();
        for (column, width) in widths.iter().enumerate() {
            line.push_str(&format!("{:<width$}  ", row[column]));
        }
        line.push_str(&row[4]);
        output.line(line.trim_end())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs `askloop runs show`: status, pending questions with their payloads and resume schemas,
/// and the messages, each field cut to [`SHOW_LIMIT`] characters; with `--json`, the whole
/// stored run state plus `pending`. Opens the store read-only, as `runs list` does.
///
/// # Errors
/// Invalid input for an unknown run; store and output errors.
pub(crate) async fn show(global: &GlobalArgs, args: ShowArgs) -> anyhow::Result<ExitCode> {
    let context = Context::open(global, Access::Read).await?;
    let state = context.load_run(&RunId::new(args.run_id)).await?;
    let mut output = Output::new(if args.json { Mode::Json } else { Mode::Human });
    let pending = state.pending_tool_calls();
    if args.json {
        let mut document = serde_json::to_value(&state)?;
        if let Value::Object(fields) = &mut document {
            fields.insert("pending".to_owned(), serde_json::to_value(&pending)?);
        }
        output.text(&serde_json::to_string_pretty(&document)?)?;
        output.text("\n")?;
        return Ok(ExitCode::SUCCESS);
    }
    let field = |name: &str, value: &str| format!("{name:<9} {value}");
    output.line(&field("run", state.run_id.as_str()))?;
    output.line(&field("status", state.status.as_str()))?;
    output.line(&field("agent", state.agent_id.as_str()))?;
    output.line(&field("model", state.model.as_deref().unwrap_or("-")))?;
    output.line(&field("thread", state.thread_id.as_str()))?;
    if let Some(resource) = &state.resource_id {
        output.line(&field("resource", resource.as_str()))?;
    }
    output.line(&field(
        "created",
        &format!("{} UTC", format_time(state.created_at_ms)),
    ))?;
    output.line(&field(
        "updated",
        &format!("{} UTC", format_time(state.updated_at_ms)),
    ))?;
    output.line(&field(
        "steps",
        &format!(
            "{} ({} input + {} output tokens)",
            state.steps, state.usage.input_tokens, state.usage.output_tokens
        ),
    ))?;
    if let Some(error) = &state.error {
        output.line(&field(
            "error",
            &format!("{}: {}", error.code, error.message),
        ))?;
    }
    if !pending.is_empty() {
        output.line("")?;
        print_pending(&mut output, &context, &state.run_id, &pending, None)?;
        for call in &pending {
            output.line("")?;
            output.line(&format!(
                "tool call {} ({})",
                call.tool_call_id, call.tool_name
            ))?;
            output.line(&format!(
                "  payload       {}",
                cut(&call.suspend_payload.to_string(), SHOW_LIMIT)
            ))?;
            let schema = call
                .resume_schema
                .as_ref()
                .map_or_else(|| "any JSON".to_owned(), Value::to_string);
            output.line(&format!("  resume schema {}", cut(&schema, SHOW_LIMIT)))?;
        }
    }
    output.line("")?;
    if state.history_len > 0 {
        output.line(&format!(
            "messages ({} earlier messages of the thread not shown)",
            state.history_len
        ))?;
    } else {
        output.line("messages")?;
    }
    for message in state.run_messages() {
        for line in message_lines(message) {
            output.line(&format!("  {line}"))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A message as lines: `user: …`, `assistant: …`, `assistant calls TOOL {…}`, `tool TOOL: …`;
/// each text on one line, cut to [`SHOW_LIMIT`] characters.
fn message_lines(message: &Message) -> Vec<String> {
    let one_line = |text: &str| cut(&text.replace('\n', " "), SHOW_LIMIT);
    match message {
        Message::User { text } => vec![format!("user: {}", one_line(text))],
        Message::Assistant { parts } => parts
            .iter()
            .filter_map(|part| match part {
                AssistantPart::Text { text } => Some(format!("assistant: {}", one_line(text))),
                AssistantPart::Reasoning { .. } => None,
                AssistantPart::ToolCall(call) => Some(tool_call_line(call)),
            })
            .collect(),
        Message::Tool { results } => results
            .iter()
            .map(|result| format!("tool {}", result_summary(result)))
            .collect(),
    }
}

/// An assistant's tool call as one line; an `ask_user` call shows its question and labels.
fn tool_call_line(call: &ToolCall) -> String {
    let args = call.args.to_value();
    if call.name == "ask_user"
        && let Ok(question) = serde_json::from_value::<AskUserArgs>(args.clone())
    {
        let labels: Vec<&str> = question
            .options
            .iter()
            .flatten()
            .map(|option| option.label.as_str())
            .collect();
        let choices = if labels.is_empty() {
            String::new()
        } else {
            format!(" [{}]", labels.join(" | "))
        };
        return format!(
            "assistant asks (tool call {}): {}{choices}",
            call.id,
            cut(&question.question.replace('\n', " "), SHOW_LIMIT)
        );
    }
    format!(
        "assistant calls {} {} (tool call {})",
        call.name,
        cut(&args.to_string(), SHOW_LIMIT),
        call.id
    )
}

/// Runs `askloop runs continue`: retries the step of a failed (or interrupted) run with every
/// answer it already has; nobody is asked again.
///
/// # Errors
/// Invalid input for an unknown run or one that is suspended or completed; a conflict when
/// another process continues it first; the run's failure.
pub(crate) async fn continue_run(
    global: &GlobalArgs,
    args: ContinueArgs,
) -> anyhow::Result<ExitCode> {
    let context = Context::open(global, Access::Update).await?;
    let run_id = RunId::new(args.run_id);
    let state = context.load_run(&run_id).await?;
    let prefix = context.command_prefix();
    match state.status {
        RunStatus::Suspended => {
            let call = state
                .pending_tool_calls()
                .first()
                .map(|call| {
                    format!(
                        " --tool-call-id {}",
                        shell_quote(call.tool_call_id.as_str())
                    )
                })
                .unwrap_or_default();
            return Err(invalid(format!(
                "run {run_id} is suspended, waiting for an answer, not failed: answer it with \
                 `{prefix} resume {run_id}{call} --answer …` (see `{prefix} runs show {run_id}`)"
            )));
        }
        RunStatus::Completed => {
            return Err(invalid(format!(
                "run {run_id} is completed; there is nothing to continue (start a new run in its \
                 thread with `{prefix} run --thread {} …`)",
                state.thread_id
            )));
        }
        RunStatus::Failed | RunStatus::Running => {}
    }
    let agent = context
        .agent_for_run(&state, args.model.model.as_deref())
        .await?;
    let stream = agent
        .continue_stream(&run_id)
        .await
        .map_err(|error| context.refused(error))?;
    let mode = if args.json { Mode::Json } else { Mode::Human };
    let mut session = Session::new(&context, agent, mode);
    session.follow(stream, Origin::Stored).await?;
    Ok(ExitCode::SUCCESS)
}
