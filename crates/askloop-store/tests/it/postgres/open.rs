//! Opening a PostgreSQL store: errors, read-only, nothing created when it may not be.

use askloop_core::store::RunFilter;
use askloop_core::{RunStore, StoreError};
use askloop_store::{OpenError, OpenOptions, StoreUrl, open_store};

use super::{TestSchema, connect_admin, one_suspended_run};

#[tokio::test]
async fn a_server_that_is_down_fails_at_once_with_connect() {
    let started = std::time::Instant::now();
    let url: StoreUrl = "postgres://postgres:s3cret@127.0.0.1:1/test"
        .parse()
        .unwrap();
    let error = open_store(&url, &OpenOptions::default())
        .await
        .err()
        .unwrap();
    assert!(matches!(error, OpenError::Connect { .. }), "{error:?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    let shown = format!("{error} {error:?} {:?}", std::error::Error::source(&error));
    assert!(!shown.contains("s3cret"), "{shown}");
    assert!(
        error.to_string().contains("postgres:***@127.0.0.1:1"),
        "{error}"
    );
}

#[tokio::test]
async fn read_only_or_no_create_open_of_an_empty_schema_is_not_found_and_creates_nothing() {
    let schema = TestSchema::create().await;
    for options in [
        OpenOptions::new().read_only(true),
        OpenOptions::new().create_if_missing(false),
    ] {
        let error = open_store(&schema.store_url(), &options)
            .await
            .err()
            .unwrap();
        assert!(matches!(error, OpenError::NotFound { .. }), "{error:?}");
    }
    let mut admin = connect_admin().await;
    let tables: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname = $1",
    )
    .bind(schema.name())
    .fetch_one(&mut admin)
    .await
    .unwrap();
    assert_eq!(tables, 0);
}

#[tokio::test]
async fn a_read_only_store_reads_and_refuses_writes() {
    let schema = TestSchema::create().await;
    let writer = schema.open().await;
    let first = one_suspended_run(writer.clone()).await;
    writer.close().await;

    let reader = open_store(&schema.store_url(), &OpenOptions::new().read_only(true))
        .await
        .unwrap();
    let stored = reader.load_run(&first).await.unwrap();
    let listed = reader.list_runs(&RunFilter::new()).await.unwrap();
    assert_eq!(listed.runs.len(), 1);
    let error = reader
        .update_run(&stored.state, stored.version, None)
        .await
        .unwrap_err();
    assert!(matches!(error, StoreError::ReadOnly), "{error:?}");
    assert_eq!(
        reader.load_run(&first).await.unwrap().version,
        stored.version
    );
}

#[tokio::test]
async fn reopening_a_migrated_schema_keeps_its_runs() {
    let schema = TestSchema::create().await;
    let first = schema.open().await;
    let run_id = one_suspended_run(first.clone()).await;
    first.close().await;
    let second = schema.open().await;
    let stored = second.load_run(&run_id).await.unwrap();
    assert_eq!(stored.state.status(), askloop_core::RunStatus::Suspended);
    assert_eq!(stored.version, 2, "inserted, then suspended");
    assert_eq!(stored.lease, None, "a suspended run has no lease");
}
