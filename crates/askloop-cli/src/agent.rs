//! Agent definitions: the built-in `assistant`, or an `[agents.ID]` of askloop.toml, and
//! building an [`Agent`] from one.

use std::collections::BTreeMap;
use std::sync::Arc;

use askloop_core::model::{LanguageModel, ModelSettings, ToolChoice};
use askloop_core::{Agent, AgentBuilder, ApproverPolicy, AskUser, DynTool, RunStore, Tool};

use askloop_mcp::{McpError, McpServerConfig, McpToolset};

use crate::config::{AgentConfig, DEFAULT_AGENT, LoadedConfig};
use crate::exit::invalid;
use crate::model::{Spec, resolve_spec};

/// Instructions of the built-in agent: ask about the request itself, then answer with what
/// the answer said (core's text, which `askloop-bench local` sends too).
const DEFAULT_INSTRUCTIONS: &str = AskUser::ASK_FIRST_INSTRUCTIONS;

/// The question budget of the built-in agent on the local model, unless set: one question,
/// and one more if the model needs it. Small local models otherwise keep asking.
pub(crate) const LOCAL_MAX_QUESTIONS: u32 = 2;

/// Everything needed to build an agent except its model and store.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct AgentDefinition {
    /// The agent's id.
    pub(crate) id: String,
    /// Display name.
    pub(crate) name: Option<String>,
    /// What the agent does: its tool's description when another agent offers it as a
    /// sub-agent.
    pub(crate) description: Option<String>,
    /// The system prompt.
    pub(crate) instructions: Option<String>,
    /// The ids of the agents offered to this one as tools (`subagents`).
    pub(crate) subagents: Vec<String>,
    /// The model SPEC from askloop.toml (the agent's own, else the file's), resolved.
    pub(crate) model: Option<Spec>,
    /// Built-in tool names.
    pub(crate) tools: Vec<String>,
    /// Step limit per run.
    pub(crate) max_steps: Option<u32>,
    /// Question budget per run, as configured.
    pub(crate) max_questions: Option<u32>,
    /// Sampling and tool-choice settings.
    pub(crate) settings: ModelSettings,
    /// MCP servers by name (stdio servers run in askloop.toml's folder). Their
    /// `require_approval` is on each tool ([`askloop_mcp::McpTool::requires_approval`]).
    pub(crate) mcp: BTreeMap<String, McpServerConfig>,
    /// The agent's own approval rule (besides its MCP servers').
    pub(crate) require_approval: askloop_mcp::RequireApproval,
    /// Whether `ask_user`'s select questions also take the person's own words, as
    /// configured; unset, see [`AgentDefinition::allow_other_for`].
    pub(crate) allow_other: Option<bool>,
    /// Each question's deadline, if any.
    pub(crate) question_timeout: Option<std::time::Duration>,
    /// How long a call waits for its approval, if it has a deadline.
    pub(crate) approval_timeout: Option<std::time::Duration>,
    /// Who may approve the agent's calls (`roles`, `self_approval`, `quorum`), if it says.
    pub(crate) approvers: Option<ApproverPolicy>,
    /// Per tool, who may approve its calls and answer its questions
    /// (`[agents.ID.approvers.TOOL]`).
    pub(crate) tool_approvers: Vec<(String, ApproverPolicy)>,
}

/// What an agent is built with besides its definition, model, store and MCP servers.
#[derive(Default)]
pub(crate) struct Added {
    /// Tools every agent gets (the test hooks').
    pub(crate) tools: Vec<Arc<dyn DynTool>>,
    /// Its sub-agents, built already, on the agent's store, in the order of `subagents`.
    pub(crate) subagents: Vec<Agent>,
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
    fn builtin(model: Option<Spec>) -> Self {
        Self {
            id: DEFAULT_AGENT.to_owned(),
            name: Some("Assistant".to_owned()),
            description: None,
            instructions: Some(DEFAULT_INSTRUCTIONS.to_owned()),
            subagents: Vec::new(),
            model,
            tools: vec![AskUser::NAME.to_owned()],
            max_steps: None,
            max_questions: None,
            settings: ModelSettings::default(),
            mcp: BTreeMap::new(),
            require_approval: askloop_mcp::RequireApproval::None,
            allow_other: None,
            question_timeout: None,
            approval_timeout: None,
            approvers: None,
            tool_approvers: Vec::new(),
        }
    }

    fn from_config(
        loaded: &LoadedConfig,
        id: &str,
        agent: &AgentConfig,
        file_model: Option<Spec>,
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
            description: agent.description.clone(),
            instructions: agent.instructions.clone(),
            subagents: agent
                .subagent_ids()
                .into_iter()
                .map(str::to_owned)
                .collect(),
            model,
            tools: agent.tool_names(),
            max_steps: agent.max_steps,
            max_questions: agent.max_questions,
            settings,
            mcp: agent
                .mcp
                .iter()
                .map(|(name, server)| {
                    let server = server.clone().with_working_dir(&loaded.base_dir);
                    (name.clone(), server)
                })
                .collect(),
            require_approval: agent
                .require_approval
                .clone()
                .unwrap_or(askloop_mcp::RequireApproval::None),
            allow_other: agent.allow_other,
            question_timeout: agent
                .question_timeout_seconds
                .map(std::time::Duration::from_secs),
            approval_timeout: agent.approval_timeout.map(|timeout| timeout.0),
            approvers: agent.approver_policy(),
            tool_approvers: agent
                .approvers
                .iter()
                .map(|(tool, config)| (tool.clone(), config.policy().unwrap_or_default()))
                .collect(),
        })
    }

    /// The model settings used with the model `spec`. On the embedded local model an agent
    /// with `ask_user` is made to ask first (`first_step_tool_choice = { tool = "ask_user" }`),
    /// since small models, left to choose, often answer in text at once (the 135M one always
    /// does), unless the agent sets `first_step_tool_choice` itself or `tool_choice = "none"`.
    pub(crate) fn settings_for(&self, spec: &Spec) -> ModelSettings {
        let mut settings = self.settings.clone();
        let local = spec.is_local();
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

    /// Starts or reaches the agent's MCP servers and lists their tools (none for an agent
    /// without `mcp` tables). Runs record only the agent's id, so a resume in another process
    /// rebuilds the agent from askloop.toml and so connects to the same servers again.
    ///
    /// # Errors
    /// [`askloop_mcp::McpError`]: a server that does not start, a failed handshake; invalid
    /// input for a `require_approval` naming a tool the server lacks or a tool name offered
    /// twice.
    pub(crate) async fn connect_mcp(&self) -> anyhow::Result<McpToolset> {
        match McpToolset::connect(&self.mcp).await {
            Ok(toolset) => Ok(toolset),
            Err(
                error @ (McpError::UnknownApprovalTools { .. } | McpError::DuplicateTool { .. }),
            ) => Err(invalid(format!("agent {:?}: {error}", self.id))),
            Err(error) => Err(error.into()),
        }
    }

    /// The question budget with the model `spec`: the configured `max_questions`; else, for
    /// the built-in agent (also when an `[agents.assistant]` table changes it) on the embedded
    /// local model, [`LOCAL_MAX_QUESTIONS`]; else none.
    pub(crate) fn max_questions_for(&self, spec: &Spec) -> Option<u32> {
        let local = spec.is_local();
        self.max_questions
            .or((local && self.id == DEFAULT_AGENT).then_some(LOCAL_MAX_QUESTIONS))
    }

    /// Whether `ask_user`'s select questions take the person's own words with the model
    /// `spec`: the configured `allow_other`; else yes for the built-in agent (also when an
    /// `[agents.assistant]` table changes it) and for any agent on the embedded local model,
    /// whose options often miss the person's answer; else no.
    pub(crate) fn allow_other_for(&self, spec: &Spec) -> bool {
        self.allow_other
            .unwrap_or(self.id == DEFAULT_AGENT || spec.is_local())
    }

    /// Builds the agent with this model (recording `spec` with its runs), store, the tools
    /// of its MCP servers, the lease duration (the core's default when `None`) and `added`
    /// tools (the test hooks') and sub-agents (built already, on the same `store`).
    ///
    /// # Errors
    /// Invalid input for an unknown tool; the builder's errors (a sub-agent on another store,
    /// sub-agents nested too deep).
    pub(crate) fn build(
        &self,
        model: Arc<dyn LanguageModel>,
        spec: &Spec,
        store: Arc<dyn RunStore>,
        mcp: &McpToolset,
        lease: Option<std::time::Duration>,
        added: Added,
    ) -> anyhow::Result<Agent> {
        let Added {
            tools: extra,
            subagents,
        } = added;
        let settings = self.settings_for(spec);
        let mut builder = Agent::builder(self.id.as_str())
            .shared_model(model)
            .model_spec(spec.text())
            .shared_store(store)
            .settings(settings);
        if let Some(name) = &self.name {
            builder = builder.name(name);
        }
        if let Some(description) = &self.description {
            builder = builder.description(description);
        }
        if let Some(instructions) = &self.instructions {
            builder = builder.instructions(instructions);
        }
        if let Some(max_steps) = self.max_steps {
            builder = builder.max_steps(max_steps);
        }
        if let Some(lease) = lease {
            builder = builder.lease(lease);
        }
        if let Some(max_questions) = self.max_questions_for(spec) {
            builder = builder.max_questions(max_questions);
        }
        if let Some(timeout) = self.approval_timeout {
            builder = builder.approval_timeout(timeout);
        }
        for name in &self.tools {
            builder = builder.shared_tool(self.builtin_tool(name, spec)?);
        }
        let mcp_tools = mcp.dyn_tools();
        builder = self.approval_rules(builder, &mcp_tools, &extra)?;
        for tool in mcp_tools {
            builder = builder.shared_tool(tool);
        }
        for tool in extra {
            builder = builder.shared_tool(tool);
        }
        for subagent in subagents {
            builder = builder.subagent(subagent);
        }
        Ok(builder.build()?)
    }

    /// `builder` with the agent's approval rules: which tools wait for approval
    /// (`require_approval`, checked against the tools it has: its own, its MCP servers'
    /// `mcp_tools`, and `extra`) and who may approve (`approvers`, per tool too).
    ///
    /// # Errors
    /// Invalid input naming tools the agent does not have, or that need no approval.
    fn approval_rules(
        &self,
        mut builder: AgentBuilder,
        mcp_tools: &[Arc<dyn DynTool>],
        extra: &[Arc<dyn DynTool>],
    ) -> anyhow::Result<AgentBuilder> {
        if let askloop_mcp::RequireApproval::Only(names) = &self.require_approval {
            // A name that is not one of the agent's tools would let the tool it meant run
            // without approval; `ask_user` only asks, so it never waits for an approval.
            let known: Vec<String> = self
                .tools
                .iter()
                .cloned()
                .chain(mcp_tools.iter().map(|tool| tool.name().to_owned()))
                .filter(|name| name != AskUser::NAME)
                .collect();
            let unknown: Vec<&str> = names
                .iter()
                .map(String::as_str)
                .filter(|name| !known.iter().any(|known| known == name))
                .collect();
            if !unknown.is_empty() {
                return Err(invalid(format!(
                    "agent {}: require_approval names tools that need no approval or that it does not have: {}; its tools that can require approval: {}",
                    self.id,
                    unknown.join(", "),
                    if known.is_empty() {
                        "none".to_owned()
                    } else {
                        known.join(", ")
                    }
                )));
            }
        }
        builder = match &self.require_approval {
            askloop_mcp::RequireApproval::All => builder.require_approval(true),
            askloop_mcp::RequireApproval::None => builder,
            askloop_mcp::RequireApproval::Only(names) => names
                .iter()
                .fold(builder, |builder, name| builder.require_approval_for(name)),
        };
        let unknown: Vec<&str> = self
            .tool_approvers
            .iter()
            .map(|(name, _)| name.as_str())
            .filter(|name| {
                !self.tools.iter().any(|tool| tool == name)
                    && !mcp_tools.iter().any(|tool| tool.name() == *name)
                    && !extra.iter().any(|tool| tool.name() == *name)
            })
            .collect();
        if !unknown.is_empty() {
            return Err(invalid(format!(
                "agent {}: [agents.{}.approvers.TOOL] names tools it does not have: {}",
                self.id,
                self.id,
                unknown.join(", ")
            )));
        }
        if let Some(policy) = &self.approvers {
            builder = builder.approvers(policy.clone());
        }
        for (tool, policy) in &self.tool_approvers {
            builder = builder.approvers_for(tool, policy.clone());
        }
        Ok(builder)
    }
}

impl AgentDefinition {
    /// A built-in tool by name, with this agent's settings on the model `spec`.
    fn builtin_tool(&self, name: &str, spec: &Spec) -> anyhow::Result<Arc<dyn DynTool>> {
        match name {
            name if name == AskUser::NAME => {
                let mut ask_user = AskUser::new().allow_other(self.allow_other_for(spec));
                if let Some(timeout) = self.question_timeout {
                    ask_user = ask_user.timeout(timeout);
                }
                Ok(Arc::new(ask_user))
            }
            other => Err(invalid(format!(
                "unknown tool {other:?}; known tools: {}",
                crate::config::KNOWN_TOOLS.join(", ")
            ))),
        }
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

    fn spec(text: &str) -> Spec {
        Spec::parse(text).unwrap()
    }

    fn ask_first() -> Option<ToolChoice> {
        Some(ToolChoice::Tool(AskUser::NAME.to_owned()))
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
            planner.settings_for(&spec("local")).first_step_tool_choice,
            ask_first()
        );
        assert_eq!(
            planner
                .settings_for(&spec("local:/models/x.gguf"))
                .first_step_tool_choice,
            ask_first()
        );
        assert_eq!(
            planner
                .settings_for(&spec("openai:gpt-4o"))
                .first_step_tool_choice,
            None
        );
        let chooser = AgentDefinition::find(&config, "chooser").unwrap();
        assert_eq!(
            chooser.settings_for(&spec("local")).first_step_tool_choice,
            Some(ToolChoice::Auto)
        );
        for id in ["silent", "quiet"] {
            let agent = AgentDefinition::find(&config, id).unwrap();
            assert_eq!(
                agent.settings_for(&spec("local")).first_step_tool_choice,
                None,
                "{id}"
            );
        }
        let builtin = AgentDefinition::find(&LoadedConfig::default(), DEFAULT_AGENT).unwrap();
        assert_eq!(
            builtin.settings_for(&spec("local")).first_step_tool_choice,
            ask_first()
        );
    }

    #[test]
    fn issue8_the_builtin_agent_on_the_local_model_has_a_question_budget() {
        let builtin = AgentDefinition::find(&LoadedConfig::default(), DEFAULT_AGENT).unwrap();
        assert_eq!(
            builtin.max_questions_for(&spec("local")),
            Some(LOCAL_MAX_QUESTIONS)
        );
        assert_eq!(
            builtin.max_questions_for(&spec("local:/models/small.gguf")),
            Some(LOCAL_MAX_QUESTIONS)
        );
        assert_eq!(builtin.max_questions_for(&spec("openai:gpt-4o")), None);
        let config = loaded(
            "[agents.assistant]\nmax_questions = 5\n[agents.planner]\n[agents.terse]\nmax_questions = 1\n",
        );
        let assistant = AgentDefinition::find(&config, DEFAULT_AGENT).unwrap();
        assert_eq!(assistant.max_questions_for(&spec("local")), Some(5));
        let planner = AgentDefinition::find(&config, "planner").unwrap();
        assert_eq!(planner.max_questions_for(&spec("local")), None);
        let terse = AgentDefinition::find(&config, "terse").unwrap();
        assert_eq!(terse.max_questions_for(&spec("openai:gpt-4o")), Some(1));
        let agent = terse
            .build(
                Arc::new(askloop_core::testing::ScriptedModel::from_steps(vec![])),
                &spec("openai:gpt-4o"),
                Arc::new(askloop_core::store::MemoryStore::new()),
                &McpToolset::default(),
                None,
                Added::default(),
            )
            .unwrap();
        assert_eq!(agent.max_questions(), Some(1));
    }

    #[test]
    fn issue33_own_words_are_welcome_by_default_for_the_builtin_agent_and_the_local_model() {
        let builtin = AgentDefinition::find(&LoadedConfig::default(), DEFAULT_AGENT).unwrap();
        assert!(builtin.allow_other_for(&spec("local")));
        assert!(builtin.allow_other_for(&spec("openai:gpt-4o")));
        let config = loaded(
            "[agents.assistant]\nallow_other = false\n[agents.planner]\n[agents.open]\nallow_other = true\n",
        );
        let assistant = AgentDefinition::find(&config, DEFAULT_AGENT).unwrap();
        assert!(!assistant.allow_other_for(&spec("local")));
        let planner = AgentDefinition::find(&config, "planner").unwrap();
        assert!(planner.allow_other_for(&spec("local")));
        assert!(!planner.allow_other_for(&spec("openai:gpt-4o")));
        let open = AgentDefinition::find(&config, "open").unwrap();
        assert!(open.allow_other_for(&spec("anthropic:claude")));
    }

    #[test]
    fn issue31_an_agent_table_sets_the_approval_timeout_also_for_the_builtin_agent() {
        let config = loaded(
            "[agents.assistant]\napproval_timeout = \"1h\"\n[agents.ops]\napproval_timeout = \"10m\"\n[agents.plain]\n",
        );
        let hour = Some(std::time::Duration::from_secs(3600));
        let assistant = AgentDefinition::find(&config, DEFAULT_AGENT).unwrap();
        assert_eq!(assistant.approval_timeout, hour);
        assert_eq!(
            assistant.instructions.as_deref(),
            Some(DEFAULT_INSTRUCTIONS)
        );
        let ops = AgentDefinition::find(&config, "ops").unwrap();
        assert_eq!(
            ops.approval_timeout,
            Some(std::time::Duration::from_secs(600))
        );
        let plain = AgentDefinition::find(&config, "plain").unwrap();
        assert_eq!(plain.approval_timeout, None);
        let builtin = AgentDefinition::find(&LoadedConfig::default(), DEFAULT_AGENT).unwrap();
        assert_eq!(builtin.approval_timeout, None);
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
