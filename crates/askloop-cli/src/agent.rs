//! Agent definitions: the built-in `assistant`, or an `[agents.ID]` of askloop.toml, and
//! building an [`Agent`] from one.

use std::sync::Arc;

use askloop_core::model::{LanguageModel, ModelSettings, ToolChoice};
use askloop_core::{Agent, AskUser, DynTool, RunStore, Tool};

use askloop_providers::ModelSpec;

use crate::config::{AgentConfig, LoadedConfig};
use crate::exit::invalid;
use crate::model::resolve_spec;

/// The id of the built-in agent.
pub(crate) const DEFAULT_AGENT: &str = "assistant";

/// Instructions of the built-in agent.
const DEFAULT_INSTRUCTIONS: &str = "You are a helpful assistant. When a request is ambiguous, \
or you need a fact or a preference only the user has, do not guess: call the ask_user tool. \
Offer options (selectionMode single_select, or multi_select when several may apply) when the \
answers are a known set; ask a free-text question otherwise. Ask one question at a time, then \
answer with what you learned.";

/// Everything needed to build an agent except its model and store.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct AgentDefinition {
    /// The agent's id.
    pub(crate) id: String,
    /// Display name.
    pub(crate) name: Option<String>,
    /// The system prompt.
    pub(crate) instructions: Option<String>,
    /// The model SPEC from askloop.toml (the agent's own, else the file's), resolved.
    pub(crate) model: Option<String>,
    /// Built-in tool names.
    pub(crate) tools: Vec<String>,
    /// Step limit per run.
    pub(crate) max_steps: Option<u32>,
    /// Sampling and tool-choice settings.
    pub(crate) settings: ModelSettings,
}

impl AgentDefinition {
    /// The agent `id`: askloop.toml's `[agents.ID]`, or the built-in `assistant`. An
    /// `[agents.assistant]` table changes the built-in agent: what it does not set (name,
    /// instructions) stays the built-in's.
    ///
    /// # Errors
    /// Invalid input: an unknown id (the message lists the known ones), or a bad model SPEC in
    /// the file.
    pub(crate) fn find(loaded: &LoadedConfig, id: &str) -> anyhow::Result<Self> {
        let file_model = loaded
            .config
            .model
            .as_deref()
            .map(|spec| resolve_spec(spec, &loaded.base_dir))
            .transpose()?;
        match loaded.config.agents.get(id) {
            Some(agent) => {
                let mut definition = Self::from_config(loaded, id, agent, file_model)?;
                if id == DEFAULT_AGENT {
                    let builtin = Self::builtin(None);
                    definition.name = definition.name.or(builtin.name);
                    definition.instructions = definition.instructions.or(builtin.instructions);
                }
                Ok(definition)
            }
            None if id == DEFAULT_AGENT => Ok(Self::builtin(file_model)),
            None => {
                let mut known: Vec<&str> =
                    loaded.config.agents.keys().map(String::as_str).collect();
                if !known.contains(&DEFAULT_AGENT) {
                    known.push(DEFAULT_AGENT);
                }
                let source = match &loaded.path {
                    Some(path) => format!("in {}", path.display()),
                    None => "(no askloop.toml here; pass --config PATH)".to_owned(),
                };
                Err(invalid(format!(
                    "unknown agent {id:?} {source}; known agents: {}",
                    known.join(", ")
                )))
            }
        }
    }

    /// The built-in `assistant` with this model SPEC.
    fn builtin(model: Option<String>) -> Self {
        Self {
            id: DEFAULT_AGENT.to_owned(),
            name: Some("Assistant".to_owned()),
            instructions: Some(DEFAULT_INSTRUCTIONS.to_owned()),
            model,
            tools: vec![AskUser::NAME.to_owned()],
            max_steps: None,
            settings: ModelSettings::default(),
        }
    }

    fn from_config(
        loaded: &LoadedConfig,
        id: &str,
        agent: &AgentConfig,
        file_model: Option<String>,
    ) -> anyhow::Result<Self> {
        let model = match &agent.model {
            Some(spec) => Some(resolve_spec(spec, &loaded.base_dir)?),
            None => file_model,
        };
        let mut settings = ModelSettings::new();
        settings.temperature = agent.temperature;
        settings.top_p = agent.top_p;
        settings.max_tokens = agent.max_tokens;
        settings.seed = agent.seed;
        settings.tool_choice = agent
            .tool_choice
            .clone()
            .map(|choice| choice.0)
            .unwrap_or_default();
        settings.first_step_tool_choice =
            agent.first_step_tool_choice.clone().map(|choice| choice.0);
        Ok(Self {
            id: id.to_owned(),
            name: agent.name.clone(),
            instructions: agent.instructions.clone(),
            model,
            tools: agent.tool_names(),
            max_steps: agent.max_steps,
            settings,
        })
    }

    /// The model settings used with the model `spec`. On the embedded local model an agent
    /// with `ask_user` is made to ask first (`first_step_tool_choice = { tool = "ask_user" }`),
    /// since at 135M parameters that model, left to choose, always answers in text, unless the
    /// agent sets `first_step_tool_choice` itself or `tool_choice = "none"`.
    pub(crate) fn settings_for(&self, spec: &str) -> ModelSettings {
        let mut settings = self.settings.clone();
        let local = matches!(ModelSpec::parse(spec), Ok(ModelSpec::Local(_)));
        let asks = self.tools.iter().any(|tool| tool == AskUser::NAME);
        if local
            && asks
            && settings.first_step_tool_choice.is_none()
            && settings.tool_choice != ToolChoice::None
        {
            settings.first_step_tool_choice = Some(ToolChoice::Tool(AskUser::NAME.to_owned()));
        }
        settings
    }

    /// Builds the agent with this model (recording `spec` with its runs) and store.
    ///
    /// # Errors
    /// Invalid input for an unknown tool; the builder's errors.
    pub(crate) fn build(
        &self,
        model: Arc<dyn LanguageModel>,
        spec: &str,
        store: Arc<dyn RunStore>,
    ) -> anyhow::Result<Agent> {
        let settings = self.settings_for(spec);
        let mut builder = Agent::builder(self.id.as_str())
            .shared_model(model)
            .model_spec(spec)
            .shared_store(store)
            .settings(settings);
        if let Some(name) = &self.name {
            builder = builder.name(name);
        }
        if let Some(instructions) = &self.instructions {
            builder = builder.instructions(instructions);
        }
        if let Some(max_steps) = self.max_steps {
            builder = builder.max_steps(max_steps);
        }
        for name in &self.tools {
            builder = builder.shared_tool(builtin_tool(name)?);
        }
        Ok(builder.build()?)
    }
}

/// A built-in tool by name.
fn builtin_tool(name: &str) -> anyhow::Result<Arc<dyn DynTool>> {
    match name {
        "ask_user" => Ok(Arc::new(AskUser)),
        other => Err(invalid(format!(
            "unknown tool {other:?}; known tools: {}",
            crate::config::KNOWN_TOOLS.join(", ")
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse;

    fn loaded(text: &str) -> LoadedConfig {
        LoadedConfig {
            config: parse(text).unwrap(),
            ..LoadedConfig::default()
        }
    }

    fn ask_first() -> Option<ToolChoice> {
        Some(ToolChoice::Tool("ask_user".to_owned()))
    }

    #[test]
    fn issue7_fault11_configured_agents_on_the_local_model_ask_first() {
        let config = loaded(
            r#"
            [agents.planner]
            instructions = "Plan."
            [agents.chooser]
            first_step_tool_choice = "auto"
            [agents.silent]
            tools = []
            [agents.quiet]
            tool_choice = "none"
            "#,
        );
        let planner = AgentDefinition::find(&config, "planner").unwrap();
        assert_eq!(
            planner.settings_for("local").first_step_tool_choice,
            ask_first()
        );
        assert_eq!(
            planner
                .settings_for("local:/models/x.gguf")
                .first_step_tool_choice,
            ask_first()
        );
        assert_eq!(
            planner.settings_for("openai:gpt-4o").first_step_tool_choice,
            None
        );
        let chooser = AgentDefinition::find(&config, "chooser").unwrap();
        assert_eq!(
            chooser.settings_for("local").first_step_tool_choice,
            Some(ToolChoice::Auto)
        );
        for id in ["silent", "quiet"] {
            let agent = AgentDefinition::find(&config, id).unwrap();
            assert_eq!(
                agent.settings_for("local").first_step_tool_choice,
                None,
                "{id}"
            );
        }
        let builtin = AgentDefinition::find(&LoadedConfig::default(), DEFAULT_AGENT).unwrap();
        assert_eq!(
            builtin.settings_for("local").first_step_tool_choice,
            ask_first()
        );
    }

    #[test]
    fn issue7_fault4_an_assistant_table_changes_only_what_it_sets() {
        let config = loaded("[agents.assistant]\nmax_steps = 20\n");
        let assistant = AgentDefinition::find(&config, DEFAULT_AGENT).unwrap();
        assert_eq!(assistant.max_steps, Some(20));
        assert_eq!(
            assistant.instructions.as_deref(),
            Some(DEFAULT_INSTRUCTIONS)
        );
        assert_eq!(assistant.tools, ["ask_user"]);
    }
}
