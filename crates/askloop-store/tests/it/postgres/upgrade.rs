//! A schema made by migration 0001 alone (one namespace of run and thread ids, as askloop before
//! issue 31 left it) is upgraded in place by 0002 when a store opens it: every row is kept under
//! its resource's key, each resource has its own threads, and the one-turn rule holds from then
//! on without refusing two runs that were already running in one thread.

use std::path::Path;

use askloop_core::model::Message;
use askloop_core::store::codec::{encode_head, encode_message};
use askloop_core::store::{RunFilter, RunState};
use askloop_core::testing::conformance::support::state;
use askloop_core::{ResourceId, RunId, RunKey, RunStatus, StoreError, ThreadId, ThreadKey};
use sqlx::Connection;
use sqlx::postgres::PgConnection;

use super::TestSchema;
use super::tables::with_messages;

/// `state`'s run in `resource` (none for `None`) with `count` messages and `status`.
fn run(
    id: &str,
    thread: &str,
    resource: Option<&str>,
    count: usize,
    status: RunStatus,
) -> RunState {
    let base = state(id, thread, status, 1_000 + count as u64);
    let run = with_messages(&base, count, status);
    match resource {
        Some(resource) => in_resource(&run, resource),
        None => with_head_resource(&run, serde_json::Value::Null),
    }
}

/// `run` of `resource` (states are opaque: the resource is set through the head, as a store
/// reads it).
pub(crate) fn in_resource(run: &RunState, resource: &str) -> RunState {
    with_head_resource(run, resource.into())
}

fn with_head_resource(run: &RunState, resource: serde_json::Value) -> RunState {
    let mut head: serde_json::Value = serde_json::from_str(&encode_head(run).unwrap()).unwrap();
    head["resourceId"] = resource;
    let messages: Vec<String> = run
        .messages()
        .iter()
        .map(|message| encode_message(run.run_id(), message).unwrap())
        .collect();
    askloop_core::store::codec::decode_run(run.run_id(), &head.to_string(), &messages).unwrap()
}

/// Inserts `run` as a store of migration 0001 did (its `askloop_insert_run`).
async fn insert_0001(connection: &mut PgConnection, run: &RunState) {
    let messages: Vec<String> = run
        .messages()
        .iter()
        .map(|message| encode_message(run.run_id(), message).unwrap())
        .collect();
    sqlx::query("SELECT askloop_insert_run($1, $2, $3, $4, $5, $6, $7, $8, $9, NULL, NULL, $10)")
        .bind(run.run_id().as_str())
        .bind(run.thread_id().as_str())
        .bind(run.resource_id().map(ResourceId::as_str))
        .bind(run.agent_id().as_str())
        .bind(run.status().as_str())
        .bind(i64::try_from(run.created_at_ms()).unwrap())
        .bind(i64::try_from(run.updated_at_ms()).unwrap())
        .bind(encode_head(run).unwrap())
        .bind(&messages)
        .bind(run.status() == RunStatus::Completed)
        .execute(connection)
        .await
        .unwrap();
}

#[tokio::test]
async fn issue31_a_schema_of_migration_1_is_keyed_by_resource_in_place() {
    let schema = TestSchema::create().await;
    // Migration 0001 alone, as the sqlx migrator of an older askloop applied it.
    let first_only = tempfile::tempdir().unwrap();
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations/postgres/0001_runs.sql"),
        first_only.path().join("0001_runs.sql"),
    )
    .unwrap();
    let mut sql = PgConnection::connect(&schema.url()).await.unwrap();
    sqlx::migrate::Migrator::new(first_only.path())
        .await
        .unwrap()
        .run(&mut sql)
        .await
        .unwrap();
    let runs = [
        run("r-a", "t1", Some("tenant-1"), 2, RunStatus::Completed),
        run("r-b", "t1", Some("tenant-2"), 2, RunStatus::Completed),
        run("r-c", "t2", None, 3, RunStatus::Suspended),
        run("r-d", "t3", Some("tenant-1"), 1, RunStatus::Running),
        run("r-e", "t3", Some("tenant-1"), 1, RunStatus::Running),
    ];
    for run in &runs {
        insert_0001(&mut sql, run).await;
    }

    let store = schema.open().await;
    let applied: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM _sqlx_migrations")
        .fetch_one(&mut sql)
        .await
        .unwrap();
    assert_eq!(applied, 7);
    for run in &runs {
        let loaded = store.load_run(&run.key()).await.unwrap();
        assert_eq!((&loaded.state, loaded.version), (run, 1), "{}", run.key());
    }
    // 0003 stamped every run once: the change cursor stands above them, nothing changed since.
    let listed = store.list_runs(&RunFilter::new()).await.unwrap();
    let mut stamps: Vec<u64> = listed
        .runs
        .iter()
        .map(|run| run.change_seq().expect("every upgraded run is stamped"))
        .collect();
    stamps.sort_unstable();
    assert_eq!(stamps, (1..=runs.len() as u64).collect::<Vec<_>>());
    let cursor = listed.change_cursor.unwrap();
    assert_eq!(cursor, runs.len() as u64);
    let unchanged = store
        .list_runs(&RunFilter::new().changed_after(cursor))
        .await
        .unwrap();
    assert!(unchanged.runs.is_empty());
    let scopes: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT scope, run_id, COUNT(*) FROM run_messages GROUP BY scope, run_id ORDER BY run_id",
    )
    .fetch_all(&mut sql)
    .await
    .unwrap();
    assert_eq!(
        scopes,
        [
            ("tenant-1".to_owned(), "r-a".to_owned(), 2),
            ("tenant-2".to_owned(), "r-b".to_owned(), 2),
            (String::new(), "r-c".to_owned(), 3),
            ("tenant-1".to_owned(), "r-d".to_owned(), 1),
            ("tenant-1".to_owned(), "r-e".to_owned(), 1),
        ]
    );
    // Thread t1 of each tenant is its own thread, with the sequences 0001 gave.
    let thread = |resource: &str| ThreadKey::new(Some(resource.into()), ThreadId::new("t1"));
    let one = store
        .thread_history(&thread("tenant-1"), None)
        .await
        .unwrap();
    assert_eq!(one.messages, runs[0].messages());
    let two = store
        .thread_history(&thread("tenant-2"), None)
        .await
        .unwrap();
    assert_eq!(two.messages, runs[1].messages());
    assert_ne!(one.through, two.through);
    let without = store
        .list_runs(&RunFilter::new().resource_filter(askloop_core::store::ResourceFilter::Without))
        .await
        .unwrap();
    assert_eq!(without.runs.len(), 1);
    assert_eq!(without.runs[0].run_id().as_str(), "r-c");

    // The same id in another resource is another run now.
    let twin = run("r-a", "t9", Some("tenant-2"), 1, RunStatus::Suspended);
    store.insert_run(&twin, None).await.unwrap();
    assert_eq!(store.load_run(&runs[0].key()).await.unwrap().state, runs[0]);
    // 0007's sequence goes on above 0003's counter.
    let changed = store
        .list_runs(&RunFilter::new().changed_after(cursor))
        .await
        .unwrap();
    assert_eq!(changed.runs.len(), 1);
    assert_eq!(changed.runs[0].change_seq(), Some(cursor + 1));
    assert_eq!(changed.change_cursor, Some(cursor + 1));

    // t3 of tenant-1 held two running runs: they may go on and end; no third one runs beside.
    let third = run("r-f", "t3", Some("tenant-1"), 1, RunStatus::Running);
    let error = store.insert_run(&third, None).await.unwrap_err();
    assert!(matches!(error, StoreError::ThreadBusy { .. }), "{error:?}");
    // (`with_messages` keeps the head's resource.)
    let d = with_messages(&runs[3], 2, RunStatus::Running);
    assert_eq!(store.update_run(&d, 1, None).await.unwrap(), 2);
    let d_done = with_messages(&d, 2, RunStatus::Completed);
    assert_eq!(store.update_run(&d_done, 2, None).await.unwrap(), 3);
    let error = store.insert_run(&third, None).await.unwrap_err();
    assert!(
        matches!(&error, StoreError::ThreadBusy { running_run_id: Some(id), .. } if id == &RunId::new("r-e")),
        "{error:?}"
    );
    let e_done = with_messages(&runs[4], 1, RunStatus::Cancelled);
    assert_eq!(store.update_run(&e_done, 1, None).await.unwrap(), 2);
    store.insert_run(&third, None).await.unwrap();
    let history = store
        .thread_history(
            &ThreadKey::new(Some("tenant-1".into()), ThreadId::new("t3")),
            None,
        )
        .await
        .unwrap();
    let mut ended: Vec<Message> = d_done.messages().to_vec();
    ended.extend(e_done.messages().iter().cloned());
    assert_eq!(history.messages, ended, "a cancelled run joins the history");
    assert_eq!(
        store
            .load_run(&RunKey::new(Some("tenant-1".into()), RunId::new("r-f")))
            .await
            .unwrap()
            .version,
        1
    );
    store.close().await;
    sql.close().await.unwrap();
}
