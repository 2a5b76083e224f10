//! The [`RunStore`] trait: where runs are committed, and the one place exactly-once is decided.

use async_trait::async_trait;

use crate::ids::{ResourceId, RunId, ThreadId};
use crate::message::Message;
use crate::run::{RunState, RunStatus};

/// A run as loaded from a store, with the version its next update must name.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredRun {
    /// The state.
    pub state: RunState,
    /// The store's version of it: 1 after insert, +1 per update.
    pub version: u64,
}

/// Which runs to list. Empty fields match everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunFilter {
    /// Only runs in this status.
    pub status: Option<RunStatus>,
    /// Only runs of this thread.
    pub thread_id: Option<ThreadId>,
    /// Only runs of this resource.
    pub resource_id: Option<ResourceId>,
    /// At most this many (newest first); `None` for all.
    pub limit: Option<usize>,
}

impl RunFilter {
    /// Whether `state` passes the filter (`limit` aside).
    pub fn matches(&self, state: &RunState) -> bool {
        self.status.is_none_or(|status| state.status == status)
            && self
                .thread_id
                .as_ref()
                .is_none_or(|thread| &state.thread_id == thread)
            && self
                .resource_id
                .as_ref()
                .is_none_or(|resource| state.resource_id.as_ref() == Some(resource))
    }
}

/// Why a store operation failed. Every backend maps its own errors to these kinds.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// No run has this id.
    #[error("run {run_id} not found")]
    NotFound {
        /// The id asked for.
        run_id: RunId,
    },
    /// A run with this id already exists.
    #[error("run {run_id} already exists")]
    AlreadyExists {
        /// The id.
        run_id: RunId,
    },
    /// The run changed since it was loaded: another process committed first.
    #[error("run {run_id} was changed concurrently (expected version {expected_version})")]
    Conflict {
        /// The run.
        run_id: RunId,
        /// The version the update expected.
        expected_version: u64,
    },
    /// The stored state has a format version this build cannot read.
    #[error(
        "run {run_id} is stored in format {format_version}; this build reads format {}",
        crate::run::RUN_FORMAT_VERSION
    )]
    UnsupportedFormat {
        /// The run.
        run_id: RunId,
        /// The version found.
        format_version: u32,
    },
    /// The stored state is not valid JSON of the run format.
    #[error("run {run_id} has a corrupt stored state: {source}")]
    Corrupt {
        /// The run.
        run_id: RunId,
        /// The decoding error.
        #[source]
        source: serde_json::Error,
    },
    /// The backend failed (I/O, connection, driver).
    #[error("store backend error: {source}")]
    Backend {
        /// The driver's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// Durable storage of runs and threads.
///
/// # Contract
/// - **Commit before emit.** The agent loop commits a run's state with [`RunStore::insert_run`]
///   or [`RunStore::update_run`] and only then emits the chunks that announce it (a
///   `tool-call-suspended` chunk is never seen for a state that is not stored).
/// - **Exactly one resume.** [`RunStore::update_run`] is a compare-and-swap on the version:
///   it succeeds only if the stored version still equals `expected_version`, and then bumps it by
///   one. Of two updates naming the same version, at most one succeeds; the other gets
///   [`StoreError::Conflict`] and changes nothing. The agent loop claims a suspended call this way
///   before any tool or model work on resume.
/// - **Threads.** An update that moves a run to [`RunStatus::Completed`] appends the run's own
///   messages ([`RunState::run_messages`]) to its thread atomically with the update;
///   [`RunStore::thread_messages`] returns those of every completed run, oldest first.
/// - Every method either fully happens or leaves the store unchanged.
#[async_trait]
pub trait RunStore: Send + Sync {
    /// Stores a new run at version 1.
    ///
    /// # Errors
    /// [`StoreError::AlreadyExists`] if the id is taken; [`StoreError::Backend`].
    async fn insert_run(&self, state: &RunState) -> Result<u64, StoreError>;

    /// Replaces a run's state if its version is still `expected_version`; returns the new version.
    ///
    /// # Errors
    /// [`StoreError::Conflict`] if the version moved on; [`StoreError::NotFound`];
    /// [`StoreError::Backend`].
    async fn update_run(&self, state: &RunState, expected_version: u64) -> Result<u64, StoreError>;

    /// Loads a run.
    ///
    /// # Errors
    /// [`StoreError::NotFound`]; [`StoreError::UnsupportedFormat`]; [`StoreError::Corrupt`];
    /// [`StoreError::Backend`].
    async fn load_run(&self, run_id: &RunId) -> Result<StoredRun, StoreError>;

    /// Lists runs matching `filter`, newest first.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] or [`StoreError::UnsupportedFormat`] for a bad row;
    /// [`StoreError::Backend`].
    async fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunState>, StoreError>;

    /// The messages of a thread's completed runs, oldest first (empty for an unknown thread).
    ///
    /// # Errors
    /// [`StoreError::Backend`]; [`StoreError::Corrupt`] naming the run whose message is bad.
    async fn thread_messages(&self, thread_id: &ThreadId) -> Result<Vec<Message>, StoreError>;
}

#[async_trait]
impl<S: RunStore + ?Sized> RunStore for std::sync::Arc<S> {
    async fn insert_run(&self, state: &RunState) -> Result<u64, StoreError> {
        (**self).insert_run(state).await
    }
    async fn update_run(&self, state: &RunState, expected_version: u64) -> Result<u64, StoreError> {
        (**self).update_run(state, expected_version).await
    }
    async fn load_run(&self, run_id: &RunId) -> Result<StoredRun, StoreError> {
        (**self).load_run(run_id).await
    }
    async fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunState>, StoreError> {
        (**self).list_runs(filter).await
    }
    async fn thread_messages(&self, thread_id: &ThreadId) -> Result<Vec<Message>, StoreError> {
        (**self).thread_messages(thread_id).await
    }
}
