//! [`AgentDefinition`]: what the loop needs of an agent (its model, instructions, tools,
//! settings, limits and store), shared by every run of the agent.

use std::sync::Arc;

use crate::ids::AgentId;
use crate::model::{LanguageModel, ModelSettings, ToolDefinition};
use crate::store::RunStore;
use crate::tool::RegisteredTool;

/// An agent as the loop sees it. Built once by `AgentBuilder::build`, never changed after.
pub(crate) struct AgentDefinition {
    pub(crate) id: AgentId,
    pub(crate) name: String,
    pub(crate) instructions: Option<String>,
    pub(crate) model: Arc<dyn LanguageModel>,
    pub(crate) model_spec: Option<String>,
    pub(crate) tools: Vec<RegisteredTool>,
    pub(crate) tool_definitions: Vec<ToolDefinition>,
    pub(crate) max_steps: u32,
    pub(crate) settings: ModelSettings,
    pub(crate) store: Arc<dyn RunStore>,
}

impl AgentDefinition {
    /// The registered tool with this name.
    pub(crate) fn tool(&self, name: &str) -> Option<&RegisteredTool> {
        self.tools
            .iter()
            .find(|tool| tool.definition().name == name)
    }

    /// The names of the agent's tools, in registration order.
    pub(crate) fn tool_names(&self) -> Vec<String> {
        self.tool_definitions
            .iter()
            .map(|tool| tool.name.clone())
            .collect()
    }
}
