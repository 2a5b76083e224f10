//! The agent loop: stream → step → tool calls → suspend → commit → resume → next step.
//!
//! [`drive`] runs the phases in order; each phase has its own file:
//! `claim.rs` (a resume or continue takes the run, before any stream exists), `tools.rs` (settle a
//! claimed step: run the answered calls' resume paths; run a new step's calls),
//! `model_step.rs` (one model call, streamed), `close.rs` (close a step: suspend and commit, or
//! record the results and go on; finish the run). `emit.rs` turns the loop into a stream.
//!
//! Every chunk that announces stored state is emitted after the commit that stores it. The loop
//! commits before each model call that follows side-effecting results (so they are never redone
//! after a crash), when it suspends, when it finishes and when it fails.
//!
//! `start` orders a new run's first commits: the insert (which takes the thread's turn or is
//! refused with `ThreadBusy`), then the supersede of the thread's waiting runs, then the history
//! read again (its `historyThrough` committed if the history moved). A resumed or continued run
//! reads `thread_history(thread, historyThrough)` once per drive. The loop is dropped, model call
//! and tool futures with it, once the run is cancelled in the store; what the driver had not
//! committed (a model call in flight, unjournaled idempotent calls) is not in the cancelled run.

mod claim;
mod close;
mod emit;
mod end;
mod envelope;
mod fork;
mod model_step;
mod tools;
mod watch;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod wait_tests;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::future::Either;
use tracing::Instrument;

#[cfg(any(test, feature = "test-support"))]
pub(crate) use claim::OUTCOME_UNKNOWN;
pub(crate) use claim::{
    Claim, Resolution, claim_continue, claim_continue_child, claim_resume, claim_resume_child,
    live_lease_of,
};
pub use end::ExpiredRun;
pub(crate) use end::{cancel_in_store, cancel_run, expired_calls};
pub(crate) use envelope::Envelope;
pub(crate) use fork::claim_fork;

use crate::cancel::CancelHandle;
use crate::chunk::Chunk;
use crate::definition::AgentDefinition;
use crate::error::{AgentError, error_chain_text};
use crate::event::{EventBasis, events_of_commit};
use crate::ids::{IdKind, InvalidId, RunId, RunKey, ThreadId, ThreadKey};
use crate::message::{Message, Usage};
use crate::options::RunOptions;
use crate::run::{RunFailure, RunState, RunStatus};
use crate::store::{Lease, RunStore, StoreError, ThreadHistory};
use crate::stream::AgentStream;
use close::StepEnd;
use emit::{Emitter, driven};

/// A run this stream holds: its state, equal to the stored one after every commit, and the
/// version its next commit must name.
struct ActiveRun {
    agent: Arc<AgentDefinition>,
    state: RunState,
    version: u64,
    cancel: CancelHandle,
    /// The thread's earlier messages (loaded once per drive), `None` until loaded.
    history: Option<Vec<Message>>,
    /// The stored version while the stored status is `running` and no commit is in flight:
    /// what the heartbeat renews the lease at. Shared with it.
    leased: Arc<Mutex<Option<u64>>>,
    /// The calls of the pending step that the claim completed itself (declined, expired),
    /// whose results the stream announces first.
    resolved: Vec<usize>,
    /// What the events of the next commit are computed against: the stored state's basis.
    committed: EventBasis,
}

/// Inserts a new run with the events of its first state: the one way the loop inserts.
pub(crate) async fn commit_insert(
    store: &dyn RunStore,
    state: &RunState,
    lease: Option<&Lease>,
) -> Result<u64, StoreError> {
    let events = events_of_commit(None, state);
    store.insert_run_with_events(state, lease, &events).await
}

/// Updates a run (compare-and-swap at `version`) from the stored state `before` to `state`,
/// with the events of that change ([`events_of_commit`]): the one way the loop updates.
pub(crate) async fn commit_update(
    store: &dyn RunStore,
    before: &EventBasis,
    state: &RunState,
    version: u64,
    lease: Option<&Lease>,
) -> Result<u64, StoreError> {
    let events = events_of_commit(Some(before), state);
    store
        .update_run_with_events(state, version, lease, &events)
        .await
}

impl ActiveRun {
    /// Stores the state (compare-and-swap on the version), with this process's lease while
    /// the run is running and none once it suspends, completes or fails.
    async fn commit(&mut self) -> Result<(), StoreError> {
        self.state.touch();
        let lease = self.agent.lease_for(&self.state);
        // No renewal while the commit is in flight: a renewal that then conflicts can only mean
        // that another process committed.
        set_leased(&self.leased, None);
        self.version = commit_update(
            self.agent.store.as_ref(),
            &self.committed,
            &self.state,
            self.version,
            lease.as_ref(),
        )
        .await?;
        self.committed = EventBasis::of(&self.state);
        set_leased(&self.leased, lease.is_some().then_some(self.version));
        Ok(())
    }

    /// The thread's earlier messages: the upgraded format-1 copy, or the thread's history
    /// through the run's `historyThrough`, read from the store once per drive.
    async fn load_history(&mut self) -> Result<(), StoreError> {
        if self.history.is_some() {
            return Ok(());
        }
        self.history = Some(history_of(self.agent.store.as_ref(), &self.state).await?);
        Ok(())
    }

    /// Records the failure (best effort: the store may be what failed) and hands the error back.
    /// After a conflict nothing is recorded: another process committed since (took the run
    /// over, or cancelled it), so this state is stale and its commit would conflict too.
    async fn fail(&mut self, error: AgentError) -> AgentError {
        if matches!(error, AgentError::Store(StoreError::Conflict { .. })) {
            return error;
        }
        self.state.status = RunStatus::Failed;
        self.state.error = Some(RunFailure {
            code: error.code().to_owned(),
            message: error_chain_text(&error),
        });
        if let Err(commit_error) = self.commit().await {
            tracing::warn!(
                run_id = %self.state.run_id,
                error = %error_chain_text(&commit_error),
                "could not record the run's failure"
            );
        }
        error
    }
}

/// The thread's earlier messages that `state`'s history holds: the upgraded format-1 copy, or
/// the thread's history through its `historyThrough` (none when that is `None`).
///
/// # Errors
/// [`StoreError`] when the store fails.
pub(super) async fn history_of(
    store: &dyn crate::store::RunStore,
    state: &RunState,
) -> Result<Vec<Message>, StoreError> {
    Ok(match (&state.legacy_history, state.history_through) {
        (Some(legacy), _) => legacy.clone(),
        (None, None) => Vec::new(),
        (None, Some(through)) => {
            store
                .thread_history(&state.thread_key(), Some(through))
                .await?
                .messages
        }
    })
}

/// Refuses options whose run, thread or resource id does not pass [`crate::IdKind::check`].
fn check_options(options: &RunOptions) -> Result<(), InvalidId> {
    if let Some(run_id) = &options.run_id {
        IdKind::Run.check(run_id.as_str())?;
    }
    if let Some(thread_id) = &options.thread_id {
        IdKind::Thread.check(thread_id.as_str())?;
    }
    if let Some(resource_id) = &options.resource_id {
        IdKind::Resource.check(resource_id.as_str())?;
    }
    Ok(())
}

/// Starts a new run, then drives it.
///
/// In a given thread the order is what makes one turn at a time exact: the run is **inserted
/// first** (running: the store refuses it while another run of the thread runs, and from then
/// on refuses any other run of the thread to become running), **then** the thread's waiting
/// runs are superseded (their calls get results saying the person wrote this message instead),
/// **then** the thread's history is read; if it changed since the run was inserted (with the
/// history read just before), the run's `historyThrough` is committed. So a waiting run is
/// never resumed beside the new turn, never superseded by a message that was refused, and the
/// new turn's history holds every turn that ended before it.
pub(crate) fn start(
    agent: Arc<AgentDefinition>,
    input: String,
    options: RunOptions,
) -> AgentStream {
    let run_id = options.run_id.clone().unwrap_or_else(RunId::generate);
    let key = RunKey::new(options.resource_id.clone(), run_id.clone());
    let cancel = CancelHandle::new();
    let run_cancel = cancel.clone();
    let span = run_span(&run_id, &agent.id, options.thread_id.as_ref(), "start");
    let stream = driven(move |mut out| {
        async move {
            check_options(&options)?;
            // A child run's thread is its own (named by its id): no history to read, no
            // waiting run to supersede.
            let given_thread = options.thread_id.is_some() && options.parent.is_none();
            let thread_id = options.thread_id.clone().unwrap_or_else(ThreadId::generate);
            let thread = ThreadKey::new(options.resource_id.clone(), thread_id.clone());
            tracing::Span::current().record("thread_id", tracing::field::display(&thread_id));
            let before = if given_thread {
                agent.store.thread_history(&thread, None).await?
            } else {
                ThreadHistory::default()
            };
            let state = RunState::new(
                run_id,
                thread_id,
                options.resource_id.clone(),
                agent.id.clone(),
                agent.model_spec.clone(),
                vec![Message::user(input.clone())],
                before.through,
            );
            let mut state = state;
            state.started_by = options.starter();
            state.parent = options.parent.clone();
            let lease = agent.lease_for(&state);
            // Claims the thread's turn (or is refused: then nothing was stored).
            let version = commit_insert(agent.store.as_ref(), &state, lease.as_ref()).await?;
            let mut run = ActiveRun {
                agent,
                committed: EventBasis::of(&state),
                state,
                version,
                cancel: run_cancel,
                history: Some(before.messages),
                leased: Arc::new(Mutex::new(Some(version))),
                resolved: Vec::new(),
            };
            if given_thread {
                let by = options
                    .by
                    .clone()
                    .or_else(|| options.actor.as_ref().map(|actor| actor.id.clone()))
                    .or_else(|| options.resource_id.as_ref().map(ToString::to_string));
                if let Err(error) = join_thread(&mut run, &thread, &input, by).await {
                    let error = run.fail(error).await;
                    return Err(watch::cancelled_or(&run.agent, &run.state.key(), error).await);
                }
            }
            out.emit(Chunk::Start {
                agent_id: run.agent.id.clone(),
            })
            .await;
            drive_leased(run, &mut out).await
        }
        .instrument(span)
    });
    AgentStream::new(key, cancel, Box::pin(stream))
}

/// After the insert of a new run of `thread`: supersedes the thread's waiting runs with the
/// run's message, reads the history again and commits the run's `historyThrough` if it moved.
async fn join_thread(
    run: &mut ActiveRun,
    thread: &ThreadKey,
    message: &str,
    by: Option<String>,
) -> Result<(), AgentError> {
    // A new message to a thread whose run waits for answers supersedes that run: its waiting
    // calls get results saying so, and it joins the history before this run.
    end::supersede_waiting_runs(&run.agent, thread, message, by).await?;
    let history = run.agent.store.thread_history(thread, None).await?;
    if history.through != run.state.history_through {
        run.state.history_through = history.through;
        run.commit().await?;
    }
    run.history = Some(history.messages);
    Ok(())
}

/// The span of one run's stream (OpenTelemetry-style attributes: `run_id`, `agent_id`,
/// `thread_id`, `kind` = `start` or `resume`). Every step, model call and tool call of the
/// stream nests in it. Disabled callsites cost one atomic load.
fn run_span(
    run_id: &RunId,
    agent_id: &crate::ids::AgentId,
    thread_id: Option<&ThreadId>,
    kind: &'static str,
) -> tracing::Span {
    let span = tracing::info_span!(
        "run",
        run_id = %run_id,
        agent_id = %agent_id,
        thread_id = tracing::field::Empty,
        kind,
    );
    if let Some(thread_id) = thread_id {
        span.record("thread_id", tracing::field::display(thread_id));
    }
    span
}

/// Streams a run that a resume or continue has claimed. A claim that only recorded approvals
/// of a quorum (the run stays suspended: [`claim_resume`]) streams the calls that still wait,
/// with their votes so far, and ends: nothing runs and nothing more is committed.
pub(crate) fn resume(agent: Arc<AgentDefinition>, claim: Claim) -> AgentStream {
    let (state, version, resolved) = claim.into_parts();
    let key = state.key();
    if state.status == RunStatus::Suspended {
        let chunks = close::waiting_chunks(&state);
        let stream = driven(move |mut out| async move {
            for chunk in chunks {
                out.emit(chunk).await;
            }
            Ok(())
        });
        return AgentStream::new(key, CancelHandle::new(), Box::pin(stream));
    }
    let run_id = state.run_id.clone();
    let cancel = CancelHandle::new();
    let run = ActiveRun {
        agent,
        committed: EventBasis::of(&state),
        state,
        version,
        cancel: cancel.clone(),
        history: None,
        leased: Arc::new(Mutex::new(Some(version))),
        resolved,
    };
    let span = run_span(
        &run_id,
        &run.state.agent_id,
        Some(&run.state.thread_id),
        "resume",
    );
    let stream =
        driven(move |mut out| async move { drive_leased(run, &mut out).await }.instrument(span));
    AgentStream::new(key, cancel, Box::pin(stream))
}

/// Drives the run while a heartbeat renews its lease, every third of the lease duration, and
/// a watch ([`watch::cancelled_elsewhere`]) looks out for the run being cancelled elsewhere,
/// for as long as the stream is polled (both are polled with the loop, not spawned: a dropped
/// stream stops them, as a dead process would). Once the run is cancelled in the store the loop
/// is dropped where it stands — its model call and running tools with it, nothing of theirs
/// recorded — and the stream ends with [`AgentError::RunCancelled`]; so does a commit of the
/// loop that conflicts because the run was cancelled first.
async fn drive_leased(run: ActiveRun, out: &mut Emitter) -> Result<(), AgentError> {
    let agent = Arc::clone(&run.agent);
    let key = run.state.key();
    let beat = heartbeat(Arc::clone(&agent), key.clone(), Arc::clone(&run.leased));
    let stop = watch::cancelled_elsewhere(&agent, &key);
    let beat = std::pin::pin!(beat);
    let stop = std::pin::pin!(stop);
    let driving = std::pin::pin!(drive(run, out));
    let result = match futures::future::select(driving, futures::future::select(beat, stop)).await {
        Either::Left((result, _)) => result,
        // The heartbeat or the watch saw the run cancelled in the store.
        Either::Right(_) => {
            return Err(AgentError::RunCancelled {
                run_id: key.run_id.clone(),
            });
        }
    };
    match result {
        Err(error) => Err(watch::cancelled_or(&agent, &key, error).await),
        Ok(()) => Ok(()),
    }
}

fn set_leased(leased: &Mutex<Option<u64>>, version: Option<u64>) {
    *leased.lock().unwrap_or_else(PoisonError::into_inner) = version;
}

fn leased_version(leased: &Mutex<Option<u64>>) -> Option<u64> {
    *leased.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Renews the run's lease every third of its duration at the version the driver last
/// committed (never while a commit is in flight or the run is not running). A conflict right
/// after a commit of the driver is retried at the new version; a conflict at the driver's own
/// version means another process committed: if it cancelled the run, the heartbeat completes
/// (the driver stops); if it took the run over, the heartbeat stops renewing, and the driver's
/// next commit fails.
async fn heartbeat(agent: Arc<AgentDefinition>, run: RunKey, leased: Arc<Mutex<Option<u64>>>) {
    let run_id = &run.run_id;
    let period = (agent.lease_duration / 3).max(Duration::from_millis(1));
    let mut wait = true;
    loop {
        if wait {
            tokio::time::sleep(period).await;
        }
        wait = true;
        let Some(version) = leased_version(&leased) else {
            continue;
        };
        match agent
            .store
            .renew_lease(&run, version, &agent.new_lease())
            .await
        {
            Ok(()) => {}
            Err(StoreError::Conflict { .. }) if leased_version(&leased) != Some(version) => {
                wait = false;
            }
            Err(StoreError::Conflict { .. }) => {
                if watch::is_cancelled(&agent, &run).await {
                    return;
                }
                tracing::warn!(%run_id, "another process took this run over; its lease is no longer renewed");
                return futures::future::pending().await;
            }
            Err(error) => {
                tracing::warn!(%run_id, error = %error_chain_text(&error), "could not renew the run's lease");
            }
        }
    }
}

/// The loop proper, on a run whose state in memory equals the stored one.
async fn drive(mut run: ActiveRun, out: &mut Emitter) -> Result<(), AgentError> {
    if let Err(error) = run.load_history().await {
        return Err(run.fail(AgentError::Store(error)).await);
    }
    // 1. A claimed step: run the answered calls' resume paths, then close the step. Every
    //    side-effecting result is committed as it comes, so the first model call needs no
    //    commit before it.
    let mut needs_commit = false;
    if let Some(step) = run.state.pending_step.take() {
        let resolved = std::mem::take(&mut run.resolved);
        let span = tracing::info_span!("step", index = run.state.steps, claimed = true);
        let end = async {
            let settled = match tools::settle_claimed(&mut run, step, &resolved, out).await {
                Ok(settled) => settled,
                Err(error) => return Err(run.fail(error).await),
            };
            close::close_step(&mut run, settled.step, Usage::default(), out).await
        }
        .instrument(span)
        .await?;
        if end == StepEnd::Suspended {
            return Ok(());
        }
    }

    // 2. Model steps. A new run was just inserted; a claimed one was just committed.
    loop {
        if run.state.steps >= run.agent.max_steps {
            return close::finish_at_step_limit(&mut run, out).await;
        }
        if needs_commit {
            run.state.status = RunStatus::Running;
            run.state.error = None;
            run.commit().await?;
        }
        needs_commit = true;
        let span = tracing::info_span!("step", index = run.state.steps + 1);
        if !one_step(&mut run, out).instrument(span).await? {
            return Ok(());
        }
    }
}

/// One model step and its tool calls; whether the loop goes on (not when the run completed
/// or suspended).
async fn one_step(run: &mut ActiveRun, out: &mut Emitter) -> Result<bool, AgentError> {
    let response = model_step::model_step(run, out).await?;
    if response.calls.is_empty() {
        close::complete(run, response, out).await?;
        return Ok(false);
    }
    let step = match tools::run_calls(run, response.calls, out).await {
        Ok(step) => step,
        Err(error) => return Err(run.fail(error).await),
    };
    Ok(close::close_step(run, step, response.usage, out).await? != StepEnd::Suspended)
}
