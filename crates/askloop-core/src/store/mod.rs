//! Where runs are kept: the [`RunStore`] trait and its contract, listing ([`RunFilter`],
//! [`RunPage`]), the shared state [`codec`], and the in-memory [`MemoryStore`].
//!
//! Durable stores (SQLite, and later PostgreSQL) live in `askloop-store`; they implement
//! [`RunStore`] and pass the conformance suite in `askloop_core::testing::conformance`.

mod changes;
pub mod codec;
mod counts;
mod filter;
mod memory;

use async_trait::async_trait;

pub use crate::run::{RunState, RunSummary, UnfinishedCall};
pub use crate::run_loop::clock::lease_now_ms;
pub use changes::{ChangeFeed, RunChange, RunChanges, notifies};
pub use counts::RunCounts;
pub use filter::{InvalidCursor, ListedRun, RunCursor, RunFilter, RunPage};
pub use memory::MemoryStore;

use crate::ids::{LeaseHolder, RunId, ThreadId};
use crate::message::Message;

/// A run as loaded from a store, with the version its next update must name and its lease.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct StoredRun {
    /// The state.
    pub state: RunState,
    /// The store's version of it: 1 after insert, +1 per update ([`RunStore::renew_lease`]
    /// does not change it).
    pub version: u64,
    /// Who drives the run and until when, as the last commit or renewal set it (`None` unless
    /// the run is running).
    pub lease: Option<Lease>,
}

impl StoredRun {
    /// A loaded run at `version` with `lease`.
    pub fn new(state: RunState, version: u64, lease: Option<Lease>) -> Self {
        Self {
            state,
            version,
            lease,
        }
    }
}

/// Who drives a run and until when. Stores keep it in columns beside the state, not in it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Lease {
    /// The driver: one holder per [`crate::Agent`] value.
    pub holder: LeaseHolder,
    /// When the lease ends unless renewed, milliseconds since the Unix epoch.
    pub expires_at_ms: u64,
}

impl Lease {
    /// A lease of `holder` until `expires_at_ms` (ms since the Unix epoch).
    pub fn new(holder: LeaseHolder, expires_at_ms: u64) -> Self {
        Self {
            holder,
            expires_at_ms,
        }
    }

    /// Whether the lease still holds at `now_ms` (ms since the Unix epoch).
    pub fn is_live_at(&self, now_ms: u64) -> bool {
        self.expires_at_ms > now_ms
    }
}

/// A thread's history as [`RunStore::thread_history`] returns it.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct ThreadHistory {
    /// The own messages of the thread's completed runs, in completion-sequence order.
    pub messages: Vec<Message>,
    /// The highest completion sequence included (`None` when no completed run was included).
    pub through: Option<u64>,
}

impl ThreadHistory {
    /// A history of `messages` through completion sequence `through`.
    pub fn new(messages: Vec<Message>, through: Option<u64>) -> Self {
        Self { messages, through }
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

/// Page size of [`RunStore::run_counts`]'s default implementation.
const COUNT_PAGE: usize = 500;

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
/// - **Opaque state, delta commits.** Stores keep a [`RunState`] as its head
///   ([`codec::encode_head`]) and its messages, one text each ([`codec::encode_message`]), and
///   rebuild it with [`codec::decode_run`]; they may index the fields of [`RunState::summary`].
///   Messages are append-only ([`RunState::messages`] only grows), so an update writes the head
///   and appends `messages[stored_count..]` ([`codec::encode_new_messages`]), where
///   `stored_count` is what the store holds, read in the same transaction as the version check:
///   a commit costs what changed, not the whole conversation, and an update that conflicts
///   appends nothing.
/// - **Threads, in completion-sequence order.** The store keeps one completion sequence for
///   all its runs, strictly increasing in commit order: the insert or update that makes a run
///   [`crate::RunStatus::Completed`] gives it the next one, in the same transaction (once; a
///   completed run keeps its sequence). [`RunStore::thread_history`] returns the own messages
///   of a thread's completed runs in that order (not creation order), up to a given sequence.
/// - **Leases.** Every insert and update sets the run's lease to the one given (`Some` while
///   the run is running: its driver and expiry; `None` when it suspends, completes or fails);
///   [`RunStore::renew_lease`] extends it without changing the version. The lease is kept
///   beside the state (columns), returned by [`RunStore::load_run`] in [`StoredRun::lease`].
///   Stores do not interpret it: the loop refuses to take over a run whose lease is live.
/// - **Listing** is newest first (creation time, then run id, both descending), with a cursor,
///   filtered by agent, status, thread and resource; it returns summaries (never whole
///   states: the pending questions' payloads come from the head or a column) and never fails
///   because of one bad row: an unreadable run is listed as [`ListedRun::Unreadable`].
/// - Every method either fully happens or leaves the store unchanged; after an error the store
///   is as it was before the call. A newer-format row is refused
///   ([`StoreError::UnsupportedFormat`]) and left untouched.
#[async_trait]
pub trait RunStore: Send + Sync {
    /// Stores a new run at version 1 with this lease (a run inserted as completed gets its
    /// completion sequence).
    ///
    /// # Errors
    /// [`StoreError::AlreadyExists`] if the id is taken; [`StoreError::Encode`];
    /// [`StoreError::ReadOnly`]; [`StoreError::Backend`].
    async fn insert_run(&self, state: &RunState, lease: Option<&Lease>) -> Result<u64, StoreError>;

    /// Compare-and-swap on the version: if the run is still at `expected_version`, writes the
    /// head, appends the messages past those stored, sets the lease to `lease`, and — when the
    /// state becomes completed — assigns the run the next completion sequence, all in one
    /// transaction; returns the new version (`expected_version + 1`).
    ///
    /// # Errors
    /// [`StoreError::Conflict`] if the version moved on; [`StoreError::NotFound`];
    /// [`StoreError::Encode`]; [`StoreError::ReadOnly`]; [`StoreError::Backend`].
    async fn update_run(
        &self,
        state: &RunState,
        expected_version: u64,
        lease: Option<&Lease>,
    ) -> Result<u64, StoreError>;

    /// Sets the run's lease to `lease` if the run is still at `expected_version`; never bumps
    /// the version (the heartbeat of a driven run).
    ///
    /// # Errors
    /// [`StoreError::Conflict`] if the version moved (a commit happened: renew with the new
    /// version); [`StoreError::NotFound`]; [`StoreError::ReadOnly`]; [`StoreError::Backend`].
    async fn renew_lease(
        &self,
        run_id: &RunId,
        expected_version: u64,
        lease: &Lease,
    ) -> Result<(), StoreError>;

    /// Loads a run, its version and its lease.
    ///
    /// # Errors
    /// [`StoreError::NotFound`]; [`StoreError::UnsupportedFormat`]; [`StoreError::Corrupt`];
    /// [`StoreError::Backend`].
    async fn load_run(&self, run_id: &RunId) -> Result<StoredRun, StoreError>;

    /// Lists summaries of the runs matching `filter`, newest first, one page at a time.
    ///
    /// # Errors
    /// [`StoreError::Backend`] only: a row that cannot be read is listed as
    /// [`ListedRun::Unreadable`].
    async fn list_runs(&self, filter: &RunFilter) -> Result<RunPage, StoreError>;

    /// How many runs the store holds in each status (for metrics: pending questions, runs by
    /// status). The default pages through [`RunStore::list_runs`] (time linear in the runs); the
    /// SQL stores count with one query over their status index.
    ///
    /// # Errors
    /// [`StoreError::Backend`] only: a row whose status cannot be read counts as
    /// [`RunCounts::unreadable`].
    async fn run_counts(&self) -> Result<RunCounts, StoreError> {
        let mut counts = RunCounts::default();
        let mut filter = RunFilter::new().limit(COUNT_PAGE);
        loop {
            let page = self.list_runs(&filter).await?;
            for run in &page.runs {
                match run.summary() {
                    Some(summary) => counts.add(summary.status, 1),
                    None => counts.unreadable = counts.unreadable.saturating_add(1),
                }
            }
            match page.next_cursor {
                Some(cursor) => filter = filter.after(cursor),
                None => return Ok(counts),
            }
        }
    }

    /// The own messages of the thread's completed runs whose completion sequence is at most
    /// `through` (all of them when `None`), in completion-sequence order, and the highest
    /// sequence included (`None` when none is).
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] for a bad row; [`StoreError::Backend`].
    async fn thread_history(
        &self,
        thread_id: &ThreadId,
        through: Option<u64>,
    ) -> Result<ThreadHistory, StoreError>;

    /// A stream of the store's changes (see [`RunChanges`] for what is notified: status changes
    /// and suspended commits, at least once, possibly coalesced into [`RunChange::Resync`]), or
    /// `None` if the store cannot notify: then watchers poll ([`RunStore::list_runs`],
    /// [`RunStore::load_run`]). The memory store notifies its own commits; PostgreSQL those of
    /// every process on the database (`LISTEN/NOTIFY`); SQLite does not notify. The default is
    /// `None`.
    ///
    /// A change committed after this returns is seen by the stream it returned.
    async fn watch_changes(&self) -> Option<RunChanges> {
        None
    }

    /// Releases the store's connections, waiting for those in use; calls after it may fail.
    /// Call it before the process exits, so that a file store is left tidy (SQLite folds its
    /// write-ahead log back into the database and removes its `-wal` and `-shm` files). The
    /// default does nothing.
    async fn close(&self) {}
}

#[async_trait]
impl<S: RunStore + ?Sized> RunStore for std::sync::Arc<S> {
    async fn insert_run(&self, state: &RunState, lease: Option<&Lease>) -> Result<u64, StoreError> {
        (**self).insert_run(state, lease).await
    }
    async fn update_run(
        &self,
        state: &RunState,
        expected_version: u64,
        lease: Option<&Lease>,
    ) -> Result<u64, StoreError> {
        (**self).update_run(state, expected_version, lease).await
    }
    async fn renew_lease(
        &self,
        run_id: &RunId,
        expected_version: u64,
        lease: &Lease,
    ) -> Result<(), StoreError> {
        (**self).renew_lease(run_id, expected_version, lease).await
    }
    async fn load_run(&self, run_id: &RunId) -> Result<StoredRun, StoreError> {
        (**self).load_run(run_id).await
    }
    async fn list_runs(&self, filter: &RunFilter) -> Result<RunPage, StoreError> {
        (**self).list_runs(filter).await
    }
    async fn run_counts(&self) -> Result<RunCounts, StoreError> {
        (**self).run_counts().await
    }
    async fn thread_history(
        &self,
        thread_id: &ThreadId,
        through: Option<u64>,
    ) -> Result<ThreadHistory, StoreError> {
        (**self).thread_history(thread_id, through).await
    }
    async fn watch_changes(&self) -> Option<RunChanges> {
        (**self).watch_changes().await
    }
    async fn close(&self) {
        (**self).close().await;
    }
}
