//! What the scenarios share: a recording model, tools that count their executions, an agent
//! with them, and readers of a stream's chunks.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use futures::StreamExt;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::ids::{RunId, RunKey, ThreadId, ThreadKey};
use crate::model::{LanguageModel, Message, ModelError, ModelEventStream, ModelRequest};
use crate::run::{RunState, RunStatus};
use crate::store::RunStore;
use crate::testing::ScriptedModel;
use crate::{Agent, AskUser, Chunk, Execution, Tool, ToolContext};

/// A model that delegates to a script and records every request it gets.
pub struct RecordingModel {
    inner: ScriptedModel,
    requests: Mutex<Vec<ModelRequest>>,
    fail_next: AtomicUsize,
}

impl RecordingModel {
    pub fn new(script: &str) -> Arc<Self> {
        Arc::new(Self {
            inner: ScriptedModel::from_json(script).unwrap(),
            requests: Mutex::new(Vec::new()),
            fail_next: AtomicUsize::new(0),
        })
    }

    pub fn calls(&self) -> usize {
        self.requests.lock().unwrap().len()
    }

    pub fn last_request(&self) -> ModelRequest {
        self.requests.lock().unwrap().last().cloned().unwrap()
    }

    /// Makes the next `count` calls fail with a request error.
    pub fn fail_next(&self, count: usize) {
        self.fail_next.store(count, Ordering::SeqCst);
    }
}

#[async_trait]
impl LanguageModel for RecordingModel {
    fn provider(&self) -> &str {
        "scripted"
    }
    fn model_id(&self) -> &str {
        "recording"
    }
    async fn stream(&self, request: ModelRequest) -> Result<ModelEventStream, ModelError> {
        self.requests.lock().unwrap().push(request.clone());
        if self.fail_next.load(Ordering::SeqCst) > 0 {
            self.fail_next.fetch_sub(1, Ordering::SeqCst);
            return Err(ModelError::Request {
                model: "recording".into(),
                message: "HTTP 503".into(),
                source: None,
            });
        }
        self.inner.stream(request).await
    }
}

#[derive(Deserialize, JsonSchema)]
pub struct CountArgs {
    /// Any label.
    pub label: String,
}

/// A tool that completes at once and counts its executions.
#[derive(Clone, Default)]
pub struct Counter {
    pub executions: Arc<AtomicUsize>,
}

#[async_trait]
impl Tool for Counter {
    const NAME: &'static str = "count";
    type Args = CountArgs;
    type Output = Value;
    type Error = std::convert::Infallible;
    fn description(&self) -> String {
        "Counts.".into()
    }
    async fn execute(
        &self,
        args: CountArgs,
        _: &ToolContext,
    ) -> Result<Execution<Value>, Self::Error> {
        let count = self.executions.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(Execution::Complete(
            json!({"label": args.label, "count": count}),
        ))
    }
}

#[derive(Deserialize, JsonSchema)]
pub struct GateArgs {
    /// What to approve.
    pub action: String,
}

/// A tool that suspends for approval and counts how often its resume path runs.
#[derive(Clone, Default)]
pub struct Gate {
    pub resumes: Arc<AtomicUsize>,
}

#[async_trait]
impl Tool for Gate {
    const NAME: &'static str = "gate";
    type Args = GateArgs;
    type Output = Value;
    type Error = std::convert::Infallible;
    fn description(&self) -> String {
        "Waits for approval.".into()
    }
    fn resume_schema(&self) -> Option<Value> {
        Some(
            json!({"type": "object", "properties": {"approved": {"type": "boolean"}}, "required": ["approved"]}),
        )
    }
    async fn execute(
        &self,
        args: GateArgs,
        context: &ToolContext,
    ) -> Result<Execution<Value>, Self::Error> {
        match context.resume_data() {
            Some(answer) => {
                self.resumes.fetch_add(1, Ordering::SeqCst);
                Ok(Execution::Complete(
                    json!({"action": args.action, "approved": answer["approved"]}),
                ))
            }
            None => Ok(context.suspend(json!({"action": args.action}))),
        }
    }
}

pub fn agent(
    store: &Arc<dyn RunStore>,
    model: &Arc<RecordingModel>,
    counter: &Counter,
    gate: &Gate,
) -> Agent {
    Agent::builder("tester")
        .shared_model(model.clone())
        .tool(AskUser::new())
        .tool(counter.clone())
        .tool(gate.clone())
        .shared_store(store.clone())
        .build()
        .unwrap()
}

pub async fn chunks_of(stream: crate::AgentStream) -> Vec<Chunk> {
    stream.map(|item| item.unwrap()).collect().await
}

pub fn suspended_payloads(chunks: &[Chunk]) -> Vec<(String, Value, Option<Value>)> {
    chunks
        .iter()
        .filter_map(|chunk| match chunk {
            Chunk::ToolCallSuspended {
                call, suspension, ..
            } => Some((
                call.id.to_string(),
                suspension.payload.clone(),
                suspension.resume_schema.clone(),
            )),
            _ => None,
        })
        .collect()
}

pub fn tool_results(chunks: &[Chunk]) -> Vec<(String, Value, bool)> {
    chunks
        .iter()
        .filter_map(|chunk| match chunk {
            Chunk::ToolResult { result, .. } => Some((
                result.tool_call_id.to_string(),
                result.result.clone(),
                result.is_error,
            )),
            _ => None,
        })
        .collect()
}

pub fn has_finish(chunks: &[Chunk]) -> bool {
    chunks
        .iter()
        .any(|chunk| matches!(chunk, Chunk::Finish { .. }))
}

/// The resource of the runs [`state`] makes.
pub const TENANT: &str = "tenant-1";

/// The key of a run [`state`] made (resource [`TENANT`]).
pub fn owned(run_id: &str) -> RunKey {
    RunKey::new(Some(TENANT.into()), RunId::new(run_id))
}

/// The key of a thread of the runs [`state`] makes (resource [`TENANT`]).
pub fn owned_thread(thread_id: &str) -> ThreadKey {
    ThreadKey::new(Some(TENANT.into()), ThreadId::new(thread_id))
}

/// The key of a run without resource (what the scenarios' agents start by default).
pub fn unowned(run_id: &RunId) -> RunKey {
    RunKey::new(None, run_id.clone())
}

/// A run `run_id` of thread `thread` in `status`, created at `created` (ms), of resource
/// [`TENANT`], with one user message.
pub fn state(run_id: &str, thread: &str, status: RunStatus, created: u64) -> RunState {
    let mut state = RunState::new(
        RunId::new(run_id),
        ThreadId::new(thread),
        Some(TENANT.into()),
        "tester".into(),
        Some("scripted:x.json".into()),
        vec![Message::user("hello")],
        None,
    );
    state.status = status;
    state.created_at_ms = created;
    state
}

/// The lease of agents in crash scenarios: short, so a "dead" driver's run can be taken over
/// soon.
pub const SHORT_LEASE: std::time::Duration = std::time::Duration::from_millis(150);

/// Continues a run whose driver "died" (its stream was dropped), once its lease expired: until
/// then the claim is refused as in progress, and nothing changes.
pub async fn continue_after_lease(agent: &Agent, run_id: &RunId) -> crate::AgentStream {
    loop {
        match agent.continue_stream(run_id).await {
            Ok(stream) => return stream,
            Err(crate::ResumeError::InProgress { .. }) => {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            Err(error) => panic!("continue of {run_id}: {error:?}"),
        }
    }
}

pub fn ask(id: &str, args: Value) -> Value {
    json!({"id": id, "name": "ask_user", "args": args})
}

pub fn script(steps: Vec<Value>) -> String {
    json!({ "steps": steps }).to_string()
}

/// A model whose first call streams one delta and then hangs; later calls answer "Recovered.".
pub struct HangingModel {
    pub calls: AtomicUsize,
}

#[async_trait]
impl LanguageModel for HangingModel {
    fn provider(&self) -> &str {
        "test"
    }
    fn model_id(&self) -> &str {
        "hanging"
    }
    async fn stream(&self, _: ModelRequest) -> Result<ModelEventStream, ModelError> {
        use crate::model::{FinishReason, ModelEvent, Usage};
        if self.calls.fetch_add(1, Ordering::SeqCst) == 0 {
            let first = futures::stream::iter([Ok(ModelEvent::TextDelta("Thinking".into()))]);
            return Ok(Box::pin(first.chain(futures::stream::pending())));
        }
        Ok(Box::pin(futures::stream::iter([
            Ok(ModelEvent::TextDelta("Recovered.".into())),
            Ok(ModelEvent::Finish {
                reason: FinishReason::Stop,
                usage: Usage::default(),
            }),
        ])))
    }
}

/// The text of a message to `resource`'s thread `thread` for [`TurnModel`]:
/// `"<resource>/<thread>: <text>"` (`-` for no resource). End `text` with `?` to have the model
/// ask a question.
pub fn turn_text(resource: Option<&str>, thread: &str, text: &str) -> String {
    format!("{}/{thread}: {text}", resource.unwrap_or("-"))
}

/// A model for races between turns of threads. Every user message is [`turn_text`]; on each
/// call it records a violation when
/// - the request holds a user message of another thread or resource than its last one (a
///   history or a supersede that crossed threads), or
/// - another call for the same thread is in the model at the same moment, or the store does
///   not hold exactly one running run of that thread (two turns running side by side).
///
/// It answers a question (an `ask_user` call) when the last message is a user message ending
/// with `?`, else the text `ok`, after `delay` (so that racing turns overlap in it).
pub struct TurnModel {
    store: Arc<dyn RunStore>,
    delay: std::time::Duration,
    active: Mutex<std::collections::HashMap<String, usize>>,
    calls: AtomicUsize,
    requests: Mutex<Vec<ModelRequest>>,
    violations: Mutex<Vec<String>>,
}

impl TurnModel {
    /// A model checking turns against `store`, each call lasting `delay`.
    pub fn new(store: Arc<dyn RunStore>, delay: std::time::Duration) -> Arc<Self> {
        Arc::new(Self {
            store,
            delay,
            active: Mutex::new(std::collections::HashMap::new()),
            calls: AtomicUsize::new(0),
            requests: Mutex::new(Vec::new()),
            violations: Mutex::new(Vec::new()),
        })
    }

    /// How many calls it got.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// Every request it got, in order.
    pub fn requests(&self) -> Vec<ModelRequest> {
        self.requests.lock().unwrap().clone()
    }

    /// What went wrong so far (empty when every call kept to its thread, one at a time).
    pub fn violations(&self) -> Vec<String> {
        self.violations.lock().unwrap().clone()
    }

    fn violation(&self, text: String) {
        self.violations.lock().unwrap().push(text);
    }
}

/// The `<resource>/<thread>` tag of a [`turn_text`].
fn turn_tag(text: &str) -> Option<&str> {
    text.split_once(": ").map(|(tag, _)| tag)
}

#[async_trait]
impl LanguageModel for TurnModel {
    fn provider(&self) -> &str {
        "test"
    }
    fn model_id(&self) -> &str {
        "turns"
    }
    async fn stream(&self, request: ModelRequest) -> Result<ModelEventStream, ModelError> {
        use crate::model::{FinishReason, ModelEvent, Usage};
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.requests.lock().unwrap().push(request.clone());
        let users: Vec<&str> = request
            .messages
            .iter()
            .filter_map(|message| match message {
                Message::User { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        let tag = users
            .last()
            .and_then(|text| turn_tag(text))
            .unwrap_or_default()
            .to_owned();
        for text in &users {
            if turn_tag(text) != Some(tag.as_str()) {
                self.violation(format!("a request of {tag} holds {text:?}"));
            }
        }
        let first = {
            let mut active = self.active.lock().unwrap();
            let count = active.entry(tag.clone()).or_insert(0);
            *count += 1;
            *count == 1
        };
        if !first {
            self.violation(format!("two turns of {tag} in the model at once"));
        }
        if let Some((resource, thread)) = tag.split_once('/') {
            let key = ThreadKey::new(
                (resource != "-").then(|| resource.into()),
                ThreadId::new(thread),
            );
            let filter = crate::store::RunFilter::in_thread(&key).status(RunStatus::Running);
            match self.store.list_runs(&filter).await {
                Ok(page) if page.runs.len() == 1 => {}
                Ok(page) => self.violation(format!(
                    "{} running runs of {tag} during a model call",
                    page.runs.len()
                )),
                Err(error) => self.violation(format!("listing {tag}: {error}")),
            }
        }
        tokio::time::sleep(self.delay).await;
        if let Some(count) = self.active.lock().unwrap().get_mut(&tag) {
            *count -= 1;
        }
        let asks =
            matches!(request.messages.last(), Some(Message::User { text }) if text.ends_with('?'));
        let mut events = Vec::new();
        if asks {
            events.push(Ok(ModelEvent::ToolCall(crate::model::ToolCall {
                id: "q".into(),
                name: "ask_user".into(),
                args: crate::model::ToolArgs::Json(json!({"question": "Which one?"})),
            })));
        } else {
            events.push(Ok(ModelEvent::TextDelta("ok".into())));
        }
        events.push(Ok(ModelEvent::Finish {
            reason: if asks {
                FinishReason::ToolCalls
            } else {
                FinishReason::Stop
            },
            usage: Usage::default(),
        }));
        Ok(Box::pin(futures::stream::iter(events)))
    }
}
