//! Test-only hooks, compiled in only with the `test-hooks` feature (the crate's integration
//! tests enable it through `--all-features`; a default or release build has none, and ignores
//! the variables below). Not meant for users; unset, nothing changes.
//!
//! `ASKLOOP_TEST_PAUSE_AT=POINT[#N]` stops this process at a chosen point of a run, so that
//! crash tests can SIGKILL it exactly there. `POINT` is one of
//! - `before-commit`: just before the Nth update of a run is sent to the store (claims
//!   included; the insert of a new run is not counted);
//! - `after-commit`: just after the Nth update is stored, before anything else happens;
//! - `model-stream`: after the first event of the Nth model call, while the model streams;
//! - `model-load`: while the model is being loaded, before the run starts (`N` is ignored).
//!
//! `N` defaults to 1. On reaching it the process prints `askloop-test: paused at POINT#N` on
//! stderr and waits forever (the run's lease is still renewed, as by a live process).
//!
//! `ASKLOOP_TEST_TOOLS=1` gives every agent the typed suspending tool `test_pay` (a payment
//! confirmed by a form: its answer is an object of a number, a yes/no, a choice and an
//! optional text), so terminal tests can answer a custom tool's prompts.
//!
//! The rest of the crate sees only [`TestHooks`]: read once per command, it wraps the store
//! and each model, and names the extra tools of every agent.

use std::sync::Arc;

use askloop_core::model::LanguageModel;
use askloop_core::{DynTool, RunStore};

#[cfg(feature = "test-hooks")]
mod pause;
#[cfg(feature = "test-hooks")]
mod pay;

/// The environment variable that adds the test tools.
#[cfg(feature = "test-hooks")]
const TOOLS_ENV: &str = "ASKLOOP_TEST_TOOLS";

/// The test hooks of this process, as the environment set them: none without the
/// `test-hooks` feature.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct TestHooks {
    /// Where to pause (`ASKLOOP_TEST_PAUSE_AT`).
    #[cfg(feature = "test-hooks")]
    pause: Option<pause::Pause>,
    /// Whether agents get the test tools (`ASKLOOP_TEST_TOOLS=1`).
    #[cfg(feature = "test-hooks")]
    tools: bool,
}

#[cfg(feature = "test-hooks")]
impl TestHooks {
    /// The hooks the environment sets.
    ///
    /// # Errors
    /// Invalid input for an `ASKLOOP_TEST_PAUSE_AT` that is not `POINT[#N]`.
    pub(crate) fn from_env() -> anyhow::Result<Self> {
        Ok(Self {
            pause: pause::Pause::from_env()?,
            tools: crate::env::env_value(TOOLS_ENV).as_deref() == Some("1"),
        })
    }

    /// The store, wrapped when the pause point is a commit.
    pub(crate) fn wrap_store(self, store: Arc<dyn RunStore>) -> Arc<dyn RunStore> {
        match self.pause {
            Some(pause) => pause.wrap_store(store),
            None => store,
        }
    }

    /// The model, wrapped when the pause point is a model call.
    pub(crate) fn wrap_model(self, model: Arc<dyn LanguageModel>) -> Arc<dyn LanguageModel> {
        match self.pause {
            Some(pause) => pause.wrap_model(model),
            None => model,
        }
    }

    /// Waits forever when the pause point is the model's load.
    pub(crate) async fn at_model_load(self) {
        if let Some(pause) = self.pause {
            pause.at_model_load().await;
        }
    }

    /// The tools every agent gets besides its own: `test_pay` when asked for.
    pub(crate) fn tools(self) -> Vec<Arc<dyn DynTool>> {
        if self.tools {
            vec![Arc::new(askloop_core::Suspending(pay::TestPay))]
        } else {
            Vec::new()
        }
    }
}

#[cfg(not(feature = "test-hooks"))]
impl TestHooks {
    /// No hooks: this build has none.
    ///
    /// # Errors
    /// None; the signature is the `test-hooks` build's.
    #[allow(clippy::unnecessary_wraps)]
    pub(crate) fn from_env() -> anyhow::Result<Self> {
        Ok(Self {})
    }

    /// The store as it is.
    pub(crate) fn wrap_store(self, store: Arc<dyn RunStore>) -> Arc<dyn RunStore> {
        store
    }

    /// The model as it is.
    pub(crate) fn wrap_model(self, model: Arc<dyn LanguageModel>) -> Arc<dyn LanguageModel> {
        model
    }

    /// Nothing to wait for.
    #[allow(clippy::unused_async)]
    pub(crate) async fn at_model_load(self) {}

    /// No extra tools.
    pub(crate) fn tools(self) -> Vec<Arc<dyn DynTool>> {
        Vec::new()
    }
}
