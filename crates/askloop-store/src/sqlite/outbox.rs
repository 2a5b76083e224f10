//! The outbox in SQLite: events written with their commit (`write_events`, in the writer's
//! transaction), fan-out, claims, attempts, replays and pruning (writes of the writer thread,
//! [`OutboxWrite`]), and the reads of events and deliveries.

use askloop_core::StoreError;
use askloop_core::store::{Delivery, DeliveryFilter, DeliveryId, DeliveryNext, StoredEvent};
use rusqlite::{Connection, OptionalExtension, params};

use crate::outbox::{DeliveryRow, EncodedEvent, decode_delivery, decode_event};
use crate::sqlite::columns::unsigned;
use crate::sqlite::error::backend;

/// A write to the outbox, run by the writer thread like a commit.
#[derive(Debug)]
pub(super) enum OutboxWrite {
    /// Creates the deliveries of events (`(event seq, endpoints)`) and marks them fanned out.
    FanOut {
        routes: Vec<(i64, Vec<String>)>,
        now_ms: i64,
    },
    /// Claims due deliveries for `holder` until `until_ms` (returns how many).
    Claim {
        holder: String,
        now_ms: i64,
        until_ms: i64,
        limit: i64,
    },
    /// Records an attempt (JSON) by `holder` and what follows.
    Attempt {
        id: i64,
        holder: String,
        attempt: String,
        next: DeliveryNext,
    },
    /// Makes a delivery of `scope` (`None`: any) pending again.
    Replay {
        id: i64,
        scope: Option<String>,
        now_ms: i64,
    },
    /// Deletes up to `limit` events fanned out before `older_than_ms` without a pending
    /// delivery, with their deliveries (returns how many events).
    Prune { older_than_ms: i64, limit: i64 },
}

/// Appends a commit's events to the outbox (inside the commit's transaction).
pub(super) fn write_events(
    connection: &Connection,
    events: &[EncodedEvent],
) -> rusqlite::Result<()> {
    if events.is_empty() {
        return Ok(());
    }
    let mut insert = connection.prepare_cached(
        "INSERT INTO run_events (scope, run_id, type, body) VALUES (?1, ?2, ?3, ?4)",
    )?;
    for event in events {
        insert.execute(params![event.scope, event.run_id, event.kind, event.body])?;
    }
    Ok(())
}

/// Runs one outbox write; returns a count (claims: how many were claimed).
pub(super) fn apply(connection: &Connection, write: &OutboxWrite) -> Result<u64, StoreError> {
    match write {
        OutboxWrite::FanOut { routes, now_ms } => fan_out(connection, routes, *now_ms),
        OutboxWrite::Claim {
            holder,
            now_ms,
            until_ms,
            limit,
        } => connection
            .prepare_cached(
                "UPDATE webhook_deliveries SET claim_holder = ?1, claim_until_ms = ?2 \
                 WHERE id IN (SELECT id FROM webhook_deliveries WHERE status = 'pending' \
                   AND next_attempt_ms <= ?3 \
                   AND (claim_until_ms IS NULL OR claim_until_ms <= ?3) \
                   ORDER BY next_attempt_ms, id LIMIT ?4)",
            )
            .and_then(|mut update| update.execute(params![holder, until_ms, now_ms, limit]))
            .map(|count| count as u64)
            .map_err(backend),
        OutboxWrite::Attempt {
            id,
            holder,
            attempt,
            next,
        } => record_attempt(connection, *id, holder, attempt, *next),
        OutboxWrite::Prune {
            older_than_ms,
            limit,
        } => prune(connection, *older_than_ms, *limit),
        OutboxWrite::Replay { id, scope, now_ms } => {
            let updated = connection
                .prepare_cached(
                    "UPDATE webhook_deliveries SET status = 'pending', next_attempt_ms = ?1, \
                     claim_holder = NULL, claim_until_ms = NULL \
                     WHERE id = ?2 AND (?3 IS NULL OR scope = ?3)",
                )
                .and_then(|mut update| update.execute(params![now_ms, id, scope]))
                .map_err(backend)?;
            if updated == 0 {
                return Err(StoreError::DeliveryNotFound {
                    id: DeliveryId(unsigned(*id)),
                });
            }
            Ok(1)
        }
    }
}

fn fan_out(
    connection: &Connection,
    routes: &[(i64, Vec<String>)],
    now_ms: i64,
) -> Result<u64, StoreError> {
    let mut insert = connection
        .prepare_cached(
            "INSERT OR IGNORE INTO webhook_deliveries \
             (endpoint, event_seq, scope, next_attempt_ms, created_at_ms) \
             SELECT ?1, seq, scope, ?2, ?2 FROM run_events WHERE seq = ?3",
        )
        .map_err(backend)?;
    let mut mark = connection
        .prepare_cached(
            "UPDATE run_events SET fanned_out = 1, \
             fanned_out_at_ms = COALESCE(fanned_out_at_ms, ?2) WHERE seq = ?1",
        )
        .map_err(backend)?;
    let mut created = 0;
    for (seq, endpoints) in routes {
        for endpoint in endpoints {
            created += insert
                .execute(params![endpoint, now_ms, seq])
                .map_err(backend)? as u64;
        }
        mark.execute(params![seq, now_ms]).map_err(backend)?;
    }
    Ok(created)
}

/// Deletes up to `limit` events fanned out before `older_than_ms` none of whose deliveries is
/// pending, earliest fanned out first, with their deliveries; returns how many events.
fn prune(connection: &Connection, older_than_ms: i64, limit: i64) -> Result<u64, StoreError> {
    let seqs: Vec<i64> = connection
        .prepare_cached(
            "SELECT e.seq FROM run_events e WHERE e.fanned_out_at_ms < ?1 \
             AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d \
                              WHERE d.event_seq = e.seq AND d.status = 'pending') \
             ORDER BY e.fanned_out_at_ms, e.seq LIMIT ?2",
        )
        .and_then(|mut select| {
            select
                .query_map(params![older_than_ms, limit], |row| row.get(0))?
                .collect()
        })
        .map_err(backend)?;
    let mut deliveries = connection
        .prepare_cached("DELETE FROM webhook_deliveries WHERE event_seq = ?1")
        .map_err(backend)?;
    let mut events = connection
        .prepare_cached("DELETE FROM run_events WHERE seq = ?1")
        .map_err(backend)?;
    for seq in &seqs {
        deliveries.execute(params![seq]).map_err(backend)?;
        events.execute(params![seq]).map_err(backend)?;
    }
    Ok(seqs.len() as u64)
}

fn record_attempt(
    connection: &Connection,
    id: i64,
    holder: &str,
    attempt: &str,
    next: DeliveryNext,
) -> Result<u64, StoreError> {
    let (status, next_ms): (&str, Option<i64>) = match next {
        DeliveryNext::Delivered => ("delivered", None),
        DeliveryNext::RetryAt(at_ms) => ("pending", Some(i64::try_from(at_ms).unwrap_or(i64::MAX))),
        _ => ("failed", None),
    };
    let updated = connection
        .prepare_cached(
            "UPDATE webhook_deliveries SET status = ?1, \
             next_attempt_ms = COALESCE(?2, next_attempt_ms), \
             claim_holder = NULL, claim_until_ms = NULL, \
             attempts = json_insert(attempts, '$[#]', json(?3)) \
             WHERE id = ?4 AND claim_holder = ?5",
        )
        .and_then(|mut update| update.execute(params![status, next_ms, attempt, id, holder]))
        .map_err(backend)?;
    if updated == 1 {
        return Ok(1);
    }
    let exists = connection
        .prepare_cached("SELECT 1 FROM webhook_deliveries WHERE id = ?1")
        .and_then(|mut select| select.query_row(params![id], |_| Ok(())).optional())
        .map_err(backend)?;
    let id = DeliveryId(unsigned(id));
    Err(match exists {
        Some(()) => StoreError::DeliveryNotHeld { id },
        None => StoreError::DeliveryNotFound { id },
    })
}

/// Events after `after_seq`, in order, at most `limit`; only those not fanned out yet when
/// `unfanned`.
pub(super) fn list_events(
    connection: &Connection,
    after_seq: i64,
    limit: i64,
    unfanned: bool,
) -> Result<Vec<StoredEvent>, StoreError> {
    let sql = if unfanned {
        "SELECT seq, body FROM run_events WHERE fanned_out = 0 AND seq > ?1 ORDER BY seq LIMIT ?2"
    } else {
        "SELECT seq, body FROM run_events WHERE seq > ?1 ORDER BY seq LIMIT ?2"
    };
    let rows: Vec<(i64, String)> = connection
        .prepare_cached(sql)
        .and_then(|mut select| {
            select
                .query_map(params![after_seq, limit], |row| {
                    Ok((row.get(0)?, row.get(1)?))
                })?
                .collect()
        })
        .map_err(backend)?;
    rows.into_iter()
        .map(|(seq, body)| decode_event(unsigned(seq), &body))
        .collect()
}

const DELIVERY_COLUMNS: &str = "SELECT d.id, d.endpoint, d.event_seq, e.body, d.status, \
     d.next_attempt_ms, d.created_at_ms, d.attempts \
     FROM webhook_deliveries d JOIN run_events e ON e.seq = d.event_seq";

fn delivery_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<DeliveryRow> {
    Ok(DeliveryRow {
        id: unsigned(row.get(0)?),
        endpoint: row.get(1)?,
        event_seq: unsigned(row.get(2)?),
        body: row.get(3)?,
        status: row.get(4)?,
        next_attempt_ms: unsigned(row.get(5)?),
        created_at_ms: unsigned(row.get(6)?),
        attempts: row.get(7)?,
    })
}

/// The pending deliveries `holder` claims until `until_ms`.
pub(super) fn claimed(
    connection: &Connection,
    holder: &str,
    until_ms: i64,
) -> Result<Vec<Delivery>, StoreError> {
    let sql = format!(
        "{DELIVERY_COLUMNS} WHERE d.claim_holder = ?1 AND d.claim_until_ms = ?2 \
         AND d.status = 'pending' ORDER BY d.next_attempt_ms, d.id"
    );
    let rows: Vec<DeliveryRow> = connection
        .prepare_cached(&sql)
        .and_then(|mut select| {
            select
                .query_map(params![holder, until_ms], delivery_row)?
                .collect()
        })
        .map_err(backend)?;
    rows.into_iter().map(decode_delivery).collect()
}

/// The deliveries `filter` names, newest first.
pub(super) fn list_deliveries(
    connection: &Connection,
    filter: &DeliveryFilter,
    scope: Option<&str>,
) -> Result<Vec<Delivery>, StoreError> {
    let sql = format!(
        "{DELIVERY_COLUMNS} WHERE (?1 IS NULL OR d.scope = ?1) AND (?2 IS NULL OR d.status = ?2) \
         AND (?3 IS NULL OR d.id < ?3) ORDER BY d.id DESC LIMIT ?4"
    );
    let before = filter
        .before
        .map(|id| i64::try_from(id.0).unwrap_or(i64::MAX));
    let status = filter.status.map(|status| status.as_str());
    let limit = i64::try_from(filter.page_size()).unwrap_or(50);
    let rows: Vec<DeliveryRow> = connection
        .prepare_cached(&sql)
        .and_then(|mut select| {
            select
                .query_map(params![scope, status, before, limit], delivery_row)?
                .collect()
        })
        .map_err(backend)?;
    rows.into_iter().map(decode_delivery).collect()
}
