//! Opening options: read-only opens create nothing and write nothing, a missing database is a
//! typed error, and open errors do not repeat their causes.

use std::error::Error;
use std::sync::Arc;

use askloop_core::store::RunFilter;
use askloop_core::testing::ScriptedModel;
use askloop_core::{Agent, AskUser, RunStore, StoreError};
use askloop_store::{OpenError, OpenOptions, SqliteStore, StoreUrl, Synchronous, open_store};

const SCRIPT: &str = r#"{"steps":[{"text":"Hello."}]}"#;

async fn one_run(store: Arc<dyn RunStore>) {
    let agent = Agent::builder("assistant")
        .model(ScriptedModel::from_json(SCRIPT).unwrap())
        .tool(AskUser::new())
        .shared_store(store)
        .build()
        .unwrap();
    agent.generate("Hi").await.unwrap();
}

#[tokio::test]
async fn issue7_fault6_read_only_open_of_a_missing_database_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let url = StoreUrl::sqlite(dir.path().join("typo/dir/x.db"));
    let error = open_store(&url, &OpenOptions::new().read_only(true))
        .await
        .err()
        .unwrap();
    assert!(matches!(error, OpenError::NotFound { .. }), "{error:?}");
    assert_eq!(
        error.to_string(),
        format!(
            "no database at sqlite://{}",
            dir.path().join("typo/dir/x.db").display()
        )
    );
    let error = open_store(&url, &OpenOptions::new().create_if_missing(false))
        .await
        .err()
        .unwrap();
    assert!(matches!(error, OpenError::NotFound { .. }), "{error:?}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[tokio::test]
async fn issue7_fault6_a_read_only_store_reads_and_refuses_writes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.db");
    let writer = SqliteStore::open_with(&path, Synchronous::Full, &OpenOptions::new())
        .await
        .unwrap();
    one_run(Arc::new(writer.clone())).await;
    writer.close().await;

    let reader = SqliteStore::open_with(
        &path,
        Synchronous::Full,
        &OpenOptions::new().read_only(true),
    )
    .await
    .unwrap();
    let runs = reader.list_runs(&RunFilter::default()).await.unwrap();
    assert_eq!(runs.runs.len(), 1);
    let stored = reader.load_run(&runs.runs[0].key()).await.unwrap();
    let error = reader
        .update_run(&stored.state, stored.version, None)
        .await
        .unwrap_err();
    assert!(matches!(error, StoreError::ReadOnly), "{error:?}");
    let error = reader.insert_run(&stored.state, None).await.unwrap_err();
    assert!(
        matches!(
            error,
            StoreError::ReadOnly | StoreError::AlreadyExists { .. }
        ),
        "{error:?}"
    );
}

#[tokio::test]
async fn issue7_errors_open_errors_do_not_repeat_their_source() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let error = SqliteStore::open_with(
        &file.join("sub/x.db"),
        Synchronous::Full,
        &OpenOptions::new(),
    )
    .await
    .unwrap_err();
    assert_eq!(
        error.to_string(),
        format!("cannot create folder {}", file.join("sub").display())
    );
    let source = error.source().unwrap().to_string();
    assert!(source.contains("os error"), "{source}");

    // A folder where the database file should be: refused before SQLite tries, with no
    // cause to repeat.
    let error = SqliteStore::open_with(dir.path(), Synchronous::Full, &OpenOptions::new())
        .await
        .unwrap_err();
    assert!(matches!(error, OpenError::IsDirectory { .. }), "{error:?}");
    assert!(error.source().is_none());
}

#[tokio::test]
async fn a_folder_is_not_a_database_whatever_the_access() {
    let dir = tempfile::tempdir().unwrap();
    let url = StoreUrl::sqlite(dir.path());
    for options in [
        OpenOptions::new(),
        OpenOptions::new().read_only(true),
        OpenOptions::new().create_if_missing(false),
    ] {
        let error = open_store(&url, &options).await.err().unwrap();
        assert!(matches!(error, OpenError::IsDirectory { .. }), "{error:?}");
        assert_eq!(
            error.to_string(),
            format!(
                "{} is a folder, not a database file; expected sqlite://PATH/FILE.db",
                dir.path().display()
            )
        );
        assert!(error.source().is_none());
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
