//! Where a front end finds the agent for a new run, and the agent that drives a stored one.
//!
//! A server or a CLI holds an [`AgentRegistry`]: [`AgentRegistry::agent`] gives the agent
//! of a new run by id, [`AgentRegistry::agent_for_run`] the agent that resumes a stored run
//! (the run's agent id, built with the model the run was started with, which may differ from
//! the one new runs get). [`AgentSet`] is the registry of agents built up front; askloop's CLI
//! implements one over askloop.toml that builds agents on demand.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;

use crate::store::RunState;
use crate::{Agent, AgentId};

/// Why a registry gave no agent.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// No agent has this id.
    #[error("unknown agent {agent_id:?}")]
    UnknownAgent {
        /// The id asked for.
        agent_id: AgentId,
    },
    /// The agent is defined but could not be built (its model, its tools).
    #[error("agent {agent_id:?} could not be built: {source}")]
    Build {
        /// The agent's id.
        agent_id: AgentId,
        /// What failed.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl RegistryError {
    /// A stable code for the error kind: `agent_not_found` or `agent_unavailable`.
    pub fn code(&self) -> &'static str {
        match self {
            Self::UnknownAgent { .. } => "agent_not_found",
            Self::Build { .. } => "agent_unavailable",
        }
    }
}

/// The agents a front end offers.
#[async_trait]
pub trait AgentRegistry: Send + Sync {
    /// The ids of the agents offered, in a stable order.
    fn agent_ids(&self) -> Vec<AgentId>;

    /// The agent that starts new runs under this id.
    ///
    /// # Errors
    /// [`RegistryError::UnknownAgent`]; [`RegistryError::Build`].
    async fn agent(&self, agent_id: &AgentId) -> Result<Agent, RegistryError>;

    /// The agent that drives this stored run: by default the agent of its id. A registry that
    /// builds agents from specs builds the run's with the model spec it was started with
    /// ([`RunState::model_spec`]).
    ///
    /// # Errors
    /// As [`AgentRegistry::agent`].
    async fn agent_for_run(&self, state: &RunState) -> Result<Agent, RegistryError> {
        self.agent(state.agent_id()).await
    }
}

#[async_trait]
impl<R: AgentRegistry + ?Sized> AgentRegistry for Arc<R> {
    fn agent_ids(&self) -> Vec<AgentId> {
        (**self).agent_ids()
    }
    async fn agent(&self, agent_id: &AgentId) -> Result<Agent, RegistryError> {
        (**self).agent(agent_id).await
    }
    async fn agent_for_run(&self, state: &RunState) -> Result<Agent, RegistryError> {
        (**self).agent_for_run(state).await
    }
}

/// A registry of agents built up front, by id.
///
/// ```
/// use askloop_core::registry::{AgentRegistry, AgentSet};
/// use askloop_core::testing::ScriptedModel;
/// use askloop_core::{Agent, AskUser};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let model = ScriptedModel::from_json(r#"{"steps":[{"text":"Hi."}]}"#)?;
/// let agent = Agent::builder("assistant").model(model).tool(AskUser::new()).build()?;
/// let agents = AgentSet::new().with(agent);
/// assert_eq!(agents.agent_ids(), vec!["assistant".into()]);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, Default)]
pub struct AgentSet {
    agents: BTreeMap<AgentId, Agent>,
}

impl AgentSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) the agent of its id.
    #[must_use]
    pub fn with(mut self, agent: Agent) -> Self {
        self.insert(agent);
        self
    }

    /// Adds (or replaces) the agent of its id.
    pub fn insert(&mut self, agent: Agent) {
        self.agents.insert(agent.id().clone(), agent);
    }
}

#[async_trait]
impl AgentRegistry for AgentSet {
    fn agent_ids(&self) -> Vec<AgentId> {
        self.agents.keys().cloned().collect()
    }

    async fn agent(&self, agent_id: &AgentId) -> Result<Agent, RegistryError> {
        self.agents
            .get(agent_id)
            .cloned()
            .ok_or_else(|| RegistryError::UnknownAgent {
                agent_id: agent_id.clone(),
            })
    }
}
