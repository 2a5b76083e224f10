//! [`SqliteStore`]: runs in one SQLite file (WAL journal): one writer thread committing in
//! groups, reads on a small pool of read-only connections, compare-and-swap on a version column.
//!
//! - `schema.rs` — the migrations (`rusqlite_migration`) and the upgrade of format-1
//!   databases;
//! - `writer.rs` — the writer thread and its group commit;
//! - `checkpoint.rs` — the thread that copies the WAL back into the database, off the commit
//!   path;
//! - `read.rs` — the read pool and every query;
//! - `columns.rs` — a run's row, encoded on the caller's thread, and summaries from columns;
//! - `outbox.rs` — the outbox: events written with their commit, webhook deliveries;
//! - `links.rs` — answer links: their writes on the writer thread, their reads;
//! - `store.rs` — the [`RunStore`](askloop_core::RunStore) implementation;
//! - `error.rs` — SQLite's errors mapped to store errors;
//! - `url.rs` — `sqlite://` store URLs.
//!
//! The PostgreSQL store (`postgres/`) has the same file for the same concern: `store.rs`,
//! `error.rs`, `schema.rs`, `url.rs`.

mod checkpoint;
mod columns;
mod error;
mod links;
mod outbox;
mod read;
mod schema;
mod store;
pub(crate) mod url;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use askloop_core::StoreError;

use crate::error::OpenError;
use crate::known::KnownRuns;
use crate::options::{OpenOptions, Synchronous};
use crate::sqlite::checkpoint::Checkpointer;
use crate::sqlite::error::{is_read_only_refusal, sqlite_open_cause};
use crate::sqlite::read::{ReadMode, Readers, open_reader, tune};
use crate::sqlite::writer::Writer;

/// How many times opening for writing retries after a failed open or migration (see
/// [`SqliteStore::open_with`]).
const OPEN_RETRIES: u32 = 8;

/// A [`RunStore`](askloop_core::RunStore) in a SQLite file.
///
/// Several processes may open the same file: SQLite serializes their writes, and the version
/// column makes every update a compare-and-swap, so two processes resuming the same run cannot
/// both win. Within a process, one thread writes (committing the queued commits of every run
/// together, see [`Synchronous::Full`]) and reads run on the calling thread over a small pool
/// of read-only connections; each read is one indexed statement.
///
/// Cloning is cheap and shares the connections.
#[derive(Clone, Debug)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// `None` when opened read-only.
    writer: Option<Writer>,
    readers: Readers,
    /// The runs this store committed or loaded: their version and stored messages, so an
    /// update at that version needs no read to know which messages are new, and a load reads
    /// and decodes only the messages it does not hold.
    known: KnownRuns,
}

impl SqliteStore {
    /// Opens the database at `path` for writing with this durability (creating the file and
    /// its folder if needed) and brings its schema up to date. The same as
    /// [`SqliteStore::open_with`] with default options.
    ///
    /// # Errors
    /// [`OpenError::CreateDir`], [`OpenError::Connect`], [`OpenError::Migrate`].
    pub async fn open(path: &Path, synchronous: Synchronous) -> Result<Self, OpenError> {
        Self::open_with(path, synchronous, &OpenOptions::new()).await
    }

    /// Opens the database at `path` as `options` say.
    ///
    /// For writing: creates the file and its folder when missing (if
    /// [`OpenOptions::create_if_missing()`]), switches it to WAL with the `synchronous`
    /// setting, and migrates it to the current schema — a database of format 1 (made by
    /// askloop's former sqlx store) is upgraded in place, atomically. Read-only
    /// ([`OpenOptions::read_only()`]): creates, migrates and writes nothing (`synchronous` is
    /// then irrelevant); a database that a writer closed in a folder this process cannot write
    /// (where SQLite cannot create the WAL's shared-memory file) is opened as immutable, since
    /// nobody can be writing to it.
    ///
    /// Opening is blocking work (file system, migration) and runs on tokio's blocking pool.
    /// SQL statements are never logged.
    ///
    /// # Errors
    /// [`OpenError::NotFound`] when the file does not exist and may not be created;
    /// [`OpenError::IsDirectory`] when the path is a folder;
    /// [`OpenError::CreateDir`], [`OpenError::Connect`], [`OpenError::Migrate`] (also for a
    /// schema newer than this build's), [`OpenError::SchemaVersion`] for a read-only open of a
    /// schema this build does not read as it is.
    pub async fn open_with(
        path: &Path,
        synchronous: Synchronous,
        options: &OpenOptions,
    ) -> Result<Self, OpenError> {
        let path = path.to_path_buf();
        let options = *options;
        let url = crate::sqlite::url::shown(&path, synchronous);
        if path.is_dir() {
            return Err(OpenError::IsDirectory {
                path: path.display().to_string(),
            });
        }
        let missing = matches!(path.try_exists(), Ok(false));
        if missing && (options.read_only || !options.create_if_missing) {
            return Err(OpenError::NotFound { url });
        }
        if options.read_only {
            let shown = url.clone();
            return tokio::task::spawn_blocking(move || open_read_only(path, url))
                .await
                .map_err(|error| OpenError::Connect {
                    url: shown,
                    source: Box::new(error),
                })?;
        }
        if let Some(parent) = path
            .parent()
            .filter(|parent| !parent.as_os_str().is_empty())
        {
            std::fs::create_dir_all(parent).map_err(|source| OpenError::CreateDir {
                path: parent.display().to_string(),
                source,
            })?;
        }
        // SQLite has no migration lock, and switching a new file to WAL takes a short
        // exclusive lock: processes opening a new file at once may fail to open or to migrate
        // it. A retry waits for the other and sees the work done.
        let mut attempt = 0;
        loop {
            let opening = {
                let path = path.clone();
                let url = url.clone();
                tokio::task::spawn_blocking(move || {
                    open_writable(path, url, synchronous, options.create_if_missing)
                })
            };
            let opened = opening.await.map_err(|error| OpenError::Connect {
                url: url.clone(),
                source: Box::new(error),
            })?;
            match opened {
                Ok(store) => return Ok(store),
                Err(OpenError::Migrate { .. } | OpenError::Connect { .. })
                    if attempt < OPEN_RETRIES =>
                {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(25 * u64::from(attempt))).await;
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// Commits what is queued and closes every connection (the last one to close folds the
    /// WAL back into the database and removes the `-wal` and `-shm` files). Calls after it
    /// fail with [`StoreError::Backend`].
    pub async fn close(&self) {
        self.inner.readers.close();
        if let Some(writer) = &self.inner.writer {
            writer.close().await;
        }
    }

    /// Runs a short read: on the writer's connection when it is free (warm cache), else on
    /// the read pool.
    fn point_read<T>(
        &self,
        read: impl Fn(&Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        if let Some(result) = self
            .inner
            .writer
            .as_ref()
            .and_then(|writer| writer.try_read(&read))
        {
            return result;
        }
        self.inner.readers.with(read)
    }

    /// The writer, or [`StoreError::ReadOnly`].
    fn writer(&self) -> Result<&Writer, StoreError> {
        self.inner.writer.as_ref().ok_or(StoreError::ReadOnly)
    }
}

/// SQLite kept another journal mode than WAL (e.g. a database on a file system without shared
/// memory).
#[derive(Debug, thiserror::Error)]
#[error("the database stays in journal mode {mode}, not WAL")]
struct NotWal {
    mode: String,
}

/// Opens for writing: the writer connection (WAL, `synchronous`), the migrations, the writer
/// thread, and the read pool.
fn open_writable(
    path: PathBuf,
    url: String,
    synchronous: Synchronous,
    create: bool,
) -> Result<SqliteStore, OpenError> {
    let connect = |source: rusqlite::Error| OpenError::Connect {
        url: url.clone(),
        source: sqlite_open_cause(source, &path),
    };
    let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    if create {
        flags |= OpenFlags::SQLITE_OPEN_CREATE;
    }
    let mut connection = Connection::open_with_flags(&path, flags).map_err(connect)?;
    tune(&connection, 32).map_err(connect)?;
    let mode: String = connection
        .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
        .map_err(connect)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(OpenError::Connect {
            url,
            source: Box::new(NotWal { mode }),
        });
    }
    connection
        .pragma_update(None, "synchronous", synchronous.as_str())
        .map_err(connect)?;
    schema::migrate(&mut connection).map_err(|source| OpenError::Migrate {
        url: url.clone(),
        source: Box::new(source),
    })?;
    connection
        .pragma_update(None, "wal_autocheckpoint", checkpoint::SAFETY_NET_PAGES)
        .map_err(connect)?;
    let checkpoint_connection = Connection::open_with_flags(
        &path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(connect)?;
    tune(&checkpoint_connection, 16).map_err(connect)?;
    let spawn_failed = |source| OpenError::Connect {
        url: url.clone(),
        source: Box::new(source),
    };
    let checkpointer = Checkpointer::start(checkpoint_connection).map_err(spawn_failed)?;
    let writer = Writer::start(connection, checkpointer, synchronous == Synchronous::Normal)
        .map_err(spawn_failed)?;
    let first_reader = open_reader(&path, &ReadMode::Shared).map_err(connect)?;
    Ok(SqliteStore {
        inner: Arc::new(Inner {
            writer: Some(writer),
            readers: Readers::new(path, ReadMode::Shared, Some(first_reader)),
            known: KnownRuns::default(),
        }),
    })
}

/// Opens an existing database for reading only, as immutable when SQLite cannot set up WAL
/// reading (a read-only folder without the `-shm` file); checks its schema version.
fn open_read_only(path: PathBuf, url: String) -> Result<SqliteStore, OpenError> {
    let (connection, mode) = match open_reader(&path, &ReadMode::Shared) {
        Ok(connection) => (connection, ReadMode::Shared),
        Err(first) if is_read_only_refusal(&first) => {
            // SQLite opens a WAL database read-only only if it can use (or create) the `-shm`
            // file. When it cannot, no process can be writing to the database either (a
            // writer needs the same files), so reading it as immutable is safe.
            match open_reader(&path, &ReadMode::Immutable) {
                Ok(connection) => (connection, ReadMode::Immutable),
                Err(_) => {
                    return Err(OpenError::Connect {
                        url,
                        source: sqlite_open_cause(first, &path),
                    });
                }
            }
        }
        Err(error) => {
            return Err(OpenError::Connect {
                url,
                source: sqlite_open_cause(error, &path),
            });
        }
    };
    let found = schema::version(&connection).map_err(|source| OpenError::Connect {
        url: url.clone(),
        source: sqlite_open_cause(source, &path),
    })?;
    if found != schema::SCHEMA_VERSION {
        return Err(OpenError::SchemaVersion {
            url,
            found,
            supported: schema::SCHEMA_VERSION,
        });
    }
    Ok(SqliteStore {
        inner: Arc::new(Inner {
            writer: None,
            readers: Readers::new(path, mode, Some(connection)),
            known: KnownRuns::default(),
        }),
    })
}
