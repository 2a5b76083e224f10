//! The core conformance suite, run on a fresh SQLite file per scenario; the file's folder is
//! removed when the scenario's store is dropped.

use std::sync::Arc;

use askloop_core::model::Message;
use askloop_core::store::{RunFilter, RunPage, RunState, StoredRun};
use askloop_core::{RunId, RunStore, StoreError, ThreadId};
use askloop_store::{SqliteStore, Synchronous};
use async_trait::async_trait;

/// A SQLite store in a temporary folder that lives as long as the store.
struct TempSqlite {
    store: SqliteStore,
    _dir: tempfile::TempDir,
}

#[async_trait]
impl RunStore for TempSqlite {
    async fn insert_run(&self, state: &RunState) -> Result<u64, StoreError> {
        self.store.insert_run(state).await
    }
    async fn update_run(&self, state: &RunState, expected_version: u64) -> Result<u64, StoreError> {
        self.store.update_run(state, expected_version).await
    }
    async fn load_run(&self, run_id: &RunId) -> Result<StoredRun, StoreError> {
        self.store.load_run(run_id).await
    }
    async fn list_runs(&self, filter: &RunFilter) -> Result<RunPage, StoreError> {
        self.store.list_runs(filter).await
    }
    async fn thread_messages(&self, thread_id: &ThreadId) -> Result<Vec<Message>, StoreError> {
        self.store.thread_messages(thread_id).await
    }
    async fn close(&self) {
        self.store.close().await;
    }
}

async fn fresh_store() -> Arc<dyn RunStore> {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("runs.db"), Synchronous::Normal)
        .await
        .unwrap();
    Arc::new(TempSqlite { store, _dir: dir })
}

askloop_core::store_conformance_tests!(fresh_store());
