//! The background sweep, every `sweep_interval`: questions and approvals whose deadline passed
//! are expired (`Agent::expire_due`), and runs left `running` under an expired lease (their process died)
//! are continued (`Agent::continue_stream`) by this server, and answer links dead for longer
//! than `links::RETENTION` are deleted. Several servers may sweep one store
//! at once: the store's compare-and-swap lets one of them act on each run; the others get a
//! conflict, logged at debug level.

use std::sync::Arc;

use askloop_core::store::RunFilter;
use askloop_core::time::lease_now_ms;
use askloop_core::{ResumeError, RunStatus, error_chain_text, expired_runs};
use tokio::sync::watch;

use crate::metrics::StreamKind;
use crate::state::AppState;

/// Who the audit records for the sweep's actions.
const SWEEPER: &str = "askloop-server-sweep";

/// Sweeps every `sweep_interval` until `stop` turns true.
pub(crate) async fn run(state: Arc<AppState>, mut stop: watch::Receiver<bool>) {
    let mut ticker = tokio::time::interval(state.sweep_interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let stopped = tokio::select! {
            _ = ticker.tick() => false,
            _ = stop.wait_for(|stopped| *stopped) => true,
        };
        if stopped {
            break;
        }
        sweep_once(&state).await;
    }
}

fn refused(action: &str, run_id: &askloop_core::RunId, error: &ResumeError) {
    match error {
        ResumeError::Conflict { .. }
        | ResumeError::AlreadyAnswered { .. }
        | ResumeError::Expired { .. }
        | ResumeError::InProgress { .. }
        | ResumeError::NotSuspended { .. }
        | ResumeError::NotContinuable { .. }
        | ResumeError::ThreadBusy { .. } => {
            tracing::debug!(%run_id, action, code = error.code(), "sweep: another process acted first");
        }
        _ => {
            tracing::warn!(%run_id, action, error = %error_chain_text(error), "sweep failed on a run")
        }
    }
}

/// One sweep: expiries, then lease recovery, then the answer links' retention.
pub(crate) async fn sweep_once(state: &AppState) {
    expire_due(state).await;
    recover_abandoned(state).await;
    match crate::links::prune_links(state.store.as_ref()).await {
        Ok(0) => {}
        Ok(pruned) => tracing::debug!(pruned, "sweep: old answer links deleted"),
        Err(error) => {
            tracing::warn!(error = %error_chain_text(&error), "sweep: pruning answer links failed")
        }
    }
}

/// Expires the due questions and approvals of top-level runs this server does not drive now,
/// each run's expiry streamed by the run hub (a sub-agent's child run's calls are its root's).
async fn expire_due(state: &AppState) {
    let now = lease_now_ms();
    match expired_runs(state.store.as_ref(), now).await {
        Ok(expired) => {
            for run in expired {
                if state.hub.is_live(&run.key()) {
                    continue;
                }
                // The run as the expiry's claim finds it, for a client told the whole turn.
                let before = state
                    .store
                    .load_run(&run.key())
                    .await
                    .ok()
                    .map(|stored| stored.state);
                // A sub-agent's child run is expired through its root, whose waiting calls
                // include the child's (with their deadlines).
                if before
                    .as_ref()
                    .is_some_and(|state| state.parent().is_some())
                {
                    continue;
                }
                let agent = match state.agents.agent(&run.agent_id).await {
                    Ok(agent) => agent,
                    Err(error) => {
                        tracing::warn!(run_id = %run.run_id, error = %error_chain_text(&error), "sweep: no agent to expire the run");
                        continue;
                    }
                };
                match agent.expire_due(&run, Some(SWEEPER.to_owned())).await {
                    Ok(stream) => drop(state.hub.spawn(
                        stream,
                        &run.agent_id,
                        StreamKind::Other,
                        before,
                    )),
                    Err(error) => refused("expire", &run.run_id, &error),
                }
            }
        }
        Err(error) => {
            tracing::warn!(error = %error_chain_text(&error), "sweep: listing expired calls failed")
        }
    }
}

/// Continues the top-level runs left `running` under an expired lease (their process died)
/// that this server does not drive now. A sub-agent's child run is recovered through its root
/// (the root's call of the sub-agent takes the child over), never on its own.
async fn recover_abandoned(state: &AppState) {
    let running = match crate::listing::all_runs(
        state,
        RunFilter::new().status(RunStatus::Running).top_level(),
    )
    .await
    {
        Ok(running) => running,
        Err(_) => return,
    };
    for summary in running {
        let key = summary.key();
        if state.hub.is_live(&key) {
            continue;
        }
        let stored = match state.store.load_run(&key).await {
            Ok(stored) => stored,
            Err(error) => {
                tracing::warn!(run_id = %summary.run_id, error = %error_chain_text(&error), "sweep: loading a running run failed");
                continue;
            }
        };
        let abandoned = stored.state.status() == RunStatus::Running
            && stored.state.parent().is_none()
            && stored.lease.as_ref().is_none_or(|lease| !lease.is_live());
        if !abandoned {
            continue;
        }
        let agent = match state.agents.agent_for_run(&stored.state).await {
            Ok(agent) => agent,
            Err(error) => {
                tracing::warn!(run_id = %summary.run_id, error = %error_chain_text(&error), "sweep: no agent to recover the run");
                continue;
            }
        };
        match agent.continue_stream(&key).await {
            Ok(stream) => {
                tracing::info!(run_id = %summary.run_id, "sweep: recovering a run whose process stopped");
                drop(state.hub.spawn(
                    stream,
                    &summary.agent_id,
                    StreamKind::Other,
                    Some(stored.state),
                ));
            }
            Err(error) => refused("recover", &summary.run_id, &error),
        }
    }
}
