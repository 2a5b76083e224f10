//! [`PgStore`]: runs in a PostgreSQL database shared by any number of processes.
//!
//! `url.rs` holds [`PgUrl`]; `schema.rs` the migrations; `store.rs` the
//! [`RunStore`](askloop_core::RunStore) implementation (each commit one statement: a
//! compare-and-swap, the new messages, the lease and the completion sequence in one call of a
//! SQL function of the migration); `error.rs` the driver's errors mapped to store errors;
//! `notify.rs` its change notifications (`LISTEN/NOTIFY`); `links.rs` answer links. The SQLite store (`sqlite/`) has the
//! same file for the same concern.

mod error;
mod links;
mod notify;
mod outbox;
mod schema;
mod store;
mod url;

use std::sync::Arc;
use std::time::Duration;

use sqlx::migrate::MigrateDatabase;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, Postgres};

use crate::error::OpenError;
use crate::options::{OpenOptions, Synchronous};

pub use self::url::PgUrl;
use crate::known::KnownRuns;

/// Connections a store keeps at most (per process), opened on demand. PostgreSQL flushes the
/// write-ahead log of the commits waiting at once together, so the commits of concurrent runs
/// share an fsync only if they are in flight together: one connection per run in flight, up to
/// this many (64 runs resuming at once commit about twice as fast as with 16 connections).
const POOL_SIZE: u32 = 64;

/// How long a statement waits for a free connection (or for the server to accept one) before
/// failing with a backend error.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// PostgreSQL's error code for a database that does not exist (`invalid_catalog_name`).
const INVALID_CATALOG_NAME: &str = "3D000";

/// PostgreSQL's error code for `CREATE DATABASE` of a name that exists (`duplicate_database`).
const DUPLICATE_DATABASE: &str = "42P04";

/// A [`RunStore`](askloop_core::RunStore) in a PostgreSQL database.
///
/// Tables live in the first schema of the connection's `search_path` (set it with the URL's
/// `options=-c search_path=NAME` parameter to keep several stores in one database). Any number
/// of processes may open the same database: every commit is a compare-and-swap on the run's
/// version under a row lock, so of several processes resuming the same call exactly one wins.
///
/// Change notifications ([`RunStore::watch_changes`](askloop_core::RunStore::watch_changes)):
/// every store `NOTIFY`s its commits that change a run's status or leave it suspended, after
/// each commit (from a task of its own that sends the queued notifications together, in a
/// statement of their own: inside the commit, NOTIFY would serialize commits), so watchers see
/// those of every process on the database; the store listens on one
/// connection of its pool, taken by the first watcher and held until the store is closed,
/// reconnecting when it is lost.
///
/// Connections: a pool of up to 64 per store, opened on demand; commits of concurrent runs go
/// through different connections, and PostgreSQL flushes the write-ahead log of concurrent
/// commits together (its own group commit).
#[derive(Clone, Debug)]
pub struct PgStore {
    pool: PgPool,
    /// The runs this process committed or loaded: their version and stored messages, so an
    /// update sends only the new messages and a load reads only those it does not hold.
    known: Arc<KnownRuns>,
    /// The change notifications' session, started by the first `watch_changes`.
    notifications: Arc<notify::Notifications>,
    /// Sends the notifications of this store's commits.
    notifier: Arc<notify::Notifier>,
}

impl PgStore {
    /// Opens the store at `url` as `options` say, with `synchronous` deciding whether commits
    /// wait for the server's disk.
    ///
    /// For writing: creates the database when it does not exist (if
    /// [`OpenOptions::create_if_missing()`] and the user may), then applies the schema
    /// migrations (PostgreSQL serializes concurrent migrators with a lock). Without
    /// `create_if_missing`, a database without askloop's tables is [`OpenError::NotFound`] and
    /// nothing is created. Read-only ([`OpenOptions::read_only()`]): sessions are read-only
    /// (`default_transaction_read_only`), nothing is created or migrated, and a database
    /// without askloop's tables is [`OpenError::NotFound`].
    ///
    /// [`Synchronous::Normal`] sets `synchronous_commit=off` for the store's sessions: a commit
    /// returns before its write-ahead log reaches the disk, so a crash of the server (not of
    /// askloop) may lose the last commits of up to three times `wal_writer_delay`; the database
    /// stays consistent. [`Synchronous::Full`] keeps the server's setting (`on` by default).
    ///
    /// SQL statements are never logged.
    ///
    /// # Errors
    /// [`OpenError::NotFound`], [`OpenError::Connect`] (the server cannot be reached or refuses
    /// the login), [`OpenError::Schema`], [`OpenError::Migrate`].
    pub async fn open_with(
        url: &PgUrl,
        synchronous: Synchronous,
        options: &OpenOptions,
    ) -> Result<Self, OpenError> {
        let shown = url.to_string();
        let connect_error = |source: sqlx::Error| OpenError::Connect {
            url: shown.clone(),
            source: source.into(),
        };
        let connect_options =
            session_options(url, synchronous, options.read_only).map_err(connect_error)?;
        let writes = !options.read_only;

        // One connection first, without the pool's retries, so a server that is down or a
        // refused login fails at once with its own error.
        let mut connection = match connect_options.connect().await {
            Ok(connection) => connection,
            Err(error) if is_missing_database(&error) => {
                if !writes || !options.create_if_missing {
                    return Err(OpenError::NotFound { url: shown });
                }
                create_database(url).await.map_err(connect_error)?;
                connect_options.connect().await.map_err(connect_error)?
            }
            Err(error) => return Err(connect_error(error)),
        };
        schema::prepare(&mut connection, &shown, options).await?;
        // Closing politely only tells the server goodbye; nothing depends on it.
        let _ = connection.close().await;

        let pool = pool_options().connect_lazy_with(connect_options);
        Ok(Self {
            notifier: Arc::new(notify::Notifier::start(pool.clone())),
            pool,
            known: Arc::new(KnownRuns::default()),
            notifications: Arc::default(),
        })
    }

    /// Sends the notifications of the commits made so far, then closes the pool, waiting for
    /// connections in use to be returned.
    pub async fn close(&self) {
        self.notifier.sent().await;
        self.pool.close().await;
    }
}

/// The options of every session of a store: the URL's, SQL statements never logged,
/// `application_name` askloop unless the URL names one, and the session settings that
/// `synchronous` and `read_only` ask for.
fn session_options(
    url: &PgUrl,
    synchronous: Synchronous,
    read_only: bool,
) -> Result<PgConnectOptions, sqlx::Error> {
    let mut options = url.connect_options()?.disable_statement_logging();
    if options.get_application_name().is_none() {
        options = options.application_name("askloop");
    }
    if synchronous == Synchronous::Normal {
        options = options.options([("synchronous_commit", "off")]);
    }
    if read_only {
        options = options.options([("default_transaction_read_only", "on")]);
    }
    Ok(options)
}

/// The pool settings: up to [`POOL_SIZE`] connections, not pinged before every statement (a
/// broken connection fails one statement, with a backend error, and is replaced).
fn pool_options() -> PgPoolOptions {
    PgPoolOptions::new()
        .max_connections(POOL_SIZE)
        .min_connections(0)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .test_before_acquire(false)
}

/// Whether connecting failed because the database does not exist.
fn is_missing_database(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(database)
        if database.code().as_deref() == Some(INVALID_CATALOG_NAME))
}

/// Creates the URL's database (through the server's `postgres` database); another process
/// creating it at the same time is no error.
async fn create_database(url: &PgUrl) -> Result<(), sqlx::Error> {
    match Postgres::create_database(url.expose_password()).await {
        Err(sqlx::Error::Database(database))
            if database.code().as_deref() == Some(DUPLICATE_DATABASE) =>
        {
            Ok(())
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test database (`ASKLOOP_TEST_POSTGRES`, as the integration tests).
    fn test_url() -> PgUrl {
        let text = std::env::var("ASKLOOP_TEST_POSTGRES")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
        PgUrl::parse(&text).unwrap().0
    }

    async fn setting(options: PgConnectOptions, name: &str) -> String {
        let mut connection = options.connect().await.unwrap_or_else(|error| {
            panic!("this test needs PostgreSQL (ASKLOOP_TEST_POSTGRES): {error}")
        });
        let value: String = sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SHOW {name}")))
            .fetch_one(&mut connection)
            .await
            .unwrap();
        connection.close().await.unwrap();
        value
    }

    #[tokio::test]
    async fn sessions_carry_synchronous_and_read_only_settings() {
        let url = test_url();
        let normal = session_options(&url, Synchronous::Normal, true).unwrap();
        assert_eq!(setting(normal.clone(), "synchronous_commit").await, "off");
        assert_eq!(
            setting(normal.clone(), "default_transaction_read_only").await,
            "on"
        );
        assert_eq!(setting(normal, "application_name").await, "askloop");
        let full = session_options(&url, Synchronous::Full, false).unwrap();
        assert_eq!(setting(full.clone(), "synchronous_commit").await, "on");
        assert_eq!(setting(full, "default_transaction_read_only").await, "off");
    }
}
