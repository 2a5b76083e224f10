//! Sub-agents: an agent offered to another as a tool ([`crate::AgentBuilder::subagent`]).
//!
//! A call of the sub-agent's tool starts a **child run** of that agent: a real run, stored in
//! the same store and resource, whose id is derived from the parent's run and call, so
//! that every process that drives the parent finds the same child. The child's chunks stream
//! through the parent's stream (`subagent-chunk`, [`Chunk::Subagent`]); its final text is the
//! call's result. When the child waits for a person, the parent's call suspends too, keeping a
//! copy of the child's waiting calls ([`crate::run::SubagentWait`]): the parent announces them as
//! its own, under ids `PARENT_CALL~CHILD_CALL`, up to the root. An answer given to the root is
//! checked against the child in the root's claim (`run_loop/claim.rs`), then carried to the
//! child as the parent's call's answer (the [`Envelope`]): the call's resume path claims the
//! child with it and drives it, and the parent goes on with the child's result.
//!
//! Every path of the tool reads where the child stands and goes on from there (start it,
//! answer it, take it over after a crash, wait for its driver, or take its outcome), so a call
//! that runs again after a crash (the loop re-runs sub-agent calls: `reruns_after_crash`)
//! neither starts a second child nor runs the child's finished tools twice: the child's own
//! journal applies inside it.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::{SinkExt, StreamExt};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::actor::Actor;
use crate::chunk::Chunk;
use crate::definition::AgentDefinition;
use crate::error::{ResumeError, error_chain_text};
use crate::ids::{RunId, RunKey, RunRef, ThreadId, ToolCallId};
use crate::message::Suspension;
use crate::model::ToolDefinition;
use crate::options::RunOptions;
use crate::run::{ParentRun, RunState, RunStatus, SubagentWait};
use crate::run_loop::{self, Envelope};
use crate::schema::schema_of;
use crate::store::{StoreError, StoredRun};
use crate::stream::AgentStream;
use crate::tool::{DynTool, Execution, ResumeRejection, ToolContext, ToolError};

/// How deep sub-agents nest by default: a root's child is at depth 1, so a question asked three
/// levels below the root is the deepest ([`crate::AgentBuilder::max_subagent_depth`]).
pub const DEFAULT_MAX_SUBAGENT_DEPTH: u32 = 3;

/// The namespace of child run ids (UUID v5 of the parent's resource, run and call).
const CHILD_RUN_NAMESPACE: uuid::Uuid =
    uuid::Uuid::from_u128(0x6a5c_1e0f_7d2b_4c39_9e84_2b1f_0c3d_5a71);

/// How often the tool looks again while another process drives the child (its lease is live).
const DRIVER_POLL: Duration = Duration::from_millis(100);

/// At most this many rounds (start, answer, take over, wait) before the tool gives up: a bound
/// on a child that never settles (each round waits or drives the child to its next stop).
const MAX_ROUNDS: usize = 10_000;

/// The arguments the model gives a sub-agent: what to do, and optionally more context.
#[derive(Debug, Deserialize, JsonSchema)]
struct SubagentArgs {
    /// The task for the sub-agent, in full: it sees nothing of this conversation but this.
    prompt: String,
    /// More context the sub-agent needs (facts, constraints, earlier findings).
    #[serde(default)]
    context: Option<String>,
}

/// The tool through which a parent calls a sub-agent: one per sub-agent, named by its id.
pub(crate) struct SubagentTool {
    child: Arc<AgentDefinition>,
    definition: ToolDefinition,
}

impl SubagentTool {
    /// The tool of sub-agent `child`.
    pub(crate) fn new(child: Arc<AgentDefinition>) -> Self {
        let description = child.description.clone().unwrap_or_else(|| {
            format!(
                "Delegate a task to the {} agent: give it the whole task as `prompt`; it works on \
                 its own (it may ask the user) and answers with its final text.",
                child.name
            )
        });
        let definition = ToolDefinition {
            name: child.id.to_string(),
            description,
            input_schema: schema_of::<SubagentArgs>(),
        };
        Self { child, definition }
    }
}

#[async_trait]
impl DynTool for SubagentTool {
    fn name(&self) -> &str {
        &self.definition.name
    }

    fn definition(&self) -> ToolDefinition {
        self.definition.clone()
    }

    fn suspend_schema(&self) -> Option<Value> {
        None
    }

    fn resume_schema(&self) -> Option<Value> {
        None
    }

    fn idempotent(&self) -> bool {
        false
    }

    fn asks_user(&self) -> bool {
        false
    }

    fn requires_approval(&self, _args: &Value) -> bool {
        false
    }

    /// A sub-agent's call is never answered itself: its child's calls are, by their own ids
    /// (the claim routes them; this refuses anything else).
    fn validate_resume(
        &self,
        _suspension: &Suspension,
        _resume_data: &Value,
    ) -> Result<(), ResumeRejection> {
        Err(ResumeRejection {
            expected: "answers to the sub-agent's waiting calls, by their ids (CALL~CHILD_CALL)"
                .into(),
            problems: Vec::new(),
        })
    }

    async fn execute_json(
        &self,
        args: Value,
        context: &ToolContext,
    ) -> Result<Execution<Value>, ToolError> {
        let args: SubagentArgs =
            serde_json::from_value(args).map_err(|error| ToolError::InvalidArguments {
                tool: self.definition.name.clone(),
                problems: vec![error.to_string()],
            })?;
        let envelope = match context.resume_data() {
            Some(data) => Some(
                serde_json::from_value::<Envelope>(data.clone())
                    .map_err(|error| self.failed(format!("unreadable answer: {error}")))?,
            ),
            None => None,
        };
        let child = Child::of(&self.child, context).map_err(|text| self.failed(text))?;
        child
            .settle(&args, envelope, context)
            .await
            .map_err(|text| self.failed(text))
    }
}

impl SubagentTool {
    fn failed(&self, text: String) -> ToolError {
        ToolError::Failed {
            tool: self.definition.name.clone(),
            source: text.into(),
        }
    }
}

/// The child run of one call of a sub-agent: its agent, key and link to its parent.
struct Child<'a> {
    agent: &'a Arc<AgentDefinition>,
    key: RunKey,
    link: ParentRun,
    started_by: Option<Actor>,
}

impl<'a> Child<'a> {
    /// The child run of the call `context` runs, or why there is none (outside a run).
    fn of(agent: &'a Arc<AgentDefinition>, context: &ToolContext) -> Result<Self, String> {
        let (Some(run_id), Some(call_id), Some(scope)) =
            (context.run_id(), context.tool_call_id(), context.scope())
        else {
            return Err("a sub-agent runs only inside an agent run".into());
        };
        let depth = scope.parent.as_ref().map_or(0, |parent| parent.depth) + 1;
        let root = scope
            .parent
            .as_ref()
            .map_or_else(|| run_id.clone(), |parent| parent.root_run_id.clone());
        let key = RunKey::new(
            scope.resource_id.clone(),
            child_run_id(
                scope.resource_id.as_ref().map(|id| id.as_str()),
                run_id,
                call_id,
            ),
        );
        Ok(Self {
            agent,
            key,
            link: ParentRun {
                run_id: run_id.clone(),
                tool_call_id: call_id.clone(),
                root_run_id: root,
                depth,
            },
            started_by: scope.started_by.clone(),
        })
    }

    /// Reads where the child stands and goes on from there until it has an outcome for the
    /// parent's call: its result, a suspension (its waiting calls, kept in the context's scope
    /// for the loop), or its failure (as text).
    async fn settle(
        &self,
        args: &SubagentArgs,
        mut envelope: Option<Envelope>,
        context: &ToolContext,
    ) -> Result<Execution<Value>, String> {
        let store = self.agent.store.as_ref();
        // A first call starts its child at once (after a crash, the child may exist: its
        // insert is then refused, and the child is read).
        let mut fresh = envelope.is_none();
        let mut started = false;
        for _ in 0..MAX_ROUNDS {
            let stored = if std::mem::take(&mut fresh) {
                None
            } else {
                match store.load_run(&self.key).await {
                    Ok(stored) => Some(stored),
                    Err(StoreError::NotFound { .. }) => None,
                    Err(error) => return Err(error_chain_text(&error)),
                }
            };
            let Some(stored) = stored else {
                if started {
                    return Err("the sub-agent's run could not be started".into());
                }
                started = true;
                let stream =
                    run_loop::start(Arc::clone(self.agent), prompt_of(args), self.options());
                self.forward(stream, context).await;
                continue;
            };
            if stored.state.parent.as_ref() != Some(&self.link) {
                return Err(format!(
                    "run {} exists and is not this call's sub-agent run",
                    self.key.run_id
                ));
            }
            match stored.state.status {
                RunStatus::Completed => {
                    return Ok(Execution::Complete(Value::String(
                        stored.state.final_text(),
                    )));
                }
                RunStatus::Failed => {
                    return Err(stored.state.error.as_ref().map_or_else(
                        || "the sub-agent's run failed".to_owned(),
                        |failure| format!("the sub-agent's run failed: {}", failure.message),
                    ));
                }
                RunStatus::Cancelled => return Err("the sub-agent's run was cancelled".into()),
                RunStatus::Suspended => {
                    let Some(given) = envelope.take() else {
                        return Ok(self.suspend(&stored.state, context));
                    };
                    envelope = self.answer(stored, given, context).await;
                }
                RunStatus::Running => self.follow(&stored, context).await?,
            }
        }
        Err("the sub-agent's run did not settle".into())
    }

    /// Claims the waiting child with the answers `given` and drives it; gives them back when
    /// the claim must be tried again (another driver is settling the child).
    async fn answer(
        &self,
        stored: StoredRun,
        given: Envelope,
        context: &ToolContext,
    ) -> Option<Envelope> {
        let claimed = run_loop::claim_resume_child(
            self.agent,
            &RunRef::Key(self.key.clone()),
            given.resolutions(),
            given.actor().cloned(),
            Some(stored),
        )
        .await;
        match claimed {
            Ok(claim) => {
                let stream = run_loop::resume(Arc::clone(self.agent), claim);
                self.forward(stream, context).await;
                None
            }
            Err(ResumeError::Conflict { .. } | ResumeError::InProgress { .. }) => {
                tokio::time::sleep(DRIVER_POLL).await;
                Some(given)
            }
            // Refused: the answer was taken before (a run again after a crash) or no longer
            // fits; the child's calls as they stand are the outcome.
            Err(error) => {
                tracing::info!(
                    run_id = %self.key.run_id,
                    error = %error_chain_text(&error),
                    "a sub-agent's answer was not applied again"
                );
                None
            }
        }
    }

    /// A running child: waits while its driver's lease lives, else takes it over and drives it.
    async fn follow(&self, stored: &StoredRun, context: &ToolContext) -> Result<(), String> {
        if let Some(lease) = run_loop::live_lease_of(stored) {
            let left = lease
                .expires_at_ms
                .saturating_sub(crate::time::lease_now_ms());
            tokio::time::sleep(DRIVER_POLL.min(Duration::from_millis(left.max(1)))).await;
            return Ok(());
        }
        match run_loop::claim_continue_child(self.agent, &RunRef::Key(self.key.clone())).await {
            Ok(claim) => {
                let stream = run_loop::resume(Arc::clone(self.agent), claim);
                self.forward(stream, context).await;
                Ok(())
            }
            Err(ResumeError::Conflict { .. } | ResumeError::InProgress { .. }) => {
                tokio::time::sleep(DRIVER_POLL).await;
                Ok(())
            }
            Err(error) => Err(error_chain_text(&error)),
        }
    }

    /// The options of the child's insert: its derived id, its own thread (named by its id), the
    /// parent's resource and starter, the link to the parent.
    fn options(&self) -> RunOptions {
        let mut options = RunOptions::new().thread(ThreadId::new(self.key.run_id.as_str()));
        options.run_id = Some(self.key.run_id.clone());
        options.resource_id = self.key.resource_id.clone();
        options.actor = self.started_by.clone();
        options.parent = Some(self.link.clone());
        options
    }

    /// The parent's call suspends: the child's waiting calls go to the loop through the
    /// context's scope; the suspension's payload names the child for people and logs.
    fn suspend(&self, state: &RunState, context: &ToolContext) -> Execution<Value> {
        let wait = SubagentWait {
            agent_id: self.agent.id.clone(),
            run_id: self.key.run_id.clone(),
            pending: state.pending_tool_calls(),
        };
        if let Some(scope) = context.scope() {
            *scope
                .wait
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(wait);
        }
        Execution::Suspend(Suspension::new(json!({
            "subagent": self.agent.id.as_str(),
            "runId": self.key.run_id.as_str(),
        })))
    }

    /// Streams the child's chunks into the parent's stream (marked as the child's), but its
    /// waiting calls: the parent announces those as its own. The child's errors end its
    /// stream; where it stands is read from the store next.
    async fn forward(&self, mut stream: AgentStream, context: &ToolContext) {
        let mut sink = context.scope().map(|scope| scope.chunks.clone());
        while let Some(item) = stream.next().await {
            let chunk = match item {
                Ok(Chunk::ToolCallSuspended { .. } | Chunk::ToolCallApproval { .. }) => continue,
                Ok(chunk) => chunk,
                Err(error) => {
                    tracing::debug!(
                        run_id = %self.key.run_id,
                        error = %error_chain_text(&error),
                        "a sub-agent's stream ended with an error"
                    );
                    continue;
                }
            };
            if let Some(sender) = sink.as_mut() {
                let nested = Chunk::Subagent {
                    run_id: self.key.run_id.clone(),
                    agent_id: self.agent.id.clone(),
                    tool_call_id: self.link.tool_call_id.clone(),
                    chunk: Box::new(chunk),
                };
                // The parent's stream is gone (dropped): the child still runs to its next stop.
                if sender.send(nested).await.is_err() {
                    sink = None;
                }
            }
        }
    }
}

/// The id of the child run that the call `call_id` of run `run_id` (in resource `resource`)
/// starts, the same in every process: the parent's id, `-`, and 16 hex digits of a UUID v5 of
/// the resource, run and call. Sharing the parent's prefix keeps a tree's rows together in the
/// store's indexes (a time-ordered parent id gives time-ordered children), where a random id
/// would land on a cold page of a large table at every insert. (A parent id too long for that
/// gives the UUID alone.)
pub(crate) fn child_run_id(resource: Option<&str>, run_id: &RunId, call_id: &ToolCallId) -> RunId {
    let name = json!([resource, run_id.as_str(), call_id.as_str()]).to_string();
    let hash = uuid::Uuid::new_v5(&CHILD_RUN_NAMESPACE, name.as_bytes());
    let short = hash.simple().to_string();
    let id = format!("{run_id}-{}", &short[..16]);
    // A parent id near the limit of an id's length: the UUID alone.
    if id.len() > crate::ids::MAX_ID_BYTES {
        return RunId::new(hash.to_string());
    }
    RunId::new(id)
}

/// The prompt a child run starts with: the task, then the context if any.
fn prompt_of(args: &SubagentArgs) -> String {
    match args
        .context
        .as_deref()
        .filter(|text| !text.trim().is_empty())
    {
        Some(context) => format!("{}\n\nContext:\n{context}", args.prompt),
        None => args.prompt.clone(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::sync::Arc;

    use crate::store::{MemoryStore, RunStore};
    use crate::testing::ScriptedModel;
    use crate::{Agent, AgentBuildError};

    fn level(id: &str, store: &Arc<dyn RunStore>, below: Option<Agent>) -> Agent {
        let mut builder = Agent::builder(id)
            .model(ScriptedModel::from_json(r#"{"steps":[{"text":"ok"}]}"#).unwrap())
            .shared_store(store.clone());
        if let Some(child) = below {
            builder = builder.subagent(child);
        }
        builder.build().unwrap()
    }

    #[test]
    fn issue35_sub_agents_nest_three_levels_deep_and_no_deeper() {
        let store: Arc<dyn RunStore> = Arc::new(MemoryStore::new());
        let mut tree = level("a3", &store, None);
        for id in ["a2", "a1", "root"] {
            tree = level(id, &store, Some(tree));
        }
        let error = Agent::builder("top")
            .model(ScriptedModel::from_json(r#"{"steps":[{"text":"ok"}]}"#).unwrap())
            .shared_store(store.clone())
            .subagent(tree)
            .build()
            .unwrap_err();
        assert!(
            matches!(
                error,
                AgentBuildError::SubagentTooDeep {
                    levels: 4,
                    limit: 3,
                    ..
                }
            ),
            "{error:?}"
        );
        assert!(error.to_string().contains("at most 3"), "{error}");
    }

    #[test]
    fn issue35_a_sub_agents_id_must_be_a_tool_name() {
        let store: Arc<dyn RunStore> = Arc::new(MemoryStore::new());
        let child = level("research team", &store, None);
        let error = Agent::builder("supervisor")
            .model(ScriptedModel::from_json(r#"{"steps":[{"text":"ok"}]}"#).unwrap())
            .shared_store(store)
            .subagent(child)
            .build()
            .unwrap_err();
        assert!(
            matches!(error, AgentBuildError::SubagentName { .. }),
            "{error:?}"
        );
    }

    #[test]
    fn issue35_a_sub_agent_must_share_its_parents_store() {
        let store: Arc<dyn RunStore> = Arc::new(MemoryStore::new());
        let other: Arc<dyn RunStore> = Arc::new(MemoryStore::new());
        let child = level("researcher", &other, None);
        let error = Agent::builder("supervisor")
            .model(ScriptedModel::from_json(r#"{"steps":[{"text":"ok"}]}"#).unwrap())
            .shared_store(store)
            .subagent(child)
            .build()
            .unwrap_err();
        assert!(
            matches!(error, AgentBuildError::SubagentStore { .. }),
            "{error:?}"
        );
    }

    #[test]
    fn issue35_child_run_ids_are_the_same_in_every_process_and_per_call() {
        let run = crate::RunId::new("r");
        let a = super::child_run_id(None, &run, &crate::ToolCallId::new("c1"));
        assert_eq!(
            a,
            super::child_run_id(None, &run, &crate::ToolCallId::new("c1"))
        );
        assert_ne!(
            a,
            super::child_run_id(None, &run, &crate::ToolCallId::new("c2"))
        );
        assert_ne!(
            a,
            super::child_run_id(Some("t"), &run, &crate::ToolCallId::new("c1"))
        );
        assert!(a.as_str().starts_with("r-"), "{a}");
        let long = crate::RunId::new("x".repeat(crate::ids::MAX_ID_BYTES));
        let child = super::child_run_id(None, &long, &crate::ToolCallId::new("c1"));
        assert!(crate::IdKind::Run.check(child.as_str()).is_ok(), "{child}");
    }
}
