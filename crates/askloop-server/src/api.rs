//! The request and response bodies of the routes (serde + utoipa schemas). These are the HTTP
//! shapes only; chunks go out as `askloop_core::wire` JSON, never through these types.

use std::collections::BTreeMap;

use askloop_core::model::{AssistantPart, Message};
use askloop_core::store::{RunState, RunSummary};
use askloop_core::time::rfc3339;
use askloop_core::wire::PendingCall;
use askloop_core::{PendingKind, PendingToolCall};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use crate::error::ApiError;

// ---------------------------------------------------------------- requests

/// `messages` of a stream request: a text, or a list of texts or `{role, content}` messages.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(untagged)]
pub(crate) enum Messages {
    /// One user message.
    Text(String),
    /// Messages; the last user message is the run's input.
    List(Vec<MessageItem>),
}

/// One message of a list: a text (a user message) or `{role, content}`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(untagged)]
pub(crate) enum MessageItem {
    /// A user message.
    Text(String),
    /// A message with its role.
    Message(RoleMessage),
}

/// A message with its role (`user`, `assistant`, `system`, …).
#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct RoleMessage {
    /// Who wrote it; only `user` messages are read.
    role: String,
    /// A text, or parts of which the `text` parts are read.
    content: MessageContent,
}

/// A message's content.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(untagged)]
pub(crate) enum MessageContent {
    /// The text.
    Text(String),
    /// Parts: `{type: "text", text}` parts are joined; other parts are ignored.
    Parts(Vec<ContentPart>),
}

/// A part of a message's content.
#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct ContentPart {
    /// The part's type; only `text` is read.
    #[serde(rename = "type")]
    kind: String,
    /// The text of a `text` part.
    #[serde(default)]
    text: Option<String>,
}

impl Messages {
    /// The text of the last user message.
    pub(crate) fn input(&self) -> Option<String> {
        match self {
            Self::Text(text) => Some(text.clone()),
            Self::List(items) => items.iter().rev().find_map(|item| match item {
                MessageItem::Text(text) => Some(text.clone()),
                MessageItem::Message(message) if message.role == "user" => {
                    Some(match &message.content {
                        MessageContent::Text(text) => text.clone(),
                        MessageContent::Parts(parts) => parts
                            .iter()
                            .filter(|part| part.kind == "text")
                            .filter_map(|part| part.text.as_deref())
                            .collect::<Vec<_>>()
                            .join(""),
                    })
                }
                MessageItem::Message(_) => None,
            }),
        }
    }
}

/// A thread given as its id or as `{id}`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(untagged)]
pub(crate) enum ThreadRef {
    /// The thread id.
    Id(String),
    /// `{id}`.
    Object {
        /// The thread id.
        id: String,
    },
}

/// The reference framework's memory option: `{thread, resource}`.
#[derive(Debug, Default, Deserialize, ToSchema)]
pub(crate) struct MemoryOption {
    /// The thread to continue.
    #[serde(default)]
    pub(crate) thread: Option<ThreadRef>,
    /// The owner of the run.
    #[serde(default)]
    pub(crate) resource: Option<String>,
}

/// `POST /api/agents/{agentId}/stream`: starts a run. Unknown fields are ignored.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct StreamRequest {
    /// The input: the last user message's text is the run's input.
    pub(crate) messages: Messages,
    /// The new run's id (generated when absent): an id of the caller's resource (the same id in
    /// another resource is another run); one the resource already uses is 409 `conflict`.
    #[serde(default)]
    pub(crate) run_id: Option<String>,
    /// The thread to continue (a new one when absent), of the caller's resource: the same
    /// thread id in another resource is another thread. While the thread has a turn running,
    /// 409 `thread_busy`.
    #[serde(default)]
    pub(crate) thread_id: Option<String>,
    /// The run's owner; with an API key, the key's resource (another one is 403).
    #[serde(default)]
    pub(crate) resource_id: Option<String>,
    /// The reference framework's `{thread, resource}` (read when `threadId`/`resourceId` are
    /// absent).
    #[serde(default)]
    pub(crate) memory: Option<MemoryOption>,
}

impl StreamRequest {
    pub(crate) fn thread(&self) -> Option<&str> {
        self.thread_id.as_deref().or_else(|| {
            self.memory
                .as_ref()
                .and_then(|memory| memory.thread.as_ref())
                .map(|thread| match thread {
                    ThreadRef::Id(id) | ThreadRef::Object { id } => id.as_str(),
                })
        })
    }

    pub(crate) fn resource(&self) -> Option<&str> {
        self.resource_id.as_deref().or_else(|| {
            self.memory
                .as_ref()
                .and_then(|memory| memory.resource.as_deref())
        })
    }
}

/// `POST /api/agents/{agentId}/resume-stream`: answers a suspended call.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ResumeRequest {
    /// The suspended run.
    pub(crate) run_id: String,
    /// The run's resource: with an API key, the key's (another one names no run: 404);
    /// without keys, needed only when several resources use the run id (409 `ambiguous_run`).
    #[serde(default)]
    pub(crate) resource_id: Option<String>,
    /// The answer, any JSON (for `ask_user`: a label, a text or a list of labels).
    #[schema(value_type = Object)]
    pub(crate) resume_data: Value,
    /// The call answered; the only pending one when absent.
    #[serde(default)]
    pub(crate) tool_call_id: Option<String>,
}

/// `POST /api/agents/{agentId}/approve-tool-call` and `/decline-tool-call`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ApprovalRequest {
    /// The suspended run.
    pub(crate) run_id: String,
    /// The run's resource, as for `resume-stream`.
    #[serde(default)]
    pub(crate) resource_id: Option<String>,
    /// The call awaiting approval.
    pub(crate) tool_call_id: String,
    /// Why it is declined (declines only).
    #[serde(default)]
    pub(crate) reason: Option<String>,
    /// Edit, then approve (approvals only; askloop's): the arguments the tool runs with instead
    /// of the model's, a JSON object checked against the tool's input schema first (400
    /// `invalid_args` with every problem in `details.problems`; nothing changes). The model is
    /// told in the call's result that the person changed the arguments and to what; the audit
    /// keeps both versions.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub(crate) args: Option<Value>,
}

/// `POST /api/runs/{runId}/responses`: several responses in one commit.
#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct ResponsesRequest {
    /// One per call answered.
    pub(crate) responses: Vec<CallResponseBody>,
}

/// A response to one waiting call: `{toolCallId, answer}`, `{toolCallId, approved: true,
/// args?}` or `{toolCallId, approved: false, reason?}`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CallResponseBody {
    /// The call.
    pub(crate) tool_call_id: String,
    /// The answer to a question.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub(crate) answer: Option<Value>,
    /// An approval (`true`) or decline (`false`).
    #[serde(default)]
    pub(crate) approved: Option<bool>,
    /// Why it is declined.
    #[serde(default)]
    pub(crate) reason: Option<String>,
    /// With `approved: true`: the arguments a person edited, which the tool runs with (as for
    /// `approve-tool-call`'s `args`: 400 `invalid_args` when they do not fit the tool).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub(crate) args: Option<Value>,
}

/// `POST /api/runs/{runId}/fork`: fork the run at a question with another answer.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ForkRequest {
    /// The question (a call of the run that suspended for an answer: answered already or
    /// still waiting, in any step).
    pub(crate) tool_call_id: String,
    /// The new answer, checked against the question as a resume's answer is.
    #[schema(value_type = Object)]
    pub(crate) resume_data: Value,
}

/// The query of the routes of one run (`/api/runs/{runId}…`).
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub(crate) struct RunQuery {
    /// The run's resource: with an API key, the key's (another one names no run: 404);
    /// without keys, needed only when several resources use the run id (409 `ambiguous_run`).
    #[serde(default)]
    pub(crate) resource_id: Option<String>,
}

/// `GET /api/runs` query.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub(crate) struct RunsQuery {
    /// Only runs in this status (`running`, `suspended`, `completed`, `failed`, `cancelled`).
    #[serde(default)]
    pub(crate) status: Option<String>,
    /// Only runs of this agent.
    #[serde(default)]
    pub(crate) agent_id: Option<String>,
    /// Only runs of this resource.
    #[serde(default)]
    pub(crate) resource_id: Option<String>,
    /// Only runs of this thread.
    #[serde(default)]
    pub(crate) thread_id: Option<String>,
    /// Only forks of this run (`POST /api/runs/{runId}/fork`): the runs whose `forkedFrom`
    /// names it.
    #[serde(default)]
    pub(crate) forked_from: Option<String>,
    /// Only the child runs this run started through its sub-agents (the runs whose
    /// `parentRunId` names it). Without it, the listing shows only top-level runs (what a
    /// person started): a sub-agent's child run is listed under its parent, and its waiting
    /// calls are its root's.
    #[serde(default)]
    pub(crate) parent_run_id: Option<String>,
    /// The `nextCursor` of the previous page.
    #[serde(default)]
    pub(crate) cursor: Option<String>,
    /// Page size, 1 to 200 (default 50).
    #[serde(default)]
    #[param(minimum = 1, maximum = 200)]
    pub(crate) limit: Option<u32>,
}

/// `GET /api/agents/{agentId}/suspended-runs` query (the reference framework's).
#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub(crate) struct SuspendedRunsQuery {
    /// Only runs of this thread.
    #[serde(default)]
    pub(crate) thread_id: Option<String>,
    /// Only runs of this resource.
    #[serde(default)]
    pub(crate) resource_id: Option<String>,
    /// The page, from 0.
    #[serde(default)]
    #[param(minimum = 0, maximum = 1000000)]
    pub(crate) page: Option<u32>,
    /// Runs per page, 1 to 200 (default 20).
    #[serde(default)]
    #[param(minimum = 1, maximum = 200)]
    pub(crate) per_page: Option<u32>,
}

// ---------------------------------------------------------------- responses

/// A tool of an agent, as the reference framework describes it.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ToolInfo {
    /// The tool's name.
    pub(crate) id: String,
    /// What it does.
    pub(crate) description: String,
    /// JSON Schema of its arguments, as a JSON string.
    pub(crate) input_schema: String,
    /// Whether every call needs a person's approval by the agent's rules.
    pub(crate) require_approval: bool,
}

/// An agent, in the reference framework's shape: what a client needs to call it — id, name,
/// instructions, tools (description, argument schema, whether a call needs approval). Never its
/// model setting, which may name a local file path or a private endpoint.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AgentDetails {
    /// The agent's id.
    pub(crate) id: String,
    /// Its display name.
    pub(crate) name: String,
    /// Its instructions (system prompt), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) instructions: Option<String>,
    /// Its tools, by name.
    pub(crate) tools: BTreeMap<String, ToolInfo>,
    /// Sub-agents (none in askloop).
    #[schema(value_type = Object)]
    pub(crate) agents: Value,
    /// Workflows (none in askloop).
    #[schema(value_type = Object)]
    pub(crate) workflows: Value,
    /// Skills (none).
    #[schema(value_type = Vec<Object>)]
    pub(crate) skills: Vec<Value>,
    /// Workspace tools (none).
    #[schema(value_type = Vec<Object>)]
    pub(crate) workspace_tools: Vec<Value>,
    /// Browser tools (none).
    #[schema(value_type = Vec<Object>)]
    pub(crate) browser_tools: Vec<Value>,
    /// Whether it has a browser (never).
    pub(crate) has_browser: bool,
    /// Input processors (none).
    #[schema(value_type = Vec<Object>)]
    pub(crate) input_processors: Vec<Value>,
    /// Output processors (none).
    #[schema(value_type = Vec<Object>)]
    pub(crate) output_processors: Vec<Value>,
}

impl AgentDetails {
    pub(crate) fn of(agent: &askloop_core::Agent) -> Self {
        let tools = agent
            .tool_definitions()
            .iter()
            .map(|tool| {
                (
                    tool.name.clone(),
                    ToolInfo {
                        id: tool.name.clone(),
                        description: tool.description.clone(),
                        input_schema: tool.input_schema.to_string(),
                        require_approval: agent.tool_requires_approval(&tool.name),
                    },
                )
            })
            .collect();
        Self {
            id: agent.id().to_string(),
            name: agent.name().to_owned(),
            instructions: agent.instructions().map(str::to_owned),
            tools,
            agents: Value::Object(Default::default()),
            workflows: Value::Object(Default::default()),
            skills: Vec::new(),
            workspace_tools: Vec::new(),
            browser_tools: Vec::new(),
            has_browser: false,
            input_processors: Vec::new(),
            output_processors: Vec::new(),
        }
    }
}

/// A run, summarised.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RunSummaryBody {
    /// The run.
    pub(crate) run_id: String,
    /// Its agent.
    pub(crate) agent_id: String,
    /// Its thread.
    pub(crate) thread_id: String,
    /// Its owner, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) resource_id: Option<String>,
    /// `running`, `suspended`, `completed`, `failed` or `cancelled`.
    pub(crate) status: String,
    /// When it was created (RFC 3339).
    pub(crate) created_at: String,
    /// When it last changed (RFC 3339).
    pub(crate) updated_at: String,
    /// What the run was asked: the first 200 characters of its first message, as written;
    /// absent when its first message is not the user's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) first_message: Option<String>,
    /// The calls that wait for a person (suspended runs).
    pub(crate) pending_tool_calls: Vec<PendingCall>,
    /// Where a fork comes from (`POST /api/runs/{runId}/fork`); absent for a run that was not
    /// forked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) forked_from: Option<ForkedFromBody>,
    /// For a sub-agent's child run: the run whose tool call started it; absent for a run a
    /// person started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) parent_run_id: Option<String>,
    /// For a sub-agent's child run: the parent's call (of the sub-agent's tool) it answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) parent_tool_call_id: Option<String>,
    /// For a sub-agent's child run: the root of its tree, the run a person started (its
    /// questions are answered, and it is continued, through that run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) root_run_id: Option<String>,
}

/// A child run of a run's sub-agents, as `GET /api/runs/{runId}` lists it.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ChildRunBody {
    /// The child run.
    pub(crate) run_id: String,
    /// Its agent (the sub-agent).
    pub(crate) agent_id: String,
    /// `running`, `suspended`, `completed`, `failed` or `cancelled`.
    pub(crate) status: String,
    /// The parent's call of the sub-agent that started it.
    pub(crate) tool_call_id: String,
}

impl ChildRunBody {
    /// The entry of child run `summary` (its `toolCallId` from its link to the parent).
    pub(crate) fn of(summary: &RunSummary) -> Self {
        Self {
            run_id: summary.run_id.to_string(),
            agent_id: summary.agent_id.to_string(),
            status: summary.status.to_string(),
            tool_call_id: summary
                .parent
                .as_ref()
                .map(|parent| parent.tool_call_id.to_string())
                .unwrap_or_default(),
        }
    }
}

/// The run and question a fork comes from.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ForkedFromBody {
    /// The original run.
    pub(crate) run_id: String,
    /// Its question that the fork answered anew.
    pub(crate) tool_call_id: String,
}

impl RunSummaryBody {
    pub(crate) fn of(summary: &RunSummary) -> Self {
        Self {
            run_id: summary.run_id.to_string(),
            agent_id: summary.agent_id.to_string(),
            thread_id: summary.thread_id.to_string(),
            resource_id: summary.resource_id.as_ref().map(ToString::to_string),
            status: summary.status.to_string(),
            created_at: rfc3339(summary.created_at_ms),
            updated_at: rfc3339(summary.updated_at_ms),
            first_message: summary.first_message.clone(),
            pending_tool_calls: summary
                .pending
                .iter()
                .map(|call| PendingCall::of(&summary.run_id, call))
                .collect(),
            forked_from: summary.forked_from.as_ref().map(|from| ForkedFromBody {
                run_id: from.run_id.to_string(),
                tool_call_id: from.tool_call_id.to_string(),
            }),
            parent_run_id: summary
                .parent
                .as_ref()
                .map(|parent| parent.run_id.to_string()),
            parent_tool_call_id: summary
                .parent
                .as_ref()
                .map(|parent| parent.tool_call_id.to_string()),
            root_run_id: summary
                .parent
                .as_ref()
                .map(|parent| parent.root_run_id.to_string()),
        }
    }
}

/// A page of runs, newest first.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RunList {
    /// The runs.
    pub(crate) runs: Vec<RunSummaryBody>,
    /// Pass it as `cursor` for the next page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) next_cursor: Option<String>,
}

/// Why a run failed.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct FailureBody {
    /// A stable code.
    pub(crate) code: String,
    /// What happened.
    pub(crate) message: String,
}

/// A run in full: its summary, its messages, how it ended.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RunDetail {
    /// The summary.
    #[serde(flatten)]
    pub(crate) summary: RunSummaryBody,
    /// The run's own messages (askloop's stored message JSON: `{role, …}`).
    #[schema(value_type = Vec<Object>)]
    pub(crate) messages: Vec<Value>,
    /// The steps taken.
    pub(crate) steps: u32,
    /// Why the model stopped (completed runs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) finish_reason: Option<String>,
    /// Why it failed (failed runs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) failure: Option<FailureBody>,
    /// Every question the run asked and keeps (answered or waiting), in the pending call's one
    /// shape: what a fork (`POST /api/runs/{runId}/fork`) answers anew, e.g. the page's
    /// "Change answer" form.
    pub(crate) questions: Vec<PendingCall>,
    /// Who started the run, if known (runs stored before askloop recorded it have none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) started_by: Option<ActorBody>,
    /// Every decision on the run's calls, in call order: who answered, approved, declined,
    /// expired or cancelled which call, when, from which route (each vote of a quorum too,
    /// also while the call still waits).
    pub(crate) decisions: Vec<DecisionBody>,
    /// The child runs the run's sub-agents started, oldest first (each a run of its own:
    /// `GET /api/runs/{runId}` of the child shows its work; its questions are this tree's
    /// root's).
    pub(crate) children: Vec<ChildRunBody>,
}

/// Who acted: an actor as the audit keeps it.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ActorBody {
    /// The actor's id: an API key's label (else its resource), `web` on an open server,
    /// `cli:USER`, `webhooks` (a webhook delivery's answer link), `link:<id>` (an answer link
    /// whose issuer is unknown; other links act as their issuer), a library caller's name.
    pub(crate) id: String,
    /// The resource it acted for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) resource: Option<String>,
    /// The roles it held.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) roles: Vec<String>,
    /// The route it came through (`POST /api/agents/{agentId}/approve-tool-call`, `cli approve`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) route: Option<String>,
}

/// One decision on one call of a run.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DecisionBody {
    /// The call.
    pub(crate) tool_call_id: String,
    /// Its tool.
    pub(crate) tool_name: String,
    /// `answer`, `approve`, `decline`, `expire`, `cancel` or `message`.
    pub(crate) action: String,
    /// Who: the actor's id (`sweep` for an expiry); absent when the caller did not say.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) by: Option<String>,
    /// The resource the actor acted for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) resource: Option<String>,
    /// The roles the actor held.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) roles: Vec<String>,
    /// The route the decision came through.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) route: Option<String>,
    /// When (RFC 3339).
    pub(crate) at: String,
    /// For an approval that edited the arguments: `{original, edited}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub(crate) args_edit: Option<Value>,
}

impl DecisionBody {
    fn of(decision: &askloop_core::Decision<'_>) -> Self {
        let record = decision.record;
        Self {
            tool_call_id: decision.tool_call_id.to_string(),
            tool_name: decision.tool_name.to_owned(),
            action: record.action.as_str().to_owned(),
            by: record.by.clone(),
            resource: record.resource.as_ref().map(ToString::to_string),
            roles: record.roles.clone(),
            route: record.route.clone(),
            at: rfc3339(record.at_ms),
            args_edit: record
                .args_edit
                .as_ref()
                .and_then(|edit| serde_json::to_value(edit).ok()),
        }
    }
}

impl RunDetail {
    /// The detail of `state`, whose sub-agents started `children` (child runs' summaries).
    pub(crate) fn of(state: &RunState, children: &[RunSummary]) -> Result<Self, ApiError> {
        let messages = state
            .messages()
            .iter()
            .map(serde_json::to_value)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| ApiError::internal("encode_error", &error))?;
        Ok(Self {
            summary: RunSummaryBody::of(&state.summary()),
            messages,
            steps: state.steps(),
            finish_reason: state
                .finish_reason()
                .map(|reason| reason.as_str().to_owned()),
            failure: state.failure().map(|failure| FailureBody {
                code: failure.code.clone(),
                message: failure.message.clone(),
            }),
            questions: asked_questions(state),
            started_by: state.started_by().map(|actor| ActorBody {
                id: actor.id.clone(),
                resource: actor.resource.as_ref().map(ToString::to_string),
                roles: actor.roles.clone(),
                route: actor.route.clone(),
            }),
            decisions: state.decisions().iter().map(DecisionBody::of).collect(),
            children: children.iter().map(ChildRunBody::of).collect(),
        })
    }
}

/// The questions `state` asked and keeps, in call order, as pending calls.
fn asked_questions(state: &RunState) -> Vec<PendingCall> {
    state
        .messages()
        .iter()
        .flat_map(|message| match message {
            Message::Assistant { parts } => parts.as_slice(),
            _ => &[],
        })
        .filter_map(|part| match part {
            AssistantPart::ToolCall(call) => state.question(&call.id).map(|question| {
                PendingCall::of(state.run_id(), &PendingToolCall::new(call, question))
            }),
            _ => None,
        })
        .collect()
}

/// A call of a suspended run, in the reference framework's shape.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SuspendedCall {
    /// The call.
    pub(crate) tool_call_id: String,
    /// The tool.
    pub(crate) tool_name: String,
    /// The call's arguments.
    #[schema(value_type = Object)]
    pub(crate) args: Value,
    /// Whether it awaits an approval (not an answer).
    pub(crate) requires_approval: bool,
    /// What the tool asked.
    #[schema(value_type = Object)]
    pub(crate) suspend_payload: Value,
    /// askloop's: where the call comes from when a sub-agent asked it (`{path, runId,
    /// toolCallId}`; `toolCallId` above is then `PARENT_CALL~CHILD_CALL`); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub(crate) subagent: Option<Value>,
}

/// A suspended run, in the reference framework's shape.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SuspendedRun {
    /// The run.
    pub(crate) run_id: String,
    /// Always `suspended`.
    pub(crate) status: String,
    /// Its thread.
    pub(crate) thread_id: String,
    /// Its owner, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) resource_id: Option<String>,
    /// When it suspended (RFC 3339).
    pub(crate) suspended_at: String,
    /// The calls that wait.
    pub(crate) tool_calls: Vec<SuspendedCall>,
}

impl SuspendedRun {
    pub(crate) fn of(summary: &RunSummary) -> Self {
        Self {
            run_id: summary.run_id.to_string(),
            status: summary.status.to_string(),
            thread_id: summary.thread_id.to_string(),
            resource_id: summary.resource_id.as_ref().map(ToString::to_string),
            suspended_at: rfc3339(summary.updated_at_ms),
            tool_calls: summary
                .pending
                .iter()
                .map(|call| SuspendedCall {
                    tool_call_id: call.tool_call_id.to_string(),
                    tool_name: call.tool_name.clone(),
                    args: call.args.clone(),
                    requires_approval: call.kind == PendingKind::Approval,
                    suspend_payload: call.suspend_payload.clone(),
                    subagent: call.subagent.as_ref().map(askloop_core::wire::origin_json),
                })
                .collect(),
        }
    }
}

/// A page of suspended runs.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct SuspendedRunList {
    /// The runs of the page.
    pub(crate) runs: Vec<SuspendedRun>,
    /// How many match, over all pages.
    pub(crate) total: u64,
}

/// A run after a cancel.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CancelledBody {
    /// The run.
    pub(crate) run_id: String,
    /// `cancelled`.
    pub(crate) status: String,
}

/// The answer to a harmless repeat: every answer of the request goes to a call that already has
/// this very answer (the same JSON, or the same label given by its number or in another case),
/// so nothing changed and the run was not resumed again. A different answer to an answered
/// call is 409 `already_answered`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RepeatNote {
    /// In words: which calls already had this answer, and that nothing changed.
    pub(crate) note: String,
    /// The run.
    pub(crate) run_id: String,
    /// The calls answered again.
    pub(crate) tool_call_ids: Vec<String>,
    /// The run's status now (`running`, `suspended`, `completed`, `failed`, `cancelled`).
    pub(crate) status: String,
}

// ---------------------------------------------------------------- webhooks

/// `GET /api/webhooks/deliveries` query.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub(crate) struct DeliveriesQuery {
    /// Only deliveries in this status: `pending`, `delivered` or `failed`.
    #[serde(default)]
    pub(crate) status: Option<String>,
    /// Only deliveries of this resource's runs (a keyed caller sees only its own).
    #[serde(default)]
    pub(crate) resource_id: Option<String>,
    /// The `nextCursor` of the previous page.
    #[serde(default)]
    #[param(minimum = 1)]
    pub(crate) cursor: Option<u64>,
    /// Page size, 1 to 200 (default 50).
    #[serde(default)]
    #[param(minimum = 1, maximum = 200)]
    pub(crate) limit: Option<u32>,
}

/// A page of webhook deliveries, newest first.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DeliveryList {
    /// The deliveries.
    pub(crate) deliveries: Vec<DeliveryBody>,
    /// Pass as `cursor` for the next page; absent on the last.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) next_cursor: Option<u64>,
}

/// One event's delivery to one endpoint, with its attempts.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DeliveryBody {
    /// The delivery's id (replay it with this).
    pub(crate) id: u64,
    /// The endpoint's name (`hook-` and 12 hex digits of its URL's SHA-256).
    pub(crate) endpoint: String,
    /// `pending`, `delivered` or `failed`.
    pub(crate) status: String,
    /// When it was created (RFC 3339).
    pub(crate) created_at: String,
    /// When it is due next, while pending (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) next_attempt_at: Option<String>,
    /// Every attempt, oldest first.
    pub(crate) attempts: Vec<AttemptBody>,
    /// The event, as endpoints receive it (standard format; `webhook-id` is its `id`).
    #[schema(value_type = Object)]
    pub(crate) event: Value,
}

/// One delivery attempt.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AttemptBody {
    /// When it was sent (RFC 3339).
    pub(crate) at: String,
    /// The HTTP status of the answer; absent when none came.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) status: Option<u16>,
    /// From sending to the answer or the error, in milliseconds.
    pub(crate) latency_ms: u64,
    /// What went wrong; absent for a 2xx answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<String>,
}

/// `POST /api/webhooks/deliveries/{id}/replay`: the delivery is due again.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ReplayedBody {
    /// The delivery.
    pub(crate) id: u64,
    /// `pending`.
    pub(crate) status: String,
}

impl DeliveryBody {
    /// The body of `delivery`.
    pub(crate) fn of(delivery: &askloop_core::store::Delivery) -> Self {
        let pending = delivery.status == askloop_core::store::DeliveryStatus::Pending;
        Self {
            id: delivery.id.0,
            endpoint: delivery.endpoint.clone(),
            status: delivery.status.as_str().to_owned(),
            created_at: rfc3339(delivery.created_at_ms),
            next_attempt_at: pending.then(|| rfc3339(delivery.next_attempt_ms)),
            attempts: delivery
                .attempts
                .iter()
                .map(|attempt| AttemptBody {
                    at: rfc3339(attempt.at_ms),
                    status: attempt.status,
                    latency_ms: attempt.latency_ms,
                    error: attempt.error.clone(),
                })
                .collect(),
            event: serde_json::to_value(&delivery.event).unwrap_or(Value::Null),
        }
    }
}

/// `POST /api/runs/{runId}/calls/{toolCallId}/link`: the link asked for (the body is optional).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct LinkRequestBody {
    /// How long the link should live, in seconds (at least 1); at most the server's maximum
    /// (`answer_link_max_hours`, 24 h by default), which is also the default. The call's
    /// deadline ends it sooner.
    #[serde(default)]
    #[schema(minimum = 1)]
    pub(crate) expires_in_seconds: Option<u64>,
    /// The role the link acts with (1 to 64 letters, digits, `-`, `_`, `.`, `:`), kept with
    /// the link for the approval policy.
    #[serde(default)]
    pub(crate) role: Option<String>,
}

/// An answer link just made.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct LinkBody {
    /// The link: the server's public URL (`public_url`; without one, `http://` and the
    /// request's `Host`) followed by `path`. Whoever has it may answer the call once.
    pub(crate) url: String,
    /// `/answer/{token}`.
    pub(crate) path: String,
    /// When it stops working (RFC 3339, UTC with milliseconds).
    #[schema(format = DateTime)]
    pub(crate) expires_at: String,
    /// The link's id (the store's number).
    pub(crate) link_id: u64,
}

/// The links revoked by `DELETE /api/runs/{runId}/calls/{toolCallId}/link`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RevokedLinksBody {
    /// How many links of the call were revoked (0 when it had none not revoked yet).
    pub(crate) revoked: u64,
}

/// `POST /answer/{token}`: the answer to the link's question (`resumeData`), or the decision
/// on its approval (`approved`, with `reason` when declining, `args` to approve edited
/// arguments).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct LinkAnswerRequest {
    /// The answer to a question, checked against its resume schema.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub(crate) resume_data: Option<Value>,
    /// The decision on an approval.
    #[serde(default)]
    pub(crate) approved: Option<bool>,
    /// Why it was declined (with `approved: false`).
    #[serde(default)]
    pub(crate) reason: Option<String>,
    /// Edited arguments, approved as edited (with `approved: true`), checked against the
    /// tool's input schema.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub(crate) args: Option<Value>,
}

/// What `POST /answer/{token}` did: the call was answered, approved or declined (the run goes
/// on in the server).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct LinkAnsweredBody {
    /// `answered`, `approved` or `declined`.
    pub(crate) outcome: String,
}
