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

mod claim;
mod close;
mod emit;
mod model_step;
mod tools;

#[cfg(test)]
mod tests;

use std::sync::Arc;

pub(crate) use claim::{Claim, claim_continue, claim_resume};

use crate::cancel::CancelHandle;
use crate::chunk::Chunk;
use crate::definition::AgentDefinition;
use crate::error::{AgentError, error_chain_text};
use crate::ids::{RunId, ThreadId};
use crate::message::{Message, Usage};
use crate::options::RunOptions;
use crate::run::{RunFailure, RunState, RunStatus};
use crate::store::StoreError;
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
}

impl ActiveRun {
    /// Stores the state (compare-and-swap on the version).
    async fn commit(&mut self) -> Result<(), StoreError> {
        self.state.touch();
        self.version = self
            .agent
            .store
            .update_run(&self.state, self.version)
            .await?;
        Ok(())
    }

    /// Records the failure (best effort: the store may be what failed) and hands the error back.
    async fn fail(&mut self, error: AgentError) -> AgentError {
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

/// Starts a new run: loads the thread's history, inserts the run, then drives it.
pub(crate) fn start(
    agent: Arc<AgentDefinition>,
    input: String,
    options: RunOptions,
) -> AgentStream {
    let run_id = RunId::generate();
    let cancel = CancelHandle::new();
    let run_cancel = cancel.clone();
    let stream_run_id = run_id.clone();
    let stream = driven(move |mut out| async move {
        let (thread_id, mut messages) = match options.thread_id {
            Some(thread_id) => {
                let history = agent.store.thread_messages(&thread_id).await?;
                (thread_id, history)
            }
            None => (ThreadId::generate(), Vec::new()),
        };
        let history_len = messages.len();
        messages.push(Message::user(input));
        let state = RunState::new(
            run_id,
            thread_id,
            options.resource_id,
            agent.id.clone(),
            agent.model_spec.clone(),
            messages,
            history_len,
        );
        let version = agent.store.insert_run(&state).await?;
        out.emit(Chunk::Start {
            agent_id: agent.id.clone(),
        })
        .await;
        let run = ActiveRun {
            agent,
            state,
            version,
            cancel: run_cancel,
        };
        drive(run, &mut out).await
    });
    AgentStream::new(stream_run_id, cancel, Box::pin(stream))
}

/// Streams a run that a resume or continue has claimed.
pub(crate) fn resume(agent: Arc<AgentDefinition>, claim: Claim) -> AgentStream {
    let (state, version) = claim.into_parts();
    let run_id = state.run_id.clone();
    let cancel = CancelHandle::new();
    let run = ActiveRun {
        agent,
        state,
        version,
        cancel: cancel.clone(),
    };
    let stream = driven(move |mut out| async move { drive(run, &mut out).await });
    AgentStream::new(run_id, cancel, Box::pin(stream))
}

/// The loop proper, on a run whose state in memory equals the stored one.
async fn drive(mut run: ActiveRun, out: &mut Emitter) -> Result<(), AgentError> {
    // 1. A claimed step: run the answered calls' resume paths, then close the step.
    let mut needs_commit = false;
    if let Some(step) = run.state.pending_step.take() {
        let settled = tools::settle_claimed(&run, step, out).await;
        let end = close::close_step(
            &mut run,
            settled.step,
            Usage::default(),
            Some(&settled.resuspended),
            out,
        )
        .await?;
        if end == StepEnd::Suspended {
            return Ok(());
        }
        needs_commit = settled.needs_commit;
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
        let response = model_step::model_step(&mut run, out).await?;
        if response.calls.is_empty() {
            return close::complete(&mut run, response, out).await;
        }
        let step = tools::run_calls(&run, response.calls, out).await;
        if close::close_step(&mut run, step, response.usage, None, out).await? == StepEnd::Suspended
        {
            return Ok(());
        }
    }
}
