//! The inbox's live events (`GET /api/inbox/events`): questions raised and resolved, across
//! every server on the same store.
//!
//! One poller task per server, running only while someone listens, lists the store's suspended
//! runs every 250 ms and diffs the set of pending tool calls against the previous poll: a new
//! call is `question-raised`, a call gone is `question-resolved`. Events fan out over a tokio
//! broadcast channel; each listener keeps those its key may see. Polling works for SQLite and
//! PostgreSQL alike and sees runs suspended or answered through any other process; PostgreSQL
//! `LISTEN/NOTIFY` is the planned upgrade (no polling, lower latency).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use askloop_core::store::{ListedRun, RunFilter, RunSummary};
use askloop_core::{AgentId, ResourceId, RunId, RunStatus, RunStore, ThreadId, ToolCallId};
use serde_json::{Value, json};
use tokio::sync::{broadcast, watch};

use crate::api::PendingCallBody;

/// How often the poller lists suspended runs.
const POLL_INTERVAL: Duration = Duration::from_millis(250);
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

type Key = (RunId, ToolCallId);

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
            (summary.run_id.clone(), call.tool_call_id.clone()),
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
    tracing::debug!("inbox poller started");
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
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}
