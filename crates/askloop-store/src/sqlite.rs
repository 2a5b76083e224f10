//! [`SqliteStore`]: runs in one SQLite file, WAL journal, compare-and-swap on a version column.

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{Row, SqliteConnection};

use askloop_core::{
    Message, RunFilter, RunId, RunState, RunStatus, RunStore, StoreError, StoredRun, ThreadId,
};

use crate::error::{OpenError, backend, map_sqlx_error};

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
    /// with the given `synchronous` setting, and applies the schema migrations.
    ///
    /// # Errors
    /// [`OpenError::CreateDir`], [`OpenError::Connect`], [`OpenError::Migrate`].
    pub async fn open(path: &Path, synchronous: Synchronous) -> Result<Self, OpenError> {
        let url = format!("sqlite://{}", path.display());
        if let Some(parent) = path
            .parent()
            .filter(|parent| !parent.as_os_str().is_empty())
        {
            std::fs::create_dir_all(parent).map_err(|source| OpenError::CreateDir {
                path: parent.display().to_string(),
                source,
            })?;
        }
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(match synchronous {
                Synchronous::Normal => SqliteSynchronous::Normal,
                Synchronous::Full => SqliteSynchronous::Full,
            })
            .busy_timeout(BUSY_TIMEOUT);
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await
            .map_err(|source| OpenError::Connect {
                url: url.clone(),
                source,
            })?;
        sqlx::migrate!("./migrations/sqlite")
            .run(&pool)
            .await
            .map_err(|source| OpenError::Migrate { url, source })?;
        Ok(Self { pool })
    }

    /// Closes the pool, waiting for connections to be returned.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

fn encode(state: &RunState) -> Result<String, StoreError> {
    serde_json::to_string(state).map_err(|source| StoreError::Corrupt {
        run_id: state.run_id.clone(),
        source,
    })
}

fn decode(run_id: &str, text: &str) -> Result<RunState, StoreError> {
    let state: RunState = serde_json::from_str(text).map_err(|source| StoreError::Corrupt {
        run_id: RunId::new(run_id),
        source,
    })?;
    state
        .check_format()
        .map_err(|format_version| StoreError::UnsupportedFormat {
            run_id: RunId::new(run_id),
            format_version,
        })?;
    Ok(state)
}

fn millis(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// Appends the run's own messages to its thread, once per run.
async fn append_thread(
    connection: &mut SqliteConnection,
    state: &RunState,
) -> Result<(), StoreError> {
    let map = |error| map_sqlx_error(&state.run_id, error);
    let already: Option<i64> =
        sqlx::query_scalar("SELECT 1 FROM thread_messages WHERE run_id = ?1 LIMIT 1")
            .bind(state.run_id.as_str())
            .fetch_optional(&mut *connection)
            .await
            .map_err(map)?;
    if already.is_some() {
        return Ok(());
    }
    let last: i64 = sqlx::query_scalar(
        "SELECT COALESCE(MAX(seq), 0) FROM thread_messages WHERE thread_id = ?1",
    )
    .bind(state.thread_id.as_str())
    .fetch_one(&mut *connection)
    .await
    .map_err(map)?;
    for (offset, message) in state.run_messages().iter().enumerate() {
        let text = serde_json::to_string(message).map_err(|source| StoreError::Corrupt {
            run_id: state.run_id.clone(),
            source,
        })?;
        let seq = last + 1 + i64::try_from(offset).unwrap_or(i64::MAX - last - 1);
        sqlx::query(
            "INSERT INTO thread_messages (thread_id, seq, run_id, message) VALUES (?1, ?2, ?3, ?4)",
        )
        .bind(state.thread_id.as_str())
        .bind(seq)
        .bind(state.run_id.as_str())
        .bind(text)
        .execute(&mut *connection)
        .await
        .map_err(map)?;
    }
    Ok(())
}

#[async_trait]
impl RunStore for SqliteStore {
    async fn insert_run(&self, state: &RunState) -> Result<u64, StoreError> {
        let map = |error| map_sqlx_error(&state.run_id, error);
        let text = encode(state)?;
        let mut transaction = self.pool.begin().await.map_err(backend)?;
        sqlx::query(
            "INSERT INTO runs (id, thread_id, resource_id, agent_id, status, version, created_at_ms, updated_at_ms, state) \
             VALUES (?1, ?2, ?3, ?4, ?5, 1, ?6, ?7, ?8)",
        )
        .bind(state.run_id.as_str())
        .bind(state.thread_id.as_str())
        .bind(state.resource_id.as_ref().map(|id| id.as_str()))
        .bind(state.agent_id.as_str())
        .bind(state.status.as_str())
        .bind(millis(state.created_at_ms))
        .bind(millis(state.updated_at_ms))
        .bind(text)
        .execute(&mut *transaction)
        .await
        .map_err(map)?;
        if state.status == RunStatus::Completed {
            append_thread(&mut transaction, state).await?;
        }
        transaction.commit().await.map_err(map)?;
        Ok(1)
    }

    async fn update_run(&self, state: &RunState, expected_version: u64) -> Result<u64, StoreError> {
        let map = |error| map_sqlx_error(&state.run_id, error);
        let text = encode(state)?;
        let expected = i64::try_from(expected_version).unwrap_or(i64::MAX);
        let mut transaction = self.pool.begin().await.map_err(backend)?;
        let updated = sqlx::query(
            "UPDATE runs SET thread_id = ?1, resource_id = ?2, status = ?3, version = version + 1, \
             updated_at_ms = ?4, state = ?5 WHERE id = ?6 AND version = ?7",
        )
        .bind(state.thread_id.as_str())
        .bind(state.resource_id.as_ref().map(|id| id.as_str()))
        .bind(state.status.as_str())
        .bind(millis(state.updated_at_ms))
        .bind(text)
        .bind(state.run_id.as_str())
        .bind(expected)
        .execute(&mut *transaction)
        .await
        .map_err(map)?
        .rows_affected();
        if updated == 0 {
            let exists: Option<i64> = sqlx::query_scalar("SELECT 1 FROM runs WHERE id = ?1")
                .bind(state.run_id.as_str())
                .fetch_optional(&mut *transaction)
                .await
                .map_err(map)?;
            return Err(match exists {
                Some(_) => StoreError::Conflict {
                    run_id: state.run_id.clone(),
                    expected_version,
                },
                None => StoreError::NotFound {
                    run_id: state.run_id.clone(),
                },
            });
        }
        if state.status == RunStatus::Completed {
            append_thread(&mut transaction, state).await?;
        }
        transaction.commit().await.map_err(map)?;
        Ok(expected_version + 1)
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
        Ok(StoredRun {
            state: decode(run_id.as_str(), &text)?,
            version: u64::try_from(version).unwrap_or(0),
        })
    }

    async fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunState>, StoreError> {
        let limit = filter
            .limit
            .map_or(-1, |limit| i64::try_from(limit).unwrap_or(i64::MAX));
        let rows = sqlx::query(
            "SELECT id, state FROM runs \
             WHERE (?1 IS NULL OR status = ?1) AND (?2 IS NULL OR thread_id = ?2) AND (?3 IS NULL OR resource_id = ?3) \
             ORDER BY created_at_ms DESC, id DESC LIMIT ?4",
        )
        .bind(filter.status.map(RunStatus::as_str))
        .bind(filter.thread_id.as_ref().map(|id| id.as_str()))
        .bind(filter.resource_id.as_ref().map(|id| id.as_str()))
        .bind(limit)
        .fetch_all(&self.pool)
        .await
        .map_err(backend)?;
        rows.iter()
            .map(|row| {
                let id: String = row.try_get("id").map_err(backend)?;
                let text: String = row.try_get("state").map_err(backend)?;
                decode(&id, &text)
            })
            .collect()
    }

    async fn thread_messages(&self, thread_id: &ThreadId) -> Result<Vec<Message>, StoreError> {
        let rows = sqlx::query(
            "SELECT run_id, message FROM thread_messages WHERE thread_id = ?1 ORDER BY seq",
        )
        .bind(thread_id.as_str())
        .fetch_all(&self.pool)
        .await
        .map_err(backend)?;
        rows.iter()
            .map(|row| {
                let run_id: String = row.try_get("run_id").map_err(backend)?;
                let text: String = row.try_get("message").map_err(backend)?;
                serde_json::from_str(&text).map_err(|source| StoreError::Corrupt {
                    run_id: RunId::new(run_id),
                    source,
                })
            })
            .collect()
    }
}
