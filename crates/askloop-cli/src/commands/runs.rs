//! `askloop runs list|show|continue`: look at stored runs and retry failed ones.

use std::process::ExitCode;

use askloop_core::model::{AssistantPart, Message, ToolCall};
use askloop_core::store::{ListedRun, RunCursor, RunFilter, RunState, RunSummary};
use askloop_core::{
    AgentId, AskUserArgs, PendingToolCall, ResumeError, RunId, RunStatus, ThreadId,
    error_chain_text,
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

/// One row of `runs list --json`: the run's summary, or, for a run this build cannot read, its
/// id and why.
#[derive(Debug, Serialize)]
#[serde(untagged)]
enum ListedJson<'a> {
    Run(&'a RunSummary),
    #[serde(rename_all = "camelCase")]
    Unreadable {
        run_id: &'a RunId,
        created_at_ms: u64,
        unreadable: String,
    },
}

/// The text of a pending call's question: the `question` of its payload, else the payload.
fn question_text(call: &PendingToolCall) -> String {
    call.suspend_payload
        .get("question")
        .and_then(Value::as_str)
        .map_or_else(
            || compact_json(&call.suspend_payload, 60),
            |text| truncate(text, 60),
        )
}

/// Runs `askloop runs list`: a table, or one JSON array with `--json`, newest first. A run this
/// build cannot read (damaged, or stored by a newer askloop) is listed with its id and the
/// reason, and the others as usual. Opens the store read-only: creates nothing, and reads a
/// database in a read-only file or folder.
///
/// # Errors
/// Invalid input for a bad `--after`; store and output errors.
pub(crate) async fn list(global: &GlobalArgs, args: ListArgs) -> anyhow::Result<ExitCode> {
    let context = Context::open(global, Access::Read).await?;
    let result: anyhow::Result<ExitCode> = async {
        let mut filter = RunFilter::new();
        filter.status = args.status.map(RunStatus::from);
        filter.thread_id = args.thread.map(ThreadId::new);
        filter.agent_id = args.agent.map(AgentId::new);
        filter.limit = args.limit;
        if let Some(after) = &args.after {
            let cursor: RunCursor = after
                .parse()
                .map_err(|error| invalid(format!("--after: {error}")))?;
            filter = filter.after(cursor);
        }
        let page = context.store.list_runs(&filter).await?;
        let mut output = Output::new(if args.json { Mode::Json } else { Mode::Human });
        if args.json {
            let rows: Vec<ListedJson<'_>> = page
                .runs
                .iter()
                .map(|run| match run {
                    ListedRun::Run(summary) => ListedJson::Run(summary),
                    other => ListedJson::Unreadable {
                        run_id: other.run_id(),
                        created_at_ms: other.created_at_ms(),
                        unreadable: match other {
                            ListedRun::Unreadable { error, .. } => error_chain_text(error),
                            _ => String::new(),
                        },
                    },
                })
                .collect();
            output.text(&serde_json::to_string_pretty(&rows)?)?;
            output.text("\n")?;
            if let Some(cursor) = &page.next_cursor {
                output.note(&format!(
                    "more runs: {} runs list --limit {} --after {}",
                    context.command_prefix(),
                    args.limit.unwrap_or_default(),
                    shell_quote(&cursor.to_string())
                ))?;
            }
            return Ok(ExitCode::SUCCESS);
        }
        if page.runs.is_empty() {
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
        for run in &page.runs {
            rows.push(match run {
                ListedRun::Run(summary) => [
                    summary.run_id.to_string(),
                    summary.status.to_string(),
                    summary.agent_id.to_string(),
                    format_time(summary.created_at_ms),
                    summary
                        .pending
                        .first()
                        .map(question_text)
                        .unwrap_or_default(),
                ],
                other => [
                    other.run_id().to_string(),
                    "unreadable".to_owned(),
                    "-".to_owned(),
                    format_time(other.created_at_ms()),
                    match other {
                        ListedRun::Unreadable { error, .. } => {
                            truncate(&error_chain_text(error), 80)
                        }
                        _ => String::new(),
                    },
                ],
            });
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
        if let Some(cursor) = &page.next_cursor {
            output.note(&format!(
                "more runs: {} runs list --limit {} --after {}",
                context.command_prefix(),
                args.limit.unwrap_or_default(),
                shell_quote(&cursor.to_string())
            ))?;
        }
        Ok(ExitCode::SUCCESS)
    }
    .await;
    context.close().await;
    result
}

/// Runs `askloop runs show`: status, pending questions with their payloads and resume schemas,
/// and the messages, each field cut to [`SHOW_LIMIT`] characters; with `--json`, the whole
/// stored run state plus `pending`. Opens the store read-only, as `runs list` does.
///
/// # Errors
/// Invalid input for an unknown run; store and output errors.
pub(crate) async fn show(global: &GlobalArgs, args: ShowArgs) -> anyhow::Result<ExitCode> {
    let context = Context::open(global, Access::Read).await?;
    let result: anyhow::Result<ExitCode> = async {
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
        output.line(&field("run", state.run_id().as_str()))?;
        output.line(&field("status", state.status().as_str()))?;
        output.line(&field("agent", state.agent_id().as_str()))?;
        output.line(&field("model", state.model_spec().unwrap_or("-")))?;
        output.line(&field("thread", state.thread_id().as_str()))?;
        if let Some(resource) = state.resource_id() {
            output.line(&field("resource", resource.as_str()))?;
        }
        output.line(&field(
            "created",
            &format!("{} UTC", format_time(state.created_at_ms())),
        ))?;
        output.line(&field(
            "updated",
            &format!("{} UTC", format_time(state.updated_at_ms())),
        ))?;
        output.line(&field(
            "steps",
            &format!(
                "{} ({} input + {} output tokens)",
                state.steps(),
                state.usage().input_tokens,
                state.usage().output_tokens
            ),
        ))?;
        if let Some(error) = state.failure() {
            output.line(&field(
                "error",
                &format!("{}: {}", error.code, error.message),
            ))?;
        }
        if !pending.is_empty() {
            output.line("")?;
            print_pending(&mut output, &context, state.run_id(), &pending, None)?;
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
        let earlier = state.messages().len() - state.run_messages().len();
        if earlier > 0 {
            output.line(&format!(
                "messages ({earlier} earlier messages of the thread not shown)"
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
    .await;
    context.close().await;
    result
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
                AssistantPart::ToolCall(call) => Some(tool_call_line(call)),
                _ => None,
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
    let result: anyhow::Result<ExitCode> = async {
        let run_id = RunId::new(args.run_id);
        let state = context.load_run(&run_id).await?;
        let agent = context
            .agent_for_run(&state, args.model.model.as_deref())
            .await?;
        let stream = match agent.continue_stream(&run_id).await {
            Ok(stream) => stream,
            Err(ResumeError::NotContinuable { status, .. }) => {
                return Err(not_continuable(&context, &state, status));
            }
            Err(error) => return Err(context.refused(error)),
        };
        let mode = if args.json { Mode::Json } else { Mode::Human };
        let mut session = Session::new(&context, agent, mode);
        session.follow(stream, Origin::Stored).await?;
        Ok(ExitCode::SUCCESS)
    }
    .await;
    context.close().await;
    result
}

/// Why a run cannot be continued, and what to do instead: answer a suspended run, start a new run
/// in a completed run's thread.
fn not_continuable(context: &Context, state: &RunState, status: RunStatus) -> anyhow::Error {
    let run_id = state.run_id();
    let prefix = context.command_prefix();
    match status {
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
            invalid(format!(
                "run {run_id} is suspended, waiting for an answer, not failed: answer it with \
                 `{prefix} resume {run_id}{call} --answer …` (see `{prefix} runs show {run_id}`)"
            ))
        }
        _ => invalid(format!(
            "run {run_id} is {status}; there is nothing to continue (start a new run in its \
             thread with `{prefix} run --thread {} …`)",
            state.thread_id()
        )),
    }
}
