//! Change notifications of a store: [`RunChanges`], what [`crate::RunStore::watch_changes`]
//! returns, and [`ChangeFeed`], the in-process fan-out that stores feed.
//!
//! Semantics (every store that notifies keeps them):
//! - **What is notified.** A commit ([`crate::RunStore::insert_run`],
//!   [`crate::RunStore::update_run`]) that changes a run's status, or that leaves it suspended
//!   (its pending calls may have changed), is notified as [`RunChange::Run`] after it commits;
//!   [`notifies`] says which. An insert of a running run, an update that keeps a run running and
//!   a lease renewal are not (they are the hot path of a driven run, and nobody waits on them).
//! - **At least once, maybe coalesced.** A watcher may see a change more than once, late, or as
//!   a [`RunChange::Resync`] ("something may have changed; list again") instead of the change
//!   itself: when it lagged behind the feed, or when a store lost its connection to the
//!   database and cannot know what it missed. A watcher must treat every change as "look at the
//!   store again", never as the new state itself.
//! - **Across processes** for PostgreSQL (`LISTEN/NOTIFY`); in one process for the memory
//!   store; SQLite does not notify (its watchers poll).

use tokio::sync::broadcast;
use tokio::sync::broadcast::error::RecvError;

use crate::ids::{ResourceId, RunId, RunKey};
use crate::run::RunStatus;

/// How many changes a watcher may fall behind before it sees [`RunChange::Resync`].
const FEED_CAPACITY: usize = 1024;

/// One notified change.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RunChange {
    /// A commit of this run left it in `status`.
    Run {
        /// The run's resource (with `run_id`, its key: [`RunChange::key`]).
        resource_id: Option<ResourceId>,
        /// The run.
        run_id: RunId,
        /// Its status after the commit.
        status: RunStatus,
    },
    /// Changes may have been missed: look at every run of interest again.
    Resync,
}

impl RunChange {
    /// The key of the run changed; `None` for [`RunChange::Resync`].
    pub fn key(&self) -> Option<RunKey> {
        match self {
            Self::Run {
                resource_id,
                run_id,
                ..
            } => Some(RunKey::new(resource_id.clone(), run_id.clone())),
            Self::Resync => None,
        }
    }
}

/// Whether a commit that takes a run from `before` (`None`: an insert) to `after` is notified
/// (see the module docs): a status change other than the insert of a running run, or a commit
/// that leaves the run suspended.
pub fn notifies(before: Option<RunStatus>, after: RunStatus) -> bool {
    match before {
        None => after != RunStatus::Running,
        Some(before) => before != after || after == RunStatus::Suspended,
    }
}

/// A watcher's stream of the store's changes (see the module docs for what it sees).
#[derive(Debug)]
pub struct RunChanges {
    receiver: broadcast::Receiver<RunChange>,
}

impl RunChanges {
    /// The next change; [`RunChange::Resync`] when this watcher fell behind. `None` once the
    /// store stopped notifying (it was closed or dropped): watch by polling from then on.
    pub async fn next(&mut self) -> Option<RunChange> {
        match self.receiver.recv().await {
            Ok(change) => Some(change),
            Err(RecvError::Lagged(_)) => Some(RunChange::Resync),
            Err(RecvError::Closed) => None,
        }
    }

    /// The next change if one is there now (without waiting); [`RunChange::Resync`] when this
    /// watcher fell behind.
    pub fn try_next(&mut self) -> Option<RunChange> {
        match self.receiver.try_recv() {
            Ok(change) => Some(change),
            Err(broadcast::error::TryRecvError::Lagged(_)) => Some(RunChange::Resync),
            Err(_) => None,
        }
    }
}

/// The fan-out of a store's changes to its watchers (a tokio broadcast channel).
#[derive(Clone, Debug)]
pub struct ChangeFeed {
    sender: broadcast::Sender<RunChange>,
}

impl Default for ChangeFeed {
    fn default() -> Self {
        Self {
            sender: broadcast::Sender::new(FEED_CAPACITY),
        }
    }
}

impl ChangeFeed {
    /// A feed without watchers.
    pub fn new() -> Self {
        Self::default()
    }

    /// A new watcher: it sees the changes sent from now on.
    pub fn watch(&self) -> RunChanges {
        RunChanges {
            receiver: self.sender.subscribe(),
        }
    }

    /// Sends `change` to every watcher (none may be listening: then it is dropped).
    pub fn send(&self, change: RunChange) {
        let _ = self.sender.send(change);
    }

    /// How many watchers there are.
    pub fn watchers(&self) -> usize {
        self.sender.receiver_count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_status_changes_and_suspended_commits_notify() {
        use RunStatus::*;
        assert!(!notifies(None, Running));
        assert!(notifies(None, Suspended) && notifies(None, Completed));
        assert!(!notifies(Some(Running), Running));
        assert!(notifies(Some(Running), Suspended) && notifies(Some(Suspended), Running));
        assert!(notifies(Some(Suspended), Suspended));
        assert!(notifies(Some(Running), Completed));
    }

    #[tokio::test]
    async fn a_lagging_watcher_is_told_to_resync() {
        let feed = ChangeFeed::new();
        let mut changes = feed.watch();
        for _ in 0..=FEED_CAPACITY {
            feed.send(RunChange::Resync);
        }
        feed.send(RunChange::Run {
            resource_id: None,
            run_id: RunId::new("r"),
            status: RunStatus::Completed,
        });
        assert_eq!(changes.next().await, Some(RunChange::Resync));
        drop(feed);
        while let Some(change) = changes.next().await {
            let _ = change;
        }
    }
}
