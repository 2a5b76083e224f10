//! [`PgStore`](super::PgStore)'s change notifications: a `NOTIFY askloop_runs` after each
//! commit that [`notifies`](askloop_core::store::notifies), and one `LISTEN askloop_runs`
//! session per store, started by the first
//! [`RunStore::watch_changes`](askloop_core::RunStore::watch_changes).
//!
//! **Sending.** The notification is its own statement, sent by the committing store after its
//! commit succeeded, not part of the commit: PostgreSQL serializes the commits of
//! transactions that notify (a database-wide lock held through the commit's WAL flush), so a
//! trigger's `pg_notify` inside the commit capped commits that notify at one flush each
//! (measured with pgbench, 64 clients, every update notifying: ~390 commits/s in the commit
//! against ~7,400/s without; ~4,000/s with the notification as a statement of its own, which
//! writes no WAL). A commit does not wait for it either: it queues its change to the store's
//! [`Notifier`], one task that sends whatever is queued in one statement (one notification per
//! change, in commit order), so under load one round trip and one turn of that database-wide
//! lock carry many commits' notifications instead of one each (issue 36: at ~4,000 such
//! statements/s, three per ask-and-resume cycle would cap cycles near 1,300/s). The payload is
//! `{"schema": ..., "resource": ..., "run": ..., "status": ...}` (`resource` null for a run
//! without one), the schema telling the stores of several schemas in one database apart. A
//! process that dies between its commit and the notification leaves that change unnotified:
//! watchers also look at the store on a timer (the inbox every 5 s); [`PgStore::close`] sends
//! what is queued before it closes the pool. The queue is bounded ([`QUEUED`]): when the
//! database falls that far behind, commits wait for room rather than grow it. Notifications of
//! different processes are not ordered with each other; watchers re-read the store anyway.
//!
//! [`PgStore::close`]: super::PgStore::close
//!
//! The session is a [`PgListener`] holding one connection of the store's pool (so in the store's
//! schema); it
//! keeps only the notifications of its schema and fans them out over a [`ChangeFeed`]. When its
//! connection is lost it reconnects and listens again, and sends [`RunChange::Resync`]: the
//! notifications of the gap are gone, so watchers look at the store again. It ends when the pool
//! is closed or every handle of the store is dropped.

use std::time::Duration;

use askloop_core::store::{ChangeFeed, RunChange};
use askloop_core::{RunId, RunKey, RunStatus};
use sqlx::postgres::{PgListener, PgNotification, PgPool};
use tokio::sync::{OnceCell, mpsc, oneshot, watch};

/// The channel of the notifications.
pub(crate) const CHANNEL: &str = "askloop_runs";

/// The notifications of several commits, in order: the channel, then their runs' resources,
/// ids and statuses; the schema is the session's (the store's tables' schema).
const NOTIFY: &str = "SELECT pg_notify($1, json_build_object('schema', current_schema(), \
    'resource', c.resource, 'run', c.run, 'status', c.status)::text) \
    FROM unnest($2::text[], $3::text[], $4::text[]) WITH ORDINALITY AS c (resource, run, status, ord) \
    ORDER BY c.ord";

/// At most this many notifications go in one statement (the rest in the next).
const BATCH: usize = 256;

/// At most this many notifications wait for the notifier; a commit that finds the queue full
/// waits for room (the queue's memory stays bounded whatever the database's pace).
const QUEUED: usize = 4 * BATCH;

/// How long the session waits after a failed reconnection before it tries again.
const RETRY_DELAY: Duration = Duration::from_secs(1);

/// The listening side of one store (shared by its clones).
#[derive(Debug, Default)]
pub(crate) struct Notifications {
    /// The feed, once the session listens.
    feed: OnceCell<ChangeFeed>,
    /// Dropped with the last handle of the store, which ends the session.
    alive: watch::Sender<()>,
}

impl Notifications {
    /// The store's feed, starting its session on the first call (it listens before this
    /// returns, so a change committed afterwards is seen).
    ///
    /// # Errors
    /// The session could not connect or listen.
    pub(crate) async fn feed(&self, pool: &PgPool) -> Result<&ChangeFeed, sqlx::Error> {
        self.feed
            .get_or_try_init(|| async {
                let mut listener = PgListener::connect_with(pool).await?;
                let schema: String = sqlx::query_scalar("SELECT current_schema()")
                    .fetch_one(&mut listener)
                    .await?;
                listener.listen(CHANNEL).await?;
                let feed = ChangeFeed::new();
                tokio::spawn(listen(
                    listener,
                    schema,
                    feed.clone(),
                    self.alive.subscribe(),
                ));
                Ok(feed)
            })
            .await
    }
}

/// What the [`Notifier`] is given: a commit to notify, or a request to say when everything
/// given before was sent.
enum Queued {
    /// The commit that left run `run` (of `resource`) in `status`.
    Change {
        resource: Option<String>,
        run: String,
        status: RunStatus,
    },
    /// Answered once everything queued before it was sent (or failed).
    Sent(oneshot::Sender<()>),
}

/// The sending side of one store (shared by its clones): a queue, and the task that sends what
/// it holds, ending once every handle of the store is dropped.
#[derive(Debug)]
pub(crate) struct Notifier {
    queue: mpsc::Sender<Queued>,
}

impl Notifier {
    /// Starts the sending task on `pool` (on the current tokio runtime).
    pub(crate) fn start(pool: PgPool) -> Self {
        let (queue, queued) = mpsc::channel(QUEUED);
        tokio::spawn(send_queued(pool, queued));
        Self { queue }
    }

    /// Queues the notification of the commit that left `run` in `status` (waiting for room
    /// when [`QUEUED`] wait already); it is sent after the commits queued before it. A failure
    /// is logged, not returned: the commit happened, and watchers look at the store on a timer
    /// too.
    pub(crate) async fn announce(&self, run: &RunKey, status: RunStatus) {
        let change = Queued::Change {
            resource: run.resource_id.as_ref().map(ToString::to_string),
            run: run.run_id.to_string(),
            status,
        };
        if self.queue.send(change).await.is_err() {
            tracing::warn!(run_id = %run.run_id, "store notifications: a commit was not notified (the notifier stopped)");
        }
    }

    /// Waits until everything queued so far was sent (before the pool closes).
    pub(crate) async fn sent(&self) {
        let (done, sent) = oneshot::channel();
        if self.queue.send(Queued::Sent(done)).await.is_ok() {
            // A stopped notifier drops the request: nothing is left to wait for.
            let _ = sent.await;
        }
    }
}

/// The notifier's task: sends what is queued, everything waiting in one statement (up to
/// [`BATCH`]), until every sender is dropped.
async fn send_queued(pool: PgPool, mut queued: mpsc::Receiver<Queued>) {
    let (mut resources, mut runs, mut statuses) = (Vec::new(), Vec::new(), Vec::new());
    let mut waiting = Vec::new();
    while let Some(first) = queued.recv().await {
        let mut next = Some(first);
        while let Some(item) = next.take() {
            match item {
                Queued::Change {
                    resource,
                    run,
                    status,
                } => {
                    resources.push(resource);
                    runs.push(run);
                    statuses.push(status.as_str());
                }
                Queued::Sent(done) => waiting.push(done),
            }
            if runs.len() < BATCH {
                next = queued.try_recv().ok();
            }
        }
        if !runs.is_empty() {
            send(&pool, &resources, &runs, &statuses).await;
        }
        resources.clear();
        runs.clear();
        statuses.clear();
        for done in waiting.drain(..) {
            let _ = done.send(());
        }
    }
}

/// Sends the notifications of one batch. A failure is logged, not returned.
async fn send(pool: &PgPool, resources: &[Option<String>], runs: &[String], statuses: &[&str]) {
    let sent = sqlx::query(NOTIFY)
        .bind(CHANNEL)
        .bind(resources)
        .bind(runs)
        .bind(statuses)
        .execute(pool)
        .await;
    if let Err(error) = sent {
        tracing::warn!(commits = runs.len(), error = %error, "store notifications: commits were not notified");
    }
}

/// The session: notifications of `schema` into `feed` until the pool closes or `alive`'s
/// sender is dropped.
async fn listen(
    mut listener: PgListener,
    schema: String,
    feed: ChangeFeed,
    mut alive: watch::Receiver<()>,
) {
    tracing::debug!(schema, "store notifications: listening");
    loop {
        let received = tokio::select! {
            received = listener.try_recv() => received,
            _ = alive.changed() => break,
        };
        match received {
            Ok(Some(notification)) => {
                if let Some(change) = change_of(&notification, &schema) {
                    feed.send(change);
                }
            }
            Ok(None) => {
                tracing::warn!("store notifications: connection lost; reconnecting");
                feed.send(RunChange::Resync);
            }
            Err(sqlx::Error::PoolClosed) => break,
            Err(error) => {
                tracing::warn!(error = %error, "store notifications: cannot reconnect yet");
                feed.send(RunChange::Resync);
                tokio::time::sleep(RETRY_DELAY).await;
            }
        }
    }
    tracing::debug!(schema, "store notifications: stopped");
}

/// The change a notification tells, if it is of `schema`; a payload that cannot be read is a
/// [`RunChange::Resync`].
fn change_of(notification: &PgNotification, schema: &str) -> Option<RunChange> {
    let Ok(payload) = serde_json::from_str::<serde_json::Value>(notification.payload()) else {
        return Some(RunChange::Resync);
    };
    if payload.get("schema").and_then(serde_json::Value::as_str) != Some(schema) {
        return None;
    }
    let run_id = payload.get("run").and_then(serde_json::Value::as_str);
    let resource_id = match payload.get("resource") {
        None | Some(serde_json::Value::Null) => Some(None),
        Some(serde_json::Value::String(resource)) => Some(Some(resource.as_str().into())),
        Some(_) => None,
    };
    let status = payload
        .get("status")
        .and_then(serde_json::Value::as_str)
        .and_then(|status| status.parse::<RunStatus>().ok());
    Some(match (resource_id, run_id, status) {
        (Some(resource_id), Some(run_id), Some(status)) => RunChange::Run {
            resource_id,
            run_id: RunId::new(run_id),
            status,
        },
        _ => RunChange::Resync,
    })
}
