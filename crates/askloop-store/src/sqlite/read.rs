//! Reads: a small pool of read-only connections (WAL lets them read while the writer commits),
//! each with its cache of prepared statements. Every read is one statement, so it sees one
//! committed snapshot.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use askloop_core::store::codec;
use askloop_core::store::{
    FIRST_MESSAGE_CHARS, Lease, ListedRun, RunCounts, RunFilter, RunPage, ThreadHistory,
};
use askloop_core::{LeaseHolder, RunId, RunKey, RunStatus, StoreError, ThreadKey};
use rusqlite::types::Value as SqlValue;
use rusqlite::{Connection, OpenFlags, OptionalExtension, params, params_from_iter};

use crate::sqlite::columns::{CURRENT_HEAD_PREFIX, ListedColumns, millis, summary, unsigned};
use crate::sqlite::error::{backend, map_sqlite_error};

/// Idle read connections kept open.
const MAX_IDLE: usize = 4;

/// Prepared statements cached per connection (listing has one per filter combination).
const STATEMENT_CACHE: usize = 64;

/// How long a connection waits for another's lock before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a read was refused: the store is closed.
#[derive(Debug, thiserror::Error)]
#[error("the store is closed")]
struct Closed;

/// How to open a read connection.
#[derive(Clone, Debug)]
pub(super) enum ReadMode {
    /// Read-only, with WAL reading (the `-shm` file is usable).
    Shared,
    /// As immutable: nobody can be writing (a read-only folder without the `-shm` file).
    Immutable,
}

/// A pool of read-only connections, opened on demand.
#[derive(Debug)]
pub(super) struct Readers {
    path: PathBuf,
    mode: ReadMode,
    idle: Mutex<Vec<Connection>>,
    closed: AtomicBool,
}

/// Opens one read-only connection to `path` and reads the schema version through it, so that
/// an unreadable database fails here and not at the first query.
pub(super) fn open_reader(path: &Path, mode: &ReadMode) -> rusqlite::Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let connection = match mode {
        ReadMode::Shared => Connection::open_with_flags(path, flags)?,
        ReadMode::Immutable => {
            Connection::open_with_flags(immutable_uri(path), flags | OpenFlags::SQLITE_OPEN_URI)?
        }
    };
    tune(&connection, STATEMENT_CACHE)?;
    crate::sqlite::schema::version(&connection)?;
    Ok(connection)
}

/// What every connection of the store gets: the busy timeout, a statement cache of
/// `statements` entries, and SQLite's query planner stability guarantee (QPSG). Without it, a
/// statement with a bound parameter the planner may look at — `LIMIT ?N` in every listing, and,
/// as this SQLite is built with `SQLITE_ENABLE_STAT4`, one compared with an indexed column — is
/// compiled again on every run (each bind expires it; `sqlite3_stmt_status` counts these as
/// re-prepares): issue 36's profile of the HTTP benchmark found the listing that resolves a run
/// id re-parsed on every resume, ~7 % of the server's time. The plans are the same, as the
/// store never runs `ANALYZE`.
pub(super) fn tune(connection: &Connection, statements: usize) -> rusqlite::Result<()> {
    connection.busy_timeout(BUSY_TIMEOUT)?;
    connection.set_prepared_statement_cache_capacity(statements);
    connection.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )?;
    Ok(())
}

/// `file:PATH?immutable=1`, with the characters a URI gives meaning to escaped.
fn immutable_uri(path: &Path) -> String {
    let mut uri = String::from("file:");
    for character in path.to_string_lossy().chars() {
        match character {
            '%' => uri.push_str("%25"),
            '?' => uri.push_str("%3f"),
            '#' => uri.push_str("%23"),
            other => uri.push(other),
        }
    }
    uri.push_str("?immutable=1");
    uri
}

impl Readers {
    /// A pool over `path`, starting with `first` (already open).
    pub(super) fn new(path: PathBuf, mode: ReadMode, first: Option<Connection>) -> Self {
        Self {
            path,
            mode,
            idle: Mutex::new(first.into_iter().collect()),
            closed: AtomicBool::new(false),
        }
    }

    /// Runs `read` on an idle connection (or a new one), then puts the connection back.
    pub(super) fn with<T>(
        &self,
        read: impl FnOnce(&Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(StoreError::backend(Closed));
        }
        let idle = self
            .idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop();
        let connection = match idle {
            Some(connection) => connection,
            None => open_reader(&self.path, &self.mode).map_err(backend)?,
        };
        let result = read(&connection);
        if !self.closed.load(Ordering::Acquire) {
            let mut idle = self
                .idle
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if idle.len() < MAX_IDLE {
                idle.push(connection);
            }
        }
        result
    }

    /// Closes the idle connections; connections in use are closed when their read ends.
    pub(super) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let idle = std::mem::take(
            &mut *self
                .idle
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        for connection in idle {
            if let Err((_, error)) = connection.close() {
                tracing::warn!(error = %error, "closing a SQLite read connection failed");
            }
        }
    }
}

/// The run's stored version and message count, if it exists.
pub(super) fn version_and_count(
    connection: &Connection,
    run: &RunKey,
) -> Result<Option<(i64, i64)>, StoreError> {
    connection
        .prepare_cached("SELECT version, message_count FROM runs WHERE scope = ?1 AND id = ?2")
        .and_then(|mut select| {
            select
                .query_row(params![run.scope(), run.run_id.as_str()], |row| {
                    Ok((row.get(0)?, row.get(1)?))
                })
                .optional()
        })
        .map_err(|error| map_sqlite_error(&run.run_id, error))
}

/// A run's row as read: version, head, lease, message count, and the message texts past
/// those the caller holds.
pub(super) struct RunRow {
    pub(super) version: u64,
    pub(super) head: String,
    pub(super) lease: Option<Lease>,
    /// How many messages the run has stored.
    pub(super) message_count: usize,
    /// The stored messages from the position asked for to the last, in order.
    pub(super) messages: Vec<String>,
}

/// A run's version, head, lease and message count, and its messages from position `from` on,
/// read by one statement (one snapshot). Decoding is left to the caller, off the connection.
pub(super) fn load_run(
    connection: &Connection,
    run: &RunKey,
    from: usize,
) -> Result<RunRow, StoreError> {
    let run_id = &run.run_id;
    let map = |error| map_sqlite_error(run_id, error);
    let mut select = connection
        .prepare_cached(
            "SELECT r.version, r.head, r.lease_holder, r.lease_expires_at_ms, r.message_count, \
               m.body \
             FROM runs r LEFT JOIN run_messages m \
               ON m.scope = r.scope AND m.run_id = r.id AND m.seq >= ?3 \
              AND m.seq < r.message_count \
             WHERE r.scope = ?1 AND r.id = ?2 ORDER BY m.seq",
        )
        .map_err(map)?;
    let from = i64::try_from(from).unwrap_or(i64::MAX);
    let mut rows = select
        .query(params![run.scope(), run_id.as_str(), from])
        .map_err(map)?;
    let Some(first) = rows.next().map_err(map)? else {
        return Err(StoreError::NotFound {
            run_id: run_id.clone(),
        });
    };
    let version: i64 = first.get(0).map_err(map)?;
    let head = head_text(first, 1).map_err(map)?;
    let holder: Option<String> = first.get(2).map_err(map)?;
    let expires_at_ms: Option<i64> = first.get(3).map_err(map)?;
    let message_count: i64 = first.get(4).map_err(map)?;
    let mut messages: Vec<String> = Vec::new();
    if let Some(body) = first.get::<_, Option<String>>(5).map_err(map)? {
        messages.push(body);
    }
    while let Some(row) = rows.next().map_err(map)? {
        if let Some(body) = row.get::<_, Option<String>>(5).map_err(map)? {
            messages.push(body);
        }
    }
    let lease = holder.zip(expires_at_ms).map(|(holder, expires_at_ms)| {
        Lease::new(LeaseHolder::new(holder), unsigned(expires_at_ms))
    });
    Ok(RunRow {
        version: unsigned(version),
        head,
        lease,
        message_count: usize::try_from(message_count).unwrap_or(0),
        messages,
    })
}

/// Runs by status: one `GROUP BY` over the status index; a status the core does not know
/// counts as unreadable.
pub(super) fn run_counts(connection: &Connection) -> Result<RunCounts, StoreError> {
    let mut select = connection
        .prepare_cached("SELECT status, COUNT(*) FROM runs GROUP BY status")
        .map_err(backend)?;
    let mut rows = select.query([]).map_err(backend)?;
    let mut counts = RunCounts::default();
    while let Some(row) = rows.next().map_err(backend)? {
        let status: String = row.get(0).map_err(backend)?;
        let count = unsigned(row.get(1).map_err(backend)?);
        match status.parse::<RunStatus>() {
            Ok(status) => counts.add(status, count),
            Err(_) => counts.unreadable = counts.unreadable.saturating_add(count),
        }
    }
    Ok(counts)
}

/// The own messages of the thread's ended runs up to `through`, in completion order.
pub(super) fn thread_history(
    connection: &Connection,
    thread: &ThreadKey,
    through: Option<u64>,
) -> Result<ThreadHistory, StoreError> {
    let mut select = connection
        .prepare_cached(
            "SELECT r.id, r.completion_seq, m.body FROM runs r \
             LEFT JOIN run_messages m \
               ON m.scope = r.scope AND m.run_id = r.id AND m.seq < r.message_count \
             WHERE r.scope = ?1 AND r.thread_id = ?2 AND r.completion_seq IS NOT NULL \
               AND r.completion_seq <= ?3 \
             ORDER BY r.completion_seq, m.seq",
        )
        .map_err(backend)?;
    let mut rows = select
        .query(params![
            thread.scope(),
            thread.thread_id.as_str(),
            through.map_or(i64::MAX, millis)
        ])
        .map_err(backend)?;
    let mut messages = Vec::new();
    let mut highest = None;
    while let Some(row) = rows.next().map_err(backend)? {
        let run_id = RunId::new(row.get::<_, String>(0).map_err(backend)?);
        let sequence: i64 = row.get(1).map_err(backend)?;
        highest = Some(unsigned(sequence));
        if let Some(body) = row.get::<_, Option<String>>(2).map_err(backend)? {
            messages.push(
                serde_json::from_str(&body)
                    .map_err(|source| StoreError::Corrupt { run_id, source })?,
            );
        }
    }
    Ok(ThreadHistory::new(messages, highest))
}

/// The highest change sequence given (0 when none was): read before a listing's rows, it is
/// where the listing's change cursor stands (the writer commits one group at a time, so
/// every change up to it is committed and seen by the rows read after).
fn change_horizon(connection: &Connection) -> Result<u64, StoreError> {
    let highest: Option<i64> = connection
        .prepare_cached(
            "SELECT change_seq FROM runs WHERE change_seq IS NOT NULL \
             ORDER BY change_seq DESC LIMIT 1",
        )
        .and_then(|mut select| select.query_row([], |row| row.get(0)).optional())
        .map_err(backend)?;
    Ok(highest.map_or(0, unsigned))
}

/// Every key of a run with this id, newest first (the `runs_by_id` index alone; no row is
/// decoded, so an unreadable row's key is listed too).
pub(super) fn keys_of_run(
    connection: &Connection,
    run_id: &RunId,
) -> Result<Vec<RunKey>, StoreError> {
    let mut select = connection
        .prepare_cached(
            "SELECT NULLIF(scope, '') FROM runs WHERE id = ?1 \
             ORDER BY created_at_ms DESC, scope DESC",
        )
        .map_err(backend)?;
    let scopes = select
        .query_map([run_id.as_str()], |row| row.get::<_, Option<String>>(0))
        .map_err(backend)?;
    scopes
        .map(|scope| {
            let scope = scope.map_err(backend)?;
            Ok(RunKey::new(scope.map(Into::into), run_id.clone()))
        })
        .collect()
}

/// A page of summaries, newest first (or in change order for a `changed_after` listing), from
/// the columns and the `pending` column (a head is decoded only for a row that is not of the
/// current format or not well-formed, to say why it is unreadable).
pub(super) fn list_runs(
    connection: &Connection,
    filter: &RunFilter,
) -> Result<RunPage, StoreError> {
    let horizon = change_horizon(connection)?;
    let (sql, values) = listing_query(filter);
    {
        let mut select = connection.prepare_cached(&sql).map_err(backend)?;
        let mut rows = select.query(params_from_iter(values)).map_err(backend)?;
        let mut runs = Vec::new();
        while let Some(row) = rows.next().map_err(backend)? {
            let columns = ListedColumns {
                run_id: row.get(0).map_err(backend)?,
                thread_id: row.get(1).map_err(backend)?,
                resource_id: row.get(2).map_err(backend)?,
                agent_id: row.get(3).map_err(backend)?,
                status: row.get(4).map_err(backend)?,
                created_at_ms: row.get(5).map_err(backend)?,
                updated_at_ms: row.get(6).map_err(backend)?,
                pending: row.get(7).map_err(backend)?,
                forked_from: row.get(11).map_err(backend)?,
                parent: row.get(12).map_err(backend)?,
            };
            let current: bool = row.get(8).map_err(backend)?;
            let change_seq: Option<i64> = row.get(9).map_err(backend)?;
            let change_seq = change_seq.map(unsigned);
            let first_message: Option<String> = row.get(10).map_err(backend)?;
            let key = RunKey::new(
                columns.resource_id.clone().map(Into::into),
                RunId::new(columns.run_id.clone()),
            );
            let created_at_ms = unsigned(columns.created_at_ms);
            let listed = if current {
                summary(columns)
            } else {
                older_or_newer(connection, &key)
            };
            runs.push(match listed {
                Ok(mut summary) => {
                    summary.change_seq = change_seq;
                    summary.first_message = first_message;
                    ListedRun::Run(summary)
                }
                Err(
                    error @ (StoreError::Corrupt { .. } | StoreError::UnsupportedFormat { .. }),
                ) => ListedRun::Unreadable {
                    run_id: key.run_id,
                    resource_id: key.resource_id,
                    created_at_ms,
                    change_seq,
                    error,
                },
                Err(error) => return Err(error),
            });
        }
        Ok(match filter.changed_after {
            Some(_) => RunPage::from_changed_rows(runs, filter.limit, horizon),
            None => RunPage::from_rows(runs, filter.limit, Some(horizon)),
        })
    }
}

/// A row's `head` column as text for the codec. The column is declared `TEXT`, but SQLite
/// stores what it is given: a head that is not text (a blob, a number: a damaged or hand-edited
/// row) is read as its bytes or digits, so decoding it says the run is corrupt
/// ([`StoreError::Corrupt`], an unreadable row in a listing) rather than failing the whole
/// read, listing or sweep with a column type error.
fn head_text(row: &rusqlite::Row<'_>, index: usize) -> rusqlite::Result<String> {
    use rusqlite::types::ValueRef;
    Ok(match row.get_ref(index)? {
        ValueRef::Text(bytes) | ValueRef::Blob(bytes) => {
            String::from_utf8_lossy(bytes).into_owned()
        }
        ValueRef::Integer(number) => number.to_string(),
        ValueRef::Real(number) => number.to_string(),
        ValueRef::Null => String::new(),
    })
}

/// The summary of a row whose head is not of the current format, decoded in full: the
/// codec's error says whether it is newer or damaged.
fn older_or_newer(
    connection: &Connection,
    run: &RunKey,
) -> Result<askloop_core::store::RunSummary, StoreError> {
    let run_id = &run.run_id;
    let head: String = connection
        .prepare_cached("SELECT head FROM runs WHERE scope = ?1 AND id = ?2")
        .and_then(|mut select| {
            select.query_row(params![run.scope(), run_id.as_str()], |row| {
                head_text(row, 0)
            })
        })
        .map_err(|error| map_sqlite_error(run_id, error))?;
    codec::decode_run(run_id, &head, std::iter::empty::<&str>()).map(|state| state.summary())
}

/// An SQL expression of the value at JSON path `$path` of the head's top-level field `$key`
/// (`forkedFrom`, `parent`: fields the codec writes only for some runs), `NULL` when the head
/// does not hold it. The text test (`"$key":` somewhere in the head) skips every other row
/// without parsing its head, so listing stays as fast for runs without the field; the head's
/// own top-level field is then read by its path (the text may also occur deeper, in a call's
/// arguments: that reads `NULL` too).
macro_rules! head_field {
    ($key:literal, $path:literal) => {
        concat!(
            "CASE WHEN instr(head, '\"",
            $key,
            "\":') > 0 AND json_valid(head) THEN json_extract(head, '",
            $path,
            "') END"
        )
    };
}

/// The listed columns (the resource is the scope, `''` read as none), then whether the head is
/// of the current format and well-formed JSON (checked inside SQLite, without decoding it),
/// then the change sequence, then the run's first message ([`RunSummary::first_message`]):
/// the text of its message 0 when that is a user message (`{"role":"user","text":…}`, core's
/// `codec::encode_message`), its first ?2 characters, read inside SQLite by its primary key
/// (one lookup per listed row, never more of the text); none for a body that is not JSON;
/// then the head's `forkedFrom` and its `parent` (each read only from heads that hold it, see
/// `head_field!`).
///
/// [`RunSummary::first_message`]: askloop_core::store::RunSummary::first_message
const LISTED_COLUMNS: &str = concat!(
    "id, thread_id, NULLIF(scope, ''), agent_id, status, \
    created_at_ms, updated_at_ms, pending, substr(head, 1, 19) = ?1 AND json_valid(head), \
    change_seq, \
    (SELECT CASE WHEN json_valid(m.body) THEN \
                CASE WHEN json_extract(m.body, '$.role') = 'user' \
                     THEN substr(json_extract(m.body, '$.text'), 1, ?2) END END \
       FROM run_messages m WHERE m.scope = runs.scope AND m.run_id = runs.id AND m.seq = 0), ",
    head_field!("forkedFrom", "$.forkedFrom"),
    ", ",
    head_field!("parent", "$.parent"),
);

/// The listing statement for `filter` (only the conditions it uses, so that SQLite picks the
/// index of the filter; one cached statement per combination) and its parameters.
fn listing_query(filter: &RunFilter) -> (String, Vec<SqlValue>) {
    let mut sql = format!("SELECT {LISTED_COLUMNS} FROM runs");
    let mut values = vec![
        SqlValue::Text(CURRENT_HEAD_PREFIX.to_owned()),
        SqlValue::Integer(i64::try_from(FIRST_MESSAGE_CHARS).unwrap_or(i64::MAX)),
    ];
    let mut conditions = Vec::new();
    let mut condition = |clause: &str, value: SqlValue| {
        values.push(value);
        conditions.push(clause.replace('?', &format!("?{}", values.len())));
    };
    if let Some(status) = filter.status {
        condition("status = ?", SqlValue::Text(status.as_str().to_owned()));
    }
    if let Some(agent_id) = &filter.agent_id {
        condition("agent_id = ?", SqlValue::Text(agent_id.as_str().to_owned()));
    }
    if let Some(thread_id) = &filter.thread_id {
        condition(
            "thread_id = ?",
            SqlValue::Text(thread_id.as_str().to_owned()),
        );
    }
    if let Some(scope) = filter.resource.scope() {
        condition("scope = ?", SqlValue::Text(scope.to_owned()));
    }
    if let Some(run_id) = &filter.run_id {
        condition("id = ?", SqlValue::Text(run_id.as_str().to_owned()));
    }
    if let Some(original) = &filter.forked_from {
        condition(
            concat!(head_field!("forkedFrom", "$.forkedFrom.runId"), " = ?"),
            SqlValue::Text(original.as_str().to_owned()),
        );
    }
    if let Some(parent) = &filter.parent_run_id {
        condition(
            concat!(head_field!("parent", "$.parent.runId"), " = ?"),
            SqlValue::Text(parent.as_str().to_owned()),
        );
    }
    if let Some(after) = filter.changed_after {
        condition("change_seq > ?", SqlValue::Integer(millis(after)));
    } else if let Some(cursor) = &filter.cursor {
        values.push(SqlValue::Integer(millis(cursor.created_at_ms)));
        values.push(SqlValue::Text(cursor.run_id.as_str().to_owned()));
        values.push(SqlValue::Text(cursor.scope().to_owned()));
        conditions.push(format!(
            "(created_at_ms, id, scope) < (?{}, ?{}, ?{})",
            values.len() - 2,
            values.len() - 1,
            values.len()
        ));
    }
    if filter.top_level {
        conditions.push(concat!(head_field!("parent", "$.parent.runId"), " IS NULL").to_owned());
    }
    if !conditions.is_empty() {
        sql.push_str(" WHERE ");
        sql.push_str(&conditions.join(" AND "));
    }
    if filter.changed_after.is_some() {
        sql.push_str(" ORDER BY change_seq");
    } else {
        sql.push_str(" ORDER BY created_at_ms DESC, id DESC, scope DESC");
    }
    if let Some(limit) = filter.limit {
        // One row more than asked for says whether there is a next page.
        values.push(SqlValue::Integer(
            i64::try_from(limit.saturating_add(1)).unwrap_or(i64::MAX),
        ));
        sql.push_str(&format!(" LIMIT ?{}", values.len()));
    }
    (sql, values)
}

#[cfg(test)]
mod tests {
    use super::*;
    use askloop_core::RunStatus;

    #[test]
    fn the_inbox_query_walks_the_status_index_without_sorting() {
        // On a connection as the store tunes it (with the query planner stability guarantee).
        let mut connection = Connection::open_in_memory().unwrap();
        tune(&connection, STATEMENT_CACHE).unwrap();
        super::super::schema::migrate(&mut connection).unwrap();
        for filter in [
            RunFilter::new().status(RunStatus::Suspended).limit(50),
            RunFilter::new().limit(50),
            RunFilter::new().agent("a").limit(50),
            RunFilter::new().thread("t").limit(50),
            RunFilter::new().resource("u").limit(50),
            RunFilter::new()
                .resource_filter(askloop_core::store::ResourceFilter::Without)
                .limit(50),
            RunFilter::new().run("r").limit(50),
            RunFilter::in_thread(&ThreadKey::new(Some("u".into()), "t".into())).limit(50),
            RunFilter::new().changed_after(7).limit(500),
            RunFilter::new()
                .status(RunStatus::Suspended)
                .top_level()
                .limit(50),
            RunFilter::new().top_level().limit(50),
            RunFilter::new().resource("u").children_of("p").limit(50),
            RunFilter::new()
                .status(RunStatus::Suspended)
                .after(askloop_core::store::RunCursor::after_run(
                    5,
                    RunKey::new(Some("u".into()), RunId::new("r")),
                ))
                .limit(50),
        ] {
            let (sql, values) = listing_query(&filter);
            let mut explain = connection
                .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
                .unwrap();
            let plan: Vec<String> = explain
                .query_map(params_from_iter(values), |row| row.get::<_, String>(3))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            let plan = plan.join("; ");
            assert!(plan.contains("USING INDEX"), "{sql}: {plan}");
            assert!(!plan.contains("TEMP B-TREE"), "{sql}: {plan}");
        }
    }

    #[test]
    fn a_listing_is_compiled_once_not_on_every_run() {
        // Issue 36: `LIMIT ?N` (and, with STAT4, a parameter compared with an indexed column)
        // made SQLite compile a cached statement again on every run, unless the connection has
        // the query planner stability guarantee that `tune` sets.
        for tuned in [false, true] {
            let mut connection = Connection::open_in_memory().unwrap();
            if tuned {
                tune(&connection, STATEMENT_CACHE).unwrap();
            }
            super::super::schema::migrate(&mut connection).unwrap();
            for run in ["a", "b", "c", "d"] {
                list_runs(&connection, &RunFilter::new().run(run).limit(500)).unwrap();
            }
            let (sql, _) = listing_query(&RunFilter::new().run("a").limit(500));
            let select = connection.prepare_cached(&sql).unwrap();
            let reprepared = select.get_status(rusqlite::StatementStatus::RePrepare);
            if tuned {
                assert_eq!(reprepared, 0, "{sql}");
            } else {
                assert!(
                    reprepared >= 3,
                    "{reprepared}: the untuned case no longer shows it"
                );
            }
        }
    }

    #[test]
    fn keys_of_run_lists_every_row_of_the_id_newest_first_even_unreadable_ones() {
        // A bare run id resolves from the `runs_by_id` index alone: rows whose head is not a
        // run (garbage text, or not text at all) still name their key, in the order a listing
        // of the id gives.
        let mut connection = Connection::open_in_memory().unwrap();
        tune(&connection, STATEMENT_CACHE).unwrap();
        super::super::schema::migrate(&mut connection).unwrap();
        let insert = |scope: &str, id: &str, created: i64, head: SqlValue| {
            connection
                .execute(
                    "INSERT INTO runs (scope, id, thread_id, agent_id, status, version, \
                     created_at_ms, updated_at_ms, head, message_count) \
                     VALUES (?1, ?2, 't', 'a', 'suspended', 1, ?3, ?3, ?4, 0)",
                    rusqlite::params![scope, id, created, head],
                )
                .unwrap();
        };
        insert("u", "r", 10, SqlValue::Text("not json".into()));
        insert("", "r", 30, SqlValue::Text("{".into()));
        insert("w", "r", 20, SqlValue::Text("garbage".into()));
        insert("v", "r", 30, SqlValue::Text("[]".into()));
        insert("x", "other", 40, SqlValue::Text("{}".into()));
        let keys = keys_of_run(&connection, &RunId::new("r")).unwrap();
        let key = |scope: Option<&str>| RunKey::new(scope.map(Into::into), RunId::new("r"));
        assert_eq!(
            keys,
            vec![key(Some("v")), key(None), key(Some("w")), key(Some("u"))]
        );
        let listed: Vec<RunKey> = list_runs(&connection, &RunFilter::new().run("r").limit(50))
            .unwrap()
            .runs
            .iter()
            .map(ListedRun::key)
            .collect();
        assert_eq!(keys, listed);
        assert!(
            keys_of_run(&connection, &RunId::new("missing"))
                .unwrap()
                .is_empty()
        );
        // A head that is not text at all: the key is still found.
        insert("y", "blob", 50, SqlValue::Blob(vec![0, 0xff]));
        assert_eq!(
            keys_of_run(&connection, &RunId::new("blob")).unwrap(),
            vec![RunKey::new(Some("y".into()), RunId::new("blob"))]
        );
    }

    #[test]
    fn a_head_that_is_not_text_is_a_corrupt_run_not_a_failed_listing() {
        // A hand-edited or damaged row whose head is a blob or a number: its load says the run
        // is corrupt, and a listing shows it as unreadable beside the others instead of failing.
        let mut connection = Connection::open_in_memory().unwrap();
        tune(&connection, STATEMENT_CACHE).unwrap();
        super::super::schema::migrate(&mut connection).unwrap();
        for (id, created, head) in [
            ("blob", 10, SqlValue::Blob(vec![0, 0xff])),
            ("number", 20, SqlValue::Integer(7)),
            ("real", 30, SqlValue::Real(0.5)),
        ] {
            connection
                .execute(
                    "INSERT INTO runs (scope, id, thread_id, agent_id, status, version, \
                     created_at_ms, updated_at_ms, head, message_count) \
                     VALUES ('u', ?1, 't', 'a', 'suspended', 1, ?2, ?2, ?3, 0)",
                    rusqlite::params![id, created, head],
                )
                .unwrap();
            let key = RunKey::new(Some("u".into()), RunId::new(id));
            let row = load_run(&connection, &key, 0).unwrap();
            let decoded = codec::decode_run(&key.run_id, &row.head, std::iter::empty::<&str>());
            assert!(
                matches!(decoded, Err(StoreError::Corrupt { .. })),
                "{id}: {decoded:?}"
            );
        }
        let page = list_runs(&connection, &RunFilter::new().limit(50)).unwrap();
        assert_eq!(page.runs.len(), 3);
        assert!(
            page.runs.iter().all(|run| run.summary().is_none()),
            "{:?}",
            page.runs
        );
    }
}
