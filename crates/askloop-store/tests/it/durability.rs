//! Durability: a run suspended through one store instance is resumed through another opened on
//! the same file, and bad stored data gives typed errors.

use std::sync::Arc;

use askloop_core::store::{ListedRun, RunFilter};
use askloop_core::testing::ScriptedModel;
use askloop_core::{Agent, AskUser, RunId, RunKey, RunOutcome, RunStatus, RunStore, StoreError};
use askloop_store::{OpenOptions, SqliteStore, StoreUrl, Synchronous, open_store};
use serde_json::json;

const SCRIPT: &str = r#"{"steps":[
  {"toolCalls":[{"id":"c1","name":"ask_user","args":{"question":"Which repo?","options":[{"label":"main"},{"label":"docs"}]}}]},
  {"text":"Summary of main."}]}"#;

fn agent(store: Arc<dyn RunStore>) -> Agent {
    Agent::builder("assistant")
        .model(ScriptedModel::from_json(SCRIPT).unwrap())
        .tool(AskUser::new())
        .shared_store(store)
        .build()
        .unwrap()
}

#[tokio::test]
async fn suspended_run_resumes_through_a_second_store_on_the_same_file() {
    let dir = tempfile::tempdir().unwrap();
    let url = StoreUrl::sqlite(dir.path().join("nested/folder/askloop.db"))
        .with_synchronous(Synchronous::Normal);
    let first = open_store(&url, &OpenOptions::default()).await.unwrap();
    let output = agent(first.clone())
        .generate("Summarize my project")
        .await
        .unwrap();
    assert!(matches!(output.status, RunOutcome::Suspended { .. }));
    drop(first);

    let second = open_store(
        &url.clone().with_synchronous(Synchronous::Full),
        &OpenOptions::new(),
    )
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
            .load_run(&output.run_key())
            .await
            .unwrap()
            .state
            .status(),
        RunStatus::Completed
    );
}

/// The head of run `run_id` as stored.
fn stored_head(path: &std::path::Path, run_id: &RunId) -> String {
    rusqlite::Connection::open(path)
        .unwrap()
        .query_row(
            "SELECT head FROM runs WHERE id = ?1",
            [run_id.as_str()],
            |row| row.get(0),
        )
        .unwrap()
}

fn set_head(path: &std::path::Path, run_id: &RunId, head: &str) {
    rusqlite::Connection::open(path)
        .unwrap()
        .execute(
            "UPDATE runs SET head = ?1 WHERE id = ?2",
            [head, run_id.as_str()],
        )
        .unwrap();
}

#[tokio::test]
async fn corrupt_and_future_rows_are_typed_errors_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.db");
    let store = SqliteStore::open(&path, Synchronous::Normal).await.unwrap();
    let output = agent(Arc::new(store.clone())).generate("hi").await.unwrap();
    let RunOutcome::Suspended { ref pending } = output.status else {
        panic!("{:?}", output.status);
    };

    let head = stored_head(&path, &output.run_id);
    let future = head.replace("\"formatVersion\":2", "\"formatVersion\":99");
    assert_ne!(future, head);
    set_head(&path, &output.run_id, &future);
    let error = store.load_run(&output.run_key()).await.unwrap_err();
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
    // Resuming it is refused before anything changes: the row stays as the newer build wrote it.
    let error = agent(Arc::new(store.clone()))
        .resume_stream(
            json!("main"),
            &output.run_id,
            Some(&pending[0].tool_call_id),
        )
        .await
        .err()
        .unwrap();
    assert!(error.to_string().contains("format 99"), "{error}");
    assert_eq!(stored_head(&path, &output.run_id), future);

    set_head(&path, &output.run_id, "not json");
    let error = store.load_run(&output.run_key()).await.unwrap_err();
    assert!(matches!(error, StoreError::Corrupt { .. }), "{error:?}");
    let error = store
        .load_run(&RunKey::new(None, RunId::new("missing")))
        .await
        .unwrap_err();
    assert!(matches!(error, StoreError::NotFound { .. }), "{error:?}");
    store.close().await;
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
    let head = stored_head(&path, &ids[1]);
    set_head(
        &path,
        &ids[1],
        &head.replace("\"formatVersion\":2", "\"formatVersion\":3"),
    );
    set_head(&path, &ids[2], "{\"formatVersion\":2,");
    let page = store.list_runs(&RunFilter::new()).await.unwrap();
    assert_eq!(page.runs.len(), 3);
    let by_id = |id: &RunId| page.runs.iter().find(|run| run.run_id() == id).unwrap();
    let summary = by_id(&ids[0]).summary().unwrap();
    assert_eq!(
        summary.pending.len(),
        1,
        "summaries carry the pending questions"
    );
    assert_eq!(
        summary.pending[0].suspend_payload["question"],
        "Which repo?"
    );
    assert!(matches!(
        by_id(&ids[1]),
        ListedRun::Unreadable {
            error: StoreError::UnsupportedFormat {
                format_version: 3,
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_commits_share_groups_and_one_conflict_aborts_no_other() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("x.db"), Synchronous::Full)
        .await
        .unwrap();
    let shared: Arc<dyn RunStore> = Arc::new(store.clone());
    let agent = agent(shared.clone());
    let mut runs = Vec::new();
    for index in 0..32 {
        let output = agent.generate(format!("run {index}")).await.unwrap();
        runs.push(store.load_run(&output.run_key()).await.unwrap());
    }
    // Every run updated at once, each twice: once with its version (wins), once with a stale
    // one (conflicts); whatever groups they land in, each winner is stored.
    let updates = runs.iter().flat_map(|stored| {
        let store = store.clone();
        let stale = store.clone();
        let state = stored.state.clone();
        let stale_state = stored.state.clone();
        let version = stored.version;
        [
            tokio::spawn(async move { store.update_run(&state, version, None).await }),
            tokio::spawn(async move { stale.update_run(&stale_state, version - 1, None).await }),
        ]
    });
    let results: Vec<_> = futures::future::join_all(updates).await;
    for (index, pair) in results.chunks(2).enumerate() {
        let won = pair[0].as_ref().unwrap();
        assert_eq!(*won.as_ref().unwrap(), runs[index].version + 1);
        let lost = pair[1].as_ref().unwrap();
        assert!(matches!(lost, Err(StoreError::Conflict { .. })), "{lost:?}");
    }
    for stored in &runs {
        let now = store.load_run(&stored.state.key()).await.unwrap();
        assert_eq!(now.version, stored.version + 1);
        assert_eq!(now.state, stored.state);
    }
    store.close().await;
    let error = store.load_run(&runs[0].state.key()).await;
    assert!(error.is_err(), "a closed store refuses reads");
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

const THREE_QUESTIONS: &str = r#"{"steps":[
  {"toolCalls":[{"id":"q1","name":"ask_user","args":{"question":"First?"}}]},
  {"toolCalls":[{"id":"q2","name":"ask_user","args":{"question":"Second?"}}]},
  {"toolCalls":[{"id":"q3","name":"ask_user","args":{"question":"Third?"}}]},
  {"text":"Done."}]}"#;

fn asking_agent(store: Arc<dyn RunStore>) -> Agent {
    Agent::builder("assistant")
        .model(ScriptedModel::from_json(THREE_QUESTIONS).unwrap())
        .tool(AskUser::new())
        .shared_store(store)
        .build()
        .unwrap()
}

/// Two stores on one database take turns driving one run (as two processes would): each
/// remembers the messages it committed or loaded, and each load still returns the whole run as
/// stored, with the messages the other appended since.
pub(crate) async fn stores_taking_turns_load_what_the_other_appended(
    first: Arc<dyn RunStore>,
    second: Arc<dyn RunStore>,
) {
    let one = asking_agent(first.clone());
    let two = asking_agent(second.clone());
    let output = one.generate("Ask me three things").await.unwrap();
    let run_id = output.run_key();
    // The second store loads the run (and remembers its messages)...
    let seen = second.load_run(&run_id).await.unwrap();
    assert_eq!(seen, first.load_run(&run_id).await.unwrap());
    // ...the first answers on, appending messages...
    one.resume_stream(json!("one"), &run_id, None)
        .await
        .unwrap()
        .collect_output()
        .await
        .unwrap();
    let after_first = first.load_run(&run_id).await.unwrap();
    assert!(after_first.state.messages().len() > seen.state.messages().len());
    // ...and the second sees them.
    assert_eq!(second.load_run(&run_id).await.unwrap(), after_first);
    // The second answers, then the first, each from what it remembers.
    two.resume_stream(json!("two"), &run_id, None)
        .await
        .unwrap()
        .collect_output()
        .await
        .unwrap();
    let done = one
        .resume_stream(json!("three"), &run_id, None)
        .await
        .unwrap()
        .collect_output()
        .await
        .unwrap();
    assert_eq!(done.text, "Done.");
    let from_first = first.load_run(&run_id).await.unwrap();
    let from_second = second.load_run(&run_id).await.unwrap();
    assert_eq!(from_first, from_second);
    assert_eq!(from_first.state.status(), RunStatus::Completed);
    // The user's request, then per question the assistant's call and its result, then the
    // final text.
    assert_eq!(from_first.state.messages().len(), 1 + 3 * 2 + 1);
}

#[tokio::test]
async fn two_sqlite_stores_taking_turns_load_what_the_other_appended() {
    let dir = tempfile::tempdir().unwrap();
    let url = StoreUrl::sqlite(dir.path().join("askloop.db"));
    let first = open_store(&url, &OpenOptions::default()).await.unwrap();
    let second = open_store(&url, &OpenOptions::default()).await.unwrap();
    stores_taking_turns_load_what_the_other_appended(first.clone(), second.clone()).await;
    first.close().await;
    second.close().await;
}
