//! `askloop.toml`: the optional agents file (current directory, or `--config PATH`).
//!
//! ```toml
//! model = "scripted:examples/demo.json"   # default model SPEC of every agent
//! store = "sqlite://askloop.db"           # default store URL
//!
//! [agents.planner]
//! name = "Trip planner"
//! description = "Plans trips."              # its tool's description when another agent uses it
//! instructions = "Plan trips. Ask when something is unclear."
//! subagents = ["researcher"]              # other agents of this file it may delegate to
//! model = "scripted:planner.json"         # overrides the top-level model
//! tools = ["ask_user"]                    # the default; the only built-in tool now
//! max_steps = 8
//! max_questions = 2                       # questions (ask_user calls) per run; see below
//! temperature = 0.2
//! top_p = 0.9
//! max_tokens = 1024
//! seed = 7
//! tool_choice = "auto"                    # "auto" | "required" | "none" | { tool = "ask_user" }
//! first_step_tool_choice = { tool = "ask_user" }
//! require_approval = false                # true (every tool but ask_user) | ["tool", …]
//! allow_other = true                      # select questions also take the person's own words
//! question_timeout_seconds = 86400        # questions expire after this (`askloop runs sweep`)
//! approval_timeout = "1h"                 # approvals expire after this ("90s", "30m", "2h 30m", "1d")
//! roles = ["ops"]                         # who may approve: an actor holding one of these roles
//! self_approval = false                   # whoever started the run may not approve its calls
//! quorum = 2                              # distinct approvers a call needs; one decline declines
//!
//! [agents.planner.approvers.book_flight]  # one tool's own policy (wins over the agent's);
//! roles = ["finance"]                     # it also gates answers to that tool's questions
//! quorum = 1
//!
//! [agents.planner.mcp.fs]                 # an MCP server whose tools the agent gets
//! command = ["npx", "-y", "@modelcontextprotocol/server-filesystem", "/srv/notes"]
//! require_approval = ["write_file"]       # or true (the default) / false
//!
//! [server]                                # `askloop serve`
//! allowed_hosts = ["askloop.example.com"] # names it answers to besides loopback (--allowed-host)
//! cors_origins = ["https://app.example.com"]  # pages that may call it (--cors-origin)
//! public_url = "https://askloop.example.com"  # answer links start with it (--public-url)
//! answer_link_max_hours = 24              # answer links live at most this long
//!
//! [[server.keys]]                         # an API key of `askloop serve` (`askloop keys new`)
//! hash = "<SHA-256 of the secret, hex>"
//! resource = "tenant-a"                   # the tenant whose runs the key sees
//! agents = ["planner"]                    # optional: the agents it may use
//! label = "alice"                         # optional: its name in the audit (default: resource)
//! roles = ["ops"]                         # optional: the roles it holds (approver policies)
//!
//! [cli]                                   # who the terminal acts as: `cli:$USER` (or --as NAME)
//! roles = ["ops"]                         # the roles it holds (none unless given here)
//!
//! [[webhooks]]                            # `askloop serve` and `askloop runs sweep` deliver
//! url = "https://hooks.example.com/askloop"
//! secret = "whsec_…"                      # Standard Webhooks secret (base64 of 24–64 bytes)
//! events = ["question.raised"]            # optional: default every event
//! resource = "tenant-a"                   # optional: only this tenant's runs
//! format = "standard"                     # or "slack" (an incoming-webhook message)
//! ```
//!
//! `max_questions` is the run's question budget: once spent, `ask_user` is no longer offered
//! and the model must answer in text. Without it there is no budget, except for the built-in
//! agent on the local model (see [`crate::agent::AgentDefinition::max_questions_for`]).
//!
//! `subagents` offers each named agent (of this file, or the built-in `assistant`) to the agent
//! as a tool named by its id: a call starts a child run of that agent, whose questions and
//! approvals wait at the root run. A cycle (`a` → `b` → `a`), an unknown id, or nesting deeper
//! than [`askloop_core::DEFAULT_MAX_SUBAGENT_DEPTH`] levels is an error naming the path
//! ([`subagent_problems`]).
//!
//! Unknown keys are errors. Relative paths in `model` and `store` are relative to the file's
//! folder. `[agents.assistant]` changes the built-in agent (see
//! [`crate::agent::AgentDefinition::find`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use askloop_core::model::ToolChoice;
use serde::Deserialize;

use askloop_core::{AskUser, Tool as _, is_blank};

use crate::exit::{invalid, invalid_because};

/// The file looked for in the current directory when `--config` is not given.
pub(crate) const DEFAULT_CONFIG_FILE: &str = "askloop.toml";

/// The id of the built-in agent (which an `[agents.assistant]` table changes).
pub(crate) const DEFAULT_AGENT: &str = "assistant";

/// The built-in tools an agent may list in `tools`.
pub(crate) const KNOWN_TOOLS: [&str; 1] = [AskUser::NAME];

/// The parsed file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Config {
    /// Default model SPEC.
    #[serde(default)]
    pub(crate) model: Option<String>,
    /// Default store URL.
    #[serde(default)]
    pub(crate) store: Option<String>,
    /// Agents by id.
    #[serde(default)]
    pub(crate) agents: BTreeMap<String, AgentConfig>,
    /// `askloop serve`'s settings.
    #[serde(default)]
    pub(crate) server: ServerConfig,
    /// Webhook endpoints (`[[webhooks]]`).
    #[serde(default)]
    pub(crate) webhooks: Vec<WebhookConfig>,
    /// Who the terminal acts as (`[cli]`).
    #[serde(default)]
    pub(crate) cli: CliConfig,
}

/// One `[[webhooks]]` table: an endpoint the store's events are delivered to.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WebhookConfig {
    /// Where events are POSTed (`http` or `https`).
    pub(crate) url: String,
    /// The signing secret, `whsec_` and base64.
    pub(crate) secret: String,
    /// The events sent (all when absent).
    #[serde(default)]
    pub(crate) events: Option<Vec<String>>,
    /// Only the runs of this resource (tenant).
    #[serde(default)]
    pub(crate) resource: Option<String>,
    /// `standard` (default) or `slack`.
    #[serde(default)]
    pub(crate) format: Option<String>,
}

impl Config {
    /// The `[[webhooks]]` as the server's endpoints.
    ///
    /// # Errors
    /// Invalid input naming the table (1-based) and what is wrong.
    pub(crate) fn webhooks(&self) -> anyhow::Result<Vec<askloop_server::webhooks::Webhook>> {
        use askloop_server::webhooks::{Webhook, WebhookFormat};
        self.webhooks
            .iter()
            .enumerate()
            .map(|(index, entry)| {
                let number = index + 1;
                let wrap = |error: askloop_server::webhooks::WebhookError| {
                    invalid(format!("[[webhooks]] number {number}: {error}"))
                };
                let mut hook = Webhook::new(&entry.url, &entry.secret).map_err(wrap)?;
                if let Some(events) = &entry.events {
                    hook = hook
                        .events(events.iter().map(String::as_str))
                        .map_err(wrap)?;
                }
                if let Some(resource) = &entry.resource {
                    askloop_core::IdKind::Resource
                        .check(resource)
                        .map_err(|error| {
                            invalid(format!("[[webhooks]] number {number}: {error}"))
                        })?;
                    hook = hook.resource(askloop_core::ResourceId::new(resource.as_str()));
                }
                if let Some(format) = &entry.format {
                    hook = hook.format(format.parse::<WebhookFormat>().map_err(wrap)?);
                }
                Ok(hook)
            })
            .collect()
    }
}

/// The `[server]` table: settings of `askloop serve`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ServerConfig {
    /// The accepted API keys (`[[server.keys]]`).
    #[serde(default)]
    pub(crate) keys: Vec<KeyConfig>,
    /// Host names the server answers to besides loopback and the address reached (`HOST`,
    /// `HOST:PORT` or `*`).
    #[serde(default)]
    pub(crate) allowed_hosts: Vec<String>,
    /// Origins whose pages may call the server (CORS): `https://app.example.com`.
    #[serde(default)]
    pub(crate) cors_origins: Vec<String>,
    /// The URL people reach the server at: answer links start with it (webhook payloads,
    /// `POST /api/runs/…/link`, `askloop runs link`).
    #[serde(default)]
    pub(crate) public_url: Option<String>,
    /// How long answer links live at most, in hours (default 24).
    #[serde(default)]
    pub(crate) answer_link_max_hours: Option<u32>,
}

/// The longest life `[server] answer_link_max_hours` may give answer links: a year.
const MAX_LINK_HOURS: u32 = 24 * 366;

impl ServerConfig {
    /// How answer links are made: `public_url` (the flag's, else this table's) and
    /// `answer_link_max_hours`.
    ///
    /// # Errors
    /// Invalid input naming the key and what is wrong.
    pub(crate) fn link_settings(
        &self,
        flag: Option<askloop_server::links::PublicUrl>,
    ) -> anyhow::Result<askloop_server::links::LinkSettings> {
        use askloop_server::links::{LinkSettings, PublicUrl};
        let mut settings = LinkSettings::new();
        let url = match (flag, &self.public_url) {
            (Some(url), _) => Some(url),
            (None, Some(text)) => Some(
                text.parse::<PublicUrl>()
                    .map_err(|error| invalid_because("[server] public_url", error))?,
            ),
            (None, None) => None,
        };
        if let Some(url) = url {
            settings = settings.public_url(url);
        }
        match self.answer_link_max_hours {
            Some(hours) if !(1..=MAX_LINK_HOURS).contains(&hours) => {
                return Err(invalid(format!(
                    "[server] answer_link_max_hours must be 1 to {MAX_LINK_HOURS} (a year), not {hours}"
                )));
            }
            Some(hours) => {
                settings =
                    settings.max_age(std::time::Duration::from_secs(u64::from(hours) * 3600));
            }
            None => {}
        }
        Ok(settings)
    }
}

/// One `[[server.keys]]` table: an API key by the SHA-256 of its secret (`askloop keys new`
/// prints one).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct KeyConfig {
    /// The SHA-256 of the secret, 64 hex digits.
    pub(crate) hash: String,
    /// The resource id (tenant) the key's runs belong to.
    pub(crate) resource: String,
    /// The agents the key may use (all when absent).
    pub(crate) agents: Option<Vec<String>>,
    /// The key's name in the audit (who started, answered, approved); its resource when
    /// absent.
    pub(crate) label: Option<String>,
    /// The roles the key holds (approver policies name them).
    #[serde(default)]
    pub(crate) roles: Vec<String>,
}

/// The `[cli]` table: who the terminal acts as.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CliConfig {
    /// The roles the CLI's operator holds (approver policies name them); none when absent.
    #[serde(default)]
    pub(crate) roles: Vec<String>,
}

/// Who may approve an agent's or a tool's calls (`roles`, `self_approval`, `quorum`): the
/// agent table's own keys, or an `[agents.ID.approvers.TOOL]` table.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ApproversConfig {
    /// The actor must hold one of these roles.
    pub(crate) roles: Option<Vec<String>>,
    /// Whether the run's starter may approve its calls (default true).
    pub(crate) self_approval: Option<bool>,
    /// How many distinct approvers a call needs (default 1).
    pub(crate) quorum: Option<u32>,
}

impl ApproversConfig {
    /// The policy, if any key was given.
    pub(crate) fn policy(&self) -> Option<askloop_core::ApproverPolicy> {
        if self.roles.is_none() && self.self_approval.is_none() && self.quorum.is_none() {
            return None;
        }
        let mut policy = askloop_core::ApproverPolicy::new();
        if let Some(roles) = &self.roles {
            policy = policy.roles(roles.iter().cloned());
        }
        if let Some(allowed) = self.self_approval {
            policy = policy.self_approval(allowed);
        }
        if let Some(quorum) = self.quorum {
            policy = policy.quorum(quorum);
        }
        Some(policy)
    }
}

/// One `[agents.ID]` table.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AgentConfig {
    /// Display name.
    pub(crate) name: Option<String>,
    /// What the agent does: its tool's description when another agent offers it as a
    /// sub-agent.
    pub(crate) description: Option<String>,
    /// The system prompt.
    pub(crate) instructions: Option<String>,
    /// The agents (ids of this file, or `assistant`) offered to this one as tools: a call
    /// starts a child run of that agent.
    pub(crate) subagents: Option<Vec<String>>,
    /// Model SPEC of this agent.
    pub(crate) model: Option<String>,
    /// Built-in tool names (default `["ask_user"]`).
    pub(crate) tools: Option<Vec<String>>,
    /// Step limit per run.
    pub(crate) max_steps: Option<u32>,
    /// Question budget per run (calls of tools that ask the user).
    pub(crate) max_questions: Option<u32>,
    /// Sampling temperature.
    pub(crate) temperature: Option<f32>,
    /// Nucleus sampling mass.
    pub(crate) top_p: Option<f32>,
    /// Output token limit per model call.
    pub(crate) max_tokens: Option<u32>,
    /// Sampling seed.
    pub(crate) seed: Option<u64>,
    /// Tool choice of every step.
    pub(crate) tool_choice: Option<ToolChoiceConfig>,
    /// Tool choice of the first step.
    pub(crate) first_step_tool_choice: Option<ToolChoiceConfig>,
    /// MCP servers by name (`[agents.ID.mcp.NAME]`): the agent gets all their tools.
    #[serde(default)]
    pub(crate) mcp: BTreeMap<String, askloop_mcp::McpServerConfig>,
    /// Which of the agent's tools need a person's approval before they run: `true` (every tool
    /// but `ask_user`), `false` (the default) or a list of tool names. MCP servers add their own
    /// `require_approval`.
    pub(crate) require_approval: Option<askloop_mcp::RequireApproval>,
    /// Whether `ask_user`'s select questions also take the person's own words.
    pub(crate) allow_other: Option<bool>,
    /// Seconds a question may wait for its answer; `askloop runs sweep` then expires it.
    pub(crate) question_timeout_seconds: Option<u64>,
    /// How long a call that needs approval waits for a person's decision; then it expires
    /// (the tool does not run) and `askloop runs sweep` tells the model so.
    pub(crate) approval_timeout: Option<DurationConfig>,
    /// Who may approve the agent's calls: an actor holding one of these roles.
    pub(crate) roles: Option<Vec<String>>,
    /// Whether the run's starter may approve its calls (default true).
    pub(crate) self_approval: Option<bool>,
    /// How many distinct approvers a call needs (default 1).
    pub(crate) quorum: Option<u32>,
    /// Per tool, who may approve its calls and answer its questions
    /// (`[agents.ID.approvers.TOOL]`).
    #[serde(default)]
    pub(crate) approvers: BTreeMap<String, ApproversConfig>,
}

impl AgentConfig {
    /// The agent's own approver policy (`roles`, `self_approval`, `quorum` of its table), if
    /// any of them is given.
    pub(crate) fn approver_policy(&self) -> Option<askloop_core::ApproverPolicy> {
        ApproversConfig {
            roles: self.roles.clone(),
            self_approval: self.self_approval,
            quorum: self.quorum,
        }
        .policy()
    }
}

/// A duration as people write it (humantime): `"90s"`, `"30m"`, `"1h"`, `"2h 30m"`, `"1d"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(try_from = "toml::Value")]
pub(crate) struct DurationConfig(pub(crate) std::time::Duration);

impl TryFrom<toml::Value> for DurationConfig {
    type Error = String;

    fn try_from(value: toml::Value) -> Result<Self, Self::Error> {
        let expected = r#"expected a duration such as "90s", "30m", "1h", "2h 30m" or "1d""#;
        match &value {
            toml::Value::String(text) => humantime::parse_duration(text)
                .map(Self)
                .map_err(|error| format!("invalid duration {text:?} ({error}); {expected}")),
            other => Err(format!("invalid duration {other}; {expected}")),
        }
    }
}

/// A `tool_choice` value: `"auto"`, `"required"`, `"none"` or `{ tool = "NAME" }`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(try_from = "toml::Value")]
pub(crate) struct ToolChoiceConfig(pub(crate) ToolChoice);

impl TryFrom<toml::Value> for ToolChoiceConfig {
    type Error = String;

    fn try_from(value: toml::Value) -> Result<Self, Self::Error> {
        let expected = r#"expected "auto", "required", "none" or { tool = "NAME" }"#;
        match &value {
            toml::Value::String(mode) => match mode.as_str() {
                "auto" => Ok(Self(ToolChoice::Auto)),
                "required" => Ok(Self(ToolChoice::Required)),
                "none" => Ok(Self(ToolChoice::None)),
                other => Err(format!("unknown tool choice {other:?}; {expected}")),
            },
            toml::Value::Table(table) => match (table.len(), table.get("tool")) {
                (1, Some(toml::Value::String(name))) => Ok(Self(ToolChoice::Tool(name.clone()))),
                _ => Err(format!("invalid tool choice {value}; {expected}")),
            },
            other => Err(format!("invalid tool choice {other}; {expected}")),
        }
    }
}

/// A loaded file and the folder its relative paths are relative to.
#[derive(Debug, Default)]
pub(crate) struct LoadedConfig {
    /// The file's contents.
    pub(crate) config: Config,
    /// Its folder.
    pub(crate) base_dir: PathBuf,
    /// The file, if one was read.
    pub(crate) path: Option<PathBuf>,
}

impl LoadedConfig {
    /// Reads `explicit`, or `./askloop.toml` if it exists, or nothing.
    ///
    /// # Errors
    /// Invalid input: an explicit file that cannot be read, TOML that does not parse or has
    /// unknown keys, unknown tools, a `tool_choice` naming a tool the agent does not have.
    pub(crate) fn load(explicit: Option<&Path>) -> anyhow::Result<Self> {
        let current_dir = std::env::current_dir()?;
        let path = match explicit {
            Some(path) => current_dir.join(path),
            None => {
                let path = current_dir.join(DEFAULT_CONFIG_FILE);
                if !path.is_file() {
                    return Ok(Self {
                        config: Config::default(),
                        base_dir: current_dir,
                        path: None,
                    });
                }
                path
            }
        };
        let text = std::fs::read_to_string(&path)
            .map_err(|error| invalid_because(format!("cannot read {}", path.display()), error))?;
        let config = parse(&text)
            .map_err(|message| invalid(format!("invalid config {}: {message}", path.display())))?;
        let base_dir = path
            .parent()
            .map_or_else(|| current_dir.clone(), Path::to_path_buf);
        Ok(Self {
            config,
            base_dir,
            path: Some(path),
        })
    }
}

/// Parses and checks a file's text, reporting every problem found after parsing.
pub(crate) fn parse(text: &str) -> Result<Config, String> {
    let config: Config = toml::from_str(text).map_err(|error| {
        let location = error
            .span()
            .map(|span| {
                let before = &text[..span.start.min(text.len())];
                let line = before.matches('\n').count() + 1;
                let column = before.len() - before.rfind('\n').map_or(0, |at| at + 1) + 1;
                format!("line {line}, column {column}: ")
            })
            .unwrap_or_default();
        format!("{location}{}", error.message().trim())
    })?;
    let problems = check(&config);
    if problems.is_empty() {
        Ok(config)
    } else {
        Err(problems.join("; "))
    }
}

/// Every problem of a parsed file.
fn check(config: &Config) -> Vec<String> {
    let mut problems = Vec::new();
    for (id, agent) in &config.agents {
        if is_blank(id) {
            problems.push("agent ids must be non-empty".to_owned());
        }
        let tools = agent.tool_names();
        for tool in &tools {
            if !KNOWN_TOOLS.contains(&tool.as_str()) {
                problems.push(format!(
                    "agents.{id}.tools: unknown tool {tool:?}; known tools: {}",
                    KNOWN_TOOLS.join(", ")
                ));
            }
        }
        for (key, choice) in [
            ("tool_choice", &agent.tool_choice),
            ("first_step_tool_choice", &agent.first_step_tool_choice),
        ] {
            // MCP tools are known only once their servers are reached.
            if let Some(ToolChoiceConfig(ToolChoice::Tool(name))) = choice
                && !tools.contains(name)
                && agent.mcp.is_empty()
            {
                problems.push(format!(
                    "agents.{id}.{key}: the agent has no tool {name:?}; its tools: {}",
                    tools.join(", ")
                ));
            }
        }
        if agent.mcp.keys().any(|name| name.trim().is_empty()) {
            problems.push(format!("agents.{id}.mcp: server names must be non-empty"));
        }
        if agent.description.as_deref().is_some_and(is_blank) {
            problems.push(format!("agents.{id}.description: must not be blank"));
        }
        problems.extend(range_problems(id, agent));
    }
    problems.extend(subagent_problems(config));
    problems
}

/// The agent ids `subagents` may name: the file's agents and the built-in `assistant`.
fn known_agent_ids(config: &Config) -> Vec<&str> {
    let mut known: Vec<&str> = config.agents.keys().map(String::as_str).collect();
    if !known.contains(&DEFAULT_AGENT) {
        known.push(DEFAULT_AGENT);
        known.sort_unstable();
    }
    known
}

/// The problems of the agents' `subagents`: unknown or repeated ids, cycles (each named once,
/// by its path: `agents.a.subagents: sub-agents form a cycle: a → b → a`) and trees deeper
/// than [`askloop_core::DEFAULT_MAX_SUBAGENT_DEPTH`] levels (named by their deepest path).
/// Checked before any agent is built, so building sub-agents first never loops.
pub(crate) fn subagent_problems(config: &Config) -> Vec<String> {
    let known = known_agent_ids(config);
    let mut problems = Vec::new();
    for (id, agent) in &config.agents {
        let mut seen = Vec::new();
        for child in agent.subagent_ids() {
            if !known.contains(&child) {
                problems.push(format!(
                    "agents.{id}.subagents: unknown agent {child:?}; known agents: {}",
                    known.join(", ")
                ));
            } else if seen.contains(&child) {
                problems.push(format!("agents.{id}.subagents: {child:?} is listed twice"));
            }
            seen.push(child);
        }
    }
    let mut walk = SubagentWalk {
        config,
        path: Vec::new(),
        deepest: BTreeMap::new(),
        cycles: Vec::new(),
    };
    for id in config.agents.keys() {
        walk.visit(id);
    }
    for cycle in &walk.cycles {
        problems.push(format!(
            "agents.{}.subagents: sub-agents form a cycle: {}",
            cycle[0],
            cycle.join(" → ")
        ));
    }
    let limit = askloop_core::DEFAULT_MAX_SUBAGENT_DEPTH;
    for (id, path) in &walk.deepest {
        let levels = path.len().saturating_sub(1);
        if levels > limit as usize {
            problems.push(format!(
                "agents.{id}.subagents: sub-agents nest {levels} levels deep ({}), more than \
                 the limit of {limit}",
                path.join(" → ")
            ));
        }
    }
    problems
}

/// A depth-first walk of the sub-agent graph: each agent's deepest path down, and the cycles.
struct SubagentWalk<'a> {
    config: &'a Config,
    /// The agents from the walk's start to the one visited.
    path: Vec<&'a str>,
    /// Per agent outside a cycle, its deepest path of sub-agents (itself first).
    deepest: BTreeMap<&'a str, Vec<&'a str>>,
    /// The cycles found, each from its smallest id round to it again.
    cycles: Vec<Vec<&'a str>>,
}

impl<'a> SubagentWalk<'a> {
    /// The deepest path down from `id`, or `None` when a cycle is below it (recorded).
    fn visit(&mut self, id: &'a str) -> Option<Vec<&'a str>> {
        if let Some(at) = self.path.iter().position(|seen| *seen == id) {
            let mut cycle: Vec<&str> = self.path[at..].to_vec();
            // The same cycle reached from another member is named once, from its smallest id.
            let start = cycle
                .iter()
                .enumerate()
                .min_by_key(|(_, name)| **name)
                .map_or(0, |(index, _)| index);
            cycle.rotate_left(start);
            cycle.push(cycle[0]);
            if !self.cycles.contains(&cycle) {
                self.cycles.push(cycle);
            }
            return None;
        }
        if let Some(path) = self.deepest.get(id) {
            return Some(path.clone());
        }
        let children: Vec<&'a str> = self
            .config
            .agents
            .get(id)
            .map(AgentConfig::subagent_ids)
            .unwrap_or_default();
        self.path.push(id);
        let mut deepest = vec![id];
        let mut cyclic = false;
        for child in children {
            match self.visit(child) {
                Some(below) if below.len() + 1 > deepest.len() => {
                    deepest = std::iter::once(id).chain(below).collect();
                }
                Some(_) => {}
                None => cyclic = true,
            }
        }
        self.path.pop();
        if cyclic {
            return None;
        }
        self.deepest.insert(id, deepest.clone());
        Some(deepest)
    }
}

/// The numeric settings of one agent that are out of range, each naming its key:
/// `max_steps` and `max_tokens` at least 1, `temperature` from 0 to 2, `top_p` above 0 and at
/// most 1 (`seed` is any unsigned 64-bit number, which TOML parsing checks).
fn range_problems(id: &str, agent: &AgentConfig) -> Vec<String> {
    let mut problems = Vec::new();
    for (key, value) in [
        ("max_steps", agent.max_steps),
        ("max_tokens", agent.max_tokens),
    ] {
        if value == Some(0) {
            problems.push(format!("agents.{id}.{key}: must be at least 1, got 0"));
        }
    }
    if let Some(temperature) = agent.temperature
        && !(0.0..=2.0).contains(&temperature)
    {
        problems.push(format!(
            "agents.{id}.temperature: must be from 0 to 2, got {temperature}"
        ));
    }
    if let Some(top_p) = agent.top_p
        && !(top_p > 0.0 && top_p <= 1.0)
    {
        problems.push(format!(
            "agents.{id}.top_p: must be above 0 and at most 1, got {top_p}"
        ));
    }
    problems
}

impl AgentConfig {
    /// The ids of the agent's `subagents`, in order (none when absent).
    pub(crate) fn subagent_ids(&self) -> Vec<&str> {
        self.subagents
            .iter()
            .flatten()
            .map(String::as_str)
            .collect()
    }

    /// The agent's tools: `tools`, or `["ask_user"]` when absent.
    pub(crate) fn tool_names(&self) -> Vec<String> {
        self.tools
            .clone()
            .unwrap_or_else(|| vec![AskUser::NAME.to_owned()])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_shape() {
        let config = parse(
            r#"
            model = "scripted:a.json"
            [agents.planner]
            instructions = "Plan."
            max_steps = 3
            max_questions = 1
            tool_choice = { tool = "ask_user" }
            first_step_tool_choice = "required"
            "#,
        )
        .unwrap();
        let planner = &config.agents["planner"];
        assert_eq!(
            planner.tool_choice,
            Some(ToolChoiceConfig(ToolChoice::Tool("ask_user".into())))
        );
        assert_eq!(
            planner.first_step_tool_choice,
            Some(ToolChoiceConfig(ToolChoice::Required))
        );
        assert_eq!(planner.tool_names(), ["ask_user"]);
        assert_eq!(planner.max_questions, Some(1));
    }

    #[test]
    fn unknown_keys_are_errors_with_their_line() {
        let error = parse("[agents.a]\ninstructions = \"x\"\ncolour = \"red\"\n").unwrap_err();
        assert!(error.contains("line 3"), "{error}");
        assert!(error.contains("colour"), "{error}");
    }

    #[test]
    fn every_problem_is_reported() {
        let error = parse(
            r#"
            [agents.a]
            tools = ["web_search"]
            [agents.b]
            tools = []
            tool_choice = { tool = "ask_user" }
            "#,
        )
        .unwrap_err();
        assert!(error.contains("agents.a.tools"), "{error}");
        assert!(error.contains("agents.b.tool_choice"), "{error}");
    }

    #[test]
    fn numeric_settings_out_of_range_name_their_key() {
        let error = parse(
            "[agents.a]\nmax_steps = 0\nmax_tokens = 0\ntemperature = -0.5\ntop_p = 1.5\n\
             [agents.b]\ntemperature = nan\ntop_p = 0.0\n",
        )
        .unwrap_err();
        for key in [
            "agents.a.max_steps",
            "agents.a.max_tokens",
            "agents.a.temperature",
            "agents.a.top_p",
            "agents.b.temperature",
            "agents.b.top_p",
        ] {
            assert!(error.contains(key), "{key}: {error}");
        }
        let error = parse("[agents.a]\nseed = -1\n").unwrap_err();
        assert!(error.contains("line 2"), "{error}");
        assert!(
            parse("[agents.a]\nmax_steps = 1\nmax_tokens = 1\ntemperature = 2.0\ntop_p = 1.0\nseed = 0\n")
                .is_ok()
        );
    }

    #[test]
    fn mcp_servers_parse_and_their_mistakes_name_the_key() {
        let config = parse(
            r#"
            [agents.files.mcp.fs]
            command = ["npx", "-y", "@modelcontextprotocol/server-filesystem", "/srv/notes"]
            require_approval = ["write_file"]
            env = { KEY = "value" }
            [agents.files.mcp.search]
            url = "http://127.0.0.1:3001/mcp"
            "#,
        )
        .unwrap();
        let files = &config.agents["files"];
        assert_eq!(
            files.mcp["fs"].require_approval,
            askloop_mcp::RequireApproval::Only(vec!["write_file".into()])
        );
        assert_eq!(
            files.mcp["search"].require_approval,
            askloop_mcp::RequireApproval::All
        );
        let error = parse("[agents.files.mcp.fs]\ncommand = [\"a\"]\nurl = \"http://x/mcp\"\n")
            .unwrap_err();
        assert!(error.contains("`command` and `url`"), "{error}");
        assert!(error.contains("line 1"), "{error}");
    }

    #[test]
    fn issue31_approval_timeouts_are_durations_as_people_write_them() {
        let config = parse(
            "[agents.ops]\napproval_timeout = \"1h 30m\"\n[agents.assistant]\napproval_timeout = \"90s\"\n",
        )
        .unwrap();
        assert_eq!(
            config.agents["ops"].approval_timeout,
            Some(DurationConfig(std::time::Duration::from_secs(5400)))
        );
        assert_eq!(
            config.agents["assistant"].approval_timeout,
            Some(DurationConfig(std::time::Duration::from_secs(90)))
        );
        for bad in ["\"soon\"", "3600"] {
            let error = parse(&format!("[agents.ops]\napproval_timeout = {bad}\n")).unwrap_err();
            assert!(error.contains("line 2"), "{bad}: {error}");
            assert!(
                error.contains("approval_timeout") || error.contains("\"1h\""),
                "{bad}: {error}"
            );
        }
    }

    #[test]
    fn issue35_subagents_name_agents_of_the_file_without_cycles_or_deep_nesting() {
        let config = parse(
            "[agents.supervisor]\nsubagents = [\"researcher\", \"assistant\"]\n\
             description = \"Runs the team.\"\n[agents.researcher]\nsubagents = [\"a\"]\n\
             [agents.a]\nsubagents = [\"b\"]\n[agents.b]\n",
        )
        .unwrap();
        assert_eq!(
            config.agents["supervisor"].subagent_ids(),
            ["researcher", "assistant"]
        );
        assert_eq!(
            config.agents["supervisor"].description.as_deref(),
            Some("Runs the team.")
        );

        let error = parse("[agents.a]\nsubagents = [\"nobody\", \"a2\", \"a2\"]\n[agents.a2]\n")
            .unwrap_err();
        assert!(
            error.contains(
                r#"agents.a.subagents: unknown agent "nobody"; known agents: a, a2, assistant"#
            ),
            "{error}"
        );
        assert!(error.contains(r#""a2" is listed twice"#), "{error}");

        // A cycle is named once, by its path, from its smallest id.
        let error = parse(
            "[agents.b]\nsubagents = [\"c\"]\n[agents.c]\nsubagents = [\"b\"]\n\
             [agents.a]\nsubagents = [\"b\"]\n[agents.self]\nsubagents = [\"self\"]\n",
        )
        .unwrap_err();
        assert!(
            error.contains("agents.b.subagents: sub-agents form a cycle: b → c → b"),
            "{error}"
        );
        assert!(
            error.contains("agents.self.subagents: sub-agents form a cycle: self → self"),
            "{error}"
        );
        assert_eq!(error.matches("cycle").count(), 2, "{error}");

        // Three levels below an agent are allowed, four are not.
        let chain = |ids: &[&str]| {
            let mut text = String::new();
            for pair in ids.windows(2) {
                text.push_str(&format!(
                    "[agents.{}]\nsubagents = [\"{}\"]\n",
                    pair[0], pair[1]
                ));
            }
            text.push_str(&format!("[agents.{}]\n", ids[ids.len() - 1]));
            text
        };
        assert!(parse(&chain(&["l0", "l1", "l2", "l3"])).is_ok());
        let error = parse(&chain(&["l0", "l1", "l2", "l3", "l4"])).unwrap_err();
        assert_eq!(
            error,
            "agents.l0.subagents: sub-agents nest 4 levels deep (l0 → l1 → l2 → l3 → l4), \
             more than the limit of 3"
        );
    }

    #[test]
    fn bad_tool_choices_say_what_is_expected() {
        let error = parse("[agents.a]\ntool_choice = \"sometimes\"\n").unwrap_err();
        assert!(error.contains(r#""auto", "required", "none""#), "{error}");
    }

    #[test]
    fn answer_links_live_an_hour_to_a_year() {
        for (hours, ok) in [
            (0_u64, false),
            (1, true),
            (8784, true),
            (8785, false),
            (4_294_967_295, false),
        ] {
            let config = parse(&format!("[server]\nanswer_link_max_hours = {hours}\n")).unwrap();
            assert_eq!(config.server.link_settings(None).is_ok(), ok, "{hours}");
        }
        let config = parse("[server]\npublic_url = \"https://x.example/base\"\n").unwrap();
        assert!(
            config.server.link_settings(None).is_err(),
            "a path is refused"
        );
    }
}
