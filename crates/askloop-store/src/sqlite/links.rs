//! Answer links in SQLite: the writes ([`LinkWrite`], run by the writer thread like a commit:
//! create, use, release, revoke, prune) and the read of a link by its hash; `store.rs` holds
//! the `AnswerLinks` implementation of `SqliteStore`, as it holds the outbox's.

use askloop_core::StoreError;
use askloop_core::store::AnswerLink;
use rusqlite::{Connection, OptionalExtension, params};

use crate::links::{LINK_COLUMNS, LinkRow, decode_link};
use crate::sqlite::columns::unsigned;
use crate::sqlite::error::backend;

/// A write to the answer links, run by the writer thread; each returns how many rows changed.
#[derive(Debug)]
pub(super) enum LinkWrite {
    /// Inserts a link unless its hash exists.
    Create {
        hash: String,
        scope: String,
        run_id: String,
        tool_call_id: String,
        role: Option<String>,
        /// The issuer's Actor as JSON.
        issuer: Option<String>,
        created_at_ms: i64,
        expires_at_ms: i64,
    },
    /// Marks the live link of `hash` used at `now_ms`.
    Use { hash: String, now_ms: i64 },
    /// Clears the use of link `id` taken at `used_at_ms` (unless revoked since).
    Release { id: i64, used_at_ms: i64 },
    /// Revokes the links of one call not revoked yet.
    Revoke {
        scope: String,
        run_id: String,
        tool_call_id: String,
        now_ms: i64,
    },
    /// Deletes up to `limit` links expired, used or revoked before `older_than_ms`.
    Prune { older_than_ms: i64, limit: i64 },
}

/// Runs one link write; how many rows it changed.
pub(super) fn apply(connection: &Connection, write: &LinkWrite) -> Result<u64, StoreError> {
    let changed = match write {
        LinkWrite::Create {
            hash,
            scope,
            run_id,
            tool_call_id,
            role,
            issuer,
            created_at_ms,
            expires_at_ms,
        } => connection
            .prepare_cached(
                "INSERT OR IGNORE INTO answer_links (token_hash, scope, run_id, tool_call_id, \
                 role, issuer, created_at_ms, expires_at_ms) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )
            .and_then(|mut insert| {
                insert.execute(params![
                    hash,
                    scope,
                    run_id,
                    tool_call_id,
                    role,
                    issuer,
                    created_at_ms,
                    expires_at_ms
                ])
            }),
        LinkWrite::Use { hash, now_ms } => connection
            .prepare_cached(
                "UPDATE answer_links SET used_at_ms = ?2 WHERE token_hash = ?1 \
                 AND used_at_ms IS NULL AND revoked_at_ms IS NULL AND expires_at_ms > ?2",
            )
            .and_then(|mut update| update.execute(params![hash, now_ms])),
        LinkWrite::Release { id, used_at_ms } => connection
            .prepare_cached(
                "UPDATE answer_links SET used_at_ms = NULL WHERE id = ?1 AND used_at_ms = ?2 \
                 AND revoked_at_ms IS NULL",
            )
            .and_then(|mut update| update.execute(params![id, used_at_ms])),
        LinkWrite::Revoke {
            scope,
            run_id,
            tool_call_id,
            now_ms,
        } => connection
            .prepare_cached(
                "UPDATE answer_links SET revoked_at_ms = ?4 WHERE scope = ?1 AND run_id = ?2 \
                 AND tool_call_id = ?3 AND revoked_at_ms IS NULL",
            )
            .and_then(|mut update| update.execute(params![scope, run_id, tool_call_id, now_ms])),
        LinkWrite::Prune {
            older_than_ms,
            limit,
        } => connection
            .prepare_cached(
                "DELETE FROM answer_links WHERE id IN (SELECT id FROM answer_links \
                 WHERE expires_at_ms < ?1 OR used_at_ms < ?1 OR revoked_at_ms < ?1 \
                 ORDER BY id LIMIT ?2)",
            )
            .and_then(|mut delete| delete.execute(params![older_than_ms, limit])),
    };
    changed.map(|count| count as u64).map_err(backend)
}

/// The link whose token has this hash (hex), if any.
pub(super) fn find(connection: &Connection, hash: &str) -> Result<Option<AnswerLink>, StoreError> {
    connection
        .prepare_cached(&format!(
            "SELECT {LINK_COLUMNS} FROM answer_links WHERE token_hash = ?1"
        ))
        .and_then(|mut select| {
            select
                .query_row(params![hash], |row| {
                    Ok(LinkRow {
                        id: unsigned(row.get(0)?),
                        scope: row.get(1)?,
                        run_id: row.get(2)?,
                        tool_call_id: row.get(3)?,
                        role: row.get(4)?,
                        issuer: row.get(5)?,
                        created_at_ms: unsigned(row.get(6)?),
                        expires_at_ms: unsigned(row.get(7)?),
                        used_at_ms: row.get::<_, Option<i64>>(8)?.map(unsigned),
                        revoked_at_ms: row.get::<_, Option<i64>>(9)?.map(unsigned),
                    })
                })
                .optional()
        })
        .map(|row| row.map(decode_link))
        .map_err(backend)
}

/// A link just stored (or found stored) could not be read back: only if it was pruned at once
/// (an expiry far in the past and a prune racing the insert).
#[derive(Debug, thiserror::Error)]
#[error("the answer link was deleted as soon as it was stored")]
pub(super) struct LinkVanished;
