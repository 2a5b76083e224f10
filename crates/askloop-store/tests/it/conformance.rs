//! The core conformance suite, run on a fresh SQLite file per scenario, once with each
//! durability setting (they commit by different paths); the file's folder is removed when the
//! scenario's store is dropped.

use std::sync::Arc;

use askloop_core::store::{Lease, RunFilter, RunPage, RunState, StoredRun, ThreadHistory};
use askloop_core::{RunKey, RunStore, StoreError, ThreadKey};
use askloop_store::{SqliteStore, Synchronous};
use async_trait::async_trait;

/// A SQLite store in a temporary folder that lives as long as the store.
struct TempSqlite {
    store: SqliteStore,
    _dir: tempfile::TempDir,
}

#[async_trait]
impl RunStore for TempSqlite {
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

async fn fresh_store(synchronous: Synchronous) -> Arc<dyn RunStore> {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("runs.db"), synchronous)
        .await
        .unwrap();
    Arc::new(TempSqlite { store, _dir: dir })
}

/// The default: every commit through the writer thread's group commit.
mod full {
    use super::*;

    askloop_core::store_conformance_tests!(fresh_store(Synchronous::Full));
}

/// `synchronous=normal`: a commit that finds the writer idle runs on the caller's thread.
mod normal {
    use super::*;

    askloop_core::store_conformance_tests!(fresh_store(Synchronous::Normal));
}
