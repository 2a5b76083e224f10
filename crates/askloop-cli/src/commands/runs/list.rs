//! `askloop runs list`: the stored runs, newest first, as a table or JSON, a page at a time: the
//! runs people started (a sub-agent's child run waits at its root, whose pending calls include
//! the child's), a run's children with `--parent`, every run with `--all`.

use std::process::ExitCode;

use askloop_core::store::{ListedRun, RunCursor, RunFilter, RunSummary};
use askloop_core::{
    AgentId, PendingToolCall, ResourceId, RunId, RunStatus, ThreadId, error_chain_text,
};
use serde::Serialize;
use serde_json::Value;
use unicode_width::UnicodeWidthStr as _;

use crate::cli::{GlobalArgs, ListArgs};
use crate::command_line::CommandLine;
use crate::context::{Access, Context};
use crate::exit::invalid_because;
use crate::format::{agent_path, compact_json, escape_controls, format_time, truncate};
use crate::output::{Mode, Output};

/// One row of `runs list --json`: the run's summary (its pending calls in the one wire shape of a
/// pending call, [`askloop_core::wire::PendingCall`]), or, for a run this build cannot read, its id and why.
#[derive(Debug, Serialize)]
#[serde(untagged)]
enum ListedJson<'a> {
    Run(Value),
    #[serde(rename_all = "camelCase")]
    Unreadable {
        run_id: &'a RunId,
        created_at_ms: u64,
        unreadable: String,
    },
}

impl<'a> ListedJson<'a> {
    /// The row of `run`.
    ///
    /// # Errors
    /// The summary does not encode.
    fn of(run: &'a ListedRun) -> serde_json::Result<Self> {
        Ok(match run {
            ListedRun::Run(summary) => Self::Run(summary_json(summary)?),
            other => Self::Unreadable {
                run_id: other.run_id(),
                created_at_ms: other.created_at_ms(),
                unreadable: match other {
                    ListedRun::Unreadable { error, .. } => error_chain_text(error),
                    _ => String::new(),
                },
            },
        })
    }
}

/// A run's summary as JSON, its pending calls in the one wire shape of a pending call.
///
/// # Errors
/// The summary does not encode.
fn summary_json(summary: &RunSummary) -> serde_json::Result<Value> {
    let mut json = serde_json::to_value(summary)?;
    if let Value::Object(fields) = &mut json {
        let pending = super::wire_pending(&summary.run_id, &summary.pending);
        fields.insert("pending".to_owned(), serde_json::to_value(pending)?);
    }
    Ok(json)
}

/// The text of a pending call's question: the `question` of its payload, else the payload;
/// after the path of sub-agents that asked it, if one did (`[researcher] Which repo?`).
fn question_text(call: &PendingToolCall) -> String {
    let text = call
        .suspend_payload
        .get("question")
        .and_then(Value::as_str)
        .map_or_else(
            || compact_json(&call.suspend_payload, 60),
            |text| truncate(text, 60),
        );
    match &call.subagent {
        Some(origin) => format!("[{}] {text}", agent_path(&origin.path)),
        None => text,
    }
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
    context
        .run(async |context| {
            let page = context.store.list_runs(&list_filter(&args)?).await?;
            let mut output = Output::new(if args.json { Mode::Json } else { Mode::Human });
            if args.json {
                let rows = page
                    .runs
                    .iter()
                    .map(ListedJson::of)
                    .collect::<serde_json::Result<Vec<_>>>()?;
                output.text(&serde_json::to_string_pretty(&rows)?)?;
                output.text("\n")?;
            } else if page.runs.is_empty() {
                let yet = if context.store_is_missing() {
                    " yet"
                } else {
                    ""
                };
                output.note(&format!("no runs{yet} in {}", context.store_url))?;
                return Ok(ExitCode::SUCCESS);
            } else {
                for line in table_lines(&page.runs) {
                    output.line(&line)?;
                }
            }
            if let Some(cursor) = &page.next_cursor {
                output.note(&format!("more runs: {}", next_page(context, &args, cursor)))?;
            }
            Ok(ExitCode::SUCCESS)
        })
        .await
}

/// The filter of `runs list`'s flags.
///
/// # Errors
/// Invalid input for a bad `--after`.
fn list_filter(args: &ListArgs) -> anyhow::Result<RunFilter> {
    let mut filter = RunFilter::new();
    filter.status = args.status.map(RunStatus::from);
    filter.thread_id = args.thread.clone().map(ThreadId::new);
    filter.agent_id = args.agent.clone().map(AgentId::new);
    if let Some(resource) = &args.resource {
        filter = filter.resource(ResourceId::new(resource.as_str()));
    }
    filter = match &args.parent {
        Some(parent) => filter.children_of(RunId::new(parent.as_str())),
        None if args.all => filter,
        None => filter.top_level(),
    };
    filter.limit = args.limit;
    if let Some(after) = &args.after {
        let cursor: RunCursor = after
            .parse()
            .map_err(|error| invalid_because("invalid --after", error))?;
        filter = filter.after(cursor);
    }
    Ok(filter)
}

/// The most characters of a run's first message that the table shows.
const MESSAGE_WIDTH: usize = 40;

/// A run's first message as the table shows it ([`RunSummary::first_message`], which the
/// listing carries): its white space (newlines too) made single spaces and its control
/// characters escaped ([`escape_controls`]), then cut to [`MESSAGE_WIDTH`] columns — cut after
/// escaping, so the column keeps its width; empty when the run has none.
fn message_cell(summary: &RunSummary) -> String {
    summary
        .first_message
        .as_deref()
        .map(|text| {
            truncate(
                &escape_controls(&text.split_whitespace().collect::<Vec<_>>().join(" ")),
                MESSAGE_WIDTH,
            )
        })
        .unwrap_or_default()
}

/// The table of `runs list`: a header, then one line per run (a run this build cannot read
/// with its id and why) with its first message, the columns padded but the question's.
fn table_lines(runs: &[ListedRun]) -> Vec<String> {
    let mut rows = vec![[
        "RUN".to_owned(),
        "STATUS".to_owned(),
        "AGENT".to_owned(),
        "CREATED (UTC)".to_owned(),
        "MESSAGE".to_owned(),
        "QUESTION".to_owned(),
    ]];
    for run in runs {
        rows.push(match run {
            ListedRun::Run(summary) => [
                summary.run_id.to_string(),
                summary.status.to_string(),
                summary.agent_id.to_string(),
                format_time(summary.created_at_ms),
                message_cell(summary),
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
                "-".to_owned(),
                match other {
                    ListedRun::Unreadable { error, .. } => truncate(&error_chain_text(error), 80),
                    _ => String::new(),
                },
            ],
        });
    }
    let widths: Vec<usize> = (0..5)
        .map(|column| {
            rows.iter()
                .map(|row| row[column].width())
                .max()
                .unwrap_or(0)
        })
        .collect();
    rows.iter()
        .map(|row| {
            let mut line = String::new();
            for (column, width) in widths.iter().enumerate() {
                // Padded by display width: a wide character takes two columns.
                line.push_str(&row[column]);
                line.push_str(&" ".repeat(width - row[column].width() + 2));
            }
            line.push_str(&row[5]);
            line.trim_end().to_owned()
        })
        .collect()
}

/// The command that lists the page after `cursor`: the same store, config, filters, limit and
/// output format.
fn next_page(context: &Context, args: &ListArgs, cursor: &RunCursor) -> CommandLine {
    let limit = args.limit.map(|limit| limit.to_string());
    let status = args.status.map(|status| RunStatus::from(status).as_str());
    let mut command = context
        .command("runs list")
        .flag("--status", status)
        .flag("--agent", args.agent.as_deref())
        .flag("--thread", args.thread.as_deref())
        .flag("--resource", args.resource.as_deref())
        .flag("--parent", args.parent.as_deref())
        .flag("--limit", limit.as_deref())
        .flag("--after", Some(&cursor.to_string()));
    if args.all {
        command = command.raw("--all");
    }
    if args.json {
        command = command.raw("--json");
    }
    command
}
