//! The background sweep: expired questions and lease recovery.
use std::sync::Arc;

use tokio::sync::watch;

use crate::server::AppState;

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

/// One sweep.
pub(crate) async fn sweep_once(_state: &AppState) {}
