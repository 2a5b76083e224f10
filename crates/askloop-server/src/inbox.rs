//! The inbox's live events (`GET /api/inbox/events`): questions raised and resolved, across
//! every server on the same store.
//!
//! One poller task per server, running only while someone listens, lists the store's suspended
//! runs and diffs the set of pending tool calls against the previous listing: a new call is
//! `question-raised`, a call gone is `question-resolved`. Events fan out over a tokio broadcast
//! channel; each listener keeps those its key may see.
//!
//! When it lists: on a store that notifies its changes ([`RunStore::watch_changes`]: PostgreSQL
//! through `LISTEN/NOTIFY`, from every process on the database; the memory store), when a change
//! may concern the inbox (a run becoming suspended, a run of the inbox changing, a resync),
//! batching the changes of [`DEBOUNCE`], plus a safety listing every [`SAFETY_RELIST`]; so a
//! question raised or answered through another server shows within tens of milliseconds. On a
//! store that does not notify (SQLite), every [`POLL_INTERVAL`], which also sees what other
//! processes did.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use askloop_core::store::{ListedRun, RunChange, RunChanges, RunFilter, RunSummary};
use askloop_core::{AgentId, ResourceId, RunId, RunKey, RunStatus, RunStore, ThreadId, ToolCallId};
use serde_json::{Value, json};
use tokio::sync::{broadcast, watch};

use crate::api::PendingCallBody;

/// How often the poller lists suspended runs on a store that does not notify.
const POLL_INTERVAL: Duration = Duration::from_millis(250);
/// On a store that notifies: how long the poller gathers changes before it lists.
const DEBOUNCE: Duration = Duration::from_millis(20);
/// On a store that notifies: how often it lists anyway (a lost notification is seen by then).
const SAFETY_RELIST: Duration = Duration::from_secs(5);
/// Page size of its listing.
const POLL_PAGE: usize = 500;
/// How long a new listener waits for the poller's first listing.
const READY_WAIT: Duration = Duration::from_secs(5);

/// Whether a question appeared or went away.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum InboxEventKind {
    Raised,
    Resolved,
}

/// One event of the inbox.
#[derive(Clone, Debug)]
pub(crate) struct InboxEvent {
    pub(crate) kind: InboxEventKind,
    pub(crate) run_id: RunId,
    pub(crate) tool_call_id: ToolCallId,
    pub(crate) agent_id: AgentId,
    pub(crate) thread_id: ThreadId,
    pub(crate) resource_id: Option<ResourceId>,
    /// The question (`PendingCallBody` JSON).
    pub(crate) question: Value,
}

impl InboxEvent {
    /// `{"type": "question-raised" | "question-resolved", runId, toolCallId, agentId,
    /// threadId, resourceId?, toolName, kind, payload, …}`.
    pub(crate) fn to_json(&self) -> Value {
        let mut event = json!({
            "type": match self.kind {
                InboxEventKind::Raised => "question-raised",
                InboxEventKind::Resolved => "question-resolved",
            },
            "runId": self.run_id.as_str(),
            "agentId": self.agent_id.as_str(),
            "threadId": self.thread_id.as_str(),
        });
        if let (Value::Object(event), Value::Object(question)) = (&mut event, &self.question) {
            for (key, value) in question {
                event.insert(key.clone(), value.clone());
            }
            if let Some(resource) = &self.resource_id {
                event.insert("resourceId".into(), Value::String(resource.to_string()));
            }
        }
        event
    }
}

/// A pending call: its run's key (resource and id) and its id.
type Key = (RunKey, ToolCallId);

struct Shared {
    /// The pending calls of the last poll.
    current: HashMap<Key, InboxEvent>,
    poller_running: bool,
}

struct InboxInner {
    store: Arc<dyn RunStore>,
    shared: Mutex<Shared>,
    sender: broadcast::Sender<InboxEvent>,
    /// Whether the running poller has listed once.
    ready: watch::Sender<bool>,
}

/// The event source of the inbox.
pub(crate) struct Inbox {
    inner: Arc<InboxInner>,
}

fn lock(shared: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    shared
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Inbox {
    pub(crate) fn new(store: Arc<dyn RunStore>) -> Self {
        Self {
            inner: Arc::new(InboxInner {
                store,
                shared: Mutex::new(Shared {
                    current: HashMap::new(),
                    poller_running: false,
                }),
                sender: broadcast::Sender::new(1024),
                ready: watch::Sender::new(false),
            }),
        }
    }

    /// The questions pending now (as `question-raised` events) and a receiver of the events
    /// after them. Starts the poller if none runs.
    pub(crate) async fn subscribe(&self) -> (Vec<InboxEvent>, broadcast::Receiver<InboxEvent>) {
        // Holding a receiver keeps the poller going while we wait for its first listing.
        let early = self.inner.sender.subscribe();
        {
            let mut shared = lock(&self.inner.shared);
            if !shared.poller_running {
                shared.poller_running = true;
                self.inner.ready.send_replace(false);
                tokio::spawn(poll(self.inner.clone()));
            }
        }
        let mut ready = self.inner.ready.subscribe();
        if tokio::time::timeout(READY_WAIT, ready.wait_for(|ready| *ready))
            .await
            .is_err()
        {
            tracing::warn!("inbox: the first listing is late; starting without it");
        }
        let shared = lock(&self.inner.shared);
        let receiver = self.inner.sender.subscribe();
        drop(early);
        let snapshot = shared.current.values().cloned().collect();
        (snapshot, receiver)
    }
}

async fn list_pending(
    store: &dyn RunStore,
) -> Result<HashMap<Key, InboxEvent>, askloop_core::StoreError> {
    let mut filter = RunFilter::new()
        .status(RunStatus::Suspended)
        .limit(POLL_PAGE);
    let mut pending = HashMap::new();
    loop {
        let page = store.list_runs(&filter).await?;
        for summary in page.runs.iter().filter_map(ListedRun::summary) {
            add_calls(&mut pending, summary);
        }
        match page.next_cursor {
            Some(cursor) => filter.cursor = Some(cursor),
            None => return Ok(pending),
        }
    }
}

fn add_calls(pending: &mut HashMap<Key, InboxEvent>, summary: &RunSummary) {
    for call in &summary.pending {
        let question = serde_json::to_value(PendingCallBody::of(call)).unwrap_or(Value::Null);
        pending.insert(
            (summary.key(), call.tool_call_id.clone()),
            InboxEvent {
                kind: InboxEventKind::Raised,
                run_id: summary.run_id.clone(),
                tool_call_id: call.tool_call_id.clone(),
                agent_id: summary.agent_id.clone(),
                thread_id: summary.thread_id.clone(),
                resource_id: summary.resource_id.clone(),
                question,
            },
        );
    }
}

async fn poll(inner: Arc<InboxInner>) {
    // Watching before the first listing: a change committed after it is seen.
    let mut changes = inner.store.watch_changes().await;
    tracing::debug!(notified = changes.is_some(), "inbox poller started");
    loop {
        let listed = list_pending(inner.store.as_ref()).await;
        {
            let mut shared = lock(&inner.shared);
            match listed {
                Ok(pending) => {
                    if *inner.ready.borrow() {
                        for (key, event) in &pending {
                            if !shared.current.contains_key(key) {
                                let _ = inner.sender.send(event.clone());
                            }
                        }
                        for (key, event) in &shared.current {
                            if !pending.contains_key(key) {
                                let mut resolved = event.clone();
                                resolved.kind = InboxEventKind::Resolved;
                                resolved.question = json!({
                                    "toolCallId": event.tool_call_id.as_str(),
                                    "toolName": event.question.get("toolName").cloned().unwrap_or(Value::Null),
                                });
                                let _ = inner.sender.send(resolved);
                            }
                        }
                    }
                    shared.current = pending;
                }
                Err(error) => {
                    tracing::warn!(error = %askloop_core::error_chain_text(&error), "inbox poll failed");
                }
            }
            inner.ready.send_replace(true);
            if inner.sender.receiver_count() == 0 {
                shared.poller_running = false;
                shared.current.clear();
                inner.ready.send_replace(false);
                tracing::debug!("inbox poller stopped: no listener");
                return;
            }
        }
        wait_for_change(&inner, &mut changes).await;
    }
}

/// Waits until the next listing is due: [`POLL_INTERVAL`] without notifications; with them, a
/// change that may concern the inbox (then [`DEBOUNCE`] more, the changes meanwhile folded into
/// the same listing) or [`SAFETY_RELIST`]. A store that stops notifying is polled from then on.
async fn wait_for_change(inner: &InboxInner, changes: &mut Option<RunChanges>) {
    let Some(feed) = changes else {
        tokio::time::sleep(POLL_INTERVAL).await;
        return;
    };
    let safety = tokio::time::sleep(SAFETY_RELIST);
    tokio::pin!(safety);
    loop {
        let change = tokio::select! {
            () = &mut safety => return,
            change = feed.next() => change,
        };
        match change {
            None => {
                tracing::warn!("inbox: the store stopped notifying; polling");
                *changes = None;
                return;
            }
            Some(change) if concerns_inbox(inner, &change) => {
                tokio::time::sleep(DEBOUNCE).await;
                while feed.try_next().is_some() {}
                return;
            }
            Some(_) => {}
        }
    }
}

/// Whether `change` may change the inbox: a run now suspended, a run with pending calls in the
/// last listing, or a resync.
fn concerns_inbox(inner: &InboxInner, change: &RunChange) -> bool {
    match (change, change.key()) {
        (RunChange::Run { status, .. }, Some(run)) => {
            *status == RunStatus::Suspended
                || lock(&inner.shared)
                    .current
                    .keys()
                    .any(|(pending, _)| pending == &run)
        }
        _ => true,
    }
}
