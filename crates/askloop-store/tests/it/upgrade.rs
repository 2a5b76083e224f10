//! A format-1 database (`tests/fixtures/format1.db`, made by askloop's former sqlx store; see
//! `tests/fixtures/README.md`) is upgraded in place when opened for writing, and its runs go
//! on: the suspended run with a copied thread history is answered, the run left `resuming` is
//! continued, the thread's history keeps its completion order.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use askloop_core::store::RunFilter;
use askloop_core::testing::ScriptedModel;
use askloop_core::{Agent, AskUser, RunId, RunStatus, RunStore, StoreError, ThreadId};
use askloop_store::{OpenError, OpenOptions, SqliteStore, Synchronous};
use serde_json::json;

const COMPLETED_1: &str = "01a22e90-2721-7683-adf7-a3c96c31046d";
const COMPLETED_2: &str = "01a22e90-2737-7380-9450-ecd49fd39e52";
const SUSPENDED: &str = "01a22e90-2750-7279-9e6b-39a03e09165d";
const FAILED: &str = "01a22e90-2762-7026-9e25-ec8857df8cae";
const RESUMING: &str = "01a22e90-2776-70e8-a729-c79d5c90b0ac";

/// The scripts the fixture's runs were made with.
const THREAD_SCRIPT: &str = r#"{"steps":[
  {"text":"Hello there."},
  {"text":"Second answer."},
  {"toolCalls":[{"id":"c1","name":"ask_user","args":{"question":"Where to?","options":[{"label":"Lisbon"},{"label":"Porto"}]}}]},
  {"text":"Lisbon it is."}]}"#;
const ASK_SCRIPT: &str = r#"{"steps":[
  {"toolCalls":[{"id":"c1","name":"ask_user","args":{"question":"Which repo?"}}]},
  {"text":"Summary."}]}"#;

/// A copy of the fixture in a fresh folder.
fn fixture_copy() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("format1.db");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/format1.db"),
        &path,
    )
    .unwrap();
    (dir, path)
}

fn agent(store: Arc<dyn RunStore>, script: &str) -> Agent {
    Agent::builder("assistant")
        .model(ScriptedModel::from_json(script).unwrap())
        .model_spec("scripted:fixture.json")
        .tool(AskUser::new())
        .shared_store(store)
        .build()
        .unwrap()
}

fn tables(path: &Path) -> (i64, Vec<String>) {
    let connection = rusqlite::Connection::open(path).unwrap();
    let version = connection
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .unwrap();
    let mut select = connection
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .unwrap();
    let names = select
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    (version, names)
}

#[tokio::test]
async fn issue9_a_format1_database_is_upgraded_in_place_and_its_runs_go_on() {
    let (_dir, path) = fixture_copy();
    assert_eq!(
        tables(&path).0,
        0,
        "the fixture is as the sqlx store left it"
    );
    let store = SqliteStore::open(&path, Synchronous::Full).await.unwrap();
    let shared: Arc<dyn RunStore> = Arc::new(store.clone());
    assert_eq!(
        tables(&path),
        (2, vec!["run_messages".to_owned(), "runs".to_owned()])
    );

    let page = store.list_runs(&RunFilter::new()).await.unwrap();
    let listed: Vec<(&str, RunStatus)> = page
        .runs
        .iter()
        .map(|run| {
            let summary = run.summary().unwrap();
            (summary.run_id.as_str(), summary.status)
        })
        .collect();
    assert_eq!(
        listed,
        vec![
            (RESUMING, RunStatus::Running),
            (FAILED, RunStatus::Failed),
            (SUSPENDED, RunStatus::Suspended),
            (COMPLETED_2, RunStatus::Completed),
            (COMPLETED_1, RunStatus::Completed),
        ]
    );
    let suspended = page.runs[2].summary().unwrap();
    assert_eq!(suspended.pending.len(), 1);
    assert_eq!(
        suspended.pending[0].suspend_payload["question"],
        "Where to?"
    );

    // The thread's history: both completed runs' own messages, in completion order.
    let history = store
        .thread_history(&ThreadId::new("thread-1"), None)
        .await
        .unwrap();
    assert_eq!(history.messages.len(), 4);
    assert_eq!(history.through, Some(2));
    let first_only = store
        .thread_history(&ThreadId::new("thread-1"), Some(1))
        .await
        .unwrap();
    assert_eq!(first_only.messages, history.messages[..2]);
    assert_eq!(first_only.through, Some(1));

    // The suspended run kept its copied history inline, and only its own messages as its own.
    let loaded = store.load_run(&RunId::new(SUSPENDED)).await.unwrap();
    assert_eq!(loaded.version, 2);
    assert_eq!(loaded.lease, None);
    assert_eq!(loaded.state.messages().len(), 2);
    assert_eq!(loaded.state.legacy_history().map(<[_]>::len), Some(4));
    assert_eq!(
        loaded.state.legacy_history().unwrap(),
        &history.messages[..]
    );

    // It is answered; the model sees the copied history (its script step is the 4th).
    let thread_agent = agent(shared.clone(), THREAD_SCRIPT);
    let pending = &suspended.pending[0];
    let output = thread_agent
        .resume_stream(
            json!("Lisbon"),
            &RunId::new(SUSPENDED),
            Some(&pending.tool_call_id),
        )
        .await
        .unwrap()
        .collect_output()
        .await
        .unwrap();
    assert_eq!(output.text, "Lisbon it is.");
    let history = store
        .thread_history(&ThreadId::new("thread-1"), None)
        .await
        .unwrap();
    assert_eq!(history.through, Some(3));
    assert_eq!(history.messages.len(), 4 + 4);

    // The run a resume had claimed (its result never recorded) is continued with the kept
    // answer (ask_user is idempotent).
    let resuming = store.load_run(&RunId::new(RESUMING)).await.unwrap();
    assert_eq!(resuming.state.unfinished_calls().len(), 1);
    assert_eq!(
        resuming.state.unfinished_calls()[0].answer,
        Some(json!("main"))
    );
    let output = agent(shared.clone(), ASK_SCRIPT)
        .continue_stream(&RunId::new(RESUMING))
        .await
        .unwrap()
        .collect_output()
        .await
        .unwrap();
    assert_eq!(output.text, "Summary.");

    let failed = store.load_run(&RunId::new(FAILED)).await.unwrap();
    assert_eq!(failed.state.status(), RunStatus::Failed);
    store.close().await;

    // Opening it again changes nothing more.
    let again = SqliteStore::open(&path, Synchronous::Full).await.unwrap();
    assert_eq!(
        again.list_runs(&RunFilter::new()).await.unwrap().runs.len(),
        5
    );
    again.close().await;
}

#[tokio::test]
async fn issue9_a_format1_database_opened_read_only_is_refused_and_left_as_it_is() {
    let (_dir, path) = fixture_copy();
    let before = std::fs::read(&path).unwrap();
    let error = SqliteStore::open_with(
        &path,
        Synchronous::Full,
        &OpenOptions::new().read_only(true),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(
            error,
            OpenError::SchemaVersion {
                found: 0,
                supported: 2,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(
        error
            .to_string()
            .contains("opening it for writing upgrades"),
        "{error}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), before);
}

#[tokio::test]
async fn issue9_a_format1_row_that_does_not_upgrade_is_kept_verbatim() {
    let (_dir, path) = fixture_copy();
    let connection = rusqlite::Connection::open(&path).unwrap();
    let state: String = connection
        .query_row("SELECT state FROM runs WHERE id = ?1", [FAILED], |row| {
            row.get(0)
        })
        .unwrap();
    let newer = state.replace("\"formatVersion\":1", "\"formatVersion\":7");
    assert_ne!(newer, state);
    connection
        .execute("UPDATE runs SET state = ?1 WHERE id = ?2", [&newer, FAILED])
        .unwrap();
    connection
        .execute(
            "UPDATE runs SET state = 'garbage' WHERE id = ?1",
            [COMPLETED_1],
        )
        .unwrap();
    drop(connection);

    let store = SqliteStore::open(&path, Synchronous::Full).await.unwrap();
    let error = store.load_run(&RunId::new(FAILED)).await.unwrap_err();
    assert!(
        matches!(
            error,
            StoreError::UnsupportedFormat {
                format_version: 7,
                ..
            }
        ),
        "{error:?}"
    );
    let error = store.load_run(&RunId::new(COMPLETED_1)).await.unwrap_err();
    assert!(matches!(error, StoreError::Corrupt { .. }), "{error:?}");
    let page = store.list_runs(&RunFilter::new()).await.unwrap();
    assert_eq!(page.runs.len(), 5);
    assert_eq!(
        page.runs
            .iter()
            .filter(|run| run.summary().is_none())
            .count(),
        2
    );
    store.close().await;
    let kept: String = rusqlite::Connection::open(&path)
        .unwrap()
        .query_row("SELECT head FROM runs WHERE id = ?1", [FAILED], |row| {
            row.get(0)
        })
        .unwrap();
    assert_eq!(kept, newer);
}
