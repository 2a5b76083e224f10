//! The outbox in PostgreSQL: reads of events and deliveries, fan-out, claims (`FOR UPDATE
//! SKIP LOCKED`, so several processes on one database each take different deliveries),
//! attempts, replays and pruning, one statement each (the fan-out one transaction). The events
//! themselves are written by the commit functions (`0004_outbox.sql`).

use askloop_core::store::{
    Delivery, DeliveryAttempt, DeliveryClaim, DeliveryFilter, DeliveryId, DeliveryNext, FanOut,
    ResourceFilter, StoredEvent,
};
use askloop_core::{LeaseHolder, StoreError};
use sqlx::postgres::PgRow;
use sqlx::{PgPool, Row};

use crate::outbox::{DeliveryRow, decode_delivery, decode_event, encode_attempt, filter_scope};
use crate::postgres::error::backend;

/// A count or time as BIGINT (saturating).
fn big(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// A BIGINT read back.
fn small(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

/// The columns of a delivery and its event (`d`, `e`), as [`delivery`] reads them.
macro_rules! delivery_columns {
    () => {
        "d.id, d.endpoint, d.event_seq, e.body, d.status, d.next_attempt_ms, d.created_at_ms, \
         d.attempts::text AS attempts"
    };
}

/// Claims due deliveries, skipping rows another claimer holds locked.
const CLAIM: &str = concat!(
    "WITH claimed AS ( \
       UPDATE webhook_deliveries SET claim_holder = $1, claim_until_ms = $2 \
        WHERE id IN (SELECT id FROM webhook_deliveries \
                      WHERE status = 'pending' AND next_attempt_ms <= $3 \
                        AND (claim_until_ms IS NULL OR claim_until_ms <= $3) \
                      ORDER BY next_attempt_ms, id LIMIT $4 \
                      FOR UPDATE SKIP LOCKED) \
       RETURNING *) \
     SELECT ",
    delivery_columns!(),
    " FROM claimed d JOIN run_events e ON e.seq = d.event_seq ORDER BY d.next_attempt_ms, d.id"
);

/// The deliveries of a listing, newest first.
const LIST: &str = concat!(
    "SELECT ",
    delivery_columns!(),
    " FROM webhook_deliveries d JOIN run_events e ON e.seq = d.event_seq \
      WHERE ($1::text IS NULL OR d.scope = $1) AND ($2::text IS NULL OR d.status = $2) \
        AND ($3::bigint IS NULL OR d.id < $3) \
      ORDER BY d.id DESC LIMIT $4"
);

fn delivery(row: &PgRow) -> Result<Delivery, StoreError> {
    let get = |error: sqlx::Error| backend(error);
    decode_delivery(DeliveryRow {
        id: small(row.try_get("id").map_err(get)?),
        endpoint: row.try_get("endpoint").map_err(get)?,
        event_seq: small(row.try_get("event_seq").map_err(get)?),
        body: row.try_get("body").map_err(get)?,
        status: row.try_get("status").map_err(get)?,
        next_attempt_ms: small(row.try_get("next_attempt_ms").map_err(get)?),
        created_at_ms: small(row.try_get("created_at_ms").map_err(get)?),
        attempts: row.try_get("attempts").map_err(get)?,
    })
}

/// Events after `after_seq` in order (only those not fanned out when `unfanned`).
pub(super) async fn list_events(
    pool: &PgPool,
    after_seq: u64,
    limit: usize,
    unfanned: bool,
) -> Result<Vec<StoredEvent>, StoreError> {
    let rows: Vec<(i64, String)> = sqlx::query_as(
        "SELECT seq, body FROM run_events WHERE seq > $1 AND (NOT $3 OR NOT fanned_out) \
         ORDER BY seq LIMIT $2",
    )
    .bind(big(after_seq))
    .bind(big(limit as u64))
    .bind(unfanned)
    .fetch_all(pool)
    .await
    .map_err(backend)?;
    rows.into_iter()
        .map(|(seq, body)| decode_event(small(seq), &body))
        .collect()
}

/// Creates the deliveries of `routes` (once per endpoint and event) and marks the events
/// fanned out, in one transaction.
pub(super) async fn fan_out(
    pool: &PgPool,
    routes: &[FanOut],
    now_ms: u64,
) -> Result<(), StoreError> {
    let mut endpoints = Vec::new();
    let mut seqs = Vec::new();
    for route in routes {
        for endpoint in &route.endpoints {
            endpoints.push(endpoint.clone());
            seqs.push(big(route.event_seq));
        }
    }
    let fanned: Vec<i64> = routes.iter().map(|route| big(route.event_seq)).collect();
    let mut transaction = pool.begin().await.map_err(backend)?;
    sqlx::query(
        "INSERT INTO webhook_deliveries (endpoint, event_seq, scope, next_attempt_ms, \
         created_at_ms) \
         SELECT r.endpoint, e.seq, e.scope, $3, $3 \
           FROM unnest($1::text[], $2::bigint[]) AS r (endpoint, seq) \
           JOIN run_events e ON e.seq = r.seq \
         ON CONFLICT (endpoint, event_seq) DO NOTHING",
    )
    .bind(&endpoints)
    .bind(&seqs)
    .bind(big(now_ms))
    .execute(&mut *transaction)
    .await
    .map_err(backend)?;
    sqlx::query(
        "UPDATE run_events SET fanned_out = TRUE, \
         fanned_out_at_ms = COALESCE(fanned_out_at_ms, $2) WHERE seq = ANY($1)",
    )
    .bind(&fanned)
    .bind(big(now_ms))
    .execute(&mut *transaction)
    .await
    .map_err(backend)?;
    transaction.commit().await.map_err(backend)
}

/// Claims due deliveries (skipping rows another claimer has locked) and returns them.
pub(super) async fn claim(
    pool: &PgPool,
    claim: &DeliveryClaim,
) -> Result<Vec<Delivery>, StoreError> {
    let rows = sqlx::query(CLAIM)
        .bind(claim.holder.as_str())
        .bind(big(claim.until_ms))
        .bind(big(claim.now_ms))
        .bind(big(claim.limit as u64))
        .fetch_all(pool)
        .await
        .map_err(backend)?;
    rows.iter().map(delivery).collect()
}

/// Records an attempt by `holder`, which must claim the delivery.
pub(super) async fn record_attempt(
    pool: &PgPool,
    id: DeliveryId,
    holder: &LeaseHolder,
    attempt: &DeliveryAttempt,
    next: DeliveryNext,
) -> Result<(), StoreError> {
    let (status, next_ms): (&str, Option<i64>) = match next {
        DeliveryNext::Delivered => ("delivered", None),
        DeliveryNext::RetryAt(at_ms) => ("pending", Some(big(at_ms))),
        _ => ("failed", None),
    };
    let (updated, exists): (bool, bool) = sqlx::query_as(
        "WITH updated AS ( \
           UPDATE webhook_deliveries SET status = $1, \
                  next_attempt_ms = COALESCE($2, next_attempt_ms), \
                  claim_holder = NULL, claim_until_ms = NULL, \
                  attempts = attempts || jsonb_build_array($3::jsonb) \
            WHERE id = $4 AND claim_holder = $5 RETURNING 1) \
         SELECT EXISTS (SELECT 1 FROM updated), \
                EXISTS (SELECT 1 FROM webhook_deliveries WHERE id = $4)",
    )
    .bind(status)
    .bind(next_ms)
    .bind(encode_attempt(attempt)?)
    .bind(big(id.0))
    .bind(holder.as_str())
    .fetch_one(pool)
    .await
    .map_err(backend)?;
    match (updated, exists) {
        (true, _) => Ok(()),
        (false, true) => Err(StoreError::DeliveryNotHeld { id }),
        (false, false) => Err(StoreError::DeliveryNotFound { id }),
    }
}

/// The deliveries `filter` names, newest first.
pub(super) async fn list_deliveries(
    pool: &PgPool,
    filter: &DeliveryFilter,
) -> Result<Vec<Delivery>, StoreError> {
    let rows = sqlx::query(LIST)
        .bind(filter_scope(&filter.resource))
        .bind(filter.status.map(|status| status.as_str()))
        .bind(filter.before.map(|id| big(id.0)))
        .bind(big(filter.page_size() as u64))
        .fetch_all(pool)
        .await
        .map_err(backend)?;
    rows.iter().map(delivery).collect()
}

/// Makes a delivery of `resource` pending again.
pub(super) async fn replay(
    pool: &PgPool,
    id: DeliveryId,
    resource: &ResourceFilter,
    now_ms: u64,
) -> Result<(), StoreError> {
    let updated = sqlx::query(
        "UPDATE webhook_deliveries SET status = 'pending', next_attempt_ms = $1, \
         claim_holder = NULL, claim_until_ms = NULL \
         WHERE id = $2 AND ($3::text IS NULL OR scope = $3)",
    )
    .bind(big(now_ms))
    .bind(big(id.0))
    .bind(filter_scope(resource))
    .execute(pool)
    .await
    .map_err(backend)?
    .rows_affected();
    if updated == 0 {
        return Err(StoreError::DeliveryNotFound { id });
    }
    Ok(())
}

/// Deletes up to `limit` events fanned out before `older_than_ms` none of whose deliveries is
/// pending, earliest fanned out first, with their deliveries, in one statement; returns how
/// many events. Events another pruner has locked are skipped; a delivery a concurrent replay
/// made pending is kept, and then its event's deletion fails the foreign key: the statement
/// changes nothing and the next round tries again.
pub(super) async fn prune(
    pool: &PgPool,
    older_than_ms: u64,
    limit: usize,
) -> Result<u64, StoreError> {
    let pruned = sqlx::query(
        "WITH doomed AS ( \
           SELECT e.seq FROM run_events e \
            WHERE e.fanned_out_at_ms < $1 \
              AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d \
                               WHERE d.event_seq = e.seq AND d.status = 'pending') \
            ORDER BY e.fanned_out_at_ms, e.seq LIMIT $2 \
            FOR UPDATE SKIP LOCKED), \
         gone AS ( \
           DELETE FROM webhook_deliveries d USING doomed \
            WHERE d.event_seq = doomed.seq AND d.status <> 'pending') \
         DELETE FROM run_events e USING doomed WHERE e.seq = doomed.seq",
    )
    .bind(big(older_than_ms))
    .bind(big(limit as u64))
    .execute(pool)
    .await
    .map_err(backend)?
    .rows_affected();
    Ok(pruned)
}
