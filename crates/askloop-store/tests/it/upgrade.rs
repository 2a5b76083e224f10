//! A format-1 database (`tests/fixtures/format1.db`, made by askloop's former sqlx store; see
//! `tests/fixtures/README.md`) is upgraded in place when opened for writing, and its runs go
//! on: the suspended run with a copied thread history is answered, the run left `resuming` is
//! continued, the thread's history keeps its completion order. A schema-2 database
//! (`tests/fixtures/schema2.db`) is keyed by resource in place (schema 3), then given the
//! change order (schema 4): every run kept byte for byte under its key, one thread per
//! resource, every run stamped in the change order, and runs go on.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use askloop_core::store::{RunFilter, codec};
use askloop_core::testing::ScriptedModel;
use askloop_core::{
    Agent, AgentError, AskUser, ResourceId, RunId, RunKey, RunOptions, RunStatus, RunStore,
    StoreError, ThreadId, ThreadKey,
};
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

/// The fixture's thread of resource `user-1`.
fn thread_1() -> ThreadKey {
    ThreadKey::new(Some("user-1".into()), ThreadId::new("thread-1"))
}

/// The key of a fixture run of resource `user-1`.
fn user_1(run_id: &str) -> RunKey {
    RunKey::new(Some("user-1".into()), RunId::new(run_id))
}

/// The key of a fixture run without resource.
fn no_resource(run_id: &str) -> RunKey {
    RunKey::new(None, RunId::new(run_id))
}

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
        (
            7,
            [
                "answer_links",
                "run_events",
                "run_messages",
                "runs",
                "sqlite_sequence",
                "webhook_deliveries"
            ]
            .map(str::to_owned)
            .to_vec()
        )
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
    let history = store.thread_history(&thread_1(), None).await.unwrap();
    assert_eq!(history.messages.len(), 4);
    assert_eq!(history.through, Some(2));
    let first_only = store.thread_history(&thread_1(), Some(1)).await.unwrap();
    assert_eq!(first_only.messages, history.messages[..2]);
    assert_eq!(first_only.through, Some(1));

    // The suspended run kept its copied history inline, and only its own messages as its own.
    let loaded = store.load_run(&user_1(SUSPENDED)).await.unwrap();
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
    let history = store.thread_history(&thread_1(), None).await.unwrap();
    assert_eq!(history.through, Some(3));
    assert_eq!(history.messages.len(), 4 + 4);

    // The run a resume had claimed (its result never recorded) is continued with the kept
    // answer (ask_user is idempotent).
    let resuming = store.load_run(&no_resource(RESUMING)).await.unwrap();
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

    let failed = store.load_run(&no_resource(FAILED)).await.unwrap();
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
                supported: 7,
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
    let error = store.load_run(&no_resource(FAILED)).await.unwrap_err();
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
    let error = store.load_run(&user_1(COMPLETED_1)).await.unwrap_err();
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

/// The script the fixture `schema2.db`'s thread-1 runs of user-1 were made with.
const SCHEMA2_SCRIPT: &str = r#"{"steps":[
  {"text":"Hello there."},
  {"toolCalls":[{"id":"c1","name":"ask_user","args":{"question":"Where to?","options":[{"label":"Lisbon"},{"label":"Porto"}]}}]},
  {"text":"Lisbon it is."}]}"#;
const SCHEMA2_SUSPENDED: &str = "01a24568-b185-7341-af8e-6ffeeeaa7409";
const SCHEMA2_OTHER_TENANT: &str = "01a30000-0000-7000-8000-00000000000c";
const SCHEMA2_RUNNING: [&str; 2] = [
    "01a30000-0000-7000-8000-0000000000e1",
    "01a30000-0000-7000-8000-0000000000e2",
];

/// A copy of `tests/fixtures/schema2.db` in a fresh folder.
fn schema2_copy() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("schema2.db");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/schema2.db"),
        &path,
    )
    .unwrap();
    (dir, path)
}

#[tokio::test]
async fn issue31_a_schema2_database_is_keyed_by_resource_in_place_and_its_runs_go_on() {
    let (_dir, path) = schema2_copy();
    assert_eq!(tables(&path).0, 2, "the fixture is of schema 2");
    let store = SqliteStore::open(&path, Synchronous::Full).await.unwrap();
    let shared: Arc<dyn RunStore> = Arc::new(store.clone());
    assert_eq!(
        tables(&path),
        (
            7,
            [
                "answer_links",
                "run_events",
                "run_messages",
                "runs",
                "sqlite_sequence",
                "webhook_deliveries"
            ]
            .map(str::to_owned)
            .to_vec()
        )
    );

    // Every run is where its resource puts it, byte for byte as schema 2 held it.
    let expected: serde_json::Map<String, serde_json::Value> = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/schema2.json"),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(expected.len(), 7);
    for (run_id, run) in &expected {
        let resource = run["state"]["resourceId"].as_str().map(ResourceId::from);
        let key = RunKey::new(resource, RunId::new(run_id.as_str()));
        let loaded = store.load_run(&key).await.unwrap();
        assert_eq!(Some(loaded.version), run["version"].as_u64(), "{key}");
        let state: serde_json::Value =
            serde_json::from_str(&codec::encode_state(&loaded.state).unwrap()).unwrap();
        assert_eq!(state, run["state"], "{key}");
    }
    let listed = store.list_runs(&RunFilter::new()).await.unwrap();
    assert_eq!(listed.runs.len(), 7);
    // Schema 4 stamped every run of schema 3, once each: the change cursor stands above them.
    let mut stamps: Vec<u64> = listed
        .runs
        .iter()
        .map(|run| run.change_seq().expect("every upgraded run is stamped"))
        .collect();
    stamps.sort_unstable();
    assert_eq!(stamps, (1..=7).collect::<Vec<_>>());
    let upgraded_cursor = listed.change_cursor.unwrap();
    assert_eq!(upgraded_cursor, 7);
    let unchanged = store
        .list_runs(&RunFilter::new().changed_after(upgraded_cursor))
        .await
        .unwrap();
    assert!(unchanged.runs.is_empty());
    let user_2 = store
        .list_runs(&RunFilter::new().resource("user-2"))
        .await
        .unwrap();
    assert_eq!(user_2.runs.len(), 1);
    assert_eq!(user_2.runs[0].run_id().as_str(), SCHEMA2_OTHER_TENANT);

    // thread-1 of user-1 and thread-1 of user-2 are two threads now.
    let mine = store.thread_history(&thread_1(), None).await.unwrap();
    assert_eq!((mine.messages.len(), mine.through), (2, Some(1)));
    let theirs = store
        .thread_history(
            &ThreadKey::new(Some("user-2".into()), ThreadId::new("thread-1")),
            None,
        )
        .await
        .unwrap();
    assert_eq!((theirs.messages.len(), theirs.through), (2, Some(2)));
    // A run cancelled under schema 2 keeps no sequence.
    let cancelled = store
        .thread_history(
            &ThreadKey::new(Some("user-1".into()), ThreadId::new("thread-3")),
            None,
        )
        .await
        .unwrap();
    assert!(cancelled.messages.is_empty());

    // The waiting run is answered by its key; its model sees its own thread only (the
    // script's third step: one earlier answer of thread-1, none of user-2's).
    let output = agent(shared.clone(), SCHEMA2_SCRIPT)
        .resume_stream(json!("Lisbon"), &user_1(SCHEMA2_SUSPENDED), None)
        .await
        .unwrap()
        .collect_output()
        .await
        .unwrap();
    assert_eq!(output.text, "Lisbon it is.");
    // Resumed and completed after the upgrade: listed as changed after the upgrade's cursor.
    let changed = store
        .list_runs(&RunFilter::new().changed_after(upgraded_cursor))
        .await
        .unwrap();
    let changed: Vec<&str> = changed
        .runs
        .iter()
        .map(|run| run.run_id().as_str())
        .collect();
    assert_eq!(changed, [SCHEMA2_SUSPENDED]);

    // thread-4 held two running runs: a new message waits until neither runs.
    let text_agent = agent(
        shared.clone(),
        r#"{"steps":[{"text":"Done."},{"text":"Again."}]}"#,
    );
    let new_message = || {
        text_agent
            .stream_with("Once more", RunOptions::new().thread("thread-4"))
            .started()
    };
    let error = new_message().await.unwrap_err();
    assert!(matches!(error, AgentError::ThreadBusy { .. }), "{error:?}");
    text_agent
        .cancel_run(&no_resource(SCHEMA2_RUNNING[0]), Some("cli".into()))
        .await
        .unwrap();
    let error = new_message().await.unwrap_err();
    assert!(
        matches!(&error, AgentError::ThreadBusy { running_run_id: Some(id), .. } if id.as_str() == SCHEMA2_RUNNING[1]),
        "{error:?}"
    );
    let continued = text_agent
        .continue_stream(&no_resource(SCHEMA2_RUNNING[1]))
        .await
        .unwrap()
        .collect_output()
        .await
        .unwrap();
    assert_eq!(continued.text, "Done.");
    let output = new_message().await.unwrap().collect_output().await.unwrap();
    assert_eq!(output.text, "Again.");
    store.close().await;

    // Opening it again changes nothing more.
    let again = SqliteStore::open(&path, Synchronous::Full).await.unwrap();
    assert_eq!(
        again.list_runs(&RunFilter::new()).await.unwrap().runs.len(),
        8
    );
    again.close().await;
}
