//! [`AgentDefinition`]: what the loop needs of an agent (its model, instructions, tools,
//! settings, limits and store), shared by every run of the agent.

use std::sync::Arc;
use std::time::Duration;

use crate::approvers::ApproverPolicy;
use crate::ids::{AgentId, LeaseHolder};
use crate::message::{AssistantPart, Message};
use crate::model::{LanguageModel, ModelSettings, ToolDefinition};
use crate::run::{RunState, RunStatus};
use crate::store::{Lease, RunStore};
use crate::time::{lease_now_ms, millis};
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
    pub(crate) max_questions: Option<u32>,
    pub(crate) settings: ModelSettings,
    pub(crate) store: Arc<dyn RunStore>,
    /// This agent value's lease holder id.
    pub(crate) lease_holder: LeaseHolder,
    /// How long a lease lasts unless renewed.
    pub(crate) lease_duration: Duration,
    /// Which calls need a person's approval before they run (besides the tools' own
    /// [`crate::Tool::requires_approval`]).
    pub(crate) approval: ApprovalPolicy,
    /// What the agent does, for a parent that offers it as a sub-agent (its tool's
    /// description).
    pub(crate) description: Option<String>,
    /// The agents offered to this one as tools, each by its id ([`crate::AgentBuilder::subagent`]).
    pub(crate) subagents: Vec<Arc<AgentDefinition>>,
    /// How many levels of sub-agents are below this agent (0 without any).
    pub(crate) subagent_levels: u32,
}

/// A predicate over a call's checked arguments: whether it needs approval.
pub(crate) type ApprovalPredicate = Arc<dyn Fn(&serde_json::Value) -> bool + Send + Sync>;

/// The agent's approval rules: every tool (except those that ask the user), or per tool name a
/// flag or a predicate over the arguments; and how long an approval may wait.
#[derive(Clone, Default)]
pub(crate) struct ApprovalPolicy {
    /// Every tool that does not itself ask the user needs approval.
    pub(crate) all: bool,
    /// Per tool name: `None` always, `Some(predicate)` when it says so.
    pub(crate) tools: Vec<(String, Option<ApprovalPredicate>)>,
    /// How long any call waits for its approval, unless a rule below says otherwise.
    pub(crate) timeout: Option<Duration>,
    /// Per tool name, how long its calls wait for their approval (the last one given wins).
    pub(crate) timeouts: Vec<(String, Duration)>,
    /// Who may approve any call of the agent, unless a rule below says otherwise.
    pub(crate) approvers: Option<ApproverPolicy>,
    /// Per tool name, who may approve its calls and answer its questions (the last one given
    /// wins).
    pub(crate) tool_approvers: Vec<(String, ApproverPolicy)>,
}

impl AgentDefinition {
    /// The lease a commit of `state` carries: this agent's, from now for the lease duration,
    /// while the run is running; none once it suspends, completes or fails.
    pub(crate) fn lease_for(&self, state: &RunState) -> Option<Lease> {
        (state.status == RunStatus::Running).then(|| self.new_lease())
    }

    /// This agent's lease, from now for the lease duration.
    pub(crate) fn new_lease(&self) -> Lease {
        Lease::new(
            self.lease_holder.clone(),
            lease_now_ms().saturating_add(millis(self.lease_duration)),
        )
    }

    /// The sub-agent offered as the tool `name`, if that tool is one.
    pub(crate) fn subagent(&self, name: &str) -> Option<&Arc<AgentDefinition>> {
        self.subagents
            .iter()
            .find(|child| child.id.as_str() == name)
    }

    /// Whether a call of `name` left `resuming` or `running` by a driver that stopped runs
    /// again when the run is taken over: an idempotent tool's, and a sub-agent's (its child run
    /// keeps its own journal, so running the call again only picks the child up where it is).
    pub(crate) fn reruns_after_crash(&self, name: &str) -> bool {
        self.subagent(name).is_some()
            || self.tool(name).is_some_and(|tool| tool.tool().idempotent())
    }

    /// The registered tool with this name.
    pub(crate) fn tool(&self, name: &str) -> Option<&RegisteredTool> {
        self.tools
            .iter()
            .find(|tool| tool.definition().name == name)
    }

    /// Whether a call of `name` with these checked arguments needs a person's approval before
    /// it runs: the agent's rules or the tool's own say so.
    pub(crate) fn requires_approval(&self, name: &str, args: &serde_json::Value) -> bool {
        let Some(tool) = self.tool(name) else {
            return false;
        };
        if tool.tool().requires_approval(args) {
            return true;
        }
        if self.approval.all && !tool.tool().asks_user() {
            return true;
        }
        self.approval
            .tools
            .iter()
            .filter(|(tool, _)| tool == name)
            .any(|(_, predicate)| predicate.as_ref().is_none_or(|predicate| predicate(args)))
    }

    /// When a call of `name` made now stops waiting for its approval (ms since the Unix epoch,
    /// on the lease clock, so paused-clock tests move it), if it has a deadline: the agent's
    /// rule for this tool, else the tool's own ([`crate::Tool::approval_timeout`]), else the
    /// agent's default.
    pub(crate) fn approval_deadline(&self, name: &str) -> Option<u64> {
        let timeout = self
            .approval
            .timeouts
            .iter()
            .rev()
            .find(|(tool, _)| tool == name)
            .map(|(_, timeout)| *timeout)
            .or_else(|| {
                self.tool(name)
                    .and_then(|tool| tool.tool().approval_timeout())
            })
            .or(self.approval.timeout)?;
        Some(lease_now_ms().saturating_add(millis(timeout)))
    }

    /// Whether the agent's rules require approval for every call of `name` (the agent requires
    /// it of all tools, or of this one without a predicate over its arguments), or the tool's
    /// own rule requires it of a call without arguments.
    pub(crate) fn always_requires_approval(&self, name: &str) -> bool {
        let Some(tool) = self.tool(name) else {
            return false;
        };
        // The tool's own rule, asked about a call without arguments: a tool whose rule is the
        // same for every call (an MCP server's `require_approval`) answers for all of them.
        tool.tool().requires_approval(&serde_json::Value::Null)
            || (self.approval.all && !tool.tool().asks_user())
            || self
                .approval
                .tools
                .iter()
                .any(|(tool, predicate)| tool == name && predicate.is_none())
    }

    /// The policy of the tool `name`'s own ([`crate::AgentBuilder::approvers_for`]), if it has
    /// one: it governs the tool's approvals and the answers to its questions.
    pub(crate) fn tool_approvers(&self, name: &str) -> Option<&ApproverPolicy> {
        self.approval
            .tool_approvers
            .iter()
            .rev()
            .find(|(tool, _)| tool == name)
            .map(|(_, policy)| policy)
    }

    /// Who may approve a call of `name`: the tool's own policy, else the agent's; `None`:
    /// anyone, once.
    pub(crate) fn approvers(&self, name: &str) -> Option<&ApproverPolicy> {
        self.tool_approvers(name)
            .or(self.approval.approvers.as_ref())
    }

    /// The quorum a call of `name` needs, when it is more than one (recorded with the call
    /// when it starts waiting, and shown with it).
    pub(crate) fn quorum_of(&self, name: &str) -> Option<u32> {
        self.approvers(name)
            .map(|policy| policy.quorum)
            .filter(|quorum| *quorum > 1)
    }

    /// Whether `name` is a tool that asks the user (counted by the question budget).
    pub(crate) fn asks_user(&self, name: &str) -> bool {
        self.tool(name).is_some_and(|tool| tool.tool().asks_user())
    }

    /// How many questions the run has asked (calls of tools that ask the user, whatever their
    /// outcome, in the run's own messages).
    pub(crate) fn questions_asked(&self, state: &RunState) -> u32 {
        let count = state
            .messages()
            .iter()
            .flat_map(|message| match message {
                Message::Assistant { parts } => parts.as_slice(),
                _ => &[],
            })
            .filter(
                |part| matches!(part, AssistantPart::ToolCall(call) if self.asks_user(&call.name)),
            )
            .count();
        u32::try_from(count).unwrap_or(u32::MAX)
    }

    /// Whether the run's question budget is spent.
    pub(crate) fn questions_spent(&self, state: &RunState) -> bool {
        self.max_questions
            .is_some_and(|budget| self.questions_asked(state) >= budget)
    }

    /// The names of the agent's tools, in registration order.
    pub(crate) fn tool_names(&self) -> Vec<String> {
        self.tool_definitions
            .iter()
            .map(|tool| tool.name.clone())
            .collect()
    }
}
