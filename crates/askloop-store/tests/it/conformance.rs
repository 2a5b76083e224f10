//! The core conformance suite, run on a fresh SQLite file per scenario.

use std::sync::Arc;

use askloop_core::RunStore;
use askloop_store::{SqliteStore, Synchronous};

async fn fresh_store() -> Arc<dyn RunStore> {
    // The folder must outlive the test; it is removed by the OS's temp cleanup.
    let dir = tempfile::tempdir().unwrap().keep();
    Arc::new(
        SqliteStore::open(&dir.join("runs.db"), Synchronous::Normal)
            .await
            .unwrap(),
    )
}

askloop_core::store_conformance_tests!(fresh_store());
