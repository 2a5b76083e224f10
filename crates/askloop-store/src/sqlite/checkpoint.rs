//! The checkpointer: a thread with its own connection that copies the WAL back into the
//! database (`wal_checkpoint(PASSIVE)`) every [`COMMITS_PER_CHECKPOINT`] commits, so that no
//! commit pays for a checkpoint (its page writes and, even under `synchronous=NORMAL`, two
//! fsyncs). A passive checkpoint runs beside the writer and the readers and never blocks them.
//! The writer's own automatic checkpoint stays as a safety net at [`SAFETY_NET_PAGES`].

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use rusqlite::Connection;

/// Commits between two checkpoints: a few thousand WAL pages (a run's commit writes about ten
/// pages — its row, the indexes it changes, its messages and events; commits grouped in one
/// transaction share theirs). Each checkpoint costs two fsyncs (the WAL's, the database's) that
/// queue on the same disk as the commits' own, rewrites the pages that changed since the last
/// one however often they changed, and lets the next writer restart the WAL, whose new header
/// it must sync even under `synchronous=NORMAL`: so checkpoints are rare, and the WAL stays at a
/// few tens of MB at most. It must come well before [`SAFETY_NET_PAGES`]: 512 commits of up to
/// ~15 pages each stay under half of it.
const COMMITS_PER_CHECKPOINT: u32 = 512;

/// The writer's automatic checkpoint, for when the checkpointer falls behind (WAL pages, 64 MB
/// of 4 KB pages). When it fires, the commit that reaches it copies the WAL back itself, two
/// fsyncs included, on the caller's thread: issue 36's profile of sequential `normal` cycles
/// found it there (3.4% of the time, plus its fsyncs' waits) when it was 10,000 pages, below
/// what 1,024 commits write.
pub(super) const SAFETY_NET_PAGES: u32 = 16_384;

#[derive(Debug, Default)]
struct Signal {
    wanted: bool,
    stopping: bool,
}

#[derive(Debug, Default)]
struct Shared {
    signal: Mutex<Signal>,
    wake: Condvar,
}

/// The handle to the checkpointer thread; dropping it stops the thread.
#[derive(Debug)]
pub(super) struct Checkpointer {
    shared: Arc<Shared>,
    commits: AtomicU32,
    thread: Mutex<Option<JoinHandle<()>>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Checkpointer {
    /// Starts the thread on `connection` (read-write, to the store's database).
    ///
    /// # Errors
    /// The I/O error of spawning the thread.
    pub(super) fn start(connection: Connection) -> std::io::Result<Self> {
        let shared = Arc::new(Shared::default());
        let thread = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("askloop-sqlite-checkpoint".into())
                .spawn(move || run(&shared, connection))?
        };
        Ok(Self {
            shared,
            commits: AtomicU32::new(0),
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Counts `requests` committed; asks for a checkpoint every [`COMMITS_PER_CHECKPOINT`].
    pub(super) fn committed(&self, requests: usize) {
        let requests = u32::try_from(requests).unwrap_or(u32::MAX);
        let before = self.commits.fetch_add(requests, Ordering::Relaxed);
        if before / COMMITS_PER_CHECKPOINT != before.wrapping_add(requests) / COMMITS_PER_CHECKPOINT
        {
            lock(&self.shared.signal).wanted = true;
            self.shared.wake.notify_one();
        }
    }

    /// Stops the thread and closes its connection (waits for a checkpoint in progress).
    pub(super) fn stop(&self) {
        lock(&self.shared.signal).stopping = true;
        self.shared.wake.notify_one();
        let thread = lock(&self.thread).take();
        if let Some(thread) = thread
            && thread.join().is_err()
        {
            tracing::warn!("the SQLite checkpoint thread panicked");
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        lock(&self.shared.signal).stopping = true;
        self.shared.wake.notify_one();
    }
}

fn run(shared: &Shared, connection: Connection) {
    loop {
        {
            let mut signal = lock(&shared.signal);
            while !signal.wanted && !signal.stopping {
                signal = shared
                    .wake
                    .wait(signal)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            if signal.stopping {
                break;
            }
            signal.wanted = false;
        }
        // PASSIVE copies what no reader still needs and never waits; the rest goes next time.
        if let Err(error) = connection.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
            tracing::debug!(error = %error, "WAL checkpoint");
        }
    }
    if let Err((_, error)) = connection.close() {
        tracing::warn!(error = %error, "closing the SQLite checkpoint connection failed");
    }
}
