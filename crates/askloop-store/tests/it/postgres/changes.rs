//! The change order on PostgreSQL when transactions overlap (`0007_parallel_change_order.sql`).
//! Stamps come from a sequence, taken mid-transaction, so a transaction that took 5 may commit
//! after one that took 6: a reader that listed "after 4" in between and moved on to 6 would miss
//! 5 for ever (issue 31, the inbox under load). Stamping commits hold the change lock shared and
//! never wait for each other (issue 36); a reader that gives a change cursor takes it
//! exclusively first, so it waits for the stamps in flight and never moves past one.

use std::time::Duration;

use askloop_core::store::RunFilter;
use askloop_core::{RunStatus, RunStore};
use sqlx::Connection;
use sqlx::postgres::PgConnection;

use super::{TestSchema, one_suspended_run};

/// The runs (ids) changed after `cursor`, and the cursor after them.
async fn changes_after(store: &dyn RunStore, cursor: u64) -> (Vec<String>, u64) {
    let page = store
        .list_runs(&RunFilter::new().changed_after(cursor))
        .await
        .unwrap();
    let runs = page
        .runs
        .iter()
        .map(|run| run.run_id().to_string())
        .collect();
    (runs, page.change_cursor.unwrap())
}

/// Waits (at most 10 s) until a session waits for the change lock of `observer`'s schema
/// exclusively: a reader of the change order waiting for the stamps in flight.
async fn until_a_reader_waits(observer: &mut PgConnection) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let waiting: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' \
               AND classid = 1855818008 AND objid = 'askloop_change_seq'::regclass::oid \
               AND mode = 'ExclusiveLock' AND NOT granted)",
        )
        .fetch_one(&mut *observer)
        .await
        .unwrap();
        if waiting {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no reader ever waited for the change lock"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Two overlapping transactions each stamp a run without waiting for the other; the one with
/// the higher stamp commits first. A listing that needs no change cursor does not wait; a
/// reader of the change order waits until the lower stamp committed too, then sees both, and
/// never moves its cursor past the stamp that was in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue36_stamps_do_not_wait_for_each_other_and_readers_wait_for_stamps_in_flight() {
    let schema = TestSchema::create().await;
    let store = schema.open().await;
    let a = one_suspended_run(store.clone()).await.run_id.to_string();
    let b = one_suspended_run(store.clone()).await.run_id.to_string();
    let start = store
        .list_runs(&RunFilter::new())
        .await
        .unwrap()
        .change_cursor
        .unwrap();

    // What a commit that leaves a run suspended does to its row (askloop_update_run's UPDATE).
    let stamp = "UPDATE runs SET status = 'suspended', head = head WHERE id = $1";
    let mut first = PgConnection::connect(&schema.url()).await.unwrap();
    let mut second = PgConnection::connect(&schema.url()).await.unwrap();
    let mut observer = PgConnection::connect(&schema.url()).await.unwrap();

    // The first transaction stamps `a` and stays open; the second stamps `b` meanwhile without
    // waiting (a higher stamp), and commits first.
    for (connection, run) in [(&mut first, &a), (&mut second, &b)] {
        sqlx::raw_sql("BEGIN")
            .execute(&mut *connection)
            .await
            .unwrap();
        tokio::time::timeout(
            Duration::from_secs(10),
            sqlx::query(stamp).bind(run).execute(&mut *connection),
        )
        .await
        .expect("a stamping commit waits for no other")
        .unwrap();
    }
    sqlx::raw_sql("COMMIT").execute(&mut second).await.unwrap();

    // Listings that need no cursor never wait for the change lock.
    let page = store
        .list_runs(
            &RunFilter::new()
                .status(RunStatus::Suspended)
                .without_change_cursor(),
        )
        .await
        .unwrap();
    assert_eq!(page.runs.len(), 2);
    assert_eq!(page.change_cursor, None);

    // A reader of the change order waits for `a`'s transaction.
    let reader_store = store.clone();
    let reader = tokio::spawn(async move { changes_after(reader_store.as_ref(), start).await });
    until_a_reader_waits(&mut observer).await;
    assert!(
        !reader.is_finished(),
        "the reader waits for the stamp in flight"
    );
    sqlx::raw_sql("COMMIT").execute(&mut first).await.unwrap();
    let (runs, cursor) = reader.await.unwrap();
    assert_eq!(runs, [a, b], "both, in stamp order");
    assert!(cursor > start);
    let (runs, same) = changes_after(store.as_ref(), cursor).await;
    assert!(runs.is_empty(), "nothing changed since: {runs:?}");
    assert_eq!(same, cursor);
    let page = store
        .list_runs(&RunFilter::new().status(RunStatus::Suspended))
        .await
        .unwrap();
    assert_eq!(page.change_cursor, Some(cursor));
}
