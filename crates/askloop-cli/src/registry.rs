//! [`ConfigRegistry`]: the agents of askloop.toml (and the built-in `assistant`), built on
//! demand with the model a run needs, once per agent and model SPEC.
//!
//! Every command finds its agents here ([`crate::context::Context::agent_for_new_run`],
//! [`crate::context::Context::agent_for_run`]), and `askloop serve` hands the same registry to
//! the server as core's [`AgentRegistry`].
//!
//! A new run's model comes from `--model`, then `ASKLOOP_MODEL`, then askloop.toml; a stored run's
//! agent from its recorded agent id and model SPEC.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use askloop_core::registry::{AgentRegistry, RegistryError};
use askloop_core::store::RunState;
use askloop_core::testing::ScriptedModel;
use askloop_core::{Agent, AgentId, RunStore};
use askloop_mcp::McpToolset;
use askloop_providers::{ModelSpec, SpecError};
use async_trait::async_trait;
use tokio::sync::OnceCell;

use crate::agent::{Added, AgentDefinition};
use crate::catalogue::{LOCAL_SPEC, ensure_available};
use crate::config::{DEFAULT_AGENT, LoadedConfig};
use crate::env::{MODEL_ENV, env_value};
use crate::exit::{invalid, invalid_because, invalid_error};
use crate::model::{Spec, build_model};
use crate::status::{self, Phase};
use crate::test_hook::TestHooks;

/// An agent built for a model: `(agent id, model SPEC)`.
type AgentKey = (String, String);

/// Which runs a `--model` flag applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FlagScope {
    /// New runs and stored ones (`resume --model`, `runs continue --model`: the flag replaces
    /// the SPEC a run was started with).
    AllRuns,
    /// New runs of agents without a `model` of their own (`serve --model`): stored runs keep
    /// the SPEC they were started with, configured agents their own model.
    NewRuns,
}

/// The model choice of new runs: `--model`, then [`MODEL_ENV`], then askloop.toml. The flag
/// and the variable are parsed once, their relative paths resolved against the current
/// directory; a SPEC that does not parse is an error only for the runs that use it.
#[derive(Clone, Debug)]
struct ModelChoice {
    /// `--model`, parsed.
    flag: Option<Result<Spec, SpecError>>,
    /// Which runs the flag applies to.
    scope: FlagScope,
    /// [`MODEL_ENV`] as set when the registry was made, parsed.
    env: Option<Result<Spec, SpecError>>,
}

/// The agents of a loaded askloop.toml plus the built-in `assistant`.
///
/// An agent is built the first time it is asked for with a model SPEC and kept: later runs
/// with the same agent and SPEC share its model (no rebuild per request), and each agent's
/// MCP servers are connected once, whatever the SPEC. [`ConfigRegistry::close`] closes them.
pub(crate) struct ConfigRegistry {
    /// askloop.toml, or an empty config.
    config: LoadedConfig,
    /// Where the agents keep their runs.
    store: Arc<dyn RunStore>,
    /// The model of new runs.
    model: ModelChoice,
    /// The lease of runs driven here, when not the core's default.
    lease: Option<Duration>,
    /// The test hooks: a pause point around each model, extra tools.
    hooks: TestHooks,
    /// The agents built, by agent id and model SPEC.
    agents: Mutex<HashMap<AgentKey, Arc<OnceCell<Agent>>>>,
    /// The MCP servers connected, by agent id.
    mcp: Mutex<HashMap<String, Arc<OnceCell<McpToolset>>>>,
}

impl std::fmt::Debug for ConfigRegistry {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("ConfigRegistry")
            .field("agents", &self.ids())
            .field("model", &self.model)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

impl ConfigRegistry {
    /// A registry over `config` whose agents keep runs in `store`. `model_flag` is `--model`,
    /// parsed (applying to the runs of `scope`); [`MODEL_ENV`] is read now.
    ///
    /// # Errors
    /// The current directory cannot be read.
    pub(crate) fn new(
        config: LoadedConfig,
        store: Arc<dyn RunStore>,
        model_flag: Option<Result<Spec, SpecError>>,
        scope: FlagScope,
        lease: Option<Duration>,
        hooks: TestHooks,
    ) -> anyhow::Result<Self> {
        let current_dir = std::env::current_dir()?;
        Ok(Self {
            config,
            store,
            model: ModelChoice {
                flag: model_flag,
                scope,
                env: env_value(MODEL_ENV).map(|text| Spec::resolve(&text, &current_dir)),
            },
            lease,
            hooks,
            agents: Mutex::default(),
            mcp: Mutex::default(),
        })
    }

    /// The loaded askloop.toml.
    pub(crate) fn config(&self) -> &LoadedConfig {
        &self.config
    }

    /// The agent ids offered: askloop.toml's `[agents.ID]` and `assistant`, sorted.
    pub(crate) fn ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.config.config.agents.keys().cloned().collect();
        if !ids.iter().any(|id| id == DEFAULT_AGENT) {
            ids.push(DEFAULT_AGENT.to_owned());
        }
        ids.sort();
        ids
    }

    /// The agent `agent_id` for a new run, with the model from `--model`, then
    /// [`MODEL_ENV`], then askloop.toml (the agent's own, else the file's), else the
    /// embedded local model.
    ///
    /// # Errors
    /// Invalid input for an unknown agent, no model or a bad SPEC; the model's and the MCP
    /// servers' errors.
    pub(crate) async fn agent_for_new_run(&self, agent_id: &str) -> anyhow::Result<Agent> {
        let definition = AgentDefinition::find(&self.config, agent_id)?;
        let spec = self.model_spec(None, &definition)?;
        self.built(&definition, spec).await
    }

    /// The agent that drives a stored run: its agent id, with the model SPEC it was started
    /// with (unless `--model` applies to every run, see [`FlagScope`]).
    ///
    /// # Errors
    /// Invalid input when the run's agent is not defined here; the rest as
    /// [`ConfigRegistry::agent_for_new_run`].
    pub(crate) async fn agent_for_stored_run(&self, state: &RunState) -> anyhow::Result<Agent> {
        let definition =
            AgentDefinition::find(&self.config, state.agent_id().as_str()).map_err(|error| {
                invalid_because(
                    format!(
                        "run {} was started by agent {:?}, which is not defined here",
                        state.run_id(),
                        state.agent_id().as_str()
                    ),
                    error,
                )
            })?;
        let spec = self.model_spec(state.model_spec(), &definition)?;
        self.built(&definition, spec).await
    }

    /// The lease of runs driven here, when not the core's default.
    pub(crate) fn lease(&self) -> Option<Duration> {
        self.lease
    }

    /// Checks every agent's definition and the model SPEC of its new runs, building nothing
    /// (no model is loaded, no MCP server started) but reading a `scripted:` SPEC's script,
    /// which is cheap: a missing or broken script is said at once, not at every run.
    ///
    /// # Errors
    /// Invalid input: a bad model SPEC, no model for an agent, a script that cannot be read
    /// or is not a script.
    pub(crate) fn check(&self) -> anyhow::Result<()> {
        for id in self.ids() {
            let definition = AgentDefinition::find(&self.config, &id)?;
            let spec = self.model_spec(None, &definition)?;
            if let ModelSpec::Scripted(path) = spec.parsed() {
                ScriptedModel::from_file(path).map_err(|error| {
                    invalid_because(format!("agent {id:?}: model {}", spec.text()), error)
                })?;
            }
        }
        Ok(())
    }

    /// Closes the MCP servers of the agents built (stdio servers end and are reaped). The
    /// store is its owner's to close.
    pub(crate) async fn close(&self) {
        let toolsets: Vec<Arc<OnceCell<McpToolset>>> = self
            .mcp
            .lock()
            .unwrap_or_else(|error| error.into_inner())
            .drain()
            .map(|(_, cell)| cell)
            .collect();
        for cell in toolsets {
            if let Some(toolset) = cell.get() {
                toolset.close().await;
            }
        }
    }

    /// The SPEC of a run of `definition` that was started with `recorded` (`None` for a new
    /// run).
    fn model_spec(
        &self,
        recorded: Option<&str>,
        definition: &AgentDefinition,
    ) -> anyhow::Result<Spec> {
        let choice = &self.model;
        // `serve --model` is the model of the agents that name none: an `[agents.ID]` with a
        // `model` of its own keeps it.
        let own_model = self
            .config
            .config
            .agents
            .get(&definition.id)
            .is_some_and(|agent| agent.model.is_some());
        let flag_applies = match choice.scope {
            FlagScope::AllRuns => true,
            FlagScope::NewRuns => recorded.is_none() && !own_model,
        };
        if let Some(spec) = choice.flag.as_ref().filter(|_| flag_applies) {
            return spec.clone().map_err(invalid_error);
        }
        if let Some(spec) = recorded {
            return Spec::parse(spec);
        }
        if let Some(spec) = &choice.env {
            return spec.clone().map_err(invalid_error);
        }
        if let Some(spec) = &definition.model {
            return Ok(spec.clone());
        }
        if cfg!(feature = "local") {
            // The embedded model: works offline, with no key and no server.
            return Spec::parse(LOCAL_SPEC);
        }
        Err(invalid(format!(
            "no model is set for agent {:?}: pass --model SPEC (e.g. --model \
             scripted:examples/demo.json), set {MODEL_ENV}, or set `model` in askloop.toml",
            definition.id
        )))
    }

    /// The agent of `definition` on the model `spec`, built on first use.
    async fn built(&self, definition: &AgentDefinition, spec: Spec) -> anyhow::Result<Agent> {
        let cell = {
            let mut agents = self.agents.lock().unwrap_or_else(|e| e.into_inner());
            agents
                .entry((definition.id.clone(), spec.text().to_owned()))
                .or_default()
                .clone()
        };
        let agent = cell
            .get_or_try_init(|| self.build(definition, &spec))
            .await?;
        Ok(agent.clone())
    }

    /// Builds the agent of `definition` on the model `spec`, its sub-agents first (each on
    /// its own model SPEC, see [`ConfigRegistry::subagent_spec`]), all on this registry's one
    /// store. askloop.toml's check refused cycles, so this ends.
    async fn build(&self, definition: &AgentDefinition, spec: &Spec) -> anyhow::Result<Agent> {
        let mut subagents = Vec::with_capacity(definition.subagents.len());
        for id in &definition.subagents {
            let child = AgentDefinition::find(&self.config, id)?;
            let child_spec = Self::subagent_spec(&child, spec);
            subagents.push(Box::pin(self.built(&child, child_spec)).await?);
        }
        ensure_available(spec.parsed()).await?;
        status::set(Phase::LoadingModel);
        self.hooks.at_model_load().await;
        let model = status::observe(self.hooks.wrap_model(build_model(spec).await?));
        let mcp = self.mcp_of(definition).await?;
        let added = Added {
            tools: self.hooks.tools(),
            subagents,
        };
        definition.build(model, spec, self.store.clone(), &mcp, self.lease, added)
    }

    /// The model SPEC of sub-agent `child` of an agent on `parent_spec`: the one askloop.toml
    /// gives it (its own `model`, else the file's), else its parent's. `--model` and
    /// `ASKLOOP_MODEL` choose the model of the run a person starts, not of its sub-agents.
    fn subagent_spec(child: &AgentDefinition, parent_spec: &Spec) -> Spec {
        child.model.clone().unwrap_or_else(|| parent_spec.clone())
    }

    /// The MCP servers of `definition`, connected on first use.
    async fn mcp_of(&self, definition: &AgentDefinition) -> anyhow::Result<McpToolset> {
        let cell = {
            let mut servers = self.mcp.lock().unwrap_or_else(|e| e.into_inner());
            servers.entry(definition.id.clone()).or_default().clone()
        };
        let toolset = cell.get_or_try_init(|| definition.connect_mcp()).await?;
        Ok(toolset.clone())
    }
}

#[async_trait]
impl AgentRegistry for ConfigRegistry {
    fn agent_ids(&self) -> Vec<AgentId> {
        self.ids().into_iter().map(AgentId::from).collect()
    }

    async fn agent(&self, agent_id: &AgentId) -> Result<Agent, RegistryError> {
        self.known(agent_id)?;
        self.agent_for_new_run(agent_id.as_str())
            .await
            .map_err(|error| build_error(agent_id, error))
    }

    async fn agent_for_run(&self, state: &RunState) -> Result<Agent, RegistryError> {
        self.known(state.agent_id())?;
        self.agent_for_stored_run(state)
            .await
            .map_err(|error| build_error(state.agent_id(), error))
    }
}

impl ConfigRegistry {
    /// [`RegistryError::UnknownAgent`] unless `agent_id` is offered here.
    fn known(&self, agent_id: &AgentId) -> Result<(), RegistryError> {
        if self.ids().iter().any(|id| id == agent_id.as_str()) {
            Ok(())
        } else {
            Err(RegistryError::UnknownAgent {
                agent_id: agent_id.clone(),
            })
        }
    }
}

/// A build failure of the agent `agent_id` as core's error.
fn build_error(agent_id: &AgentId, error: anyhow::Error) -> RegistryError {
    RegistryError::Build {
        agent_id: agent_id.clone(),
        source: error.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse;
    use askloop_core::store::MemoryStore;

    fn registry(text: &str, flag: Option<&str>, scope: FlagScope) -> ConfigRegistry {
        let config = LoadedConfig {
            config: parse(text).unwrap(),
            ..LoadedConfig::default()
        };
        ConfigRegistry::new(
            config,
            Arc::new(MemoryStore::new()),
            flag.map(|flag| Spec::resolve(flag, std::path::Path::new("/"))),
            scope,
            None,
            TestHooks::default(),
        )
        .unwrap()
    }

    fn script() -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), r#"{"steps":[{"text":"Hi."}]}"#).unwrap();
        file
    }

    #[tokio::test]
    async fn offers_the_configured_agents_and_the_builtin_one() {
        let registry = registry("[agents.planner]\n", None, FlagScope::AllRuns);
        assert_eq!(
            registry.agent_ids(),
            vec![AgentId::from("assistant"), AgentId::from("planner")]
        );
        let error = registry.agent(&AgentId::from("nobody")).await.unwrap_err();
        assert!(
            matches!(error, RegistryError::UnknownAgent { .. }),
            "{error}"
        );
        assert_eq!(error.code(), "agent_not_found");
    }

    #[tokio::test]
    async fn builds_an_agent_once_per_model_spec() {
        let script = script();
        let spec = format!("scripted:{}", script.path().display());
        let registry = registry("[agents.planner]\n", Some(&spec), FlagScope::NewRuns);
        let first = registry.agent(&AgentId::from("planner")).await.unwrap();
        let second = registry.agent(&AgentId::from("planner")).await.unwrap();
        assert_eq!(first.model_spec(), Some(spec.as_str()));
        assert_eq!(registry.agents.lock().unwrap().len(), 1);
        assert_eq!(first.id(), second.id());
        let error = registry
            .agent(&AgentId::from("assistant"))
            .await
            .map(|_| ());
        assert!(error.is_ok());
        assert_eq!(registry.agents.lock().unwrap().len(), 2);
    }

    #[tokio::test]
    async fn issue35_sub_agents_are_built_first_as_tools_on_their_own_models() {
        let parents = script();
        let own = script();
        let spec = format!("scripted:{}", parents.path().display());
        let own_spec = format!("scripted:{}", own.path().display());
        let registry = registry(
            &format!(
                "[agents.supervisor]\nsubagents = [\"researcher\", \"writer\"]\n\
                 [agents.researcher]\ndescription = \"Finds facts.\"\nmodel = \"{own_spec}\"\n\
                 [agents.writer]\n"
            ),
            Some(&spec),
            FlagScope::NewRuns,
        );
        let supervisor = registry.agent(&AgentId::from("supervisor")).await.unwrap();
        let tools: Vec<(&str, &str)> = supervisor
            .tool_definitions()
            .iter()
            .map(|tool| (tool.name.as_str(), tool.description.as_str()))
            .collect();
        assert!(tools.contains(&("researcher", "Finds facts.")), "{tools:?}");
        assert!(tools.iter().any(|(name, _)| *name == "writer"), "{tools:?}");
        let built: Vec<AgentKey> = registry.agents.lock().unwrap().keys().cloned().collect();
        // The researcher on its own model, the writer on its parent's.
        assert!(
            built.contains(&("researcher".into(), own_spec.clone())),
            "{built:?}"
        );
        assert!(
            built.contains(&("writer".into(), spec.clone())),
            "{built:?}"
        );
        assert_eq!(built.len(), 3, "{built:?}");
    }

    #[tokio::test]
    async fn a_bad_model_is_a_build_error() {
        let registry = registry(
            "",
            Some("scripted:/no/such/script.json"),
            FlagScope::NewRuns,
        );
        let error = registry
            .agent(&AgentId::from("assistant"))
            .await
            .unwrap_err();
        assert!(matches!(error, RegistryError::Build { .. }), "{error}");
        assert_eq!(error.code(), "agent_unavailable");
    }

    #[test]
    fn a_new_runs_flag_leaves_stored_runs_their_spec() {
        let definition = AgentDefinition::find(&LoadedConfig::default(), "assistant").unwrap();
        let new_runs = registry("", Some("openai:gpt-4o"), FlagScope::NewRuns);
        assert_eq!(
            new_runs.model_spec(None, &definition).unwrap().text(),
            "openai:gpt-4o"
        );
        assert_eq!(
            new_runs
                .model_spec(Some("anthropic:claude"), &definition)
                .unwrap()
                .text(),
            "anthropic:claude"
        );
        let all_runs = registry("", Some("openai:gpt-4o"), FlagScope::AllRuns);
        assert_eq!(
            all_runs
                .model_spec(Some("anthropic:claude"), &definition)
                .unwrap()
                .text(),
            "openai:gpt-4o"
        );
    }
}
