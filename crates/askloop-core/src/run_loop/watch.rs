//! How a driver learns that its run was cancelled elsewhere (another agent, process or server
//! on the same store committed the run as `cancelled`, overriding the driver's lease): through
//! the store's change notifications where it has them ([`crate::RunStore::watch_changes`]:
//! memory, PostgreSQL), else by reading the run's status every [`POLL`] (SQLite); the lease
//! heartbeat and a conflicting commit of the driver check it too. The driver then drops its
//! model call and tool futures and ends its stream with [`crate::AgentError::RunCancelled`].

use std::time::Duration;

use crate::definition::AgentDefinition;
use crate::error::AgentError;
use crate::ids::RunKey;
use crate::run::RunStatus;
use crate::store::{RunChange, StoreError};

/// How often a driver reads its run's status on a store that does not notify: one point read
/// per running run per period, so a cancel from another process stops the run within it.
pub(super) const POLL: Duration = Duration::from_millis(250);

/// Whether the stored run is cancelled (a store failure reads as "not known to be").
pub(super) async fn is_cancelled(agent: &AgentDefinition, key: &RunKey) -> bool {
    match agent.store.load_run(key).await {
        Ok(stored) => stored.state.status == RunStatus::Cancelled,
        Err(error) => {
            tracing::debug!(
                run_id = %key.run_id,
                error = %crate::error::error_chain_text(&error),
                "could not read the run's status"
            );
            false
        }
    }
}

/// The error a driver's stream ends with: [`AgentError::RunCancelled`] for a commit that
/// conflicted because the run was cancelled first, else `error` itself.
pub(super) async fn cancelled_or(
    agent: &AgentDefinition,
    key: &RunKey,
    error: AgentError,
) -> AgentError {
    match error {
        AgentError::Store(StoreError::Conflict { .. }) if is_cancelled(agent, key).await => {
            AgentError::RunCancelled {
                run_id: key.run_id.clone(),
            }
        }
        other => other,
    }
}

/// Completes once the stored run is cancelled: on a notification that says so (a
/// [`RunChange::Resync`] reads the run), or, on a store that does not notify (or stops), on a
/// poll every [`POLL`]. Never completes otherwise; polled with the loop, so it stops with the
/// stream.
pub(super) async fn cancelled_elsewhere(agent: &AgentDefinition, key: &RunKey) {
    if let Some(mut changes) = agent.store.watch_changes().await {
        loop {
            match changes.next().await {
                Some(RunChange::Resync) => {
                    if is_cancelled(agent, key).await {
                        return;
                    }
                }
                Some(change) => {
                    let cancelled = matches!(
                        change,
                        RunChange::Run {
                            status: RunStatus::Cancelled,
                            ..
                        }
                    );
                    if cancelled && change.key().as_ref() == Some(key) {
                        return;
                    }
                }
                // The store stopped notifying: poll from now on.
                None => break,
            }
        }
    }
    loop {
        tokio::time::sleep(POLL).await;
        if is_cancelled(agent, key).await {
            return;
        }
    }
}
