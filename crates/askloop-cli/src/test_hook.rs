//! Test-only: `ASKLOOP_TEST_PAUSE_AT=POINT[#N]` stops this process at a chosen point of a run,
//! so that crash tests can SIGKILL it exactly there. Not meant for users; unset, nothing
//! changes.
//!
//! `POINT` is one of
//! - `before-commit`: just before the Nth update of a run is sent to the store (claims
//!   included; the insert of a new run is not counted);
//! - `after-commit`: just after the Nth update is stored, before anything else happens;
//! - `model-stream`: after the first event of the Nth model call, while the model streams.
//!
//! `N` defaults to 1. On reaching it the process prints `askloop-test: paused at POINT#N` on
//! stderr and waits forever (the run's lease is still renewed, as by a live process).
//!
//! `ASKLOOP_TEST_TOOLS=1` gives every agent the typed suspending tool `test_pay` (a payment
//! confirmed by a form: its answer is an object of a number, a yes/no, a choice and an
//! optional text), so terminal tests can answer a custom tool's prompts.

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
        let Some(text) = crate::context::env_value(PAUSE_ENV) else {
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
            Point::ModelStream => store,
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
    async fn insert_run(&self, state: &RunState, lease: Option<&Lease>) -> Result<u64, StoreError> {
        self.inner.insert_run(state, lease).await
    }
    async fn update_run(
        &self,
        state: &RunState,
        expected_version: u64,
        lease: Option<&Lease>,
    ) -> Result<u64, StoreError> {
        let count = self.commits.fetch_add(1, Ordering::SeqCst) + 1;
        let here = count == self.pause.nth;
        if here && self.pause.point == Point::BeforeCommit {
            pause_here(&format!("before-commit#{count}")).await;
        }
        let result = self.inner.update_run(state, expected_version, lease).await;
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

/// The environment variable that adds the test tools.
pub(crate) const TOOLS_ENV: &str = "ASKLOOP_TEST_TOOLS";

/// The test tools, when [`TOOLS_ENV`] is `1`; none otherwise.
pub(crate) fn test_tools() -> Vec<Arc<dyn askloop_core::DynTool>> {
    match crate::context::env_value(TOOLS_ENV).as_deref() {
        Some("1") => vec![Arc::new(askloop_core::Suspending(TestPay))],
        _ => Vec::new(),
    }
}

/// `test_pay`'s arguments.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct PayArgs {
    /// Amount in cents.
    amount_cents: u64,
    /// Who is paid.
    to: String,
}

/// `test_pay`'s question.
#[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
struct PayQuestion {
    /// What is asked.
    question: String,
    /// The amount to confirm.
    amount_cents: u64,
}

/// `test_pay`'s answer. Fields in name order, so the prompts' order is the same whether
/// serde_json keeps the schema's order or sorts it.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct PayAnswer {
    /// The amount, typed again.
    amount_cents: u64,
    /// Whether to pay.
    confirmed: bool,
    /// A note for the payee.
    #[schemars(length(max = 20))]
    note: Option<String>,
    /// How fast.
    speed: Speed,
}

/// How fast a payment goes.
#[derive(serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
enum Speed {
    /// Within three days, free.
    Standard,
    /// Today, for a fee.
    Express,
}

/// A payment that a person confirms by typing the amount again.
struct TestPay;

#[async_trait]
impl askloop_core::SuspendingTool for TestPay {
    const NAME: &'static str = "test_pay";
    type Args = PayArgs;
    type Suspend = PayQuestion;
    type Resume = PayAnswer;
    type Output = serde_json::Value;
    type Error = std::convert::Infallible;

    fn description(&self) -> String {
        "Pays someone after a person confirms (test tool).".to_owned()
    }

    fn check_resume(&self, asked: &PayQuestion, answer: &PayAnswer) -> Result<(), String> {
        if answer.amount_cents == asked.amount_cents {
            Ok(())
        } else {
            Err(format!(
                "the amount typed ({}) is not the amount to pay ({})",
                answer.amount_cents, asked.amount_cents
            ))
        }
    }

    async fn execute(
        &self,
        args: PayArgs,
        _context: &askloop_core::ToolContext,
    ) -> Result<askloop_core::Suspendable<serde_json::Value, PayQuestion>, Self::Error> {
        Ok(askloop_core::Suspendable::Suspend(PayQuestion {
            question: format!("Pay {} cents to {}?", args.amount_cents, args.to),
            amount_cents: args.amount_cents,
        }))
    }

    async fn resume(
        &self,
        args: PayArgs,
        answer: PayAnswer,
        _context: &askloop_core::ToolContext,
    ) -> Result<askloop_core::Suspendable<serde_json::Value, PayQuestion>, Self::Error> {
        let speed = match answer.speed {
            Speed::Standard => "standard",
            Speed::Express => "express",
        };
        Ok(askloop_core::Suspendable::Complete(serde_json::json!({
            "paid": if answer.confirmed { answer.amount_cents } else { 0 },
            "to": args.to,
            "speed": speed,
            "note": answer.note,
        })))
    }
}
