//! `askloop runs list|show|continue|recover|cancel|sweep|link`: look at stored runs, retry
//! failed ones, take over abandoned ones, stop them, expire overdue questions, hand out answer
//! links.

use std::process::ExitCode;

use askloop_core::store::{RunFilter, RunState};
use askloop_core::time::lease_now_ms;
use askloop_core::{ResumeError, RunKey, RunStatus};

use crate::cli::{CancelArgs, ContinueArgs, GlobalArgs, RecoverArgs, SweepArgs};
use crate::context::{Access, Context};
use crate::exit::invalid;
use crate::format::format_time;
use crate::output::{Mode, Output};
use crate::registry::FlagScope;
use crate::session::{Origin, Session};

mod link;
mod list;
mod show;

/// A run's pending calls in the one wire shape of a pending call (what the HTTP API and the page
/// show too), for `runs list --json` and `runs show --json`.
fn wire_pending(
    run_id: &askloop_core::RunId,
    calls: &[askloop_core::PendingToolCall],
) -> Vec<askloop_core::wire::PendingCall> {
    calls
        .iter()
        .map(|call| askloop_core::wire::PendingCall::of(run_id, call))
        .collect()
}

pub(crate) use link::link;
pub(crate) use list::list;
pub(crate) use show::show;

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
/// stopped), oldest first; top-level runs only: a sub-agent's child run is taken over by its
/// parent's call when the root goes on (a continue of a child itself is refused).
async fn abandoned_runs(context: &Context) -> anyhow::Result<Vec<(RunKey, Option<u64>)>> {
    let mut found = Vec::new();
    let mut filter = RunFilter::new()
        .status(RunStatus::Running)
        .top_level()
        .limit(RECOVER_PAGE);
    loop {
        let page = context.store.list_runs(&filter).await?;
        for run in &page.runs {
            let Ok(stored) = context.store.load_run(&run.key()).await else {
                continue;
            };
            if stored.state.status() != RunStatus::Running
                || stored.lease.as_ref().is_some_and(|lease| lease.is_live())
            {
                continue;
            }
            found.push((run.key(), stored.lease.map(|lease| lease.expires_at_ms)));
        }
        match page.next_cursor {
            Some(cursor) => {
                filter = RunFilter::new()
                    .status(RunStatus::Running)
                    .top_level()
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
            askloop_core::cancel_run_in(
                context.store.as_ref(),
                &run,
                Some(context.actor("cli runs cancel").id),
            )
            .await
            .map_err(|error| context.refused(&run, error))?;
            let mut output = Output::new(Mode::Human);
            output.note(&format!("run {run} is cancelled"))?;
            Ok(ExitCode::SUCCESS)
        })
        .await
}

/// Delivers the due webhooks of askloop.toml's `[[webhooks]]` (for setups without `askloop
/// serve`): rounds until nothing more is due now (retries due later wait for the next sweep).
/// Without webhooks it still fans the events out (to nobody) and prunes the old ones.
///
/// # Errors
/// A bad `[[webhooks]]` table; the store's.
async fn deliver_webhooks(context: &Context, output: &mut Output) -> anyhow::Result<()> {
    let hooks = context.config().config.webhooks()?;
    let configured = !hooks.is_empty();
    let links = context.config().config.server.link_settings(None)?;
    let deliverer = askloop_server::webhooks::Deliverer::new(
        context.store.clone(),
        hooks,
        crate::env::webhook_policy()?,
    )?
    .answer_links(links);
    let (mut delivered, mut failed, mut retrying) = (0, 0, 0);
    // Each round claims what is due now; a round without attempts ends it.
    for _ in 0..100 {
        let round = deliverer.deliver_due().await?;
        delivered += round.delivered;
        failed += round.failed;
        retrying += round.attempts - round.delivered - round.failed;
        if round.attempts == 0 {
            break;
        }
    }
    if !configured {
        return Ok(());
    }
    output.note(&format!(
        "webhooks: {delivered} delivered, {failed} failed, {retrying} attempt(s) to retry later"
    ))?;
    Ok(())
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
                deliver_webhooks(context, &mut output).await?;
                askloop_server::links::prune_links(context.store.as_ref()).await?;
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
                        // Another sweep (or an answer) got there first: nothing to do. A
                        // sub-agent's child run is swept through its root, whose waiting calls
                        // include the child's.
                        Err(
                            ResumeError::Conflict { .. }
                            | ResumeError::AlreadyAnswered { .. }
                            | ResumeError::Expired { .. }
                            | ResumeError::NotSuspended { .. }
                            | ResumeError::ChildRun { .. },
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
            deliver_webhooks(context, &mut output).await?;
            askloop_server::links::prune_links(context.store.as_ref()).await?;
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
