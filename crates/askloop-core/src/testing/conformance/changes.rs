//! Store scenarios of issue 31, "the inbox under load": the change order. Every commit that
//! notifies stamps its run with the next change sequence, in commit order; a watcher that lists
//! the runs changed after its cursor sees every change, in order, and nothing when nothing
//! changed. Listed in `store.rs`'s `SCENARIOS`, so they run on every store.

use std::collections::HashMap;
use std::sync::Arc;

use crate::LeaseHolder;
use crate::ids::RunKey;
use crate::run::RunStatus;
use crate::store::{Lease, ListedRun, RunFilter, RunPage, RunStore};
use crate::testing::conformance::support::*;

/// The runs (ids) and change sequences of a `changed_after` page.
fn changed(page: &RunPage) -> Vec<(String, u64)> {
    page.runs
        .iter()
        .map(|run| {
            (
                run.run_id().to_string(),
                run.change_seq()
                    .expect("a changed run has a change sequence"),
            )
        })
        .collect()
}

/// Lists what changed after `cursor`: the runs (ids, in change order) and the new cursor.
async fn changes_after(store: &Arc<dyn RunStore>, cursor: u64) -> (Vec<String>, u64) {
    let page = store
        .list_runs(&RunFilter::new().changed_after(cursor))
        .await
        .unwrap();
    assert!(!page.more_changes, "an unlimited listing is never cut");
    let runs = changed(&page);
    let seqs: Vec<u64> = runs.iter().map(|(_, seq)| *seq).collect();
    assert!(
        seqs.windows(2).all(|pair| pair[0] < pair[1]),
        "change order, oldest first: {runs:?}"
    );
    assert!(
        seqs.iter().all(|seq| *seq > cursor),
        "only changes after {cursor}: {runs:?}"
    );
    let next = page
        .change_cursor
        .expect("every store keeps a change order");
    assert!(
        next >= cursor,
        "the cursor never goes back: {cursor} → {next}"
    );
    (runs.into_iter().map(|(id, _)| id).collect(), next)
}

/// Commits that notify stamp their run, in commit order; a running run's own commits and
/// lease renewals do not; `changed_after` lists exactly the runs changed since a cursor, in
/// change order, filtered and paged, and nothing when nothing changed.
pub(super) async fn issue31_changed_runs_are_listed_after_a_cursor(store: Arc<dyn RunStore>) {
    let start = store
        .list_runs(&RunFilter::new())
        .await
        .unwrap()
        .change_cursor
        .expect("every store keeps a change order");
    let (runs, cursor) = changes_after(&store, start).await;
    assert!(runs.is_empty(), "{runs:?}");
    assert_eq!(cursor, start, "nothing changed");

    // Inserted running, committed running, its lease renewed: nothing that notifies.
    let mut r1 = state("r1", "t1", RunStatus::Running, 1);
    let lease = Lease::new(LeaseHolder::new("driver"), u64::MAX);
    store.insert_run(&r1, Some(&lease)).await.unwrap();
    r1.steps = 1;
    store.update_run(&r1, 1, Some(&lease)).await.unwrap();
    store.renew_lease(&owned("r1"), 2, &lease).await.unwrap();
    let (runs, cursor) = changes_after(&store, start).await;
    assert!(runs.is_empty(), "a running run's own commits: {runs:?}");
    assert_eq!(cursor, start);

    // Suspended: listed once, and the cursor moves past it.
    r1.status = RunStatus::Suspended;
    store.update_run(&r1, 2, None).await.unwrap();
    let (runs, after_r1) = changes_after(&store, cursor).await;
    assert_eq!(runs, ["r1"]);
    assert!(after_r1 > cursor);
    let (runs, same) = changes_after(&store, after_r1).await;
    assert!(runs.is_empty(), "nothing changed since: {runs:?}");
    assert_eq!(same, after_r1);

    // Inserts that notify, in commit order; a run left suspended is stamped again.
    store
        .insert_run(&state("r2", "t2", RunStatus::Suspended, 2), None)
        .await
        .unwrap();
    store
        .insert_run(&state("r3", "t3", RunStatus::Completed, 3), None)
        .await
        .unwrap();
    r1.steps = 2;
    store.update_run(&r1, 3, None).await.unwrap();
    let (runs, after_all) = changes_after(&store, after_r1).await;
    assert_eq!(runs, ["r2", "r3", "r1"], "in commit order");
    let (runs, _) = changes_after(&store, start).await;
    assert_eq!(
        runs,
        ["r2", "r3", "r1"],
        "each run once, at its last change"
    );

    // Filtered by the other fields, and paged by the cursor.
    let suspended = store
        .list_runs(
            &RunFilter::new()
                .changed_after(start)
                .status(RunStatus::Suspended),
        )
        .await
        .unwrap();
    let ids: Vec<String> = changed(&suspended).into_iter().map(|(id, _)| id).collect();
    assert_eq!(ids, ["r2", "r1"]);
    assert_eq!(suspended.change_cursor, Some(after_all));
    let first = store
        .list_runs(&RunFilter::new().changed_after(start).limit(2))
        .await
        .unwrap();
    assert!(first.more_changes);
    assert_eq!(first.next_cursor, None);
    let first_runs = changed(&first);
    assert_eq!(
        first_runs
            .iter()
            .map(|(id, _)| id.as_str())
            .collect::<Vec<_>>(),
        ["r2", "r3"]
    );
    assert_eq!(first.change_cursor, Some(first_runs[1].1));
    let second = store
        .list_runs(&RunFilter::new().changed_after(first_runs[1].1).limit(2))
        .await
        .unwrap();
    assert!(!second.more_changes);
    assert_eq!(changed(&second).len(), 1);
    assert_eq!(second.runs[0].run_id().as_str(), "r1");
    assert_eq!(second.change_cursor, Some(after_all));

    // Every listing shows its runs' sequences and where the order stands.
    let all = store.list_runs(&RunFilter::new()).await.unwrap();
    assert_eq!(all.change_cursor, Some(after_all));
    let seq_of = |id: &str| {
        all.runs
            .iter()
            .find(|run| run.run_id().as_str() == id)
            .and_then(ListedRun::change_seq)
    };
    assert_eq!(seq_of("r1"), Some(after_all));
    assert!(seq_of("r2").is_some() && seq_of("r3").is_some());

    // Resumed (a status change): listed; ended: listed again.
    r1.status = RunStatus::Running;
    store.update_run(&r1, 4, Some(&lease)).await.unwrap();
    let (runs, after_claim) = changes_after(&store, after_all).await;
    assert_eq!(runs, ["r1"]);
    r1.status = RunStatus::Completed;
    store.update_run(&r1, 5, None).await.unwrap();
    let (runs, _) = changes_after(&store, after_claim).await;
    assert_eq!(runs, ["r1"]);
}

/// Writers commit concurrently while a watcher follows the change cursor: when they are done,
/// the watcher has seen every run at its last change (no stamp committed "behind" the cursor).
pub(super) async fn issue31_a_watcher_of_the_change_cursor_misses_no_commit(
    store: Arc<dyn RunStore>,
) {
    const WRITERS: usize = 8;
    const COMMITS: u64 = 12;
    let cursor = store
        .list_runs(&RunFilter::new().limit(1))
        .await
        .unwrap()
        .change_cursor
        .unwrap();
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let writers: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let (store, done) = (store.clone(), done.clone());
            tokio::spawn(async move {
                let id = format!("w{writer}");
                let mut run = state(&id, &id, RunStatus::Suspended, writer as u64);
                store.insert_run(&run, None).await.unwrap();
                for version in 1..=COMMITS {
                    run.steps = version as u32;
                    store.update_run(&run, version, None).await.unwrap();
                    tokio::task::yield_now().await;
                }
                done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            })
        })
        .collect();
    // The watcher: what it saw last of each run (its change sequence).
    let mut seen: HashMap<RunKey, u64> = HashMap::new();
    let mut cursor = cursor;
    loop {
        let finished = done.load(std::sync::atomic::Ordering::SeqCst) == WRITERS;
        let page = store
            .list_runs(&RunFilter::new().changed_after(cursor).limit(5))
            .await
            .unwrap();
        for run in &page.runs {
            let seq = run.change_seq().unwrap();
            assert!(seq > cursor, "listed after the cursor");
            seen.insert(run.key(), seq);
        }
        cursor = page.change_cursor.unwrap();
        if finished && !page.more_changes {
            break;
        }
        tokio::task::yield_now().await;
    }
    for writer in writers {
        writer.await.unwrap();
    }
    let all = store
        .list_runs(&RunFilter::new().status(RunStatus::Suspended))
        .await
        .unwrap();
    assert_eq!(all.runs.len(), WRITERS);
    for run in &all.runs {
        assert_eq!(
            seen.get(&run.key()).copied(),
            run.change_seq(),
            "the watcher saw {} at its last change",
            run.run_id()
        );
    }
}
