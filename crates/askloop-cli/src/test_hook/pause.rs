//! `ASKLOOP_TEST_PAUSE_AT=POINT[#N]`: stops this process at a chosen point of a run, so that
//! crash tests can SIGKILL it exactly there ([`crate::test_hook`] lists the points).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use askloop_core::model::{LanguageModel, ModelError, ModelEvent, ModelEventStream, ModelRequest};
use askloop_core::store::{Lease, RunFilter, RunPage, RunState, StoredRun, ThreadHistory};
use askloop_core::{RunKey, RunStore, StoreError, ThreadKey};
use async_trait::async_trait;
use futures::StreamExt;

use crate::exit::invalid;

/// The environment variable naming the pause point.
pub(crate) const PAUSE_ENV: &str = "ASKLOOP_TEST_PAUSE_AT";

/// Where to pause.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Point {
    BeforeCommit,
    AfterCommit,
    ModelStream,
    ModelLoad,
}

/// A pause point and how many times to pass it first.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pause {
    point: Point,
    nth: usize,
}

impl Pause {
    /// The pause point of [`PAUSE_ENV`], if set.
    ///
    /// # Errors
    /// Invalid input for a value that is not `POINT[#N]`.
    pub(crate) fn from_env() -> anyhow::Result<Option<Self>> {
        let Some(text) = crate::env::env_value(PAUSE_ENV) else {
            return Ok(None);
        };
        let (name, nth) = match text.split_once('#') {
            Some((name, nth)) => (
                name,
                nth.parse::<usize>()
                    .ok()
                    .filter(|nth| *nth > 0)
                    .ok_or_else(|| invalid(format!("invalid {PAUSE_ENV}: {text:?}")))?,
            ),
            None => (text.as_str(), 1),
        };
        let point = match name {
            "before-commit" => Point::BeforeCommit,
            "after-commit" => Point::AfterCommit,
            "model-stream" => Point::ModelStream,
            "model-load" => Point::ModelLoad,
            _ => return Err(invalid(format!("invalid {PAUSE_ENV}: {text:?}"))),
        };
        Ok(Some(Self { point, nth }))
    }

    /// The store, wrapped when the pause point is a commit.
    pub(crate) fn wrap_store(self, store: Arc<dyn RunStore>) -> Arc<dyn RunStore> {
        match self.point {
            Point::BeforeCommit | Point::AfterCommit => Arc::new(PausingStore {
                inner: store,
                pause: self,
                commits: AtomicUsize::new(0),
            }),
            Point::ModelStream | Point::ModelLoad => store,
        }
    }

    /// The model, wrapped when the pause point is a model call.
    pub(crate) fn wrap_model(self, model: Arc<dyn LanguageModel>) -> Arc<dyn LanguageModel> {
        match self.point {
            Point::ModelStream => Arc::new(PausingModel {
                inner: model,
                nth: self.nth,
                calls: AtomicUsize::new(0),
            }),
            _ => model,
        }
    }

    /// Waits forever here when the pause point is the model's load.
    pub(crate) async fn at_model_load(self) {
        if self.point == Point::ModelLoad {
            pause_here("model-load").await;
        }
    }
}

/// Says where it stopped and waits forever.
async fn pause_here(label: &str) {
    use std::io::Write;
    let mut stderr = std::io::stderr();
    let _ = writeln!(stderr, "askloop-test: paused at {label}");
    let _ = stderr.flush();
    futures::future::pending::<()>().await;
}

struct PausingStore {
    inner: Arc<dyn RunStore>,
    pause: Pause,
    commits: AtomicUsize,
}

#[async_trait]
impl RunStore for PausingStore {
    async fn insert_run_with_events(
        &self,
        state: &RunState,
        lease: Option<&Lease>,
        events: &[askloop_core::event::RunEvent],
    ) -> Result<u64, StoreError> {
        self.inner
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
        let count = self.commits.fetch_add(1, Ordering::SeqCst) + 1;
        let here = count == self.pause.nth;
        if here && self.pause.point == Point::BeforeCommit {
            pause_here(&format!("before-commit#{count}")).await;
        }
        let result = self
            .inner
            .update_run_with_events(state, expected_version, lease, events)
            .await;
        if here && self.pause.point == Point::AfterCommit && result.is_ok() {
            pause_here(&format!("after-commit#{count}")).await;
        }
        result
    }
    async fn renew_lease(
        &self,
        run: &RunKey,
        expected_version: u64,
        lease: &Lease,
    ) -> Result<(), StoreError> {
        self.inner.renew_lease(run, expected_version, lease).await
    }
    async fn load_run(&self, run: &RunKey) -> Result<StoredRun, StoreError> {
        self.inner.load_run(run).await
    }
    async fn keys_of_run(
        &self,
        run_id: &askloop_core::RunId,
    ) -> Result<Vec<askloop_core::RunKey>, askloop_core::StoreError> {
        self.inner.keys_of_run(run_id).await
    }
    async fn list_runs(&self, filter: &RunFilter) -> Result<RunPage, StoreError> {
        self.inner.list_runs(filter).await
    }
    async fn run_counts(&self) -> Result<askloop_core::store::RunCounts, StoreError> {
        self.inner.run_counts().await
    }
    async fn thread_history(
        &self,
        thread: &ThreadKey,
        through: Option<u64>,
    ) -> Result<ThreadHistory, StoreError> {
        self.inner.thread_history(thread, through).await
    }
    async fn watch_changes(&self) -> Option<askloop_core::store::RunChanges> {
        self.inner.watch_changes().await
    }
    async fn close(&self) {
        self.inner.close().await;
    }
    fn answer_links(&self) -> Option<&dyn askloop_core::store::AnswerLinks> {
        self.inner.answer_links()
    }
    fn outbox(&self) -> Option<&dyn askloop_core::store::Outbox> {
        self.inner.outbox()
    }
}

struct PausingModel {
    inner: Arc<dyn LanguageModel>,
    nth: usize,
    calls: AtomicUsize,
}

#[async_trait]
impl LanguageModel for PausingModel {
    fn provider(&self) -> &str {
        self.inner.provider()
    }
    fn model_id(&self) -> &str {
        self.inner.model_id()
    }
    async fn stream(&self, request: ModelRequest) -> Result<ModelEventStream, ModelError> {
        let count = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        let events = self.inner.stream(request).await?;
        if count != self.nth {
            return Ok(events);
        }
        let label = format!("model-stream#{count}");
        let paused = futures::stream::once(async move {
            pause_here(&label).await;
            Err::<ModelEvent, ModelError>(ModelError::Cancelled)
        });
        Ok(Box::pin(events.take(1).chain(paused)))
    }
}
