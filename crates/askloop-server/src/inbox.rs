//! The inbox's live events (`GET /api/inbox/events`): questions raised and resolved, across
//! every server on the same store.
//!
//! One poller task per server, running only while someone listens, keeps the pending tool
//! calls of the store's suspended runs and the store's change cursor
//! ([`askloop_core::store::RunFilter::changed_after`]): one full listing of the suspended runs
//! when it starts, then, each time, only the runs changed since the cursor — a run no longer
//! suspended has its calls resolved, a suspended one has its pending calls diffed: a new call
//! is `question-raised`, a call gone is `question-resolved`. Only top-level runs are entries
//! ([`RunFilter::top_level`]): a sub-agent's question is one of its root's calls
//! (`PARENT_CALL~CHILD_CALL`, with its `subagent` origin), raised and resolved under the root. When nothing changed that costs
//! one indexed query returning nothing. Events fan out over a tokio broadcast channel; each
//! listener keeps those its key may see. A listener that falls more than [`BUFFER`] events
//! behind is not skipped ahead silently: it gets a `resync` event and the questions pending
//! now (see `routes::inbox::inbox_events`). The poller keeps only the keys and names of the
//! pending calls, never the questions: a listener reads the questions pending when it starts
//! from the store, one page at a time, keeping those the poller holds ([`Inbox::pending_now`]).
//!
//! When it lists: on a store that notifies its changes ([`RunStore::watch_changes`]: PostgreSQL
//! through `LISTEN/NOTIFY`, from every process on the database; the memory store), when a change
//! may concern the inbox (a run becoming suspended, a run of the inbox changing), batching the
//! changes of [`DEBOUNCE`], plus a listing every [`SAFETY_RELIST`] (what a lost notification
//! changed shows by then); a [`RunChange::Resync`] (the store may have lost notifications)
//! starts over with a full listing. On a store that does not notify (SQLite), every
//! [`POLL_INTERVAL`], which also sees what other processes did.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use askloop_core::store::{
    ListedRun, ResourceFilter, RunChange, RunChanges, RunFilter, RunSummary,
};
use askloop_core::wire::PendingCall;
use askloop_core::{AgentId, ResourceId, RunId, RunKey, RunStatus, RunStore, ThreadId, ToolCallId};
use serde_json::{Value, json};
use tokio::sync::{broadcast, watch};

/// How often the poller lists changed runs on a store that does not notify.
const POLL_INTERVAL: Duration = Duration::from_millis(250);
/// On a store that notifies: how long the poller gathers changes before it lists.
const DEBOUNCE: Duration = Duration::from_millis(20);
/// On a store that notifies: how often it lists the changes anyway (a lost notification is
/// seen by then).
const SAFETY_RELIST: Duration = Duration::from_secs(5);
/// Page size of its listings.
const POLL_PAGE: usize = 500;
/// Page size of a listener's reading of the questions pending now: small, so that listeners
/// opening at once hold little in memory (the poller's own listing uses [`POLL_PAGE`]).
const LISTENER_PAGE: usize = 100;
/// How long a new listener waits for the poller's first listing.
const READY_WAIT: Duration = Duration::from_secs(5);
/// How many events a listener may fall behind before it is told to resync.
pub(crate) const BUFFER: usize = 1024;

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
    /// The question ([`PendingCall`] JSON; a resolved one's `toolCallId` and `toolName` only).
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

/// `{"type": "resync"}`: what a listener that fell behind gets before the questions pending
/// now (as `question-raised` events): forget every question shown, then rebuild from them.
pub(crate) fn resync_json() -> Value {
    json!({"type": "resync"})
}

/// A pending call as the poller keeps it: what its `question-resolved` event needs (the
/// question itself is not kept: with 10,000 questions waiting, their JSON would be tens of
/// megabytes held for as long as someone listens).
#[derive(Clone, Debug)]
struct Held {
    tool_call_id: ToolCallId,
    tool_name: String,
}

/// A suspended run's pending calls as the poller keeps them.
#[derive(Clone, Debug)]
struct HeldRun {
    agent_id: AgentId,
    thread_id: ThreadId,
    calls: Vec<Held>,
}

impl HeldRun {
    fn of(summary: &RunSummary) -> Self {
        Self {
            agent_id: summary.agent_id.clone(),
            thread_id: summary.thread_id.clone(),
            calls: summary
                .pending
                .iter()
                .map(|call| Held {
                    tool_call_id: call.tool_call_id.clone(),
                    tool_name: call.tool_name.clone(),
                })
                .collect(),
        }
    }

    /// The `question-resolved` event of its call `held`.
    fn resolved(&self, run: &RunKey, held: &Held) -> InboxEvent {
        InboxEvent {
            kind: InboxEventKind::Resolved,
            run_id: run.run_id.clone(),
            tool_call_id: held.tool_call_id.clone(),
            agent_id: self.agent_id.clone(),
            thread_id: self.thread_id.clone(),
            resource_id: run.resource_id.clone(),
            question: json!({
                "toolCallId": held.tool_call_id.as_str(),
                "toolName": held.tool_name,
            }),
        }
    }
}

/// The pending calls of the inbox, by run.
type Pending = HashMap<RunKey, HeldRun>;

struct Shared {
    /// The pending calls as of the last listing.
    current: Pending,
    poller_running: bool,
}

struct InboxInner {
    store: Arc<dyn RunStore>,
    shared: Mutex<Shared>,
    sender: broadcast::Sender<InboxEvent>,
    /// Whether the running poller has listed once.
    ready: watch::Sender<bool>,
    /// One listener's page of the questions pending now is read at a time: ten listeners
    /// opening at once cost one page in memory, not ten (see [`Inbox::pending_now`]).
    reading: tokio::sync::Semaphore,
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
                sender: broadcast::Sender::new(BUFFER),
                ready: watch::Sender::new(false),
                reading: tokio::sync::Semaphore::new(1),
            }),
        }
    }

    /// A receiver of the inbox's events from now on, once the poller (started if none runs)
    /// has listed once: every change committed after this returns is sent to it. The caller
    /// then reads the questions pending now ([`Inbox::pending_now`]); an event for a change its
    /// reading already shows may follow (a question raised again, a question it never saw
    /// resolved): applied in order after the reading, the events leave exactly the questions
    /// pending.
    pub(crate) async fn subscribe(&self) -> broadcast::Receiver<InboxEvent> {
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
        let receiver = self.inner.sender.subscribe();
        drop(early);
        receiver
    }

    /// A receiver from now on, for a listener that fell behind (it holds its old receiver
    /// until then, so the poller keeps going); it reads the questions pending now after.
    pub(crate) fn resubscribe(&self) -> broadcast::Receiver<InboxEvent> {
        self.inner.sender.subscribe()
    }
}

impl Inbox {
    /// The questions pending now in `resource` (every resource with [`ResourceFilter::Any`])
    /// that the poller knows of, as `question-raised` events, read from the store one page of
    /// suspended runs at a time (a listener sends them as it reads them: nothing is held for the
    /// whole set). Read after [`Inbox::subscribe`]: a question is shown only when the poller
    /// holds it, so its end is announced to the receiver; one the poller does not hold yet will
    /// come to the receiver as raised.
    pub(crate) fn pending_now(
        &self,
        resource: ResourceFilter,
    ) -> impl futures::Stream<Item = InboxEvent> + use<> {
        let inner = self.inner.clone();
        async_stream::stream! {
            let mut filter = RunFilter::new()
                .status(RunStatus::Suspended)
                .top_level()
                .resource_filter(resource)
                .limit(LISTENER_PAGE);
            loop {
                // Held while the page is read and turned into events, released before they
                // are sent, so a slow listener never holds up another one.
                let Ok(permit) = inner.reading.acquire().await else {
                    break;
                };
                let mut page = match inner.store.list_runs(&filter).await {
                    Ok(page) => page,
                    Err(error) => {
                        tracing::warn!(error = %askloop_core::error_chain_text(&error), "inbox: listing the pending questions failed");
                        break;
                    }
                };
                let known: Vec<InboxEvent> = {
                    let shared = lock(&inner.shared);
                    page.runs
                        .iter()
                        .filter_map(ListedRun::summary)
                        .flat_map(|summary| {
                            let held = shared.current.get(&summary.key());
                            raised(summary).into_iter().filter(move |event| {
                                held.is_some_and(|held| {
                                    held.calls
                                        .iter()
                                        .any(|call| call.tool_call_id == event.tool_call_id)
                                })
                            })
                        })
                        .collect()
                };
                // The page's runs go here, before the events are sent.
                let next = page.next_cursor.take();
                drop(page);
                drop(permit);
                for event in known {
                    yield event;
                }
                match next {
                    Some(next) => filter.cursor = Some(next),
                    None => break,
                }
            }
        }
    }
}

/// What one listing found: the pending calls it shows, and the `question-raised` events of the
/// calls not in the poller's state when it read them.
struct Listing {
    kind: ListingKind,
    raised: Vec<InboxEvent>,
}

enum ListingKind {
    /// Every suspended run's pending calls, and the change cursor the listing started at.
    Full(Pending, Option<u64>),
    /// The runs changed after the cursor (no calls for a run no longer suspended), and the
    /// cursor after them.
    Changes(Pending, u64),
}

/// The `question-raised` events of `summary`'s calls that `before` does not hold.
fn raised_since(before: Option<&HeldRun>, summary: &RunSummary) -> Vec<InboxEvent> {
    let mut events = raised(summary);
    if let Some(before) = before {
        events.retain(|event| {
            !before
                .calls
                .iter()
                .any(|held| held.tool_call_id == event.tool_call_id)
        });
    }
    events
}

/// The pending calls of every suspended run, and the change cursor of the first page (every
/// change after it shows in a later `changed_after` listing). The `question-raised` events are
/// made only once someone may hear them (not for the poller's first listing, which would build
/// every question at once).
async fn list_pending(inner: &InboxInner) -> Result<Listing, askloop_core::StoreError> {
    let announce = *inner.ready.borrow();
    let mut filter = RunFilter::new()
        .status(RunStatus::Suspended)
        .top_level()
        .limit(POLL_PAGE);
    let mut pending = HashMap::new();
    let mut raised = Vec::new();
    let mut cursor = None;
    loop {
        let page = inner.store.list_runs(&filter).await?;
        cursor = cursor.or(page.change_cursor);
        {
            let shared = lock(&inner.shared);
            for summary in page.runs.iter().filter_map(ListedRun::summary) {
                let key = summary.key();
                if announce {
                    raised.extend(raised_since(shared.current.get(&key), summary));
                }
                pending.insert(key, HeldRun::of(summary));
            }
        }
        match page.next_cursor {
            // The first page's change cursor is the listing's: the next pages need none.
            Some(next) => filter = filter.after(next).without_change_cursor(),
            None => {
                return Ok(Listing {
                    kind: ListingKind::Full(pending, cursor),
                    raised,
                });
            }
        }
    }
}

/// The runs changed after `cursor`, each with its pending calls now (none unless suspended; an
/// unreadable run has none either, as a full listing would skip it).
async fn list_changes(
    inner: &InboxInner,
    mut cursor: u64,
) -> Result<Listing, askloop_core::StoreError> {
    let mut changed = HashMap::new();
    let mut raised = Vec::new();
    loop {
        let page = inner
            .store
            .list_runs(&RunFilter::new().changed_after(cursor).limit(POLL_PAGE))
            .await?;
        {
            let shared = lock(&inner.shared);
            for run in &page.runs {
                let key = run.key();
                let held = match run.summary() {
                    // A sub-agent's child run is never an entry: its root lists its calls.
                    Some(summary)
                        if summary.status == RunStatus::Suspended && summary.parent.is_none() =>
                    {
                        raised.extend(raised_since(shared.current.get(&key), summary));
                        HeldRun::of(summary)
                    }
                    _ => HeldRun {
                        agent_id: AgentId::new(""),
                        thread_id: ThreadId::new(""),
                        calls: Vec::new(),
                    },
                };
                changed.insert(key, held);
            }
        }
        let Some(next) = page.change_cursor else {
            // A store without a change order (never one of askloop's): nothing is lost by
            // keeping the cursor; the next full listing happens on a resync.
            return Ok(Listing {
                kind: ListingKind::Changes(changed, cursor),
                raised,
            });
        };
        cursor = next;
        if !page.more_changes {
            return Ok(Listing {
                kind: ListingKind::Changes(changed, cursor),
                raised,
            });
        }
    }
}

/// A run's pending calls as `question-raised` events.
fn raised(summary: &RunSummary) -> Vec<InboxEvent> {
    summary
        .pending
        .iter()
        .map(|call| InboxEvent {
            kind: InboxEventKind::Raised,
            run_id: summary.run_id.clone(),
            tool_call_id: call.tool_call_id.clone(),
            agent_id: summary.agent_id.clone(),
            thread_id: summary.thread_id.clone(),
            resource_id: summary.resource_id.clone(),
            question: serde_json::to_value(PendingCall::of(&summary.run_id, call))
                .unwrap_or(Value::Null),
        })
        .collect()
}

/// Sends `question-resolved` for each call of `before` that `after` does not hold.
fn send_resolved(
    sender: &broadcast::Sender<InboxEvent>,
    run: &RunKey,
    before: &HeldRun,
    after: Option<&HeldRun>,
) {
    for held in &before.calls {
        let kept = after.is_some_and(|after| {
            after
                .calls
                .iter()
                .any(|call| call.tool_call_id == held.tool_call_id)
        });
        if !kept {
            let _ = sender.send(before.resolved(run, held));
        }
    }
}

/// Applies a listing to `current`, sending the events of what changed when `announce` (not for
/// the first listing: nobody listened before it). Returns the change cursor to list from next
/// (`None`: list everything again).
fn apply(
    shared: &mut Shared,
    sender: &broadcast::Sender<InboxEvent>,
    listing: Listing,
    announce: bool,
) -> Option<u64> {
    if announce {
        for event in listing.raised {
            let _ = sender.send(event);
        }
    }
    match listing.kind {
        ListingKind::Full(pending, cursor) => {
            if announce {
                for (run, before) in &shared.current {
                    send_resolved(sender, run, before, pending.get(run));
                }
            }
            shared.current = pending;
            cursor
        }
        ListingKind::Changes(changed, cursor) => {
            for (run, after) in changed {
                if let Some(before) = shared.current.remove(&run)
                    && announce
                {
                    send_resolved(sender, &run, &before, Some(&after));
                }
                if !after.calls.is_empty() {
                    shared.current.insert(run, after);
                }
            }
            Some(cursor)
        }
    }
}

async fn poll(inner: Arc<InboxInner>) {
    // Watching before the first listing: a change committed after it is seen.
    let mut changes = inner.store.watch_changes().await;
    tracing::debug!(notified = changes.is_some(), "inbox poller started");
    // Where the store's change order stood at the last listing; `None`: list everything.
    let mut cursor: Option<u64> = None;
    loop {
        let listed = match cursor {
            Some(after) => list_changes(&inner, after).await,
            None => list_pending(&inner).await,
        };
        {
            let mut shared = lock(&inner.shared);
            match listed {
                Ok(listing) => {
                    let announce = *inner.ready.borrow();
                    cursor = apply(&mut shared, &inner.sender, listing, announce);
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
        if wait_for_change(&inner, &mut changes).await == Wake::Resync {
            cursor = None;
        }
    }
}

/// Why the poller lists again.
#[derive(Debug, PartialEq, Eq)]
enum Wake {
    /// Something may have changed: list the changes.
    Changes,
    /// The store may have lost changes: list everything.
    Resync,
}

/// Waits until the next listing is due: [`POLL_INTERVAL`] without notifications; with them, a
/// change that may concern the inbox (then [`DEBOUNCE`] more, the changes meanwhile folded into
/// the same listing) or [`SAFETY_RELIST`]. A store that stops notifying is polled from then on.
async fn wait_for_change(inner: &InboxInner, changes: &mut Option<RunChanges>) -> Wake {
    let Some(feed) = changes else {
        tokio::time::sleep(POLL_INTERVAL).await;
        return Wake::Changes;
    };
    let safety = tokio::time::sleep(SAFETY_RELIST);
    tokio::pin!(safety);
    loop {
        let change = tokio::select! {
            () = &mut safety => return Wake::Changes,
            change = feed.next() => change,
        };
        match change {
            None => {
                tracing::warn!("inbox: the store stopped notifying; polling");
                *changes = None;
                return Wake::Changes;
            }
            Some(change) if concerns_inbox(inner, &change) => {
                tokio::time::sleep(DEBOUNCE).await;
                let mut wake = wake_for(&change);
                while let Some(change) = feed.try_next() {
                    if wake_for(&change) == Wake::Resync {
                        wake = Wake::Resync;
                    }
                }
                return wake;
            }
            Some(_) => {}
        }
    }
}

/// A resync lists everything; any other change, what changed.
fn wake_for(change: &RunChange) -> Wake {
    match change {
        RunChange::Resync => Wake::Resync,
        _ => Wake::Changes,
    }
}

/// Whether `change` may change the inbox: a run now suspended, a run with pending calls in the
/// last listing, or a resync.
fn concerns_inbox(inner: &InboxInner, change: &RunChange) -> bool {
    match (change, change.key()) {
        (RunChange::Run { status, .. }, Some(run)) => {
            *status == RunStatus::Suspended || lock(&inner.shared).current.contains_key(&run)
        }
        _ => true,
    }
}
