//! The run hub: runs live apart from connections. A stream route hands its [`AgentStream`] to
//! [`RunHub::spawn`] (a claimed run) or [`RunHub::start`] (a new run), which drive it to its end
//! in a task of its own and record its chunks (as wire JSON) in a per-run live buffer; HTTP
//! responses only subscribe to that buffer, so a client that disconnects does not stop the run,
//! and another can re-attach ([`RunHub::subscribe`]: the chunks so far, then the live ones).
//! A claimed run's buffer also keeps the state the claim started from, so a client can be told
//! the run's whole turn, not only this stream's part of it ([`RunHub::subscribe_turn`]).
//!
//! Invariants: one buffer per run key (resource and id: the same id in two resources is two
//! runs; a new stream of the run replaces a finished one); a new run's buffer is known to the
//! hub only once the run started (a start refused before anything was stored — a busy thread, a
//! taken id — never replaces the buffer of the run that holds that key); a subscriber sees every
//! chunk of the buffer in order, none twice, however late it attaches (the buffer is kept whole
//! while the stream runs; a `watch` channel only says "more is there", so a slow subscriber never
//! lags behind and loses chunks); a buffer is removed once its stream ended and no subscriber is
//! attached.
//!
//! Once a run was created or resumed the response is 200, and errors after that are `error`
//! chunks, so a client retrying a 5xx never starts a run twice.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use askloop_core::store::RunState;
use askloop_core::{AgentError, AgentId, AgentStream, Chunk, RunKey, error_chain_text, wire};
use futures::{Stream, StreamExt};
use tokio::sync::{oneshot, watch};
use tracing::Instrument;

use crate::metrics::{Metrics, Outcome, StreamKind};

/// The live runs of this server.
#[derive(Clone)]
pub(crate) struct RunHub {
    inner: Arc<HubInner>,
}

struct HubInner {
    runs: Mutex<HashMap<RunKey, Arc<LiveRun>>>,
    /// How many run tasks are going.
    live: watch::Sender<usize>,
    /// Where stream durations are recorded.
    metrics: Arc<Metrics>,
}

/// The buffer of one run's current stream.
struct LiveRun {
    /// The run as the claim of this stream found it (`None` for a new run).
    before: Option<RunState>,
    state: Mutex<LiveState>,
    /// Bumped on every chunk and at the end.
    changed: watch::Sender<u64>,
}

#[derive(Default)]
struct LiveState {
    chunks: Vec<Arc<str>>,
    done: bool,
    attached: usize,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding these locks leaves plain data behind; go on with it.
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl LiveRun {
    fn new(before: Option<RunState>) -> Self {
        Self {
            before,
            state: Mutex::new(LiveState::default()),
            changed: watch::Sender::new(0),
        }
    }

    fn push(&self, chunk: String) {
        lock(&self.state).chunks.push(chunk.into());
        self.changed.send_modify(|generation| *generation += 1);
    }

    fn finish(&self) {
        lock(&self.state).done = true;
        self.changed.send_modify(|generation| *generation += 1);
    }
}

/// Counts a run task while it lives, and closes its buffer however it ends.
struct TaskGuard {
    hub: RunHub,
    key: RunKey,
    live: Arc<LiveRun>,
}

impl Drop for TaskGuard {
    fn drop(&mut self) {
        self.live.finish();
        self.hub.release_if_unused(&self.key, &self.live);
        self.hub
            .inner
            .live
            .send_modify(|count| *count = count.saturating_sub(1));
    }
}

/// Counts a subscriber while it is attached.
struct Attached {
    hub: RunHub,
    key: RunKey,
    live: Arc<LiveRun>,
}

impl Drop for Attached {
    fn drop(&mut self) {
        {
            let mut state = lock(&self.live.state);
            state.attached = state.attached.saturating_sub(1);
        }
        self.hub.release_if_unused(&self.key, &self.live);
    }
}

/// Where a new run's task tells whether the run started (its first chunk came) or was refused
/// (its first item was this error).
type Started = oneshot::Sender<Result<(), AgentError>>;

impl RunHub {
    /// A hub recording its streams' durations in `metrics`.
    pub(crate) fn new(metrics: Arc<Metrics>) -> Self {
        Self {
            inner: Arc::new(HubInner {
                runs: Mutex::new(HashMap::new()),
                live: watch::Sender::new(0),
                metrics,
            }),
        }
    }

    /// Drives `stream` (a claimed run: a resume, a continue) to its end in a task of its own,
    /// recording its chunks; returns a subscription attached before the first chunk (it sees
    /// them all). `kind` says which duration histogram the stream's end goes to; `before` is
    /// the run as the claim found it (the state loaded before the claim: its messages and
    /// waiting calls are the turn before this stream; `None` when unknown, and then a turn's
    /// subscriber is told this stream's part only).
    pub(crate) fn spawn(
        &self,
        stream: AgentStream,
        agent_id: &AgentId,
        kind: StreamKind,
        before: Option<RunState>,
    ) -> impl Stream<Item = Arc<str>> + Send + 'static {
        self.launch(stream, agent_id, kind, None, before)
    }

    /// Drives a new run's `stream` as [`RunHub::spawn`] does, once it started: waits for its
    /// first item, so that a start refused before anything was stored is answered as an error
    /// (the thread has a turn running, the run id is taken, an id is invalid), not as a
    /// stream. The run is driven by the hub's task from the first poll: a client that goes
    /// away while this waits stops nothing.
    ///
    /// # Errors
    /// The [`AgentError`] that was the stream's first item.
    pub(crate) async fn start(
        &self,
        stream: AgentStream,
        agent_id: &AgentId,
        kind: StreamKind,
    ) -> Result<impl Stream<Item = Arc<str>> + Send + 'static, AgentError> {
        let (started, outcome) = oneshot::channel();
        let subscription = self.launch(stream, agent_id, kind, Some(started), None);
        match outcome.await {
            Ok(Err(error)) => Err(error),
            _ => Ok(subscription),
        }
    }

    /// Starts the task of `stream`. Its buffer is registered under the run's key at once, or,
    /// with `started` (a new run), once its first chunk came.
    fn launch(
        &self,
        stream: AgentStream,
        agent_id: &AgentId,
        kind: StreamKind,
        started: Option<Started>,
        before: Option<RunState>,
    ) -> impl Stream<Item = Arc<str>> + Send + 'static {
        let key = stream.run_key().clone();
        let live = Arc::new(LiveRun::new(before));
        if started.is_none() {
            lock(&self.inner.runs).insert(key.clone(), live.clone());
        }
        let subscription = self.attach(key.clone(), live.clone());
        self.inner.live.send_modify(|count| *count += 1);
        let guard = TaskGuard {
            hub: self.clone(),
            key: key.clone(),
            live,
        };
        let span = tracing::info_span!("run task", run_id = %key.run_id, agent_id = %agent_id);
        let metrics = self.inner.metrics.clone();
        tokio::spawn(
            async move {
                // A run refused before it started is no stream of the metrics.
                if let Some(outcome) = drive(stream, guard, started).await {
                    metrics.stream_ended(kind, outcome);
                }
            }
            .instrument(span),
        );
        subscription
    }

    /// A subscription to the run's current stream if it is live in this server: the chunks so
    /// far, then the live ones until it ends.
    pub(crate) fn subscribe(
        &self,
        run: &RunKey,
    ) -> Option<impl Stream<Item = Arc<str>> + Send + 'static> {
        self.subscribe_turn(run).map(|(_, chunks)| chunks)
    }

    /// [`RunHub::subscribe`], with the run as the claim of its current stream found it (`None`
    /// for a new run's stream, which is the whole turn).
    pub(crate) fn subscribe_turn(
        &self,
        run: &RunKey,
    ) -> Option<(
        Option<RunState>,
        impl Stream<Item = Arc<str>> + Send + 'static,
    )> {
        let live = lock(&self.inner.runs).get(run).cloned()?;
        if lock(&live.state).done {
            return None;
        }
        Some((live.before.clone(), self.attach(run.clone(), live)))
    }

    /// Whether this server drives the run now.
    pub(crate) fn is_live(&self, run: &RunKey) -> bool {
        lock(&self.inner.runs)
            .get(run)
            .is_some_and(|live| !lock(&live.state).done)
    }

    /// How many run tasks are going.
    pub(crate) fn live_count(&self) -> usize {
        *self.inner.live.borrow()
    }

    /// Waits until no run task is going, at most `timeout`; whether that happened.
    pub(crate) async fn wait_idle(&self, timeout: Duration) -> bool {
        let mut receiver = self.inner.live.subscribe();
        tokio::time::timeout(timeout, receiver.wait_for(|count| *count == 0))
            .await
            .is_ok_and(|waited| waited.is_ok())
    }

    fn attach(
        &self,
        key: RunKey,
        live: Arc<LiveRun>,
    ) -> impl Stream<Item = Arc<str>> + Send + 'static {
        lock(&live.state).attached += 1;
        let mut changed = live.changed.subscribe();
        let attached = Attached {
            hub: self.clone(),
            key,
            live,
        };
        async_stream::stream! {
            let attached = attached;
            let mut next = 0;
            loop {
                changed.borrow_and_update();
                let (batch, done) = {
                    let state = lock(&attached.live.state);
                    (state.chunks.get(next..).unwrap_or_default().to_vec(), state.done)
                };
                next += batch.len();
                let had_batch = !batch.is_empty();
                for chunk in batch {
                    yield chunk;
                }
                if done {
                    break;
                }
                if !had_batch && changed.changed().await.is_err() {
                    break;
                }
            }
        }
    }

    /// Registers `live` as the buffer of `run` (a new run that started).
    fn register(&self, run: &RunKey, live: &Arc<LiveRun>) {
        lock(&self.inner.runs).insert(run.clone(), live.clone());
    }

    /// Removes the run's buffer if it is this one, its stream ended and no one is attached.
    fn release_if_unused(&self, run: &RunKey, live: &Arc<LiveRun>) {
        let mut runs = lock(&self.inner.runs);
        let unused = {
            let state = lock(&live.state);
            state.done && state.attached == 0
        };
        if unused && runs.get(run).is_some_and(|kept| Arc::ptr_eq(kept, live)) {
            runs.remove(run);
        }
    }
}

/// Drives the stream to its end; how it ended, or `None` for a new run refused before it
/// started (its first item an error, handed to `started`).
async fn drive(
    mut stream: AgentStream,
    guard: TaskGuard,
    mut started: Option<Started>,
) -> Option<Outcome> {
    let run_id = guard.key.run_id.clone();
    tracing::debug!("run task started");
    let mut outcome = Outcome::interrupted;
    while let Some(item) = stream.next().await {
        match item {
            Ok(chunk) => {
                if let Some(started) = started.take() {
                    guard.hub.register(&guard.key, &guard.live);
                    let _ = started.send(Ok(()));
                }
                match &chunk {
                    Chunk::Finish { .. } => outcome = Outcome::finished,
                    Chunk::ToolCallSuspended { .. } | Chunk::ToolCallApproval { .. } => {
                        outcome = Outcome::suspended;
                    }
                    _ => {}
                }
                guard
                    .live
                    .push(wire::chunk_to_json(&run_id, &chunk).to_string());
            }
            Err(error) => {
                guard.live.push(
                    wire::error_to_json(&run_id, error.code(), &error.to_string()).to_string(),
                );
                if let Some(started) = started.take() {
                    tracing::debug!(code = error.code(), error = %error_chain_text(&error), "run refused before it started");
                    let _ = started.send(Err(error));
                    return None;
                }
                outcome = Outcome::failed;
                tracing::warn!(code = error.code(), error = %error_chain_text(&error), "run stream failed");
                break;
            }
        }
    }
    if let Some(started) = started.take() {
        let _ = started.send(Ok(()));
    }
    tracing::debug!(?outcome, "run task ended");
    drop(guard);
    Some(outcome)
}
