//! Where runs are kept: the [`RunStore`] trait and its contract, listing ([`RunFilter`],
//! [`RunPage`]), the shared state [`codec`], and the in-memory [`MemoryStore`].
//!
//! Durable stores (SQLite, and later PostgreSQL) live in `askloop-store`; they implement
//! [`RunStore`] and pass the conformance suite in `askloop_core::testing::conformance`.

pub mod codec;
mod filter;
mod memory;

use async_trait::async_trait;

pub use crate::run::{RunState, RunSummary};
pub use filter::{InvalidCursor, ListedRun, RunCursor, RunFilter, RunPage};
pub use memory::MemoryStore;

use crate::ids::{RunId, ThreadId};
use crate::message::Message;

/// A run as loaded from a store, with the version its next update must name.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct StoredRun {
    /// The state.
    pub state: RunState,
    /// The store's version of it: 1 after insert, +1 per update.
    pub version: u64,
}

impl StoredRun {
    /// A loaded run at `version`.
    pub fn new(state: RunState, version: u64) -> Self {
        Self { state, version }
    }
}

/// Why a store operation failed. Every backend maps its own errors to these kinds, in one
/// function per backend.
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
    /// The stored state has a format version this build cannot read (written by a newer
    /// askloop).
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
    #[error("run {run_id} has a corrupt stored state")]
    Corrupt {
        /// The run.
        run_id: RunId,
        /// The decoding error.
        #[source]
        source: serde_json::Error,
    },
    /// The state could not be encoded for storage (nothing was written).
    #[error("run {run_id} could not be encoded for storage")]
    Encode {
        /// The run.
        run_id: RunId,
        /// The encoder's error.
        #[source]
        source: serde_json::Error,
    },
    /// The store was opened read-only and was asked to write.
    #[error("the store is open read-only")]
    ReadOnly,
    /// The backend failed (I/O, connection, driver).
    #[error("the store failed")]
    Backend {
        /// The driver's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl StoreError {
    /// A backend failure with this cause.
    pub fn backend(source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self::Backend {
            source: source.into(),
        }
    }
}

/// Durable storage of runs and threads.
///
/// # Contract
/// What the agent loop promises, and what every implementation must do (the conformance suite
/// checks each point on every store):
/// - **Commit before emit.** The loop commits a run's state with [`RunStore::insert_run`] or
///   [`RunStore::update_run`] and only then emits the chunks that announce it (a
///   `tool-call-suspended` chunk is never seen for a state that is not stored).
/// - **Exactly one resume.** [`RunStore::update_run`] is a compare-and-swap on the version: it
///   succeeds only if the stored version still equals `expected_version`, and then bumps it by
///   one. Of any number of updates naming the same version, across processes, at most one
///   succeeds; the others get [`StoreError::Conflict`] and change nothing. The loop claims a
///   suspended call this way before any tool or model work on resume.
/// - **Opaque state.** Stores keep [`RunState`] as the text of [`codec::encode_state`] and read
///   it back with [`codec::decode_state`]; they may index the fields of [`RunState::summary`].
/// - **Threads.** An update that moves a run to [`crate::RunStatus::Completed`] appends the run's
///   own messages ([`RunState::run_messages`]) to its thread atomically with the update;
///   [`RunStore::thread_messages`] returns those of every completed run, in the order the runs
///   completed, oldest first.
/// - **Listing** is newest first (creation time, then run id, both descending) and never fails
///   because of one bad row: an unreadable run is listed as [`ListedRun::Unreadable`].
/// - Every method either fully happens or leaves the store unchanged; after an error the store
///   is as it was before the call.
#[async_trait]
pub trait RunStore: Send + Sync {
    /// Stores a new run at version 1.
    ///
    /// # Errors
    /// [`StoreError::AlreadyExists`] if the id is taken; [`StoreError::Encode`];
    /// [`StoreError::ReadOnly`]; [`StoreError::Backend`].
    async fn insert_run(&self, state: &RunState) -> Result<u64, StoreError>;

    /// Replaces a run's state if its version is still `expected_version`; returns the new
    /// version.
    ///
    /// # Errors
    /// [`StoreError::Conflict`] if the version moved on; [`StoreError::NotFound`];
    /// [`StoreError::Encode`]; [`StoreError::ReadOnly`]; [`StoreError::Backend`].
    async fn update_run(&self, state: &RunState, expected_version: u64) -> Result<u64, StoreError>;

    /// Loads a run.
    ///
    /// # Errors
    /// [`StoreError::NotFound`]; [`StoreError::UnsupportedFormat`]; [`StoreError::Corrupt`];
    /// [`StoreError::Backend`].
    async fn load_run(&self, run_id: &RunId) -> Result<StoredRun, StoreError>;

    /// Lists the runs matching `filter`, newest first, one page at a time.
    ///
    /// # Errors
    /// [`StoreError::Backend`] only: a row that cannot be read is listed as
    /// [`ListedRun::Unreadable`].
    async fn list_runs(&self, filter: &RunFilter) -> Result<RunPage, StoreError>;

    /// The messages of the thread's completed runs, in completion order.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] for a bad row; [`StoreError::Backend`].
    async fn thread_messages(&self, thread_id: &ThreadId) -> Result<Vec<Message>, StoreError>;

    /// Releases the store's connections, waiting for those in use; calls after it may fail.
    /// Call it before the process exits, so that a file store is left tidy (SQLite folds its
    /// write-ahead log back into the database and removes its `-wal` and `-shm` files). The
    /// default does nothing.
    async fn close(&self) {}
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
    async fn list_runs(&self, filter: &RunFilter) -> Result<RunPage, StoreError> {
        (**self).list_runs(filter).await
    }
    async fn thread_messages(&self, thread_id: &ThreadId) -> Result<Vec<Message>, StoreError> {
        (**self).thread_messages(thread_id).await
    }
    async fn close(&self) {
        (**self).close().await;
    }
}
