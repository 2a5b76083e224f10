//! Where runs are kept: the [`RunStore`] trait and its contract, listing ([`RunFilter`],
//! [`RunPage`]), the shared state [`codec`], and the in-memory [`MemoryStore`].
//!
//! Durable stores (SQLite, and later PostgreSQL) live in `askloop-store`; they implement
//! [`RunStore`] and pass the conformance suite in `askloop_core::testing::conformance`.

mod changes;
pub mod codec;
mod counts;
mod filter;
mod links;
mod memory;
mod outbox;

use async_trait::async_trait;

pub use crate::run::{FIRST_MESSAGE_CHARS, RunState, RunSummary, UnfinishedCall};
pub use changes::{ChangeFeed, RunChange, RunChanges, notifies};
pub use counts::RunCounts;
pub use filter::{InvalidCursor, ListedRun, ResourceFilter, RunCursor, RunFilter, RunPage};
pub use links::{AnswerLink, AnswerLinks, LinkHash, LinkId, NewAnswerLink};
pub use memory::MemoryStore;
pub use outbox::{
    Delivery, DeliveryAttempt, DeliveryClaim, DeliveryFilter, DeliveryId, DeliveryNext,
    DeliveryStatus, FanOut, Outbox, StoredEvent, outbox_of,
};

use crate::event::RunEvent;
use crate::ids::{LeaseHolder, RunId, RunKey, ThreadId, ThreadKey};
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

    /// Whether the lease still holds now, by the lease clock ([`crate::time::lease_now_ms`]):
    /// its holder may still be driving the run.
    pub fn is_live(&self) -> bool {
        self.expires_at_ms > crate::time::lease_now_ms()
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
    /// The write would leave a second run of one thread `running` (a thread has one turn at a
    /// time, [`RunStore`]'s contract): nothing was written.
    #[error("thread {thread_id} has a turn running{}", running_text(running_run_id.as_ref()))]
    ThreadBusy {
        /// The thread (within the resource of the run written).
        thread_id: ThreadId,
        /// The run of the thread that is running, as read after the refusal (`None` when it
        /// stopped running meanwhile).
        running_run_id: Option<RunId>,
    },
    /// The store was opened read-only and was asked to write.
    #[error("the store is open read-only")]
    ReadOnly,
    /// This store does not offer what was asked: it keeps no outbox of events, or no answer
    /// links (a store written before them, or a wrapper that does not pass them on).
    #[error("this store does not support {operation}")]
    Unsupported {
        /// What was asked for (`outbox`).
        operation: &'static str,
    },
    /// No delivery has this id (within the tenant asked for).
    #[error("delivery {id} not found")]
    DeliveryNotFound {
        /// The id asked for.
        id: DeliveryId,
    },
    /// The delivery is no longer claimed by the one recording an attempt (its claim expired
    /// and another deliverer took it, or it was replayed): nothing was recorded.
    #[error("delivery {id} is not claimed by this deliverer")]
    DeliveryNotHeld {
        /// The delivery.
        id: DeliveryId,
    },
    /// The backend failed (I/O, connection, driver).
    #[error("the store failed")]
    Backend {
        /// The driver's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// `" (run R)"` for a known running run.
pub(crate) fn running_text(running_run_id: Option<&RunId>) -> String {
    running_run_id.map_or_else(String::new, |run_id| format!(" (run {run_id})"))
}

impl StoreError {
    /// A backend failure with this cause.
    pub fn backend(source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self::Backend {
            source: source.into(),
        }
    }
}

/// The run of `thread` that is running now, if any (what a [`StoreError::ThreadBusy`] names;
/// stores read it after refusing a write).
///
/// # Errors
/// [`StoreError::Backend`].
pub async fn running_run_of(
    store: &dyn RunStore,
    thread: &ThreadKey,
) -> Result<Option<RunId>, StoreError> {
    let filter = RunFilter::in_thread(thread)
        .status(crate::RunStatus::Running)
        .limit(1);
    let page = store.list_runs(&filter).await?;
    Ok(page.runs.first().map(|run| run.run_id().clone()))
}

/// Page size of [`RunStore::run_counts`]'s default implementation.
const COUNT_PAGE: usize = 500;

/// Durable storage of runs and threads.
///
/// # Contract
/// What the agent loop promises, and what every implementation must do (the conformance suite
/// checks each point on every store):
/// - **Keys.** A run is named by its [`RunKey`] (resource and id; [`RunState::key`]), a
///   thread by its [`ThreadKey`] ([`RunState::thread_key`]): the same run id or thread id in two
///   resources names two runs or two threads, and `None` is the namespace of runs without a
///   resource. Every read and write of a run takes its key; every thread query (history,
///   listing by [`RunFilter::in_thread`], the one-turn rule) is scoped by the thread's key.
///   The ids in a key pass [`crate::IdKind::check`], so `""` is never a resource id and a store
///   may keep "no resource" as `""` in a key column.
/// - **Commit before emit.** The loop commits a run's state with [`RunStore::insert_run`] or
///   [`RunStore::update_run`] and only then emits the chunks that announce it (a
///   `tool-call-suspended` chunk is never seen for a state that is not stored).
/// - **Exactly one resume.** [`RunStore::update_run`] is a compare-and-swap on the version: it
///   succeeds only if the stored version still equals `expected_version`, and then bumps it by
///   one. Of any number of updates naming the same version, across processes, at most one
///   succeeds; the others get [`StoreError::Conflict`] and change nothing. The loop claims a
///   suspended call this way before any tool or model work on resume.
/// - **One turn at a time per thread.** At most one run of a [`ThreadKey`] is
///   [`crate::RunStatus::Running`]: an insert of a running run, or an update that makes a run
///   running that was not, while another run of its thread is running, is refused with
///   [`StoreError::ThreadBusy`] (naming that run) and changes nothing. The check is part of the
///   write's transaction (exact under any concurrency, across processes); a run that stays
///   running is not checked again.
/// - **Opaque state, delta commits.** Stores keep a [`RunState`] as its head
///   ([`codec::encode_head`]) and its messages, one text each ([`codec::encode_message`]), and
///   rebuild it with [`codec::decode_run`]; they may index the fields of [`RunState::summary`].
///   Messages are append-only ([`RunState::messages`] only grows), so an update writes the head
///   and appends `messages[stored_count..]` ([`codec::encode_new_messages`]), where
///   `stored_count` is what the store holds, read in the same transaction as the version check:
///   a commit costs what changed, not the whole conversation, and an update that conflicts
///   appends nothing.
/// - **Threads, in completion-sequence order.** The store keeps one completion sequence for
///   all its runs, strictly increasing in commit order: the insert or update that ends a run —
///   makes it [`crate::RunStatus::Completed`] or [`crate::RunStatus::Cancelled`] — gives it the
///   next one, in the same transaction (once; the run keeps its sequence).
///   [`RunStore::thread_history`] returns the own messages of a thread's ended runs (completed
///   and cancelled) in that order (not creation order), up to a given sequence: the next turn
///   sees what was cancelled too.
/// - **Leases.** Every insert and update sets the run's lease to the one given (`Some` while
///   the run is running: its driver and expiry; `None` when it suspends, completes or fails);
///   [`RunStore::renew_lease`] extends it without changing the version. The lease is kept
///   beside the state (columns), returned by [`RunStore::load_run`] in [`StoredRun::lease`].
///   Stores do not interpret it: the loop refuses to take over a run whose lease is live.
/// - **Listing** is newest first (creation time, then run id, then resource, all descending),
///   with a cursor, filtered by agent, status, thread, resource and exact run id; it returns
///   summaries (never whole states: the pending questions' payloads come from the head or a
///   column) and never fails because of one bad row: an unreadable run is listed as
///   [`ListedRun::Unreadable`], with its key.
/// - **Events with the commit.** [`RunStore::insert_run_with_events`] and
///   [`RunStore::update_run_with_events`] append the events given to the store's outbox in the
///   write's own transaction, in order, each with the next outbox sequence: a write that is
///   refused (conflict, thread busy, already exists) appends none. The store's
///   [`Outbox`] ([`RunStore::outbox`]) fans them out to webhook endpoints and tracks their
///   deliveries; fan-out creates one delivery per endpoint and event however often it runs,
///   and a claim gives each due delivery to one claimer until its claim expires or an attempt
///   is recorded; [`Outbox::prune_outbox`] deletes old fanned-out events whose deliveries are
///   all finished.
/// - Every method either fully happens or leaves the store unchanged; after an error the store
///   is as it was before the call. A newer-format row is refused
///   ([`StoreError::UnsupportedFormat`]) and left untouched.
#[async_trait]
pub trait RunStore: Send + Sync {
    /// Stores a new run at version 1 under its key ([`RunState::key`]) with this lease (a run
    /// inserted as completed or cancelled gets its completion sequence).
    ///
    /// # Errors
    /// [`StoreError::AlreadyExists`] if the key is taken (the same id in another resource is
    /// another run); [`StoreError::ThreadBusy`] for a running run whose thread has a running
    /// run; [`StoreError::Encode`]; [`StoreError::ReadOnly`]; [`StoreError::Backend`].
    async fn insert_run(&self, state: &RunState, lease: Option<&Lease>) -> Result<u64, StoreError> {
        self.insert_run_with_events(state, lease, &[]).await
    }

    /// [`RunStore::insert_run`], writing `events` to the outbox in the same transaction (none
    /// if the insert is refused). The loop commits this way, with the events of
    /// [`crate::event::events_of_commit`].
    ///
    /// # Errors
    /// As [`RunStore::insert_run`].
    async fn insert_run_with_events(
        &self,
        state: &RunState,
        lease: Option<&Lease>,
        events: &[RunEvent],
    ) -> Result<u64, StoreError>;

    /// Compare-and-swap on the version of the run `state.key()`: if it is still at
    /// `expected_version`, writes the head, appends the messages past those stored, sets the
    /// lease to `lease`, and — when the state becomes completed or cancelled — assigns the run
    /// the next completion sequence, all in one transaction; returns the new version
    /// (`expected_version + 1`).
    ///
    /// # Errors
    /// [`StoreError::Conflict`] if the version moved on; [`StoreError::NotFound`];
    /// [`StoreError::ThreadBusy`] when the update makes the run running while another run of
    /// its thread is; [`StoreError::Encode`]; [`StoreError::ReadOnly`];
    /// [`StoreError::Backend`].
    async fn update_run(
        &self,
        state: &RunState,
        expected_version: u64,
        lease: Option<&Lease>,
    ) -> Result<u64, StoreError> {
        self.update_run_with_events(state, expected_version, lease, &[])
            .await
    }

    /// [`RunStore::update_run`], writing `events` to the outbox in the same transaction: a
    /// refused compare-and-swap writes none.
    ///
    /// # Errors
    /// As [`RunStore::update_run`].
    async fn update_run_with_events(
        &self,
        state: &RunState,
        expected_version: u64,
        lease: Option<&Lease>,
        events: &[RunEvent],
    ) -> Result<u64, StoreError>;

    /// Sets the run's lease to `lease` if the run is still at `expected_version`; never bumps
    /// the version (the heartbeat of a driven run).
    ///
    /// # Errors
    /// [`StoreError::Conflict`] if the version moved (a commit happened: renew with the new
    /// version); [`StoreError::NotFound`]; [`StoreError::ReadOnly`]; [`StoreError::Backend`].
    async fn renew_lease(
        &self,
        run: &RunKey,
        expected_version: u64,
        lease: &Lease,
    ) -> Result<(), StoreError>;

    /// Loads the run `run` (exactly that key: the same id in another resource is another
    /// run), its version and its lease.
    ///
    /// # Errors
    /// [`StoreError::NotFound`]; [`StoreError::UnsupportedFormat`]; [`StoreError::Corrupt`];
    /// [`StoreError::Backend`].
    async fn load_run(&self, run: &RunKey) -> Result<StoredRun, StoreError>;

    /// Lists summaries of the runs matching `filter`, newest first, one page at a time.
    ///
    /// # Errors
    /// [`StoreError::Backend`] only: a row that cannot be read is listed as
    /// [`ListedRun::Unreadable`].
    async fn list_runs(&self, filter: &RunFilter) -> Result<RunPage, StoreError>;

    /// Every key under which the store holds a run with this id (one per resource that uses
    /// it, newest first, as [`RunStore::list_runs`] lists them): how a bare run id is resolved.
    /// Unreadable rows count (their key is listed). The default pages through
    /// [`RunStore::list_runs`]; the SQL stores read the keys alone from their run-id index
    /// (a resume by bare id does this first: issue 36).
    ///
    /// # Errors
    /// [`StoreError::Backend`].
    async fn keys_of_run(&self, run_id: &RunId) -> Result<Vec<RunKey>, StoreError> {
        let mut filter = RunFilter::new().run(run_id.clone()).limit(COUNT_PAGE);
        let mut keys = Vec::new();
        loop {
            let page = self.list_runs(&filter).await?;
            keys.extend(page.runs.iter().map(ListedRun::key));
            match page.next_cursor {
                Some(cursor) => filter = filter.after(cursor),
                None => return Ok(keys),
            }
        }
    }

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

    /// The own messages of the thread's ended runs (completed or cancelled: those with a
    /// completion sequence) whose completion sequence is at most `through` (all of them when
    /// `None`), in completion-sequence order, and the highest sequence included (`None` when
    /// none is). Only the runs of `thread`'s resource count.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] for a bad row; [`StoreError::Backend`].
    async fn thread_history(
        &self,
        thread: &ThreadKey,
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

    /// The store's answer links ([`AnswerLinks`]), or `None` when it keeps none (the
    /// default): a front end asked for a link then answers [`StoreError::Unsupported`].
    /// [`MemoryStore`] and the SQL stores return themselves; a wrapper store forwards the
    /// store it wraps.
    fn answer_links(&self) -> Option<&dyn AnswerLinks> {
        None
    }

    /// The store's webhook outbox ([`Outbox`]: events written with the commits, and their
    /// deliveries), or `None` when it keeps none — then [`outbox_of`] answers
    /// [`StoreError::Unsupported`]. Every store of this workspace has one (it returns
    /// `Some(self)`); a wrapper store forwards it. The default is `None`.
    fn outbox(&self) -> Option<&dyn Outbox> {
        None
    }
}

#[async_trait]
impl<S: RunStore + ?Sized> RunStore for std::sync::Arc<S> {
    async fn insert_run_with_events(
        &self,
        state: &RunState,
        lease: Option<&Lease>,
        events: &[RunEvent],
    ) -> Result<u64, StoreError> {
        (**self).insert_run_with_events(state, lease, events).await
    }
    async fn update_run_with_events(
        &self,
        state: &RunState,
        expected_version: u64,
        lease: Option<&Lease>,
        events: &[RunEvent],
    ) -> Result<u64, StoreError> {
        (**self)
            .update_run_with_events(state, expected_version, lease, events)
            .await
    }
    async fn renew_lease(
        &self,
        run: &RunKey,
        expected_version: u64,
        lease: &Lease,
    ) -> Result<(), StoreError> {
        (**self).renew_lease(run, expected_version, lease).await
    }
    async fn load_run(&self, run: &RunKey) -> Result<StoredRun, StoreError> {
        (**self).load_run(run).await
    }
    async fn list_runs(&self, filter: &RunFilter) -> Result<RunPage, StoreError> {
        (**self).list_runs(filter).await
    }
    async fn keys_of_run(&self, run_id: &RunId) -> Result<Vec<RunKey>, StoreError> {
        (**self).keys_of_run(run_id).await
    }
    async fn run_counts(&self) -> Result<RunCounts, StoreError> {
        (**self).run_counts().await
    }
    async fn thread_history(
        &self,
        thread: &ThreadKey,
        through: Option<u64>,
    ) -> Result<ThreadHistory, StoreError> {
        (**self).thread_history(thread, through).await
    }
    async fn watch_changes(&self) -> Option<RunChanges> {
        (**self).watch_changes().await
    }
    async fn close(&self) {
        (**self).close().await;
    }
    fn answer_links(&self) -> Option<&dyn AnswerLinks> {
        (**self).answer_links()
    }
    fn outbox(&self) -> Option<&dyn Outbox> {
        (**self).outbox()
    }
}
