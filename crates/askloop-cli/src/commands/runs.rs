//! `askloop runs list|show|continue`: look at stored runs and retry failed ones.

use std::process::ExitCode;

use askloop_core::Tool as _;
use askloop_core::model::{AssistantPart, Message, ToolCall};
use askloop_core::store::{
    ListedRun, RunCursor, RunFilter, RunState, RunSummary, StoredRun, codec, lease_now_ms,
};
use askloop_core::{
    AgentId, AskUser, AskUserArgs, PendingToolCall, ResourceId, ResumeError, RunId, RunKey,
    RunStatus, ThreadId, error_chain_text,
};
use serde::Serialize;
use serde_json::Value;

use crate::cli::{
    CancelArgs, ContinueArgs, GlobalArgs, ListArgs, RecoverArgs, ShowArgs, SweepArgs,
};
use crate::command_line::CommandLine;
use crate::context::{Access, Context};
use crate::exit::{invalid, invalid_because};
use crate::format::{SHOW_LIMIT, compact_json, cut, format_time, result_summary, truncate};
use crate::output::{Mode, Output};
use crate::registry::FlagScope;
use crate::session::{Origin, Session, print_pending};

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

impl<'a> ListedJson<'a> {
    /// The row of `run`.
    fn of(run: &'a ListedRun) -> Self {
        match run {
            ListedRun::Run(summary) => Self::Run(summary),
            other => Self::Unreadable {
                run_id: other.run_id(),
                created_at_ms: other.created_at_ms(),
                unreadable: match other {
                    ListedRun::Unreadable { error, .. } => error_chain_text(error),
                    _ => String::new(),
                },
            },
        }
    }
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
    context
        .run(async |context| {
            let page = context.store.list_runs(&list_filter(&args)?).await?;
            let mut output = Output::new(if args.json { Mode::Json } else { Mode::Human });
            if args.json {
                let rows: Vec<ListedJson<'_>> = page.runs.iter().map(ListedJson::of).collect();
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
    filter.limit = args.limit;
    if let Some(after) = &args.after {
        let cursor: RunCursor = after
            .parse()
            .map_err(|error| invalid_because("invalid --after", error))?;
        filter = filter.after(cursor);
    }
    Ok(filter)
}

/// The table of `runs list`: a header, then one line per run (a run this build cannot read
/// with its id and why), the columns padded but the question's.
fn table_lines(runs: &[ListedRun]) -> Vec<String> {
    let mut rows = vec![[
        "RUN".to_owned(),
        "STATUS".to_owned(),
        "AGENT".to_owned(),
        "CREATED (UTC)".to_owned(),
        "QUESTION".to_owned(),
    ]];
    for run in runs {
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
                    ListedRun::Unreadable { error, .. } => truncate(&error_chain_text(error), 80),
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
    rows.iter()
        .map(|row| {
            let mut line = String::new();
            for (column, width) in widths.iter().enumerate() {
                line.push_str(&format!("{:<width$}  ", row[column]));
            }
            line.push_str(&row[4]);
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
        .flag("--limit", limit.as_deref())
        .flag("--after", Some(&cursor.to_string()));
    if args.json {
        command = command.raw("--json");
    }
    command
}

/// Runs `askloop runs show`: status, pending questions with their payloads and resume schemas,
/// and the messages, each field cut to [`SHOW_LIMIT`] characters; with `--json`, the whole
/// stored run state plus `pending`. Opens the store read-only, as `runs list` does.
///
/// # Errors
/// Invalid input for an unknown run; store and output errors.
pub(crate) async fn show(global: &GlobalArgs, args: ShowArgs) -> anyhow::Result<ExitCode> {
    let context = Context::open(global, Access::Read).await?;
    context
        .run(async |context| {
            let run = context
                .resolve_run(&args.run_id, args.resource.as_deref())
                .await?;
            let stored = context.load_stored(&run).await?;
            let mut output = Output::new(if args.json { Mode::Json } else { Mode::Human });
            if args.json {
                output.text(&serde_json::to_string_pretty(&show_document(&stored)?)?)?;
                output.text("\n")?;
                return Ok(ExitCode::SUCCESS);
            }
            show_fields(&mut output, context, &run, &stored)?;
            show_pending(&mut output, context, &run, &stored.state)?;
            show_messages(&mut output, &stored.state)?;
            Ok(ExitCode::SUCCESS)
        })
        .await
}

/// `runs show --json`: the whole stored run state plus `pending`, `unfinished` and `lease`.
///
/// # Errors
/// The state does not encode.
fn show_document(stored: &StoredRun) -> anyhow::Result<Value> {
    let state = &stored.state;
    let mut document: Value = serde_json::from_str(&codec::encode_state(state)?)?;
    if let Value::Object(fields) = &mut document {
        fields.insert(
            "pending".to_owned(),
            serde_json::to_value(state.pending_tool_calls())?,
        );
        fields.insert(
            "unfinished".to_owned(),
            serde_json::to_value(state.unfinished_calls())?,
        );
        fields.insert(
            "lease".to_owned(),
            stored.lease.as_ref().map_or(Value::Null, |lease| {
                serde_json::json!({
                    "holder": lease.holder.as_str(),
                    "expiresAtMs": lease.expires_at_ms,
                    "live": lease.is_live_at(lease_now_ms()),
                })
            }),
        );
    }
    Ok(document)
}

/// `runs show`'s fields: `NAME  VALUE` lines from `run` to `unfinished`.
///
/// # Errors
/// Writing to stdout failed.
fn show_fields(
    output: &mut Output,
    context: &Context,
    run: &RunKey,
    stored: &StoredRun,
) -> std::io::Result<()> {
    let state = &stored.state;
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
    if state.status() == RunStatus::Running {
        output.line(&field("lease", &lease_line(context, run, stored)))?;
    }
    for call in &state.unfinished_calls() {
        let kept = call.answer.as_ref().map_or_else(
            || "it was started and its outcome is not recorded".to_owned(),
            |answer| {
                format!(
                    "the answer it kept: {}",
                    cut(&answer.to_string(), SHOW_LIMIT)
                )
            },
        );
        output.line(&field(
            "unfinished",
            &format!(
                "tool call {} ({}) was interrupted; {kept}; `runs continue` re-runs it if \
                 the tool is idempotent, otherwise tells the model its outcome is unknown",
                call.tool_call_id, call.tool_name
            ),
        ))?;
    }
    Ok(())
}

/// The `lease` field of a running run: held by a live process, or what to run when its
/// process stopped.
fn lease_line(context: &Context, run: &RunKey, stored: &StoredRun) -> String {
    let continue_run = context.command("runs continue").run(run);
    match &stored.lease {
        Some(lease) if lease.is_live_at(lease_now_ms()) => format!(
            "held by a running process until {} UTC (renewed while it lives)",
            format_time(lease.expires_at_ms)
        ),
        Some(lease) => format!(
            "expired at {} UTC: the process running it stopped; continue it with \
             `{continue_run}`",
            format_time(lease.expires_at_ms)
        ),
        None => {
            format!("none: the process running it stopped; continue it with `{continue_run}`")
        }
    }
}

/// `runs show`'s pending calls: how to answer them, then each one's payload, resume schema
/// and deadline.
///
/// # Errors
/// Writing to stdout failed.
fn show_pending(
    output: &mut Output,
    context: &Context,
    run: &RunKey,
    state: &RunState,
) -> std::io::Result<()> {
    let pending = state.pending_tool_calls();
    if pending.is_empty() {
        return Ok(());
    }
    output.line("")?;
    print_pending(output, context, run, &pending, None)?;
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
        if let Some(at) = call.expires_at_ms {
            output.line(&format!("  expires       {} UTC", format_time(at)))?;
        }
    }
    Ok(())
}

/// `runs show`'s messages, after a blank line: a heading saying whether the thread's earlier
/// messages are left out, then each message's lines.
///
/// # Errors
/// Writing to stdout failed.
fn show_messages(output: &mut Output, state: &RunState) -> std::io::Result<()> {
    output.line("")?;
    match (state.legacy_history(), state.history_through()) {
        (Some(legacy), _) if !legacy.is_empty() => output.line(&format!(
            "messages ({} earlier messages of the thread not shown)",
            legacy.len()
        ))?,
        (None, Some(_)) => {
            output.line("messages (the thread's earlier messages not shown)")?;
        }
        _ => output.line("messages")?,
    }
    for message in state.messages() {
        for line in message_lines(message) {
            output.line(&format!("  {line}"))?;
        }
    }
    Ok(())
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
            .flat_map(|result| {
                let mut lines = vec![format!("tool {}", result_summary(result))];
                lines.extend(result.audit.iter().map(|record| {
                    format!(
                        "  {} by {} at {} UTC",
                        record.action.as_str(),
                        record.by.as_deref().map_or_else(
                            || "(not said)".to_owned(),
                            |by| crate::format::escape_controls(by).into_owned()
                        ),
                        format_time(record.at_ms)
                    )
                }));
                lines
            })
            .collect(),
    }
}

/// An assistant's tool call as one line; an `ask_user` call shows its question and labels.
fn tool_call_line(call: &ToolCall) -> String {
    let args = call.args.to_value();
    if call.name == AskUser::NAME
        && let Ok(question) = serde_json::from_value::<AskUserArgs>(args.clone())
    {
        let labels: Vec<String> = question
            .options
            .iter()
            .flatten()
            .map(|option| cut(&option.label.replace('\n', " "), SHOW_LIMIT))
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
    let context = Context::open_with_model(
        global,
        Access::Update,
        args.model.model.clone(),
        FlagScope::AllRuns,
    )
    .await?;
    context
        .run(async |context| {
            let run = context
                .resolve_run(&args.run_id, args.resource.as_deref())
                .await?;
            let state = context.load_run(&run).await?;
            let agent = context.agent_for_run(&state).await?;
            let stream = match agent.continue_stream(&run).await {
                Ok(stream) => stream,
                Err(ResumeError::NotContinuable { status, .. }) => {
                    return Err(not_continuable(context, &state, status));
                }
                Err(error) => return Err(context.refused(&run, error)),
            };
            let mode = if args.json { Mode::Json } else { Mode::Human };
            let mut session = Session::new(context, agent, mode);
            session.follow(stream, Origin::Stored).await?;
            Ok(ExitCode::SUCCESS)
        })
        .await
}

/// Why a run cannot be continued, and what to do instead: answer a suspended run, start a new run
/// in a completed run's thread.
fn not_continuable(context: &Context, state: &RunState, status: RunStatus) -> anyhow::Error {
    let run_id = state.run_id();
    let show = context.command("runs show").run(&state.key());
    match status {
        RunStatus::Suspended => {
            let pending = state.pending_tool_calls();
            let answer = context
                .command("resume")
                .run(&state.key())
                .flag(
                    "--tool-call-id",
                    pending.first().map(|call| call.tool_call_id.as_str()),
                )
                .model(context.model_flag.as_deref())
                .raw(&pending.first().map_or_else(
                    || "--answer '<your answer>'".to_owned(),
                    crate::format::answer_example,
                ));
            invalid(format!(
                "run {run_id} is suspended, waiting for an answer, not failed: answer it with \
                 `{answer}` (see `{show}`)"
            ))
        }
        _ => {
            let again = context
                .command("run")
                .agent(state.agent_id().as_str())
                .model(context.model_flag.as_deref())
                .flag("--thread", Some(state.thread_id().as_str()))
                .flag("--resource", state.resource_id().map(|id| id.as_str()))
                .raw("…");
            invalid(format!(
                "run {run_id} is {status}; there is nothing to continue (start a new run in its \
                 thread with `{again}`)"
            ))
        }
    }
}

/// The runs `runs recover` takes over: running, with no live lease (the process running them
/// stopped), oldest first.
async fn abandoned_runs(context: &Context) -> anyhow::Result<Vec<(RunKey, Option<u64>)>> {
    let mut found = Vec::new();
    let mut filter = RunFilter::new()
        .status(RunStatus::Running)
        .limit(RECOVER_PAGE);
    loop {
        let page = context.store.list_runs(&filter).await?;
        for run in &page.runs {
            let Ok(stored) = context.store.load_run(&run.key()).await else {
                continue;
            };
            let now = lease_now_ms();
            if stored.state.status() != RunStatus::Running
                || stored
                    .lease
                    .as_ref()
                    .is_some_and(|lease| lease.is_live_at(now))
            {
                continue;
            }
            found.push((run.key(), stored.lease.map(|lease| lease.expires_at_ms)));
        }
        match page.next_cursor {
            Some(cursor) => {
                filter = RunFilter::new()
                    .status(RunStatus::Running)
                    .limit(RECOVER_PAGE)
                    .after(cursor);
            }
            None => break,
        }
    }
    found.reverse();
    Ok(found)
}

/// How many runs `runs recover` lists per store query.
const RECOVER_PAGE: usize = 200;

/// Runs `askloop runs recover`: finds the runs whose process stopped while running them (status
/// running, lease expired) and continues each in turn, as `runs continue` would; with `--list`,
/// only lists them.
///
/// # Errors
/// Store errors; the first run that fails (the others are still tried first).
pub(crate) async fn recover(global: &GlobalArgs, args: RecoverArgs) -> anyhow::Result<ExitCode> {
    let access = if args.list {
        Access::Read
    } else {
        Access::Update
    };
    let context = Context::open(global, access).await?;
    context
        .run(async |context| {
            let runs = abandoned_runs(context).await?;
            let mode = if args.json { Mode::Json } else { Mode::Human };
            let mut output = Output::new(mode);
            if runs.is_empty() {
                output.note("no run needs recovering")?;
                return Ok(ExitCode::SUCCESS);
            }
            if args.list {
                for (run_id, expired) in &runs {
                    let since = expired.map_or_else(
                        || "no lease".to_owned(),
                        |ms| format!("lease expired {} UTC", format_time(ms)),
                    );
                    output.line(&format!("{run_id}  {since}"))?;
                }
                output.note(&format!(
                    "continue them with `{} runs recover`",
                    context.command_prefix()
                ))?;
                return Ok(ExitCode::SUCCESS);
            }
            let mut failures = Failures::default();
            for (run_id, _) in runs {
                output.note(&format!("recovering run {run_id}"))?;
                let continued: anyhow::Result<()> = async {
                    let state = context.load_run(&run_id).await?;
                    let agent = context.agent_for_run(&state).await?;
                    let stream = agent
                        .continue_stream(&run_id)
                        .await
                        .map_err(|error| context.refused(&run_id, error))?;
                    let mut session = Session::new(context, agent, mode);
                    session.follow(stream, Origin::Stored).await.map(|_| ())
                }
                .await;
                failures.record(&mut output, &run_id, "recovered", continued)?;
            }
            failures.into_exit()
        })
        .await
}

/// Runs `askloop runs cancel RUN_ID`: every call the run waits on gets a result saying the run
/// was cancelled (recorded as by `cli`), and the run ends as cancelled.
///
/// # Errors
/// Invalid input for an unknown run or one that already ended.
pub(crate) async fn cancel(global: &GlobalArgs, args: CancelArgs) -> anyhow::Result<ExitCode> {
    let context = Context::open(global, Access::Update).await?;
    context
        .run(async |context| {
            let run = context
                .resolve_run(&args.run_id, args.resource.as_deref())
                .await?;
            // Cancelling needs no tool or model of the run's agent: a folder whose askloop.toml
            // does not define it can still stop the run (its driver learns from the store).
            askloop_core::cancel_run_in(context.store.as_ref(), &run, Some("cli".to_owned()))
                .await
                .map_err(|error| context.refused(&run, error))?;
            let mut output = Output::new(Mode::Human);
            output.note(&format!("run {run} is cancelled"))?;
            Ok(ExitCode::SUCCESS)
        })
        .await
}

/// Runs `askloop runs sweep`: expires every question and approval whose deadline passed (each
/// call gets a result telling the model no answer — or no decision, and the tool did not run —
/// came in time, recorded as by `sweep`) and follows each such run to its next question or its
/// end. Two sweeps at once expire each call once.
///
/// # Errors
/// Store errors; the first run that fails (the others are still tried first).
pub(crate) async fn sweep(global: &GlobalArgs, args: SweepArgs) -> anyhow::Result<ExitCode> {
    let context = Context::open(global, Access::Update).await?;
    context
        .run(async |context| {
            let due = askloop_core::expired_runs(context.store.as_ref(), lease_now_ms()).await?;
            let mode = if args.json { Mode::Json } else { Mode::Human };
            let mut output = Output::new(mode);
            if due.is_empty() {
                output.note("no question or approval has expired")?;
                return Ok(ExitCode::SUCCESS);
            }
            let mut failures = Failures::default();
            for expired in due {
                let run_id = expired.key();
                let swept: anyhow::Result<()> = async {
                    let state = context.load_run(&run_id).await?;
                    let agent = context.agent_for_run(&state).await?;
                    let stream = match agent.expire_due(&expired, Some("sweep".to_owned())).await {
                        Ok(stream) => stream,
                        // Another sweep (or an answer) got there first: nothing to do.
                        Err(
                            ResumeError::Conflict { .. }
                            | ResumeError::AlreadyAnswered { .. }
                            | ResumeError::Expired { .. }
                            | ResumeError::NotSuspended { .. },
                        ) => return Ok(()),
                        Err(error) => return Err(context.refused(&run_id, error)),
                    };
                    output.note(&format!(
                        "run {run_id}: {} waiting call(s) expired",
                        expired.tool_call_ids.len()
                    ))?;
                    let mut session = Session::new(context, agent, mode);
                    session.answerer = crate::prompt::Answerer::Nobody;
                    session.follow(stream, Origin::Stored).await.map(|_| ())
                }
                .await;
                failures.record(&mut output, &run_id, "swept", swept)?;
            }
            failures.into_exit()
        })
        .await
}

/// The outcome of a command that goes through several runs (`runs recover`, `runs sweep`):
/// each failure is said as it happens, the others are still tried, and the first one is the
/// command's error.
#[derive(Default)]
struct Failures(Option<anyhow::Error>);

impl Failures {
    /// Notes `result` of run `run_id`: on failure, `run RUN was not VERB: …` on stderr.
    fn record(
        &mut self,
        output: &mut Output,
        run_id: &RunKey,
        verb: &str,
        result: anyhow::Result<()>,
    ) -> std::io::Result<()> {
        if let Err(error) = result {
            output.note(&format!(
                "run {run_id} was not {verb}: {}",
                crate::exit::one_line(&error)
            ))?;
            self.0.get_or_insert(error);
        }
        Ok(())
    }

    /// The first failure, or success.
    fn into_exit(self) -> anyhow::Result<ExitCode> {
        self.0.map_or(Ok(ExitCode::SUCCESS), Err)
    }
}
