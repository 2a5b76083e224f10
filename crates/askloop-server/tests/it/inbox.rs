//! The inbox under load (issue 31): a listener that falls behind is told to resync and gets
//! the questions pending now, never a silent gap; on SQLite the poller reads only the runs that
//! changed since its cursor, not every suspended run every 250 ms.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use askloop_core::registry::AgentRegistry;
use askloop_core::store::{
    Lease, MemoryStore, RunChanges, RunCounts, RunFilter, RunPage, RunState, StoredRun,
    ThreadHistory,
};
use askloop_core::{AgentId, RunKey, RunStore, StoreError, ThreadKey};
use async_trait::async_trait;
use axum::Router;
use futures::StreamExt;
use serde_json::Value;
use tower::ServiceExt;

use crate::support::{Backend, Hold, Place, agents, eventually, request, server};

/// Follows an inbox event stream as the page does: the questions it shows (run id and tool call
/// id), rebuilt from scratch on `resync`. Reads until it shows `expected` questions (at most
/// 30 s); returns how many `resync` events it saw.
async fn follow_until(
    events: &mut axum::body::BodyDataStream,
    shown: &mut HashSet<(String, String)>,
    expected: usize,
) -> usize {
    let mut resyncs = 0;
    let mut text = String::new();
    tokio::time::timeout(Duration::from_secs(30), async {
        while shown.len() != expected {
            let bytes = events.next().await.unwrap().unwrap();
            text.push_str(std::str::from_utf8(&bytes).unwrap());
            while let Some(end) = text.find("\n\n") {
                let frame: String = text.drain(..end + 2).collect();
                let Some(data) = frame.trim_end().strip_prefix("data: ") else {
                    continue;
                };
                let event: Value = serde_json::from_str(data).unwrap();
                let key = || {
                    (
                        event["runId"].as_str().unwrap().to_owned(),
                        event["toolCallId"].as_str().unwrap().to_owned(),
                    )
                };
                match event["type"].as_str().unwrap() {
                    "resync" => {
                        resyncs += 1;
                        shown.clear();
                    }
                    "question-raised" => {
                        shown.insert(key());
                    }
                    "question-resolved" => {
                        shown.remove(&key());
                    }
                    other => panic!("unexpected inbox event {other}"),
                }
            }
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "the listener shows {} questions, not {expected} (resyncs: {resyncs})",
            shown.len()
        )
    });
    resyncs
}

async fn open_inbox(router: &Router) -> axum::body::BodyDataStream {
    let response = router
        .clone()
        .oneshot(request("GET", "/api/inbox/events", None, None))
        .await
        .unwrap();
    assert_eq!(response.status(), axum::http::StatusCode::OK);
    response.into_body().into_data_stream()
}

/// 3,000 questions raised while one listener reads nothing (more than the 1,024 events it may
/// fall behind) and another reads along: both end up showing exactly the questions pending; the
/// slow one through a `resync` and the questions pending after it (before, it was skipped
/// ahead silently and showed about a third of them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue31_a_slow_inbox_listener_gets_every_event_or_a_resync() {
    const QUESTIONS: usize = 3000;
    let store: Arc<dyn RunStore> = Arc::new(MemoryStore::new());
    let (server, _) = server(&store, Vec::new());
    let router = server.router();
    let agents = agents(&store, &Hold::default());
    let assistant = agents.agent(&AgentId::new("assistant")).await.unwrap();
    let mut asked = HashSet::new();
    let first = assistant.generate("Summarize my project").await.unwrap();
    asked.insert((first.run_id.to_string(), "c1".to_owned()));

    // Both listeners read the question pending when they open, then one stops reading.
    let mut slow = open_inbox(&router).await;
    let mut shown = HashSet::new();
    follow_until(&mut slow, &mut shown, 1).await;
    let mut fast = open_inbox(&router).await;
    let mut fast_shown = HashSet::new();
    follow_until(&mut fast, &mut fast_shown, 1).await;
    let fast_reader = tokio::spawn(async move {
        follow_until(&mut fast, &mut fast_shown, QUESTIONS + 1).await;
        fast_shown
    });

    for _ in 0..QUESTIONS {
        let output = assistant.generate("Summarize my project").await.unwrap();
        asked.insert((output.run_id.to_string(), "c1".to_owned()));
    }

    assert_eq!(
        fast_reader.await.unwrap(),
        asked,
        "the listener that reads along"
    );
    let resyncs = follow_until(&mut slow, &mut shown, QUESTIONS + 1).await;
    assert_eq!(shown, asked, "the listener that fell behind");
    assert!(resyncs >= 1, "it fell behind, and was told so");
}

/// A store that counts the listings made through it: full ones, and `changed_after` ones with
/// the rows they returned.
struct CountingStore {
    store: Arc<dyn RunStore>,
    full_listings: AtomicUsize,
    full_rows: AtomicUsize,
    change_listings: AtomicUsize,
    change_rows: AtomicUsize,
}

#[async_trait]
impl RunStore for CountingStore {
    async fn insert_run_with_events(
        &self,
        state: &RunState,
        lease: Option<&Lease>,
        events: &[askloop_core::event::RunEvent],
    ) -> Result<u64, StoreError> {
        self.store
            .insert_run_with_events(state, lease, events)
            .await
    }
    async fn update_run_with_events(
        &self,
        state: &RunState,
        expected_version: u64,
        lease: Option<&Lease>,
        events: &[askloop_core::event::RunEvent],
    ) -> Result<u64, StoreError> {
        self.store
            .update_run_with_events(state, expected_version, lease, events)
            .await
    }
    fn answer_links(&self) -> Option<&dyn askloop_core::store::AnswerLinks> {
        self.store.answer_links()
    }
    async fn renew_lease(
        &self,
        run: &RunKey,
        expected_version: u64,
        lease: &Lease,
    ) -> Result<(), StoreError> {
        self.store.renew_lease(run, expected_version, lease).await
    }
    async fn load_run(&self, run: &RunKey) -> Result<StoredRun, StoreError> {
        self.store.load_run(run).await
    }
    async fn keys_of_run(
        &self,
        run_id: &askloop_core::RunId,
    ) -> Result<Vec<askloop_core::RunKey>, askloop_core::StoreError> {
        self.store.keys_of_run(run_id).await
    }
    async fn list_runs(&self, filter: &RunFilter) -> Result<RunPage, StoreError> {
        let page = self.store.list_runs(filter).await?;
        let (listings, rows) = match filter.changed_after {
            Some(_) => (&self.change_listings, &self.change_rows),
            None => (&self.full_listings, &self.full_rows),
        };
        rows.fetch_add(page.runs.len(), Ordering::SeqCst);
        listings.fetch_add(1, Ordering::SeqCst);
        Ok(page)
    }
    async fn run_counts(&self) -> Result<RunCounts, StoreError> {
        self.store.run_counts().await
    }
    async fn thread_history(
        &self,
        thread: &ThreadKey,
        through: Option<u64>,
    ) -> Result<ThreadHistory, StoreError> {
        self.store.thread_history(thread, through).await
    }
    async fn watch_changes(&self) -> Option<RunChanges> {
        self.store.watch_changes().await
    }
    fn outbox(&self) -> Option<&dyn askloop_core::store::Outbox> {
        self.store.outbox()
    }
}

/// On SQLite (no notifications: the inbox polls every 250 ms) the poller lists the suspended
/// runs once, then only what changed since its cursor: polls over unchanged runs read no row,
/// and an answered question costs the rows of the run that changed (before: every poll listed
/// every suspended run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue31_the_sqlite_inbox_poller_reads_only_what_changed() {
    const RUNS: usize = 40;
    let place = Place::new(Backend::Sqlite).await;
    let inner = place.open().await;
    let hold = Hold::default();
    let agents = agents(&inner, &hold);
    let assistant = agents.agent(&AgentId::new("assistant")).await.unwrap();
    let mut runs = Vec::new();
    for _ in 0..RUNS {
        runs.push(
            assistant
                .generate("Summarize my project")
                .await
                .unwrap()
                .run_id,
        );
    }
    let counting = Arc::new(CountingStore {
        store: inner,
        full_listings: AtomicUsize::new(0),
        full_rows: AtomicUsize::new(0),
        change_listings: AtomicUsize::new(0),
        change_rows: AtomicUsize::new(0),
    });
    let store: Arc<dyn RunStore> = counting.clone();
    let (server, _) = server(&store, Vec::new());
    let router = server.router();
    let mut events = open_inbox(&router).await;
    let mut shown = HashSet::new();
    follow_until(&mut events, &mut shown, RUNS).await;
    // The poller's first listing, and the listener's reading of the questions pending.
    assert_eq!(counting.full_listings.load(Ordering::SeqCst), 2);
    assert_eq!(counting.full_rows.load(Ordering::SeqCst), 2 * RUNS);

    // Polls over unchanged runs read nothing.
    let polls = counting.change_listings.load(Ordering::SeqCst);
    eventually("four more polls", || {
        let counting = counting.clone();
        async move { counting.change_listings.load(Ordering::SeqCst) >= polls + 4 }
    })
    .await;
    assert_eq!(counting.change_rows.load(Ordering::SeqCst), 0);

    // An answer: the poll reads the run that changed, and the listener sees it resolved.
    let output = assistant
        .resume_stream(serde_json::json!("main"), &runs[0], None)
        .await
        .unwrap()
        .collect_output()
        .await
        .unwrap();
    assert_eq!(output.text, "Summary of main.");
    follow_until(&mut events, &mut shown, RUNS - 1).await;
    assert!(!shown.iter().any(|(run, _)| run == runs[0].as_str()));
    assert_eq!(
        counting.full_listings.load(Ordering::SeqCst),
        2,
        "no full listing again"
    );
    let rows = counting.change_rows.load(Ordering::SeqCst);
    assert!(
        (1..=2).contains(&rows),
        "only the answered run was read ({rows} rows)"
    );
}
