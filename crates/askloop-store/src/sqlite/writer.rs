//! The writer: one thread owns the store's only read-write connection and commits in groups.
//!
//! Commit requests of any number of runs queue up. The thread takes everything
//! queued (up to [`MAX_BATCH`]), runs each request inside its own savepoint (so one request's
//! compare-and-swap conflict or error rolls back that request only), then issues one `COMMIT`
//! — one fsync for the whole group under `synchronous=FULL` — and only then answers each
//! request. While the disk syncs, the next group queues up, so full durability costs one fsync
//! per group rather than one per run. A request is answered `Ok` only once its group's commit
//! returned; if the commit fails, every request of the group gets the error and nothing of it
//! is stored. Under `synchronous=NORMAL` (no fsync), a commit that finds the writer idle runs
//! on the caller's thread instead, as a group of one (see [`Writer::start`]).

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use askloop_core::{RunId, RunKey, StoreError, ThreadId};
use rusqlite::{Connection, OptionalExtension, params};
use tokio::sync::oneshot;

use crate::outbox::EncodedEvent;
use crate::sqlite::checkpoint::Checkpointer;
use crate::sqlite::columns::Head;
use crate::sqlite::error::{backend, map_sqlite_error};
use crate::sqlite::outbox::{OutboxWrite, write_events};

/// Most requests committed in one transaction.
const MAX_BATCH: usize = 512;

/// One write, encoded by the caller.
#[derive(Debug)]
pub(super) enum Write {
    /// A new run at version 1 with its messages.
    Insert {
        key: RunKey,
        thread_id: String,
        agent_id: String,
        created_at_ms: i64,
        head: Head,
        messages: Vec<String>,
        /// The commit's events, for the outbox.
        events: Vec<EncodedEvent>,
    },
    /// A compare-and-swap update: the run must be at `expected_version` and hold
    /// `stored_count` messages; `new_messages` are appended from there.
    Update {
        key: RunKey,
        expected_version: i64,
        stored_count: i64,
        head: Head,
        new_messages: Vec<String>,
        /// The commit's events, for the outbox (none written if the swap fails).
        events: Vec<EncodedEvent>,
    },
    /// A lease renewal at `expected_version` (the version does not change).
    Renew {
        key: RunKey,
        expected_version: i64,
        holder: String,
        expires_at_ms: i64,
    },
    /// A write to the outbox (fan-out, claim, attempt, replay).
    Outbox(OutboxWrite),
    /// A write to the answer links (create, use, release, revoke, prune).
    Links(crate::sqlite::links::LinkWrite),
}

/// What a write returns: the run's version after it.
type Reply = oneshot::Sender<Result<u64, StoreError>>;

/// The handle to the writer: its thread, and the connection and queue it shares with the
/// callers. Dropping it lets the thread commit what is queued and stop.
#[derive(Debug)]
pub(super) struct Writer {
    shared: Arc<Shared>,
    /// Whether a commit that finds the writer idle runs on the caller's thread (only without
    /// fsync, see [`Writer::start`]).
    inline: bool,
    thread: Mutex<Option<JoinHandle<()>>>,
}

#[derive(Debug)]
struct Shared {
    /// Copies the WAL back into the database in the background.
    checkpointer: Checkpointer,
    /// The read-write connection; `None` once closed. Held by the writer thread while it
    /// commits a group, or by a caller committing alone.
    connection: Mutex<Option<Connection>>,
    queue: Mutex<Queue>,
    /// Signalled when a request or a close is queued.
    ready: Condvar,
}

#[derive(Debug, Default)]
struct Queue {
    requests: VecDeque<(Write, Reply)>,
    /// A close was asked for (with a reply when by `close`, without when dropped).
    closing: Option<Option<oneshot::Sender<()>>>,
    /// No more requests are taken.
    closed: bool,
}

/// Why a write got no answer: the writer is closed (or stopped).
#[derive(Debug, thiserror::Error)]
#[error("the store is closed")]
struct Closed;

/// A group commit's failure, shared by every request of the group.
#[derive(Debug, thiserror::Error)]
enum GroupFailed {
    /// The transaction could not begin or end.
    #[error("the group commit failed")]
    Sqlite(#[source] Arc<rusqlite::Error>),
    /// SQLite rolled the transaction back after another request's error (I/O, full disk).
    #[error("the group commit was rolled back after another request's error")]
    RolledBack,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Writer {
    /// Starts the writer thread on `connection` (read-write, already migrated).
    ///
    /// With `inline` (for `synchronous=NORMAL`, where a commit does not wait for the disk), a
    /// commit that finds nothing queued and the connection free runs at once on the caller's
    /// thread, as a group of one: a sequential workload then never pays two thread wake-ups
    /// per commit. Under `synchronous=FULL` every commit goes through the thread, so no caller
    /// ever waits for the disk on an async worker, and concurrent commits share one fsync.
    ///
    /// # Errors
    /// The I/O error of spawning the thread.
    pub(super) fn start(
        connection: Connection,
        checkpointer: Checkpointer,
        inline: bool,
    ) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            checkpointer,
            connection: Mutex::new(Some(connection)),
            queue: Mutex::new(Queue::default()),
            ready: Condvar::new(),
        });
        let thread = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("askloop-sqlite-writer".into())
                .spawn(move || run(&shared))?
        };
        Ok(Self {
            shared,
            inline,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Commits `write`: at once on this thread when allowed and the writer is idle, else with
    /// the next group of the writer thread.
    ///
    /// # Errors
    /// The request's own error (conflict, not found, already exists), or its group's.
    pub(super) async fn write(&self, write: Write) -> Result<u64, StoreError> {
        if self.inline
            && lock(&self.shared.queue).requests.is_empty()
            && let Ok(mut connection) = self.shared.connection.try_lock()
            && let Some(connection) = connection.as_mut()
        {
            let mut results = commit_group(connection, std::slice::from_ref(&write));
            self.shared.checkpointer.committed(count_ok(&results));
            return results
                .pop()
                .unwrap_or_else(|| Err(StoreError::backend(Closed)));
        }
        let (reply, answer) = oneshot::channel();
        {
            let mut queue = lock(&self.shared.queue);
            if queue.closed || queue.closing.is_some() {
                return Err(StoreError::backend(Closed));
            }
            queue.requests.push_back((write, reply));
        }
        self.shared.ready.notify_one();
        answer.await.map_err(|_| StoreError::backend(Closed))?
    }

    /// Runs `read` on the read-write connection if it is free at once (its page cache is warm:
    /// it made the last changes, while a read-only connection drops its cache whenever another
    /// connection committed); `None` when the writer is busy or closed.
    pub(super) fn try_read<T>(&self, read: impl FnOnce(&Connection) -> T) -> Option<T> {
        let connection = self.shared.connection.try_lock().ok()?;
        connection.as_ref().map(read)
    }

    /// Commits what is queued, closes the connection (SQLite then folds the WAL back and
    /// removes its files if no other connection uses the database) and stops the thread.
    pub(super) async fn close(&self) {
        let (done, closed) = oneshot::channel();
        let asked = {
            let mut queue = lock(&self.shared.queue);
            let first = !queue.closed && queue.closing.is_none();
            if first {
                queue.closing = Some(Some(done));
            }
            first
        };
        if asked {
            // The writer's connection closes last, so SQLite folds the WAL back then.
            self.shared.checkpointer.stop();
            self.shared.ready.notify_one();
            let _ = closed.await;
        }
        let thread = lock(&self.thread).take();
        if let Some(thread) = thread
            && thread.join().is_err()
        {
            tracing::warn!("the SQLite writer thread panicked");
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        let mut queue = lock(&self.shared.queue);
        if !queue.closed && queue.closing.is_none() {
            queue.closing = Some(None);
            drop(queue);
            self.shared.ready.notify_one();
        }
    }
}

/// The writer thread: waits for requests, takes every one queued (up to [`MAX_BATCH`]),
/// commits them as one group and answers them; after a close, once the queue is empty, closes
/// the connection.
fn run(shared: &Shared) {
    loop {
        let (group, closing) = {
            let mut queue = lock(&shared.queue);
            while queue.requests.is_empty() && queue.closing.is_none() {
                queue = shared
                    .ready
                    .wait(queue)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            let take = queue.requests.len().min(MAX_BATCH);
            let group: Vec<(Write, Reply)> = queue.requests.drain(..take).collect();
            let closing = if queue.requests.is_empty() {
                queue.closing.take()
            } else {
                None
            };
            if closing.is_some() {
                queue.closed = true;
            }
            (group, closing)
        };
        let mut connection = lock(&shared.connection);
        if !group.is_empty() {
            let (writes, replies): (Vec<Write>, Vec<Reply>) = group.into_iter().unzip();
            let results = match connection.as_mut() {
                Some(connection) => {
                    let results = commit_group(connection, &writes);
                    shared.checkpointer.committed(count_ok(&results));
                    results
                }
                None => writes
                    .iter()
                    .map(|_| Err(StoreError::backend(Closed)))
                    .collect(),
            };
            for (reply, result) in replies.into_iter().zip(results) {
                let _ = reply.send(result);
            }
        }
        if let Some(done) = closing {
            if let Some(connection) = connection.take()
                && let Err((_, error)) = connection.close()
            {
                tracing::warn!(error = %error, "closing the SQLite writer connection failed");
            }
            if let Some(done) = done {
                let _ = done.send(());
            }
            return;
        }
    }
}

/// Runs a group in one transaction, a savepoint per request, and returns each request's
/// result (every one failed when the transaction fails).
fn commit_group(connection: &Connection, writes: &[Write]) -> Vec<Result<u64, StoreError>> {
    if let Err(error) = execute(connection, "BEGIN IMMEDIATE") {
        return fail_all(writes.len(), error);
    }
    let mut results = Vec::with_capacity(writes.len());
    for write in writes {
        // A group of one needs no savepoint: its failure rolls the transaction back.
        let result = if writes.len() == 1 {
            apply(connection, write)
        } else {
            apply_in_savepoint(connection, write)
        };
        // SQLite rolls the whole transaction back by itself after some errors (I/O, full
        // disk): then nothing of the group is stored. The request that met the error gets it,
        // the others say so.
        if connection.is_autocommit() {
            let failing = results.len();
            let mut own = Some(result);
            return (0..writes.len())
                .map(|index| match own.take_if(|_| index == failing) {
                    Some(Err(error)) => Err(error),
                    _ => Err(StoreError::backend(GroupFailed::RolledBack)),
                })
                .collect();
        }
        results.push(result);
    }
    let end = if results.iter().any(Result::is_ok) {
        execute(connection, "COMMIT")
    } else {
        execute(connection, "ROLLBACK")
    };
    if let Err(error) = end {
        if !connection.is_autocommit() {
            let _ = execute(connection, "ROLLBACK");
        }
        return fail_all(writes.len(), error);
    }
    results
}

fn count_ok(results: &[Result<u64, StoreError>]) -> usize {
    results.iter().filter(|result| result.is_ok()).count()
}

/// `count` failures sharing `error`.
fn fail_all(count: usize, error: rusqlite::Error) -> Vec<Result<u64, StoreError>> {
    let read_only = matches!(
        error.sqlite_error_code(),
        Some(rusqlite::ErrorCode::ReadOnly)
    );
    let shared = Arc::new(error);
    (0..count)
        .map(|_| {
            Err(if read_only {
                StoreError::ReadOnly
            } else {
                StoreError::backend(GroupFailed::Sqlite(shared.clone()))
            })
        })
        .collect()
}

fn execute(connection: &Connection, sql: &str) -> rusqlite::Result<()> {
    connection.prepare_cached(sql)?.execute([]).map(|_| ())
}

/// Runs one request inside a savepoint: released when it succeeds, rolled back when it fails.
fn apply_in_savepoint(connection: &Connection, write: &Write) -> Result<u64, StoreError> {
    execute(connection, "SAVEPOINT request").map_err(backend)?;
    let result = apply(connection, write);
    let end = match &result {
        Ok(_) => execute(connection, "RELEASE request"),
        Err(_) => execute(connection, "ROLLBACK TO request")
            .and_then(|()| execute(connection, "RELEASE request")),
    };
    match end {
        Ok(()) => result,
        Err(error) => Err(backend(error)),
    }
}

/// The run of the thread (`scope`, `thread_id`) that is running, other than `run_id`: the one
/// that makes a write into `running` of `run_id` a second turn.
fn other_running(
    connection: &Connection,
    scope: &str,
    thread_id: &str,
    run_id: &str,
) -> rusqlite::Result<Option<String>> {
    connection
        .prepare_cached(
            "SELECT id FROM runs WHERE scope = ?1 AND thread_id = ?2 AND status = 'running' \
             AND id <> ?3 LIMIT 1",
        )?
        .query_row(params![scope, thread_id, run_id], |row| row.get(0))
        .optional()
}

/// For an update of `key` at `expected_version` into `running`: the thread and the run that
/// runs in it already, when the run is at that version and not running yet (a run that stays
/// running is not checked again, and a stale update fails on its version instead).
fn busy_for_update(
    connection: &Connection,
    key: &RunKey,
    expected_version: i64,
) -> rusqlite::Result<Option<(String, String)>> {
    connection
        .prepare_cached(
            "SELECT r.thread_id, o.id FROM runs r JOIN runs o \
               ON o.scope = r.scope AND o.thread_id = r.thread_id AND o.status = 'running' \
              AND o.id <> r.id \
             WHERE r.scope = ?1 AND r.id = ?2 AND r.version = ?3 AND r.status <> 'running' \
             LIMIT 1",
        )?
        .query_row(
            params![key.scope(), key.run_id.as_str(), expected_version],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .optional()
}

fn thread_busy(thread_id: String, running: String) -> StoreError {
    StoreError::ThreadBusy {
        thread_id: ThreadId::new(thread_id),
        running_run_id: Some(RunId::new(running)),
    }
}

/// The next completion sequence: one more than the highest given.
fn next_completion_seq(connection: &Connection) -> rusqlite::Result<i64> {
    let highest: Option<i64> = connection
        .prepare_cached(
            "SELECT completion_seq FROM runs WHERE completion_seq IS NOT NULL \
             ORDER BY completion_seq DESC LIMIT 1",
        )?
        .query_row([], |row| row.get(0))
        .optional()?;
    Ok(highest.unwrap_or(0) + 1)
}

/// The next change sequence: one more than the highest given (the writer's transaction holds
/// the database's write lock, so commits take their sequences in commit order).
fn next_change_seq(connection: &Connection) -> rusqlite::Result<i64> {
    let highest: Option<i64> = connection
        .prepare_cached(
            "SELECT change_seq FROM runs WHERE change_seq IS NOT NULL \
             ORDER BY change_seq DESC LIMIT 1",
        )?
        .query_row([], |row| row.get(0))
        .optional()?;
    Ok(highest.unwrap_or(0) + 1)
}

fn append_messages(
    connection: &Connection,
    key: &RunKey,
    first_seq: i64,
    messages: &[String],
) -> rusqlite::Result<()> {
    let mut insert = connection.prepare_cached(
        "INSERT INTO run_messages (scope, run_id, seq, body) VALUES (?1, ?2, ?3, ?4)",
    )?;
    for (seq, body) in (first_seq..).zip(messages) {
        insert.execute(params![key.scope(), key.run_id.as_str(), seq, body])?;
    }
    Ok(())
}

/// Why a compare-and-swap changed nothing: the run is missing, or at another version.
fn cas_failure(
    connection: &Connection,
    key: &RunKey,
    expected_version: i64,
) -> Result<u64, StoreError> {
    let run_id = &key.run_id;
    let exists = connection
        .prepare_cached("SELECT 1 FROM runs WHERE scope = ?1 AND id = ?2")
        .and_then(|mut select| {
            select
                .query_row(params![key.scope(), run_id.as_str()], |_| Ok(()))
                .optional()
        })
        .map_err(backend)?;
    Err(match exists {
        Some(()) => StoreError::Conflict {
            run_id: run_id.clone(),
            expected_version: u64::try_from(expected_version).unwrap_or(0),
        },
        None => StoreError::NotFound {
            run_id: run_id.clone(),
        },
    })
}

/// Runs one request's statements.
fn apply(connection: &Connection, write: &Write) -> Result<u64, StoreError> {
    match write {
        Write::Insert {
            key,
            thread_id,
            agent_id,
            created_at_ms,
            head,
            messages,
            events,
        } => insert_run(
            connection,
            key,
            (thread_id, agent_id),
            *created_at_ms,
            head,
            (messages, events),
        ),
        Write::Update {
            key,
            expected_version,
            stored_count,
            head,
            new_messages,
            events,
        } => update_run(
            connection,
            key,
            (*expected_version, *stored_count),
            head,
            (new_messages, events),
        ),
        Write::Renew {
            key,
            expected_version,
            holder,
            expires_at_ms,
        } => renew_lease(connection, key, *expected_version, holder, *expires_at_ms),
        Write::Outbox(write) => crate::sqlite::outbox::apply(connection, write),
        Write::Links(write) => crate::sqlite::links::apply(connection, write),
    }
}

/// The completion sequence of a commit that ends its run (`ended`): the next one; `None`
/// otherwise.
fn completion_seq_if(connection: &Connection, ended: bool) -> rusqlite::Result<Option<i64>> {
    if ended {
        next_completion_seq(connection).map(Some)
    } else {
        Ok(None)
    }
}

/// Inserts a new run at version 1 with its messages ([`Write::Insert`]).
fn insert_run(
    connection: &Connection,
    key: &RunKey,
    (thread_id, agent_id): (&str, &str),
    created_at_ms: i64,
    head: &Head,
    (messages, events): (&[String], &[EncodedEvent]),
) -> Result<u64, StoreError> {
    let map = |error| map_sqlite_error(&key.run_id, error);
    if head.status == "running"
        && let Some(running) =
            other_running(connection, key.scope(), thread_id, key.run_id.as_str()).map_err(map)?
    {
        return Err(thread_busy(thread_id.to_owned(), running));
    }
    let completion_seq = completion_seq_if(connection, head.ended).map_err(map)?;
    // An insert notifies unless the run is running (`store::notifies`).
    let change_seq = if head.status == "running" {
        None
    } else {
        Some(next_change_seq(connection).map_err(map)?)
    };
    connection
        .prepare_cached(
            "INSERT INTO runs (scope, id, thread_id, agent_id, status, version, \
             created_at_ms, updated_at_ms, head, message_count, pending, lease_holder, \
             lease_expires_at_ms, completion_seq, change_seq) \
             VALUES (?1, ?2, ?3, ?4, ?5, 1, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
        )
        .and_then(|mut insert| {
            insert.execute(params![
                key.scope(),
                key.run_id.as_str(),
                thread_id,
                agent_id,
                head.status,
                created_at_ms,
                head.updated_at_ms,
                head.head,
                head.message_count,
                head.pending,
                head.lease_holder,
                head.lease_expires_at_ms,
                completion_seq,
                change_seq,
            ])
        })
        .map_err(map)?;
    append_messages(connection, key, 0, messages).map_err(map)?;
    write_events(connection, events).map_err(map)?;
    Ok(1)
}

/// A compare-and-swap update ([`Write::Update`]): the run must be at `expected_version` and
/// hold `stored_count` messages; `new_messages` are appended from there.
fn update_run(
    connection: &Connection,
    key: &RunKey,
    (expected_version, stored_count): (i64, i64),
    head: &Head,
    (new_messages, events): (&[String], &[EncodedEvent]),
) -> Result<u64, StoreError> {
    let map = |error| map_sqlite_error(&key.run_id, error);
    if head.status == "running"
        && let Some((thread_id, running)) =
            busy_for_update(connection, key, expected_version).map_err(map)?
    {
        return Err(thread_busy(thread_id, running));
    }
    let completion_seq = completion_seq_if(connection, head.ended).map_err(map)?;
    // A commit that changes the status or leaves the run suspended is stamped with the
    // next change sequence (`store::notifies`; the status before is the row's: `status`
    // on the right of SET is the old value); a running run's own commits are not.
    let change_seq = next_change_seq(connection).map_err(map)?;
    // Only the columns that change are named: SQLite rewrites the entries of every
    // index whose columns an UPDATE sets. The thread, resource, agent and creation
    // time of a run never change.
    let updated = connection
        .prepare_cached(
            "UPDATE runs SET status = ?1, version = version + 1, updated_at_ms = ?2, \
             head = ?3, message_count = ?4, pending = ?5, lease_holder = ?6, \
             lease_expires_at_ms = ?7, completion_seq = COALESCE(completion_seq, ?8), \
             change_seq = CASE WHEN status <> ?1 OR ?1 = 'suspended' \
               THEN ?13 ELSE change_seq END \
             WHERE scope = ?9 AND id = ?10 AND version = ?11 AND message_count = ?12",
        )
        .and_then(|mut update| {
            update.execute(params![
                head.status,
                head.updated_at_ms,
                head.head,
                head.message_count,
                head.pending,
                head.lease_holder,
                head.lease_expires_at_ms,
                completion_seq,
                key.scope(),
                key.run_id.as_str(),
                expected_version,
                stored_count,
                change_seq,
            ])
        })
        .map_err(map)?;
    if updated == 0 {
        return cas_failure(connection, key, expected_version);
    }
    append_messages(connection, key, stored_count, new_messages).map_err(map)?;
    write_events(connection, events).map_err(map)?;
    Ok(u64::try_from(expected_version).unwrap_or(0) + 1)
}

/// Renews a run's lease at `expected_version` ([`Write::Renew`]; the version does not change).
fn renew_lease(
    connection: &Connection,
    key: &RunKey,
    expected_version: i64,
    holder: &str,
    expires_at_ms: i64,
) -> Result<u64, StoreError> {
    let updated = connection
        .prepare_cached(
            "UPDATE runs SET lease_holder = ?1, lease_expires_at_ms = ?2 \
             WHERE scope = ?3 AND id = ?4 AND version = ?5",
        )
        .and_then(|mut update| {
            update.execute(params![
                holder,
                expires_at_ms,
                key.scope(),
                key.run_id.as_str(),
                expected_version
            ])
        })
        .map_err(|error| map_sqlite_error(&key.run_id, error))?;
    if updated == 0 {
        return cas_failure(connection, key, expected_version);
    }
    Ok(u64::try_from(expected_version).unwrap_or(0))
}
