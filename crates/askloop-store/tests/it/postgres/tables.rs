//! What the PostgreSQL tables hold: the shared codec's text byte for byte, one row per message
//! appended only once, completion sequences in commit order, leases in columns, and rows that
//! a build cannot read refused or listed as unreadable, never changed.

use std::sync::Arc;

use askloop_core::model::Message;
use askloop_core::store::codec::{decode_run, encode_head, encode_message};
use askloop_core::store::{Lease, ListedRun, RunFilter, RunState};
use askloop_core::testing::conformance::support::{owned, owned_thread, state};
use askloop_core::{LeaseHolder, RunId, RunStatus, RunStore, StoreError};
use serde_json::Value;
use sqlx::Connection;
use sqlx::postgres::PgConnection;

use super::TestSchema;

/// `base` with `count` messages and `status` (states are opaque outside the core: they are
/// built through the codec, as a store reads them).
pub(crate) fn with_messages(base: &RunState, count: usize, status: RunStatus) -> RunState {
    let mut head: Value = serde_json::from_str(&encode_head(base).unwrap()).unwrap();
    head["status"] = Value::String(status.as_str().to_owned());
    let messages: Vec<String> = (0..count)
        .map(|index| {
            encode_message(base.run_id(), &Message::user(format!("message {index}"))).unwrap()
        })
        .collect();
    decode_run(base.run_id(), &head.to_string(), &messages).unwrap()
}

async fn connect(schema: &TestSchema) -> PgConnection {
    PgConnection::connect(&schema.url()).await.unwrap()
}

async fn message_rows(connection: &mut PgConnection, run_id: &RunId) -> Vec<String> {
    sqlx::query_scalar("SELECT body FROM run_messages WHERE run_id = $1 ORDER BY seq")
        .bind(run_id.as_str())
        .fetch_all(connection)
        .await
        .unwrap()
}

#[tokio::test]
async fn commits_append_only_the_new_messages_as_the_codec_writes_them() {
    let schema = TestSchema::create().await;
    let store = schema.open().await;
    let mut sql = connect(&schema).await;
    let base = state("r1", "t1", RunStatus::Running, 1_000);
    let run_id = base.run_id().clone();

    store
        .insert_run(&with_messages(&base, 1, RunStatus::Running), None)
        .await
        .unwrap();
    let three = with_messages(&base, 3, RunStatus::Running);
    assert_eq!(store.update_run(&three, 1, None).await.unwrap(), 2);
    // A stale commit (of more messages) appends nothing.
    let five = with_messages(&base, 5, RunStatus::Running);
    let error = store.update_run(&five, 1, None).await.unwrap_err();
    assert!(matches!(error, StoreError::Conflict { .. }), "{error:?}");
    assert_eq!(message_rows(&mut sql, &run_id).await.len(), 3);

    // Another store (another process: it knows nothing of this run) commits the next one.
    let other = schema.open().await;
    let four = with_messages(&base, 4, RunStatus::Suspended);
    assert_eq!(other.update_run(&four, 2, None).await.unwrap(), 3);
    let expected: Vec<String> = four
        .messages()
        .iter()
        .map(|message| encode_message(&run_id, message).unwrap())
        .collect();
    assert_eq!(message_rows(&mut sql, &run_id).await, expected);
    let (head, count): (String, i32) =
        sqlx::query_as("SELECT head, message_count FROM runs WHERE id = $1")
            .bind(run_id.as_str())
            .fetch_one(&mut sql)
            .await
            .unwrap();
    assert_eq!(
        head,
        encode_head(&four).unwrap(),
        "the codec's text, byte for byte"
    );
    assert_eq!(count, 4);
    let loaded = store.load_run(&base.key()).await.unwrap();
    assert_eq!((loaded.state, loaded.version), (four, 3));

    // A long run: its commits send and write only what is new.
    let long = with_messages(&base, 300, RunStatus::Running);
    assert_eq!(store.update_run(&long, 3, None).await.unwrap(), 4);
    assert_eq!(store.load_run(&base.key()).await.unwrap().state, long);
    assert_eq!(message_rows(&mut sql, &run_id).await.len(), 300);
}

#[tokio::test]
async fn a_thread_is_ordered_by_completion_and_read_through_a_sequence() {
    let schema = TestSchema::create().await;
    let store = schema.open().await;
    // Suspended: a thread has one running run at a time.
    let older = with_messages(
        &state("r-older", "t1", RunStatus::Suspended, 1),
        2,
        RunStatus::Suspended,
    );
    let newer = with_messages(
        &state("r-newer", "t1", RunStatus::Suspended, 2),
        3,
        RunStatus::Suspended,
    );
    let elsewhere = with_messages(
        &state("r-other", "t2", RunStatus::Running, 3),
        1,
        RunStatus::Running,
    );
    for run in [&older, &newer, &elsewhere] {
        store.insert_run(run, None).await.unwrap();
    }
    let empty = store
        .thread_history(&owned_thread("t1"), None)
        .await
        .unwrap();
    assert_eq!((empty.messages.len(), empty.through), (0, None));

    // The newer run completes first.
    let completed = |run: &RunState| with_messages(run, run.messages().len(), RunStatus::Completed);
    store.update_run(&completed(&newer), 1, None).await.unwrap();
    store
        .update_run(&completed(&elsewhere), 1, None)
        .await
        .unwrap();
    store.update_run(&completed(&older), 1, None).await.unwrap();

    let all = store
        .thread_history(&owned_thread("t1"), None)
        .await
        .unwrap();
    let expected: Vec<Message> = newer
        .messages()
        .iter()
        .chain(older.messages())
        .cloned()
        .collect();
    assert_eq!(all.messages, expected);
    let first = store
        .thread_history(&owned_thread("t1"), Some(all.through.unwrap() - 2))
        .await
        .unwrap();
    assert_eq!(first.messages, newer.messages());
    assert_eq!(first.through, Some(all.through.unwrap() - 2));
    let none = store
        .thread_history(&owned_thread("t1"), Some(0))
        .await
        .unwrap();
    assert_eq!((none.messages.len(), none.through), (0, None));
}

/// Runs of one thread completing at once through different stores (processes) get distinct
/// sequences, and the history holds each run once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_completions_of_one_thread_each_get_their_own_sequence() {
    let _alone = super::many_connections().await;
    const RUNS: usize = 20;
    let schema = TestSchema::create().await;
    let mut stores = Vec::new();
    for _ in 0..4 {
        stores.push(schema.open().await);
    }
    let runs: Vec<RunState> = (0..RUNS)
        .map(|index| {
            // Suspended: a thread has one running run at a time.
            with_messages(
                &state(
                    &format!("r{index:02}"),
                    "t1",
                    RunStatus::Suspended,
                    index as u64,
                ),
                2,
                RunStatus::Suspended,
            )
        })
        .collect();
    for run in &runs {
        stores[0].insert_run(run, None).await.unwrap();
    }
    let tasks: Vec<_> = runs
        .iter()
        .enumerate()
        .map(|(index, run)| {
            let store: Arc<dyn RunStore> = stores[index % stores.len()].clone();
            let done = with_messages(run, 2, RunStatus::Completed);
            tokio::spawn(async move { store.update_run(&done, 1, None).await })
        })
        .collect();
    for task in tasks {
        assert_eq!(task.await.unwrap().unwrap(), 2);
    }
    let mut sql = connect(&schema).await;
    let sequences: Vec<i64> = sqlx::query_scalar(
        "SELECT completion_seq FROM runs WHERE thread_id = 't1' ORDER BY completion_seq",
    )
    .fetch_all(&mut sql)
    .await
    .unwrap();
    let mut distinct = sequences.clone();
    distinct.dedup();
    assert_eq!(distinct.len(), RUNS, "{sequences:?}");
    let history = stores[1]
        .thread_history(&owned_thread("t1"), None)
        .await
        .unwrap();
    assert_eq!(history.messages.len(), RUNS * 2);
    assert_eq!(history.through, sequences.last().map(|seq| *seq as u64));
}

#[tokio::test]
async fn leases_live_in_columns_and_renewals_keep_the_version() {
    let schema = TestSchema::create().await;
    let store = schema.open().await;
    let run = state("r1", "t1", RunStatus::Running, 1);
    let lease = Lease::new(LeaseHolder::new("holder-a"), 5_000);
    store.insert_run(&run, Some(&lease)).await.unwrap();
    assert_eq!(store.load_run(&run.key()).await.unwrap().lease, Some(lease));

    let renewed = Lease::new(LeaseHolder::new("holder-a"), 9_000);
    store.renew_lease(&run.key(), 1, &renewed).await.unwrap();
    let stored = store.load_run(&run.key()).await.unwrap();
    assert_eq!((stored.version, stored.lease), (1, Some(renewed.clone())));

    let error = store
        .renew_lease(&run.key(), 2, &renewed)
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            StoreError::Conflict {
                expected_version: 2,
                ..
            }
        ),
        "{error:?}"
    );
    let error = store
        .renew_lease(&owned("nobody"), 1, &renewed)
        .await
        .unwrap_err();
    assert!(matches!(error, StoreError::NotFound { .. }), "{error:?}");

    let suspended = with_messages(&run, 1, RunStatus::Suspended);
    assert_eq!(store.update_run(&suspended, 1, None).await.unwrap(), 2);
    assert_eq!(store.load_run(&run.key()).await.unwrap().lease, None);
}

#[tokio::test]
async fn rows_this_build_cannot_read_are_refused_or_listed_unreadable_and_left_as_they_are() {
    let schema = TestSchema::create().await;
    let store = schema.open().await;
    let mut sql = connect(&schema).await;
    for (id, created) in [("r-newer", 3), ("r-damaged", 2), ("r-fine", 1)] {
        store
            .insert_run(&state(id, "t1", RunStatus::Suspended, created), None)
            .await
            .unwrap();
    }
    let mut head: Value = serde_json::from_str(
        &sqlx::query_scalar::<_, String>("SELECT head FROM runs WHERE id = 'r-newer'")
            .fetch_one(&mut sql)
            .await
            .unwrap(),
    )
    .unwrap();
    head["formatVersion"] = 3.into();
    head["somethingNew"] = serde_json::json!({"x": 1});
    sqlx::query("UPDATE runs SET head = $1, status = 'archived' WHERE id = 'r-newer'")
        .bind(head.to_string())
        .execute(&mut sql)
        .await
        .unwrap();
    sqlx::query("UPDATE runs SET head = '{\"formatVersion\": 2' WHERE id = 'r-damaged'")
        .execute(&mut sql)
        .await
        .unwrap();
    let before: Vec<(String, String, i64)> =
        sqlx::query_as("SELECT id, head, version FROM runs ORDER BY id")
            .fetch_all(&mut sql)
            .await
            .unwrap();

    let error = store.load_run(&owned("r-newer")).await.unwrap_err();
    assert!(
        matches!(
            error,
            StoreError::UnsupportedFormat {
                format_version: 3,
                ..
            }
        ),
        "{error:?}"
    );
    let page = store.list_runs(&RunFilter::new()).await.unwrap();
    let shapes: Vec<(String, bool)> = page
        .runs
        .iter()
        .map(|listed| match listed {
            ListedRun::Run(summary) => (summary.run_id.to_string(), true),
            ListedRun::Unreadable { run_id, .. } => (run_id.to_string(), false),
            _ => panic!("{listed:?}"),
        })
        .collect();
    assert_eq!(
        shapes,
        [
            ("r-newer".to_owned(), false),
            ("r-damaged".to_owned(), false),
            ("r-fine".to_owned(), true)
        ]
    );
    let after: Vec<(String, String, i64)> =
        sqlx::query_as("SELECT id, head, version FROM runs ORDER BY id")
            .fetch_all(&mut sql)
            .await
            .unwrap();
    assert_eq!(before, after, "reading changes nothing");
}

/// Runs of one thread inserted as running at once through different stores (processes): one
/// holds the turn, every other insert is refused as busy and writes nothing; the same thread id
/// of another resource is another thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue31_one_running_run_per_thread_across_pools() {
    let _alone = super::many_connections().await;
    const RUNS: usize = 16;
    let schema = TestSchema::create().await;
    let mut stores = Vec::new();
    for _ in 0..4 {
        stores.push(schema.open().await);
    }
    for round in 0..5 {
        let thread = format!("t{round}");
        let tasks: Vec<_> = (0..RUNS)
            .map(|index| {
                let store: Arc<dyn RunStore> = stores[index % stores.len()].clone();
                let mut run = state(
                    &format!("r{round}-{index:02}"),
                    &thread,
                    RunStatus::Running,
                    index as u64,
                );
                if index % 4 == 3 {
                    // Another tenant's thread of the same id.
                    run = super::upgrade::in_resource(&run, "tenant-2");
                }
                tokio::spawn(async move { store.insert_run(&run, None).await })
            })
            .collect();
        let mut won = 0;
        for task in tasks {
            match task.await.unwrap() {
                Ok(_) => won += 1,
                Err(StoreError::ThreadBusy { running_run_id, .. }) => {
                    assert!(running_run_id.is_some());
                }
                Err(error) => panic!("round {round}: {error:?}"),
            }
        }
        assert_eq!(won, 2, "round {round}: one turn per tenant's thread");
        let mut sql = connect(&schema).await;
        let running: Vec<(String, i64)> = sqlx::query_as(
            "SELECT scope, COUNT(*) FROM runs WHERE thread_id = $1 GROUP BY scope ORDER BY scope",
        )
        .bind(&thread)
        .fetch_all(&mut sql)
        .await
        .unwrap();
        assert_eq!(
            running,
            [("tenant-1".to_owned(), 1), ("tenant-2".to_owned(), 1)],
            "refused inserts wrote nothing"
        );
    }
}
