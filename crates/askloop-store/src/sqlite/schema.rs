//! The schema and its migrations (`rusqlite_migration`, version in SQLite's `user_version`),
//! including the in-place upgrade of a format-1 database made by askloop's former sqlx store.

use std::sync::LazyLock;

use askloop_core::RunId;
use askloop_core::store::codec;
use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};
use rusqlite_migration::{HookError, HookResult, M, Migrations};

use crate::sqlite::columns::{Head, millis};

/// The schema version this build reads and writes.
pub(super) const SCHEMA_VERSION: i64 = 7;

/// The migrations, in order: version 1 is the format-1 schema, version 2 the first of format
/// 2 (one namespace of runs), version 3 keys runs and threads by resource, version 4 the change
/// order (`change_seq`), version 5 the outbox of events and their webhook deliveries, version 6
/// the outbox's retention (when each event was fanned out), version 7 the current one (answer
/// links).
static MIGRATIONS: LazyLock<Migrations<'static>> = LazyLock::new(|| {
    Migrations::new(vec![
        M::up(include_str!("../../migrations/sqlite/v1.sql")),
        M::up_with_hook(
            include_str!("../../migrations/sqlite/v2.sql"),
            upgrade_v1_rows,
        ),
        M::up(include_str!("../../migrations/sqlite/v3.sql")),
        M::up(include_str!("../../migrations/sqlite/v4.sql")),
        M::up(include_str!("../../migrations/sqlite/v5.sql")),
        M::up(include_str!("../../migrations/sqlite/v6.sql")),
        M::up(include_str!("../../migrations/sqlite/v7.sql")),
    ])
});

/// Brings the database to [`SCHEMA_VERSION`]: marks a database made by the sqlx store (its
/// tables, `user_version` 0) as version 1, then applies what is missing, atomically. A newer
/// version is refused (`DatabaseTooFarAhead`) and nothing changes.
///
/// # Errors
/// The migrator's error; SQLite's while marking a sqlx-made database.
pub(super) fn migrate(connection: &mut Connection) -> Result<(), rusqlite_migration::Error> {
    // Other processes may open the same new file at once: take the write lock before reading
    // the version, so that only one of them migrates and the others wait and see it done.
    connection.set_transaction_behavior(TransactionBehavior::Immediate);
    mark_sqlx_database(connection)
        .map_err(|error| rusqlite_migration::Error::with_sql(error, "PRAGMA user_version"))?;
    let migrated = MIGRATIONS.to_latest(connection);
    connection.set_transaction_behavior(TransactionBehavior::Deferred);
    migrated
}

/// A database made by askloop's sqlx store has the version-1 tables, its own
/// `_sqlx_migrations` table and `user_version` 0: mark it as version 1.
fn mark_sqlx_database(connection: &mut Connection) -> rusqlite::Result<()> {
    let transaction = connection.transaction()?;
    let version: i64 = transaction.query_row("PRAGMA user_version", [], |row| row.get(0))?;
    let made_by_sqlx = transaction
        .query_row(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations'",
            [],
            |_| Ok(()),
        )
        .optional()?
        .is_some();
    if version == 0 && made_by_sqlx {
        transaction.pragma_update(None, "user_version", 1)?;
        tracing::info!("upgrading a format-1 askloop database");
    }
    transaction.commit()
}

/// The schema version of a database (SQLite's `user_version`).
pub(super) fn version(connection: &Connection) -> rusqlite::Result<i64> {
    connection.query_row("PRAGMA user_version", [], |row| row.get(0))
}

/// The hook of version 2: copies every row of `runs_v1` into the new tables, then drops it.
///
/// Each state is upgraded with `codec::upgrade_v1`: its own messages (past the copied thread
/// history) go to `run_messages`, the copied history stays in the head (`legacyHistory`).
/// Completed runs (those with `thread_messages`) get completion sequences in the order the
/// format-1 store read a thread's history (`updated_at_ms`, then `rowid`). A row that does not
/// upgrade (damaged, or of a newer format) is kept verbatim as its head, so that reading it
/// reports the same error as before and nothing is lost.
fn upgrade_v1_rows(transaction: &Transaction) -> HookResult {
    let mut select = transaction.prepare(
        "SELECT id, thread_id, resource_id, agent_id, status, version, created_at_ms, \
         updated_at_ms, state, thread_messages IS NOT NULL FROM runs_v1 \
         ORDER BY updated_at_ms, rowid",
    )?;
    let mut insert_run = transaction.prepare(
        "INSERT INTO runs (id, thread_id, resource_id, agent_id, status, version, created_at_ms, \
         updated_at_ms, head, message_count, pending, completion_seq) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
    )?;
    let mut insert_message =
        transaction.prepare("INSERT INTO run_messages (run_id, seq, body) VALUES (?1, ?2, ?3)")?;
    let mut rows = select.query([])?;
    let mut completion_seq = 0i64;
    let (mut upgraded, mut kept) = (0usize, 0usize);
    while let Some(row) = rows.next()? {
        let id: String = row.get(0)?;
        let status: String = row.get(4)?;
        let version: i64 = row.get(5)?;
        let updated_at_ms: i64 = row.get(7)?;
        let text: String = row.get(8)?;
        let completed: bool = row.get(9)?;
        let sequence = completed.then(|| {
            completion_seq += 1;
            completion_seq
        });
        let run_id = RunId::new(id.clone());
        let (head, messages, pending, status, updated_at_ms) = match codec::upgrade_v1(
            &run_id, &text,
        ) {
            Ok(state) => {
                let head = Head::of(&state, None).map_err(hook_error)?;
                let messages = codec::encode_new_messages(&state, 0).map_err(hook_error)?;
                upgraded += 1;
                (
                    head.head,
                    messages,
                    head.pending,
                    head.status.to_owned(),
                    millis(state.updated_at_ms()),
                )
            }
            Err(error) => {
                tracing::warn!(run_id = %run_id, error = %error, "run kept as stored: it does not upgrade");
                kept += 1;
                (text, Vec::new(), None, status, updated_at_ms)
            }
        };
        insert_run.execute(params![
            id,
            row.get::<_, String>(1)?,
            row.get::<_, Option<String>>(2)?,
            row.get::<_, String>(3)?,
            status,
            version,
            row.get::<_, i64>(6)?,
            updated_at_ms,
            head,
            i64::try_from(messages.len()).unwrap_or(i64::MAX),
            pending,
            sequence,
        ])?;
        for (seq, body) in messages.iter().enumerate() {
            insert_message.execute(params![id, i64::try_from(seq).unwrap_or(i64::MAX), body])?;
        }
    }
    drop(rows);
    transaction.execute_batch("DROP TABLE runs_v1")?;
    tracing::info!(
        upgraded,
        kept,
        "askloop database upgraded to schema version 2"
    );
    Ok(())
}

fn hook_error(error: askloop_core::StoreError) -> HookError {
    HookError::Hook(askloop_core::error_chain_text(&error))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_are_valid() {
        MIGRATIONS.validate().unwrap();
    }

    #[test]
    fn a_new_database_reaches_the_current_version_and_a_newer_one_is_refused() {
        let mut connection = Connection::open_in_memory().unwrap();
        migrate(&mut connection).unwrap();
        assert_eq!(version(&connection).unwrap(), SCHEMA_VERSION);
        migrate(&mut connection).unwrap();
        connection
            .pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
        assert!(migrate(&mut connection).is_err());
        assert_eq!(version(&connection).unwrap(), SCHEMA_VERSION + 1);
    }
}
