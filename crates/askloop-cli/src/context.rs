//! What every command starts from: askloop.toml, the store, and agents built for new or
//! stored runs.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use askloop_core::{Agent, RunId, RunState, RunStore};
use askloop_store::{OpenOptions, StoreUrl, default_store_url, open_store};

use crate::agent::AgentDefinition;
use crate::cli::GlobalArgs;
use crate::config::LoadedConfig;
use crate::exit::invalid;
use crate::format::shell_quote;
use crate::model::{build_model, resolve_spec};

/// The environment variable holding the default model SPEC.
pub(crate) const MODEL_ENV: &str = "ASKLOOP_MODEL";

/// The loaded config and the opened store.
pub(crate) struct Context {
    /// askloop.toml, or an empty config.
    pub(crate) config: LoadedConfig,
    /// Where runs are kept (SQLite paths absolute).
    pub(crate) store_url: StoreUrl,
    /// The store.
    pub(crate) store: Arc<dyn RunStore>,
    /// Whether `store_url` is the default one (so commands printed for later need no `--store`).
    store_is_default: bool,
    /// The `--config` given, absolute.
    explicit_config: Option<PathBuf>,
}

impl Context {
    /// Reads askloop.toml and opens the store: `--store` / `ASKLOOP_STORE`, else the file's
    /// `store`, else the default SQLite file in the data folder.
    ///
    /// # Errors
    /// Invalid input for a bad config or store URL; the store's open errors.
    pub(crate) async fn open(global: &GlobalArgs) -> anyhow::Result<Self> {
        let current_dir = std::env::current_dir()?;
        let config = LoadedConfig::load(global.config.as_deref())?;
        let default_url = default_store_url()
            .ok()
            .map(|url| absolute(url, &current_dir));
        let store_url = match (&global.store, &config.config.store) {
            (Some(url), _) => absolute(url.clone(), &current_dir),
            (None, Some(text)) => {
                let url: StoreUrl = text.parse().map_err(|error| {
                    invalid(format!("invalid `store` in askloop.toml: {error}"))
                })?;
                absolute(url, &config.base_dir)
            }
            (None, None) => absolute(default_store_url()?, &current_dir),
        };
        let store = open_store(&store_url, &OpenOptions::default()).await?;
        Ok(Self {
            store_is_default: default_url.as_ref() == Some(&store_url),
            store_url,
            store,
            config,
            explicit_config: global.config.as_ref().map(|path| current_dir.join(path)),
        })
    }

    /// An agent for a new run: its definition, and the model from `--model`, then
    /// `ASKLOOP_MODEL`, then askloop.toml.
    ///
    /// # Errors
    /// Invalid input for an unknown agent, no model, or a bad SPEC; the model's build errors.
    pub(crate) async fn agent_for_new_run(
        &self,
        agent_id: &str,
        model_flag: Option<&str>,
    ) -> anyhow::Result<Agent> {
        let definition = AgentDefinition::find(&self.config, agent_id)?;
        let spec = self.model_spec(model_flag, None, &definition)?;
        self.build(&definition, &spec).await
    }

    /// The agent that runs a stored run, with the model it was started with (unless
    /// `--model` overrides it).
    ///
    /// # Errors
    /// Invalid input when the run's agent is not defined here; model errors as for
    /// [`Context::agent_for_new_run`].
    pub(crate) async fn agent_for_run(
        &self,
        state: &RunState,
        model_flag: Option<&str>,
    ) -> anyhow::Result<Agent> {
        let definition =
            AgentDefinition::find(&self.config, state.agent_id.as_str()).map_err(|error| {
                invalid(format!(
                    "run {} was started by agent {:?}, which is not defined here: {error:#}",
                    state.run_id,
                    state.agent_id.as_str()
                ))
            })?;
        let spec = self.model_spec(model_flag, state.model.as_deref(), &definition)?;
        self.build(&definition, &spec).await
    }

    /// Loads a stored run.
    ///
    /// # Errors
    /// The store's error (not found: exit status 2).
    pub(crate) async fn load_run(&self, run_id: &RunId) -> anyhow::Result<RunState> {
        Ok(self.store.load_run(run_id).await?.state)
    }

    /// The start of a command that reaches the same store and agents from another process:
    /// `askloop`, plus `--store URL` and `--config PATH` when they are not the defaults.
    pub(crate) fn command_prefix(&self) -> String {
        let mut command = "askloop".to_owned();
        if !self.store_is_default {
            command.push_str(" --store ");
            command.push_str(&shell_quote(&self.store_url.to_string()));
        }
        if let Some(path) = &self.explicit_config {
            command.push_str(" --config ");
            command.push_str(&shell_quote(&path.display().to_string()));
        }
        command
    }

    /// Whether runs survive this process (false for the memory store).
    pub(crate) fn is_durable(&self) -> bool {
        !matches!(self.store_url, StoreUrl::Memory)
    }

    fn model_spec(
        &self,
        model_flag: Option<&str>,
        recorded: Option<&str>,
        definition: &AgentDefinition,
    ) -> anyhow::Result<String> {
        let current_dir = std::env::current_dir()?;
        if let Some(spec) = model_flag {
            return resolve_spec(spec, &current_dir);
        }
        if let Some(spec) = recorded {
            return Ok(spec.to_owned());
        }
        if let Some(spec) = std::env::var(MODEL_ENV)
            .ok()
            .filter(|spec| !spec.trim().is_empty())
        {
            return resolve_spec(&spec, &current_dir);
        }
        if let Some(spec) = &definition.model {
            return Ok(spec.clone());
        }
        if cfg!(feature = "local") {
            // The embedded model: works offline, with no key and no server.
            return Ok(crate::commands::model::LOCAL_SPEC.to_owned());
        }
        Err(invalid(format!(
            "no model is set for agent {:?}: pass --model SPEC (e.g. --model \
             scripted:examples/demo.json), set {MODEL_ENV}, or set `model` in askloop.toml",
            definition.id
        )))
    }

    async fn build(&self, definition: &AgentDefinition, spec: &str) -> anyhow::Result<Agent> {
        crate::commands::model::ensure_available(spec).await?;
        let model = build_model(spec).await?;
        definition.build(model, spec, self.store.clone())
    }
}

/// The URL with a relative SQLite path made absolute against `base`.
fn absolute(url: StoreUrl, base: &Path) -> StoreUrl {
    match url {
        StoreUrl::Sqlite(path) if path.is_relative() => StoreUrl::Sqlite(base.join(path)),
        other => other,
    }
}
