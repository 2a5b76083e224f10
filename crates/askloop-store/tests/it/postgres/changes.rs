//! The change order on PostgreSQL when transactions overlap: a change sequence must increase in
//! commit order, or a reader following the cursor misses a change for ever (issue 31, the inbox
//! under load). With a plain SEQUENCE, a transaction that took 5 and commits after one that took
//! 6 is skipped by a reader that listed "after 4" in between and moved on to 6.

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

/// Waits (at most 10 s) until the session `pid` waits for a lock.
async fn until_waiting_for_a_lock(observer: &mut PgConnection, pid: i32) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let waiting: Option<String> =
            sqlx::query_scalar("SELECT wait_event_type FROM pg_stat_activity WHERE pid = $1")
                .bind(pid)
                .fetch_one(&mut *observer)
                .await
                .unwrap();
        if waiting.as_deref() == Some("Lock") {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "session {pid} never waited for the change counter"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Two overlapping transactions each stamp a run: the second one to stamp waits until the first
/// ends, so it gets the higher sequence and commits after; a reader listing in between sees
/// nothing, then the first, then the second, and never moves its cursor past an uncommitted
/// stamp.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue31_change_sequences_follow_commit_order_across_transactions() {
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
    let second_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut second)
        .await
        .unwrap();

    // The first transaction stamps `a` and stays open.
    sqlx::raw_sql("BEGIN").execute(&mut first).await.unwrap();
    sqlx::query(stamp)
        .bind(&a)
        .execute(&mut first)
        .await
        .unwrap();
    // The second stamps `b` meanwhile: it waits for the first.
    let second_run = b.clone();
    let second_stamps = tokio::spawn(async move {
        sqlx::raw_sql("BEGIN").execute(&mut second).await.unwrap();
        sqlx::query(stamp)
            .bind(&second_run)
            .execute(&mut second)
            .await
            .unwrap();
        second
    });
    until_waiting_for_a_lock(&mut observer, second_pid).await;
    let (runs, cursor) = changes_after(store.as_ref(), start).await;
    assert!(runs.is_empty(), "nothing committed yet: {runs:?}");
    assert_eq!(
        cursor, start,
        "the cursor stays below every uncommitted stamp"
    );

    sqlx::raw_sql("COMMIT").execute(&mut first).await.unwrap();
    let mut second = second_stamps.await.unwrap();
    let (runs, after_a) = changes_after(store.as_ref(), cursor).await;
    assert_eq!(runs, [a], "the first commit, not yet the second");

    sqlx::raw_sql("COMMIT").execute(&mut second).await.unwrap();
    let (runs, after_b) = changes_after(store.as_ref(), after_a).await;
    assert_eq!(runs, [b], "the second commit, after the first");
    assert!(after_a < after_b);
    let page = store
        .list_runs(&RunFilter::new().status(RunStatus::Suspended))
        .await
        .unwrap();
    assert_eq!(page.change_cursor, Some(after_b));
}
