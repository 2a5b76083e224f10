//! Durability: a run suspended through one store instance is resumed through another opened on
//! the same file, and bad stored data gives typed errors.

use std::sync::Arc;

use askloop_core::store::{ListedRun, RunFilter};
use askloop_core::testing::ScriptedModel;
use askloop_core::{Agent, AskUser, RunId, RunOutcome, RunStatus, RunStore, StoreError};
use askloop_store::{OpenOptions, SqliteStore, StoreUrl, Synchronous, open_store};
use serde_json::json;

const SCRIPT: &str = r#"{"steps":[
  {"toolCalls":[{"id":"c1","name":"ask_user","args":{"question":"Which repo?","options":[{"label":"main"},{"label":"docs"}]}}]},
  {"text":"Summary of main."}]}"#;

fn agent(store: Arc<dyn RunStore>) -> Agent {
    Agent::builder("assistant")
        .model(ScriptedModel::from_json(SCRIPT).unwrap())
        .tool(AskUser)
        .shared_store(store)
        .build()
        .unwrap()
}

#[tokio::test]
async fn suspended_run_resumes_through_a_second_store_on_the_same_file() {
    let dir = tempfile::tempdir().unwrap();
    let url = StoreUrl::Sqlite(dir.path().join("nested/folder/askloop.db"));
    let first = open_store(&url, &OpenOptions::default()).await.unwrap();
    let output = agent(first.clone())
        .generate("Summarize my project")
        .await
        .unwrap();
    assert!(matches!(output.status, RunOutcome::Suspended { .. }));
    drop(first);

    let second = open_store(&url, &OpenOptions::new().synchronous(Synchronous::Full))
        .await
        .unwrap();
    let resumed = agent(second.clone())
        .resume_stream(json!("main"), &output.run_id, None)
        .await
        .unwrap()
        .collect_output()
        .await
        .unwrap();
    assert_eq!(resumed.text, "Summary of main.");
    assert_eq!(
        second
            .load_run(&output.run_id)
            .await
            .unwrap()
            .state
            .status(),
        RunStatus::Completed
    );
}

#[tokio::test]
async fn corrupt_and_future_rows_are_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.db");
    let store = SqliteStore::open(&path, Synchronous::Normal).await.unwrap();
    let output = agent(Arc::new(store.clone())).generate("hi").await.unwrap();
    store.close().await;

    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    let state: String = sqlx::query_scalar("SELECT state FROM runs")
        .fetch_one(&pool)
        .await
        .unwrap();
    let future = state.replace("\"formatVersion\":1", "\"formatVersion\":99");
    sqlx::query("UPDATE runs SET state = ?1")
        .bind(&future)
        .execute(&pool)
        .await
        .unwrap();
    let store = SqliteStore::open(&path, Synchronous::Normal).await.unwrap();
    let error = store.load_run(&output.run_id).await.unwrap_err();
    assert!(
        matches!(
            error,
            StoreError::UnsupportedFormat {
                format_version: 99,
                ..
            }
        ),
        "{error:?}"
    );

    sqlx::query("UPDATE runs SET state = 'not json'")
        .execute(&pool)
        .await
        .unwrap();
    let error = store.load_run(&output.run_id).await.unwrap_err();
    assert!(matches!(error, StoreError::Corrupt { .. }), "{error:?}");
    let error = store.load_run(&RunId::new("missing")).await.unwrap_err();
    assert!(matches!(error, StoreError::NotFound { .. }), "{error:?}");
}

#[tokio::test]
async fn issue7_fault13_one_unreadable_run_does_not_hide_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.db");
    let store = SqliteStore::open(&path, Synchronous::Normal).await.unwrap();
    let agent = agent(Arc::new(store.clone()));
    let mut ids = Vec::new();
    for prompt in ["one", "two", "three"] {
        ids.push(agent.generate(prompt).await.unwrap().run_id);
    }
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    let state: String = sqlx::query_scalar("SELECT state FROM runs WHERE id = ?1")
        .bind(ids[1].as_str())
        .fetch_one(&pool)
        .await
        .unwrap();
    sqlx::query("UPDATE runs SET state = ?1 WHERE id = ?2")
        .bind(state.replace("\"formatVersion\":1", "\"formatVersion\":2"))
        .bind(ids[1].as_str())
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query("UPDATE runs SET state = '{\"formatVersion\":1,' WHERE id = ?1")
        .bind(ids[2].as_str())
        .execute(&pool)
        .await
        .unwrap();
    let page = store.list_runs(&RunFilter::new()).await.unwrap();
    assert_eq!(page.runs.len(), 3);
    let by_id = |id: &RunId| page.runs.iter().find(|run| run.run_id() == id).unwrap();
    assert!(by_id(&ids[0]).summary().is_some());
    assert!(matches!(
        by_id(&ids[1]),
        ListedRun::Unreadable {
            error: StoreError::UnsupportedFormat {
                format_version: 2,
                ..
            },
            ..
        }
    ));
    assert!(matches!(
        by_id(&ids[2]),
        ListedRun::Unreadable {
            error: StoreError::Corrupt { .. },
            ..
        }
    ));
    let suspended = store
        .list_runs(&RunFilter::new().status(RunStatus::Suspended))
        .await
        .unwrap();
    assert_eq!(
        suspended.runs.len(),
        3,
        "filters use the columns, not the state"
    );
}

#[tokio::test]
async fn unwritable_location_is_an_open_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let error = SqliteStore::open(&file.join("sub/x.db"), Synchronous::Normal)
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("cannot create folder"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_stores_opening_a_new_file_at_once_all_succeed() {
    for _ in 0..5 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("new.db");
        let opens = (0..8).map(|_| {
            let path = path.clone();
            tokio::spawn(async move {
                SqliteStore::open(&path, Synchronous::Normal)
                    .await
                    .map(|_| ())
            })
        });
        for result in futures::future::join_all(opens).await {
            result.unwrap().unwrap();
        }
    }
}
