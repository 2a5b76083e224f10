//! The [`RunStore`] implementation of [`PgStore`]: one statement per operation.
//!
//! Commits call the SQL functions of the migrations (`askloop_insert_run`,
//! `askloop_update_run`, as `0002_resource_keys.sql` defines them), so the compare-and-swap,
//! the one-turn-per-thread check, the appended messages, the lease and the completion sequence
//! travel in one round trip and commit as one statement. Every run is named by its key: the
//! `scope` column (its resource id, `''` for none) and its id. Reads are single statements too, so each sees one snapshot. A commit that
//! [`notifies`] is followed by its notification (`notify.rs`), sent by the store's notifier
//! after the commit returned.
//!
//! The one-turn check: `askloop_update_run` (and `askloop_insert_run`), when the run becomes
//! running, looks for another running run of its thread under a transaction lock on the thread
//! (`askloop_thread_busy`): racing writers take turns, and the second sees the first. A run that
//! completes or is cancelled takes the next value of `run_completion_seq` under the same thread
//! lock, so a thread's completion sequences increase in commit order. Listing filters and orders on
//! indexed columns and reads each listed run's head (its summary and pending calls) and the
//! start of its first message, never the rest of its messages; a listing reads the change
//! horizon (`askloop_change_horizon`, which waits for the stamping commits in flight) before its
//! rows, so its change cursor never runs ahead of a commit it has not seen, unless it needs no
//! cursor ([`RunFilter::without_change_cursor`]); a `changed_after` listing lists no stamp above
//! that horizon.

use async_trait::async_trait;
use sqlx::postgres::PgRow;
use sqlx::{Postgres, QueryBuilder, Row};

use askloop_core::event::RunEvent;
use askloop_core::model::Message;
use askloop_core::store::codec::{decode_run, decode_run_after, encode_head, encode_new_messages};
use askloop_core::store::{
    Delivery, DeliveryAttempt, DeliveryClaim, DeliveryFilter, DeliveryId, DeliveryNext,
    FIRST_MESSAGE_CHARS, FanOut, Lease, ListedRun, Outbox, ResourceFilter, RunChanges, RunCounts,
    RunFilter, RunPage, RunState, StoredEvent, StoredRun, ThreadHistory, notifies,
};
use askloop_core::{
    LeaseHolder, RunId, RunKey, RunStatus, RunStore, StoreError, ThreadKey, resource_of_scope,
};

use crate::outbox::encode_events;
use crate::postgres::error::{backend, map_pg_error};
use crate::postgres::{PgStore, outbox};

/// `askloop_update_run`'s (and `askloop_insert_run`'s) answers besides a new version.
const UPDATE_CONFLICT: i64 = 0;
const UPDATE_NOT_FOUND: i64 = -1;
const UPDATE_MESSAGES_GAP: i64 = -2;
const THREAD_BUSY: i64 = -3;

const INSERT_RUN: &str = "SELECT askloop_insert_run_with_events($1, $2, $3, $4, $5, $6, $7, $8, \
     $9, $10, $11, $12, $13, $14)";

const UPDATE_RUN: &str = "SELECT askloop_update_run_with_events($1, $2, $3, $4, $5, $6, $7, $8, \
     $9, $10, $11, $12, $13)";

// The lease alone: the version is the condition, never changed. The second column tells a
// conflict from a missing run without another round trip (it reads the statement's snapshot,
// which is enough to know the run exists).
const RENEW_LEASE: &str = "WITH renewed AS ( \
        UPDATE runs SET lease_holder = $4, lease_expires_at_ms = $5 \
        WHERE scope = $1 AND id = $2 AND version = $3 RETURNING 1) \
    SELECT EXISTS (SELECT 1 FROM renewed), \
        EXISTS (SELECT 1 FROM runs WHERE scope = $1 AND id = $2)";

/// The run's row and its messages from position `$3` on (those the store does not hold
/// decoded already), in one statement.
const LOAD_RUN: &str = "SELECT version, head, lease_holder, lease_expires_at_ms, message_count, \
        ARRAY(SELECT body FROM run_messages \
               WHERE scope = $1 AND run_id = $2 AND seq >= $3 ORDER BY seq) AS messages \
    FROM runs WHERE scope = $1 AND id = $2";

/// The listing's columns (the head carries the summary: never the messages, but for the run's
/// first message, [`RunSummary::first_message`]: the text of its message 0 when that is a user
/// message, `{"role":"user","text":…}` as core's `codec::encode_message` writes it, its first
/// `{chars}` ([`FIRST_MESSAGE_CHARS`]) characters, read inside PostgreSQL by the message's
/// primary key, one lookup per listed row); its conditions are added by [`list_query`].
///
/// [`RunSummary::first_message`]: askloop_core::store::RunSummary::first_message
const LIST_RUNS: &str = "SELECT id, scope, created_at_ms, head, change_seq, \
        (SELECT CASE WHEN m.body::json ->> 'role' = 'user' \
                     THEN left(m.body::json ->> 'text', {chars}) END \
           FROM run_messages m WHERE m.scope = runs.scope AND m.run_id = runs.id AND m.seq = 0) \
        AS first_message \
    FROM runs WHERE TRUE";

/// The change horizon (`0007_parallel_change_order.sql`): waits until no commit that stamps is
/// in flight, then the highest stamp; read before a listing's rows, where its change cursor
/// stands (every stamp at most it is committed; every later one is higher).
const CHANGE_HORIZON: &str = "SELECT askloop_change_horizon()";

const THREAD_HISTORY: &str = "SELECT r.id, r.completion_seq, m.body \
    FROM runs r LEFT JOIN run_messages m ON m.scope = r.scope AND m.run_id = r.id \
    WHERE r.scope = $1 AND r.thread_id = $2 AND r.completion_seq IS NOT NULL \
      AND ($3::bigint IS NULL OR r.completion_seq <= $3) \
    ORDER BY r.completion_seq, m.seq";

/// The running run of a thread, read after a write was refused for it.
const RUNNING_OF_THREAD: &str =
    "SELECT id FROM runs WHERE scope = $1 AND thread_id = $2 AND status = 'running' LIMIT 1";

/// A millisecond time or count as PostgreSQL's BIGINT (times past year 292 million saturate).
fn to_bigint(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// A BIGINT column read back (negative values, which askloop never writes, read as 0).
fn from_bigint(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

/// A message position as PostgreSQL's INTEGER.
fn to_integer(value: usize) -> i32 {
    i32::try_from(value).unwrap_or(i32::MAX)
}

/// A commit's events as the two arrays the commit functions take: types and bodies.
fn event_columns(
    key: &RunKey,
    events: &[RunEvent],
) -> Result<(Vec<String>, Vec<String>), StoreError> {
    Ok(encode_events(key, events)?
        .into_iter()
        .map(|event| (event.kind.to_owned(), event.body))
        .unzip())
}

/// The lease's two columns.
fn lease_columns(lease: Option<&Lease>) -> (Option<&str>, Option<i64>) {
    match lease {
        Some(lease) => (
            Some(lease.holder.as_str()),
            Some(to_bigint(lease.expires_at_ms)),
        ),
        None => (None, None),
    }
}

#[async_trait]
impl RunStore for PgStore {
    async fn insert_run_with_events(
        &self,
        state: &RunState,
        lease: Option<&Lease>,
        events: &[RunEvent],
    ) -> Result<u64, StoreError> {
        let run_id = state.run_id();
        let key = state.key();
        let (event_types, event_bodies) = event_columns(&key, events)?;
        let messages = encode_new_messages(state, 0)?;
        let (holder, expires) = lease_columns(lease);
        let outcome: i64 = sqlx::query_scalar(INSERT_RUN)
            .bind(key.scope())
            .bind(run_id.as_str())
            .bind(state.thread_id().as_str())
            .bind(state.agent_id().as_str())
            .bind(state.status().as_str())
            .bind(to_bigint(state.created_at_ms()))
            .bind(to_bigint(state.updated_at_ms()))
            .bind(encode_head(state)?)
            .bind(&messages)
            .bind(holder)
            .bind(expires)
            .bind(ends(state.status()))
            .bind(&event_types)
            .bind(&event_bodies)
            .fetch_one(&self.pool)
            .await
            .map_err(|error| map_pg_error(run_id, error))?;
        if outcome == THREAD_BUSY {
            return Err(self.thread_busy(&state.thread_key()).await);
        }
        self.known.stored(state, 0, 1);
        if notifies(None, state.status()) {
            self.notifier.announce(&key, state.status()).await;
        }
        Ok(1)
    }

    async fn update_run_with_events(
        &self,
        state: &RunState,
        expected_version: u64,
        lease: Option<&Lease>,
        events: &[RunEvent],
    ) -> Result<u64, StoreError> {
        let run_id = state.run_id();
        let key = state.key();
        let (event_types, event_bodies) = event_columns(&key, events)?;
        let head = encode_head(state)?;
        let (holder, expires) = lease_columns(lease);
        let mut first = self.known.count_at(&key, expected_version).unwrap_or(0);
        // The status committed at `expected_version`, if this store committed or loaded it
        // (the driver of a run always has): unknown, the commit is notified.
        let before = self.known.status_at(&key, expected_version);
        loop {
            let messages = encode_new_messages(state, first)?;
            let outcome: i64 = sqlx::query_scalar(UPDATE_RUN)
                .bind(key.scope())
                .bind(run_id.as_str())
                .bind(to_bigint(expected_version))
                .bind(state.status().as_str())
                .bind(to_bigint(state.updated_at_ms()))
                .bind(&head)
                .bind(to_integer(first))
                .bind(&messages)
                .bind(holder)
                .bind(expires)
                .bind(ends(state.status()))
                .bind(&event_types)
                .bind(&event_bodies)
                .fetch_one(&self.pool)
                .await
                .map_err(|error| map_pg_error(run_id, error))?;
            match outcome {
                UPDATE_CONFLICT => {
                    self.known.forget(&key);
                    return Err(StoreError::Conflict {
                        run_id: run_id.clone(),
                        expected_version,
                    });
                }
                UPDATE_NOT_FOUND => {
                    self.known.forget(&key);
                    return Err(StoreError::NotFound {
                        run_id: run_id.clone(),
                    });
                }
                THREAD_BUSY => return Err(self.thread_busy(&state.thread_key()).await),
                // The cache was wrong (it never should be): send every message once.
                UPDATE_MESSAGES_GAP if first > 0 => first = 0,
                version if version > 0 => {
                    let version = from_bigint(version);
                    // On a miss every message was sent and the store skipped those it had:
                    // what it held before is not known, so nothing remembered is kept.
                    self.known.stored(state, first, version);
                    if before.is_none_or(|before| notifies(Some(before), state.status())) {
                        self.notifier.announce(&key, state.status()).await;
                    }
                    return Ok(version);
                }
                other => {
                    return Err(StoreError::backend(UnexpectedAnswer {
                        function: "askloop_update_run",
                        value: other,
                    }));
                }
            }
        }
    }

    async fn renew_lease(
        &self,
        run: &RunKey,
        expected_version: u64,
        lease: &Lease,
    ) -> Result<(), StoreError> {
        let run_id = &run.run_id;
        let (renewed, exists): (bool, bool) = sqlx::query_as(RENEW_LEASE)
            .bind(run.scope())
            .bind(run_id.as_str())
            .bind(to_bigint(expected_version))
            .bind(lease.holder.as_str())
            .bind(to_bigint(lease.expires_at_ms))
            .fetch_one(&self.pool)
            .await
            .map_err(|error| map_pg_error(run_id, error))?;
        match (renewed, exists) {
            (true, _) => Ok(()),
            (false, true) => Err(StoreError::Conflict {
                run_id: run_id.clone(),
                expected_version,
            }),
            (false, false) => Err(StoreError::NotFound {
                run_id: run_id.clone(),
            }),
        }
    }

    async fn load_run(&self, run: &RunKey) -> Result<StoredRun, StoreError> {
        let run_id = &run.run_id;
        let map = |error| map_pg_error(run_id, error);
        // Only the messages past those this store holds decoded are read and decoded.
        let mut known = self.known.messages(run);
        let mut row = self.load_row(run, known.len()).await?;
        let mut message_count: i32 = row.try_get("message_count").map_err(map)?;
        if usize::try_from(message_count).unwrap_or(0) < known.len() {
            // Fewer messages than remembered: not the run remembered (never expected).
            self.known.forget(run);
            known = Vec::new();
            row = self.load_row(run, 0).await?;
            message_count = row.try_get("message_count").map_err(map)?;
        }
        let from = known.len();
        let version = from_bigint(row.try_get("version").map_err(map)?);
        let head: String = row.try_get("head").map_err(map)?;
        let messages: Vec<String> = row.try_get("messages").map_err(map)?;
        let holder: Option<String> = row.try_get("lease_holder").map_err(map)?;
        let expires: Option<i64> = row.try_get("lease_expires_at_ms").map_err(map)?;
        let state = decode_run_after(run_id, &head, known, &messages)?;
        if usize::try_from(message_count).ok() == Some(state.messages().len()) && state.is(run) {
            self.known.stored(&state, from, version);
        } else {
            self.known.forget(run);
        }
        let lease = holder
            .zip(expires)
            .map(|(holder, expires)| Lease::new(LeaseHolder::new(holder), from_bigint(expires)));
        Ok(StoredRun::new(state, version, lease))
    }

    async fn list_runs(&self, filter: &RunFilter) -> Result<RunPage, StoreError> {
        // One row more than asked for says whether there is a next page.
        let limit = filter
            .limit
            .map(|limit| i64::try_from(limit.saturating_add(1)).unwrap_or(i64::MAX));
        // Read first, in a statement of its own: every stamp up to it is committed, so seen by
        // the rows read after. It waits for the stamping commits in flight: a listing that
        // needs no cursor skips it.
        let horizon = if filter.changed_after.is_some() || !filter.without_change_cursor {
            let horizon: i64 = sqlx::query_scalar(CHANGE_HORIZON)
                .fetch_one(&self.pool)
                .await
                .map_err(backend)?;
            Some(from_bigint(horizon))
        } else {
            None
        };
        let mut query = list_query(filter, limit, horizon);
        let rows = query.build().fetch_all(&self.pool).await.map_err(backend)?;
        let runs = rows.iter().map(listed_run).collect::<Result<Vec<_>, _>>()?;
        Ok(match (filter.changed_after, horizon) {
            (Some(_), Some(horizon)) => RunPage::from_changed_rows(runs, filter.limit, horizon),
            _ => RunPage::from_rows(runs, filter.limit, horizon),
        })
    }

    async fn keys_of_run(&self, run_id: &RunId) -> Result<Vec<RunKey>, StoreError> {
        let scopes: Vec<String> = sqlx::query_scalar(
            "SELECT scope FROM runs WHERE id = $1 ORDER BY created_at_ms DESC, scope DESC",
        )
        .bind(run_id.as_str())
        .fetch_all(&self.pool)
        .await
        .map_err(backend)?;
        Ok(scopes
            .into_iter()
            .map(|scope| RunKey::new(resource_of_scope(scope), run_id.clone()))
            .collect())
    }

    async fn run_counts(&self) -> Result<RunCounts, StoreError> {
        let rows = sqlx::query("SELECT status, COUNT(*) AS runs FROM runs GROUP BY status")
            .fetch_all(&self.pool)
            .await
            .map_err(backend)?;
        let mut counts = RunCounts::default();
        for row in &rows {
            let status: String = row.try_get("status").map_err(backend)?;
            let count = from_bigint(row.try_get("runs").map_err(backend)?);
            match status.parse::<RunStatus>() {
                Ok(status) => counts.add(status, count),
                Err(_) => counts.unreadable = counts.unreadable.saturating_add(count),
            }
        }
        Ok(counts)
    }

    async fn thread_history(
        &self,
        thread: &ThreadKey,
        through: Option<u64>,
    ) -> Result<ThreadHistory, StoreError> {
        let rows = sqlx::query(THREAD_HISTORY)
            .bind(thread.scope())
            .bind(thread.thread_id.as_str())
            .bind(through.map(to_bigint))
            .fetch_all(&self.pool)
            .await
            .map_err(backend)?;
        let mut messages = Vec::with_capacity(rows.len());
        let mut highest = None;
        for row in &rows {
            let run_id = RunId::new(row.try_get::<String, _>("id").map_err(backend)?);
            let seq = from_bigint(row.try_get("completion_seq").map_err(backend)?);
            // NULL for a completed run without messages (none is, but it still counts).
            let body: Option<String> = row.try_get("body").map_err(backend)?;
            if let Some(body) = body {
                messages.push(decode_message(&run_id, &body)?);
            }
            highest = Some(seq);
        }
        Ok(ThreadHistory::new(messages, highest))
    }

    async fn watch_changes(&self) -> Option<RunChanges> {
        match self.notifications.feed(&self.pool).await {
            Ok(feed) => Some(feed.watch()),
            Err(error) => {
                tracing::warn!(error = %error, "store notifications unavailable; watchers poll");
                None
            }
        }
    }

    async fn close(&self) {
        PgStore::close(self).await;
    }

    fn answer_links(&self) -> Option<&dyn askloop_core::store::AnswerLinks> {
        Some(self)
    }

    fn outbox(&self) -> Option<&dyn Outbox> {
        Some(self)
    }
}

#[async_trait]
impl Outbox for PgStore {
    async fn list_events(
        &self,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        outbox::list_events(&self.pool, after_seq, limit, false).await
    }

    async fn unfanned_events(&self, limit: usize) -> Result<Vec<StoredEvent>, StoreError> {
        outbox::list_events(&self.pool, 0, limit, true).await
    }

    async fn fan_out(&self, routes: &[FanOut], now_ms: u64) -> Result<(), StoreError> {
        outbox::fan_out(&self.pool, routes, now_ms).await
    }

    async fn claim_deliveries(&self, claim: &DeliveryClaim) -> Result<Vec<Delivery>, StoreError> {
        outbox::claim(&self.pool, claim).await
    }

    async fn record_attempt(
        &self,
        id: DeliveryId,
        holder: &LeaseHolder,
        attempt: &DeliveryAttempt,
        next: DeliveryNext,
    ) -> Result<(), StoreError> {
        outbox::record_attempt(&self.pool, id, holder, attempt, next).await
    }

    async fn list_deliveries(&self, filter: &DeliveryFilter) -> Result<Vec<Delivery>, StoreError> {
        outbox::list_deliveries(&self.pool, filter).await
    }

    async fn replay_delivery(
        &self,
        id: DeliveryId,
        resource: &ResourceFilter,
        now_ms: u64,
    ) -> Result<(), StoreError> {
        outbox::replay(&self.pool, id, resource, now_ms).await
    }

    async fn prune_outbox(&self, older_than_ms: u64, limit: usize) -> Result<u64, StoreError> {
        outbox::prune(&self.pool, older_than_ms, limit).await
    }
}

impl PgStore {
    /// The run's row with its messages from position `from` on.
    async fn load_row(&self, run: &RunKey, from: usize) -> Result<PgRow, StoreError> {
        sqlx::query(LOAD_RUN)
            .bind(run.scope())
            .bind(run.run_id.as_str())
            .bind(to_integer(from))
            .fetch_optional(&self.pool)
            .await
            .map_err(|error| map_pg_error(&run.run_id, error))?
            .ok_or_else(|| StoreError::NotFound {
                run_id: run.run_id.clone(),
            })
    }

    /// The refusal of a write that would have made a second run of `thread` running, naming
    /// the running run as read now (best effort: a failed read names none).
    async fn thread_busy(&self, thread: &ThreadKey) -> StoreError {
        let running: Option<String> = sqlx::query_scalar(RUNNING_OF_THREAD)
            .bind(thread.scope())
            .bind(thread.thread_id.as_str())
            .fetch_optional(&self.pool)
            .await
            .unwrap_or_else(|error| {
                tracing::debug!(error = %error, "reading a thread's running run failed");
                None
            });
        StoreError::ThreadBusy {
            thread_id: thread.thread_id.clone(),
            running_run_id: running.map(RunId::new),
        }
    }
}

/// Whether a run in `status` has ended: it gets a completion sequence and joins its thread's
/// history.
fn ends(status: RunStatus) -> bool {
    matches!(status, RunStatus::Completed | RunStatus::Cancelled)
}

/// An SQL expression of the text at path `$path` of the head's top-level field `$key`
/// (`forkedFrom`, `parent`: fields the codec writes only for some runs), `NULL` when the head
/// does not hold it. The text test (`"$key":` somewhere in the head) skips every other row
/// without parsing its head, so listing stays as fast for runs without the field; the head's
/// own top-level field is then read by its path (the text may also occur deeper, in a call's
/// arguments: that reads `NULL` too).
macro_rules! head_field {
    ($key:literal, $path:literal) => {
        concat!(
            "CASE WHEN strpos(head, '\"",
            $key,
            "\":') > 0 THEN head::jsonb #>> '",
            $path,
            "' END"
        )
    };
}

/// The listing statement for `filter`: only the conditions it sets, so each shape of listing is
/// its own prepared statement, planned on the index that fits it (a generic plan of
/// `$1 IS NULL OR status = $1` would scan every run). A `changed_after` listing lists no stamp
/// above `horizon` (one may be visible while a smaller one is still in flight).
fn list_query(
    filter: &RunFilter,
    limit: Option<i64>,
    horizon: Option<u64>,
) -> QueryBuilder<Postgres> {
    let mut query =
        QueryBuilder::new(LIST_RUNS.replace("{chars}", &FIRST_MESSAGE_CHARS.to_string()));
    if let Some(status) = filter.status {
        query.push(" AND status = ").push_bind(status.as_str());
    }
    if let Some(thread_id) = &filter.thread_id {
        query
            .push(" AND thread_id = ")
            .push_bind(thread_id.as_str());
    }
    if let Some(scope) = filter.resource.scope() {
        query.push(" AND scope = ").push_bind(scope.to_owned());
    }
    if let Some(run_id) = &filter.run_id {
        query.push(" AND id = ").push_bind(run_id.as_str());
    }
    if let Some(agent_id) = &filter.agent_id {
        query.push(" AND agent_id = ").push_bind(agent_id.as_str());
    }
    if let Some(original) = &filter.forked_from {
        query
            .push(concat!(
                " AND ",
                head_field!("forkedFrom", "{forkedFrom,runId}"),
                " = "
            ))
            .push_bind(original.as_str());
    }
    if let Some(parent) = &filter.parent_run_id {
        query
            .push(concat!(
                " AND ",
                head_field!("parent", "{parent,runId}"),
                " = "
            ))
            .push_bind(parent.as_str());
    }
    if filter.top_level {
        query.push(concat!(
            " AND ",
            head_field!("parent", "{parent,runId}"),
            " IS NULL"
        ));
    }
    if let Some(after) = filter.changed_after {
        query.push(" AND change_seq > ").push_bind(to_bigint(after));
        if let Some(horizon) = horizon {
            query
                .push(" AND change_seq <= ")
                .push_bind(to_bigint(horizon));
        }
        query.push(" ORDER BY change_seq");
    } else if let Some(cursor) = &filter.cursor {
        query
            .push(" AND (created_at_ms, id, scope) < (")
            .push_bind(to_bigint(cursor.created_at_ms))
            .push(", ")
            .push_bind(cursor.run_id.as_str())
            .push(", ")
            .push_bind(cursor.scope().to_owned())
            .push(")");
    }
    if filter.changed_after.is_none() {
        query.push(" ORDER BY created_at_ms DESC, id DESC, scope DESC");
    }
    if let Some(limit) = limit {
        query.push(" LIMIT ").push_bind(limit);
    }
    query
}

/// One listing row: the summary its head gives (read without the run's messages), or the
/// row as unreadable when the head does not decode (a newer format, damaged text).
fn listed_run(row: &PgRow) -> Result<ListedRun, StoreError> {
    let run_id = RunId::new(row.try_get::<String, _>("id").map_err(backend)?);
    let scope: String = row.try_get("scope").map_err(backend)?;
    let created_at_ms = from_bigint(row.try_get("created_at_ms").map_err(backend)?);
    let head: String = row.try_get("head").map_err(backend)?;
    let change_seq: Option<i64> = row.try_get("change_seq").map_err(backend)?;
    let change_seq = change_seq.map(from_bigint);
    let first_message: Option<String> = row.try_get("first_message").map_err(backend)?;
    Ok(match decode_run(&run_id, &head, [""; 0]) {
        Ok(state) => {
            let mut summary = state.summary();
            summary.change_seq = change_seq;
            summary.first_message = first_message;
            ListedRun::Run(summary)
        }
        Err(error) => ListedRun::Unreadable {
            run_id,
            resource_id: resource_of_scope(scope),
            created_at_ms,
            change_seq,
            error,
        },
    })
}

/// One stored message.
fn decode_message(run_id: &RunId, text: &str) -> Result<Message, StoreError> {
    serde_json::from_str(text).map_err(|source| StoreError::Corrupt {
        run_id: run_id.clone(),
        source,
    })
}

/// A function of the migration answered with a value it never returns.
#[derive(Debug, thiserror::Error)]
#[error("{function} answered {value}, which it never returns")]
struct UnexpectedAnswer {
    function: &'static str,
    value: i64,
}
