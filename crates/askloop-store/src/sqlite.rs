//! [`SqliteStore`]: runs in one SQLite file, WAL journal, compare-and-swap on a version column.

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{ConnectOptions, Row};

use askloop_core::model::Message;
use askloop_core::store::codec::{
    decode_state, decode_thread_share, encode_state, encode_thread_share,
};
use askloop_core::store::{ListedRun, RunFilter, RunPage, RunState, StoredRun};
use askloop_core::{RunId, RunStatus, RunStore, StoreError, ThreadId};

use crate::error::{OpenError, backend, map_sqlx_error};
use crate::url::OpenOptions;

/// SQLite's `synchronous` setting: how often commits wait for the disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Synchronous {
    /// `NORMAL` (the default): with WAL, a commit survives a process crash; the last commits
    /// before a power loss may be lost, and the database stays consistent.
    #[default]
    Normal,
    /// `FULL`: every commit waits for the disk, so it also survives a power loss.
    Full,
}

impl FromStr for Synchronous {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "normal" => Ok(Self::Normal),
            "full" => Ok(Self::Full),
            other => Err(format!(
                "unknown sync mode {other:?}; expected normal or full"
            )),
        }
    }
}

impl Synchronous {
    /// `"normal"` or `"full"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Normal => "normal",
            Self::Full => "full",
        }
    }
}

/// How many times opening for writing retries after a failed connect or migration (see
/// [`SqliteStore::open_with`]).
const OPEN_RETRIES: u32 = 8;

/// How long a connection waits for another process's write lock before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// A [`RunStore`] in a SQLite file.
///
/// Several processes may open the same file: SQLite serializes their writes, and the version
/// column makes every update a compare-and-swap, so two processes resuming the same run cannot
/// both win.
#[derive(Clone, Debug)]
pub struct SqliteStore {
    pool: SqlitePool,
}

impl SqliteStore {
    /// Opens the database at `path` (creating the file and its folder if needed), in WAL mode
    /// with the given `synchronous` setting, and applies the schema migrations. The same as
    /// [`SqliteStore::open_with`] with default options and this `synchronous` setting.
    ///
    /// # Errors
    /// [`OpenError::CreateDir`], [`OpenError::Connect`], [`OpenError::Migrate`].
    pub async fn open(path: &Path, synchronous: Synchronous) -> Result<Self, OpenError> {
        Self::open_with(path, &OpenOptions::new().synchronous(synchronous)).await
    }

    /// Opens the database at `path` as `options` say.
    ///
    /// For writing: creates the file and its folder when missing (if
    /// [`OpenOptions::create_if_missing()`]), switches it to WAL with the `synchronous` setting
    /// and applies the schema migrations. Read-only ([`OpenOptions::read_only()`]): creates,
    /// migrates and writes nothing; a database that a writer closed in a folder this process
    /// cannot write (where SQLite cannot create the WAL's shared-memory file) is opened as
    /// immutable, since nobody can be writing to it.
    ///
    /// SQL statements are never logged, slow ones included (sqlx logs those as multi-line
    /// warnings by default).
    ///
    /// # Errors
    /// [`OpenError::NotFound`] when the file does not exist and may not be created;
    /// [`OpenError::CreateDir`], [`OpenError::Connect`], [`OpenError::Migrate`].
    pub async fn open_with(path: &Path, options: &OpenOptions) -> Result<Self, OpenError> {
        let url = format!("sqlite://{}", path.display());
        let missing = matches!(path.try_exists(), Ok(false));
        if missing && (options.read_only || !options.create_if_missing) {
            return Err(OpenError::NotFound { url });
        }
        let connect_options = SqliteConnectOptions::new()
            .filename(path)
            .busy_timeout(BUSY_TIMEOUT)
            .disable_statement_logging();
        if options.read_only {
            return Self::open_read_only(connect_options, url).await;
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
        let connect_options = connect_options
            .create_if_missing(options.create_if_missing)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(match options.synchronous {
                Synchronous::Normal => SqliteSynchronous::Normal,
                Synchronous::Full => SqliteSynchronous::Full,
            });
        // One connection per process: SQLite runs one writer at a time anyway, and a single
        // connection keeps its page cache warm (a pool hands connections out in turn, and each
        // would re-read pages the others wrote). Other processes coordinate through the file's
        // locks, waiting up to BUSY_TIMEOUT.
        // SQLite has no migration lock, and switching a new file to WAL takes a short exclusive
        // lock: processes opening a new file at once may fail to connect or to apply a
        // migration. A retry waits for the other and sees the work done.
        let migrator = sqlx::migrate!("./migrations/sqlite");
        let mut attempt = 0;
        let pool = loop {
            let opened = match pool_options().connect_with(connect_options.clone()).await {
                Ok(pool) => match migrator.run(&pool).await {
                    Ok(()) => Ok(pool),
                    Err(source) => Err(OpenError::Migrate {
                        url: url.clone(),
                        source,
                    }),
                },
                Err(source) => Err(OpenError::Connect {
                    url: url.clone(),
                    source,
                }),
            };
            match opened {
                Ok(pool) => break pool,
                Err(_) if attempt < OPEN_RETRIES => {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(25 * u64::from(attempt))).await;
                }
                Err(error) => return Err(error),
            }
        };
        Ok(Self { pool })
    }

    /// Opens an existing database for reading only, as immutable when SQLite cannot set up
    /// WAL reading (a read-only folder without the `-shm` file).
    async fn open_read_only(
        connect_options: SqliteConnectOptions,
        url: String,
    ) -> Result<Self, OpenError> {
        let connect_options = connect_options.read_only(true).create_if_missing(false);
        let first = match connect_and_read(connect_options.clone()).await {
            Ok(pool) => return Ok(Self { pool }),
            Err(error) => error,
        };
        if !is_read_only_refusal(&first) {
            return Err(OpenError::Connect { url, source: first });
        }
        // SQLite opens a WAL database read-only only if it can use (or create) the `-shm`
        // file. When it cannot, no process can be writing to the database either (a writer
        // needs the same files), so reading it as immutable is safe.
        match connect_and_read(connect_options.immutable(true)).await {
            Ok(pool) => Ok(Self { pool }),
            Err(_) => Err(OpenError::Connect { url, source: first }),
        }
    }

    /// Closes the pool, waiting for connections to be returned.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

/// The pool settings: one connection, not pinged before every statement.
fn pool_options() -> SqlitePoolOptions {
    // `test_before_acquire(false)`: the pool would otherwise ping the connection (one more
    // round trip to SQLite's worker thread) before every statement.
    SqlitePoolOptions::new()
        .max_connections(1)
        .test_before_acquire(false)
}

/// Connects and reads the schema, so an unreadable database fails here and not at the first
/// query.
async fn connect_and_read(options: SqliteConnectOptions) -> Result<SqlitePool, sqlx::Error> {
    let pool = pool_options().connect_with(options).await?;
    sqlx::query("SELECT COUNT(*) FROM sqlite_master")
        .fetch_one(&pool)
        .await?;
    Ok(pool)
}

/// Whether SQLite refused a read-only open for want of write access (`SQLITE_READONLY` or
/// `SQLITE_CANTOPEN`, with any extended code).
fn is_read_only_refusal(error: &sqlx::Error) -> bool {
    const SQLITE_READONLY: i32 = 8;
    const SQLITE_CANTOPEN: i32 = 14;
    let sqlx::Error::Database(database) = error else {
        return false;
    };
    database
        .code()
        .and_then(|code| code.parse::<i32>().ok())
        .is_some_and(|code| matches!(code & 0xff, SQLITE_READONLY | SQLITE_CANTOPEN))
}

fn millis(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

const INSERT_RUN: &str = "INSERT INTO runs \
    (id, thread_id, resource_id, agent_id, status, version, created_at_ms, updated_at_ms, state, thread_messages) \
    VALUES (?1, ?2, ?3, ?4, ?5, 1, ?6, ?7, ?8, ?9)";

// The thread, resource and agent of a run never change, so only the columns that do are set:
// SQLite rewrites the entries of every index whose columns an UPDATE names.
const UPDATE_RUN: &str = "UPDATE runs SET status = ?1, version = version + 1, updated_at_ms = ?2, \
    state = ?3, thread_messages = ?4 WHERE id = ?5 AND version = ?6";

/// Binds a run's columns to [`INSERT_RUN`].
fn insert_query<'q>(
    state: &'q RunState,
    text: String,
    thread_messages: Option<String>,
) -> sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments> {
    sqlx::query(INSERT_RUN)
        .bind(state.run_id().as_str())
        .bind(state.thread_id().as_str())
        .bind(state.resource_id().map(|id| id.as_str()))
        .bind(state.agent_id().as_str())
        .bind(state.status().as_str())
        .bind(millis(state.created_at_ms()))
        .bind(millis(state.updated_at_ms()))
        .bind(text)
        .bind(thread_messages)
}

/// Binds a run's columns to [`UPDATE_RUN`].
fn update_query<'q>(
    state: &'q RunState,
    text: String,
    thread_messages: Option<String>,
    expected_version: i64,
) -> sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments> {
    sqlx::query(UPDATE_RUN)
        .bind(state.status().as_str())
        .bind(millis(state.updated_at_ms()))
        .bind(text)
        .bind(thread_messages)
        .bind(state.run_id().as_str())
        .bind(expected_version)
}

#[async_trait]
impl RunStore for SqliteStore {
    async fn insert_run(&self, state: &RunState) -> Result<u64, StoreError> {
        // One statement, so SQLite commits it atomically on its own.
        insert_query(state, encode_state(state)?, encode_thread_share(state)?)
            .execute(&self.pool)
            .await
            .map_err(|error| map_sqlx_error(state.run_id(), error))?;
        Ok(1)
    }

    async fn update_run(&self, state: &RunState, expected_version: u64) -> Result<u64, StoreError> {
        let map = |error| map_sqlx_error(state.run_id(), error);
        let expected = i64::try_from(expected_version).unwrap_or(i64::MAX);
        // One statement: the compare-and-swap is its `version = ?` condition, and a completing
        // update records the thread's share in the same row, so both happen or neither does.
        let updated = update_query(
            state,
            encode_state(state)?,
            encode_thread_share(state)?,
            expected,
        )
        .execute(&self.pool)
        .await
        .map_err(map)?
        .rows_affected();
        if updated == 1 {
            return Ok(expected_version + 1);
        }
        let exists: Option<i64> = sqlx::query_scalar("SELECT 1 FROM runs WHERE id = ?1")
            .bind(state.run_id().as_str())
            .fetch_optional(&self.pool)
            .await
            .map_err(map)?;
        Err(match exists {
            Some(_) => StoreError::Conflict {
                run_id: state.run_id().clone(),
                expected_version,
            },
            None => StoreError::NotFound {
                run_id: state.run_id().clone(),
            },
        })
    }

    async fn load_run(&self, run_id: &RunId) -> Result<StoredRun, StoreError> {
        let row = sqlx::query("SELECT version, state FROM runs WHERE id = ?1")
            .bind(run_id.as_str())
            .fetch_optional(&self.pool)
            .await
            .map_err(|error| map_sqlx_error(run_id, error))?
            .ok_or_else(|| StoreError::NotFound {
                run_id: run_id.clone(),
            })?;
        let version: i64 = row
            .try_get("version")
            .map_err(|error| map_sqlx_error(run_id, error))?;
        let text: String = row
            .try_get("state")
            .map_err(|error| map_sqlx_error(run_id, error))?;
        Ok(StoredRun::new(
            decode_state(run_id, &text)?,
            u64::try_from(version).unwrap_or(0),
        ))
    }

    async fn list_runs(&self, filter: &RunFilter) -> Result<RunPage, StoreError> {
        // One row more than asked for says whether there is a next page.
        let limit = filter.limit.map_or(-1, |limit| {
            i64::try_from(limit.saturating_add(1)).unwrap_or(i64::MAX)
        });
        let cursor = filter.cursor.as_ref();
        let rows = sqlx::query(
            "SELECT id, created_at_ms, state FROM runs \
             WHERE (?1 IS NULL OR status = ?1) AND (?2 IS NULL OR thread_id = ?2) \
               AND (?3 IS NULL OR resource_id = ?3) AND (?4 IS NULL OR agent_id = ?4) \
               AND (?5 IS NULL OR created_at_ms < ?5 OR (created_at_ms = ?5 AND id < ?6)) \
             ORDER BY created_at_ms DESC, id DESC LIMIT ?7",
        )
        .bind(filter.status.map(RunStatus::as_str))
        .bind(filter.thread_id.as_ref().map(|id| id.as_str()))
        .bind(filter.resource_id.as_ref().map(|id| id.as_str()))
        .bind(filter.agent_id.as_ref().map(|id| id.as_str()))
        .bind(cursor.map(|cursor| millis(cursor.created_at_ms)))
        .bind(cursor.map(|cursor| cursor.run_id.as_str()))
        .bind(limit)
        .fetch_all(&self.pool)
        .await
        .map_err(backend)?;
        let mut runs = Vec::with_capacity(rows.len());
        for row in &rows {
            let run_id = RunId::new(row.try_get::<String, _>("id").map_err(backend)?);
            let created_at_ms = row.try_get::<i64, _>("created_at_ms").map_err(backend)?;
            let text: String = row.try_get("state").map_err(backend)?;
            runs.push(match decode_state(&run_id, &text) {
                Ok(state) => ListedRun::Run(state.summary()),
                Err(error) => ListedRun::Unreadable {
                    run_id,
                    created_at_ms: u64::try_from(created_at_ms).unwrap_or(0),
                    error,
                },
            });
        }
        Ok(RunPage::from_rows(runs, filter.limit))
    }

    async fn thread_messages(&self, thread_id: &ThreadId) -> Result<Vec<Message>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, thread_messages FROM runs \
             WHERE thread_id = ?1 AND thread_messages IS NOT NULL ORDER BY updated_at_ms, rowid",
        )
        .bind(thread_id.as_str())
        .fetch_all(&self.pool)
        .await
        .map_err(backend)?;
        let mut messages = Vec::new();
        for row in &rows {
            let run_id = RunId::new(row.try_get::<String, _>("id").map_err(backend)?);
            let text: String = row.try_get("thread_messages").map_err(backend)?;
            messages.extend(decode_thread_share(&run_id, &text)?);
        }
        Ok(messages)
    }

    async fn close(&self) {
        self.pool.close().await;
    }
}
