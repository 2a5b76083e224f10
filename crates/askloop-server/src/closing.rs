//! [`Closing`]: the server's shutdown as open responses see it, so that none keeps a graceful
//! shutdown waiting forever.
//!
//! When [`crate::Server::serve`]'s shutdown future completes, the server stops accepting and
//! axum waits for open responses to end. Endless streams (the inbox's events) end at once; a
//! run's stream ends when its run ends, or [`SHUTDOWN_GRACE`] after shutdown began (the client
//! sees the body end without a finish and can re-attach to the run later, through any instance;
//! the run itself is left to its lease, as [`crate::Server::serve`] says).

use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;

/// How long a run's open stream may go on after shutdown began, and how long
/// [`crate::Server::serve`] then waits for run tasks to end.
pub(crate) const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Whether the server is shutting down. Cheap to clone; every clone sees [`Closing::begin`].
#[derive(Clone, Debug)]
pub(crate) struct Closing {
    begun: watch::Sender<bool>,
}

impl Default for Closing {
    fn default() -> Self {
        Self {
            begun: watch::Sender::new(false),
        }
    }
}

impl Closing {
    /// Marks the shutdown as begun (idempotent).
    pub(crate) fn begin(&self) {
        self.begun.send_replace(true);
    }

    /// Completes once the shutdown has begun (at once if it has).
    pub(crate) fn begun(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut receiver = self.begun.subscribe();
        async move {
            // An error means the sender is gone: the server itself is gone, so end too.
            let _ = receiver.wait_for(|begun| *begun).await;
        }
    }

    /// Completes [`SHUTDOWN_GRACE`] after the shutdown began.
    pub(crate) fn grace_over(&self) -> impl Future<Output = ()> + Send + 'static {
        let begun = self.begun();
        async move {
            begun.await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        }
    }
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn endless_streams_end_at_once_runs_after_the_grace() {
        let closing = Closing::default();
        let begun = tokio::spawn(closing.begun());
        let grace = tokio::spawn(closing.grace_over());
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(!begun.is_finished() && !grace.is_finished());
        closing.begin();
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(begun.is_finished() && !grace.is_finished());
        tokio::time::sleep(SHUTDOWN_GRACE).await;
        assert!(grace.is_finished());
        // Late subscribers see a shutdown already begun.
        tokio::time::timeout(Duration::from_millis(1), closing.begun())
            .await
            .expect("a late subscriber waited for a shutdown already begun");
    }
}
