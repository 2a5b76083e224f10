//! [`CancelHandle`]: stops a run's model call from outside its stream (e.g. on Ctrl-C).

use std::sync::Arc;

use tokio::sync::watch;

/// Cancels the stream it was taken from ([`crate::AgentStream::cancel_handle`]).
///
/// Cancelling stops the current model call at its next event (or before the next call starts).
/// The run is then recorded as failed with code `"cancelled"`, the stream yields
/// `Err(AgentError::Model(ModelError::Cancelled))` and ends, and
/// [`crate::Agent::continue_stream`] can retry the step later. Tool calls already running are
/// allowed to finish, so their results are never lost. Cancelling twice, or after the stream
/// ended, does nothing. To end the run itself for good, from this or any other process on the
/// store, use [`crate::Agent::cancel_run`]: the run ends as cancelled and its driver stops.
#[derive(Clone, Debug)]
pub struct CancelHandle {
    sender: Arc<watch::Sender<bool>>,
}

impl Default for CancelHandle {
    fn default() -> Self {
        Self::new()
    }
}

impl CancelHandle {
    /// A handle that is not cancelled.
    pub fn new() -> Self {
        Self {
            sender: Arc::new(watch::Sender::new(false)),
        }
    }

    /// Requests cancellation.
    pub fn cancel(&self) {
        self.sender.send_replace(true);
    }

    /// Whether cancellation was requested.
    pub fn is_cancelled(&self) -> bool {
        *self.sender.borrow()
    }

    /// Completes once cancellation is requested.
    pub async fn cancelled(&self) {
        let mut receiver = self.sender.subscribe();
        // The sender lives as long as `self`, so `wait_for` cannot fail while we wait.
        let _ = receiver.wait_for(|cancelled| *cancelled).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn cancelled_completes_after_cancel() {
        let handle = CancelHandle::new();
        assert!(!handle.is_cancelled());
        let waiter = handle.clone();
        let task = tokio::spawn(async move { waiter.cancelled().await });
        handle.cancel();
        task.await.unwrap();
        assert!(handle.is_cancelled());
        handle.cancelled().await;
    }
}
