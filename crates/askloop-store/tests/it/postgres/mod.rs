//! PostgreSQL: the core conformance suite (here), opening (`open.rs`), what the tables hold
//! (`tables.rs`), exactly-once resumes across stores (`race.rs`), and the upgrade of a schema
//! made by an older askloop (`upgrade.rs`).
//!
//! Every test works in its own freshly created schema (named in the connection's
//! `search_path`) of the database at `ASKLOOP_TEST_POSTGRES` (default
//! `postgres://postgres@127.0.0.1:5432/test`), dropped when the test's store is dropped. Without
//! a reachable PostgreSQL these tests fail; they never skip.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use askloop_core::store::{Lease, RunFilter, RunPage, RunState, StoredRun, ThreadHistory};
use askloop_core::{RunKey, RunStore, StoreError, ThreadKey};
use askloop_store::{OpenOptions, StoreUrl, open_store};
use async_trait::async_trait;
use sqlx::Connection;

mod changes;
mod open;
mod race;
mod tables;
mod upgrade;
use sqlx::postgres::PgConnection;

/// Held by the tests that open many pools at once (tens of connections each), so that two of
/// them never run together: with the other tests beside them they would exceed PostgreSQL's
/// default `max_connections` (100) and fail with "too many clients", not with a finding.
static MANY_CONNECTIONS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Waits until no other many-pool test runs (see [`MANY_CONNECTIONS`]).
pub(crate) async fn many_connections() -> tokio::sync::MutexGuard<'static, ()> {
    MANY_CONNECTIONS.lock().await
}

/// The test database's URL.
pub(crate) fn database_url() -> String {
    std::env::var("ASKLOOP_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// Connects to the test database, failing the test (never skipping it) when PostgreSQL is
/// missing.
async fn connect_admin() -> PgConnection {
    let url = database_url();
    match PgConnection::connect(&url).await {
        Ok(connection) => connection,
        Err(error) => panic!(
            "these tests need PostgreSQL at {url} (set ASKLOOP_TEST_POSTGRES to another \
             database): {error}"
        ),
    }
}

/// A schema of its own for one test, created empty and dropped (with everything in it) when
/// this value is dropped.
pub(crate) struct TestSchema {
    name: String,
}

impl TestSchema {
    /// Creates a schema no other test uses.
    pub(crate) async fn create() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let name = format!(
            "askloop_test_{}_{}_{nanos}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let mut admin = connect_admin().await;
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {name}")))
            .execute(&mut admin)
            .await
            .unwrap();
        admin.close().await.unwrap();
        Self { name }
    }

    /// The schema's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The test database's URL with this schema first in `search_path`.
    pub(crate) fn url(&self) -> String {
        let base = database_url();
        let separator = if base.contains('?') { '&' } else { '?' };
        format!("{base}{separator}options=-c%20search_path%3D{}", self.name)
    }

    /// [`TestSchema::url`] as a store URL.
    pub(crate) fn store_url(&self) -> StoreUrl {
        self.url().parse().unwrap()
    }

    /// Opens a store in this schema (migrating it).
    pub(crate) async fn open(&self) -> Arc<dyn RunStore> {
        open_store(&self.store_url(), &OpenOptions::default())
            .await
            .unwrap()
    }
}

impl Drop for TestSchema {
    fn drop(&mut self) {
        let name = self.name.clone();
        // Drop may run inside a runtime: use a thread of its own with its own runtime.
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let mut admin = PgConnection::connect(&database_url()).await?;
                sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                    "SET lock_timeout = '10s'; DROP SCHEMA IF EXISTS {name} CASCADE"
                )))
                .execute(&mut admin)
                .await?;
                admin.close().await
            })
        })
        .join();
        if let Ok(Err(error)) = dropped {
            eprintln!("could not drop test schema {}: {error}", self.name);
        }
    }
}

/// A store in a schema of its own, dropped with the store.
struct SchemaStore {
    store: Arc<dyn RunStore>,
    _schema: TestSchema,
}

#[async_trait]
impl RunStore for SchemaStore {
    async fn insert_run_with_events(
        &self,
        state: &RunState,
        lease: Option<&Lease>,
        events: &[askloop_core::event::RunEvent],
    ) -> Result<u64, StoreError> {
        self.store
            .insert_run_with_events(state, lease, events)
            .await
    }
    async fn update_run_with_events(
        &self,
        state: &RunState,
        expected_version: u64,
        lease: Option<&Lease>,
        events: &[askloop_core::event::RunEvent],
    ) -> Result<u64, StoreError> {
        self.store
            .update_run_with_events(state, expected_version, lease, events)
            .await
    }
    async fn renew_lease(
        &self,
        run: &RunKey,
        expected_version: u64,
        lease: &Lease,
    ) -> Result<(), StoreError> {
        self.store.renew_lease(run, expected_version, lease).await
    }
    async fn load_run(&self, run: &RunKey) -> Result<StoredRun, StoreError> {
        self.store.load_run(run).await
    }
    async fn keys_of_run(
        &self,
        run_id: &askloop_core::RunId,
    ) -> Result<Vec<askloop_core::RunKey>, askloop_core::StoreError> {
        self.store.keys_of_run(run_id).await
    }
    async fn list_runs(&self, filter: &RunFilter) -> Result<RunPage, StoreError> {
        self.store.list_runs(filter).await
    }
    async fn run_counts(&self) -> Result<askloop_core::store::RunCounts, StoreError> {
        self.store.run_counts().await
    }
    async fn thread_history(
        &self,
        thread: &ThreadKey,
        through: Option<u64>,
    ) -> Result<ThreadHistory, StoreError> {
        self.store.thread_history(thread, through).await
    }
    async fn watch_changes(&self) -> Option<askloop_core::store::RunChanges> {
        self.store.watch_changes().await
    }
    async fn close(&self) {
        self.store.close().await;
    }
    fn answer_links(&self) -> Option<&dyn askloop_core::store::AnswerLinks> {
        self.store.answer_links()
    }
    fn outbox(&self) -> Option<&dyn askloop_core::store::Outbox> {
        self.store.outbox()
    }
}

/// A fresh PostgreSQL store in a schema of its own.
pub(crate) async fn fresh_store() -> Arc<dyn RunStore> {
    let schema = TestSchema::create().await;
    let store = schema.open().await;
    Arc::new(SchemaStore {
        store,
        _schema: schema,
    })
}

mod conformance {
    askloop_core::store_conformance_tests!(super::fresh_store());
}

/// Commits through one pool are notified to another pool on the same schema (LISTEN/NOTIFY),
/// and not to a store of another schema in the same database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_through_one_pool_are_notified_to_another() {
    let schema = TestSchema::create().await;
    let (writer, watcher) = (schema.open().await, schema.open().await);
    let other_schema = TestSchema::create().await;
    let other = other_schema.open().await;
    let mut unrelated = other.watch_changes().await.expect("PostgreSQL notifies");
    askloop_core::testing::conformance::run_change_scenario(writer.clone(), watcher.clone()).await;
    let stray = tokio::time::timeout(std::time::Duration::from_millis(200), unrelated.next()).await;
    assert!(
        stray.is_err(),
        "another schema's change was notified: {stray:?}"
    );
    for store in [writer, watcher, other] {
        store.close().await;
    }
}

/// Starts one run that suspends at its question; returns its key.
pub(crate) async fn one_suspended_run(store: Arc<dyn RunStore>) -> RunKey {
    let output = race::agent(store)
        .generate("Summarize my project")
        .await
        .unwrap();
    assert!(
        matches!(output.status, askloop_core::RunOutcome::Suspended { .. }),
        "{:?}",
        output.status
    );
    output.run_key()
}
