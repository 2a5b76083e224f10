//! A running turn can be stopped (issue 31): a run blocked in its model call, or with a tool
//! executing, is cancelled through a second agent on the same store (as another process or
//! server would); the driver's stream ends promptly with the cancelled error, the stored run is
//! `cancelled` with exactly one result per call, a late tool result is never recorded, and the
//! thread's next turn sees what was cancelled.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::ids::RunKey;
use crate::message::AuditAction;
use crate::model::{
    AssistantPart, FinishReason, LanguageModel, Message, ModelError, ModelEvent, ModelEventStream,
    ModelRequest, Usage,
};
use crate::run::RunStatus;
use crate::store::RunStore;
use crate::testing::conformance::support::*;
use crate::{Agent, AgentError, AgentStream, Chunk, Execution, RunOptions, Tool, ToolContext};

/// How long a cancelled driver may take to end its stream (the SQLite poll is 250 ms).
const PROMPTLY: Duration = Duration::from_secs(5);

/// A model that records its requests; its first call streams "Thinking" and then waits
/// forever (a slow model), or — with `tool_calls` — calls those tools at once; every later call
/// answers "Recovered.".
struct SlowModel {
    requests: Mutex<Vec<ModelRequest>>,
    first: Vec<Value>,
    started: Notify,
}

impl SlowModel {
    fn new(first: Vec<Value>) -> Arc<Self> {
        Arc::new(Self {
            requests: Mutex::new(Vec::new()),
            first,
            started: Notify::new(),
        })
    }

    fn requests(&self) -> Vec<ModelRequest> {
        self.requests.lock().unwrap().clone()
    }
}

#[async_trait]
impl LanguageModel for SlowModel {
    fn provider(&self) -> &str {
        "test"
    }
    fn model_id(&self) -> &str {
        "slow"
    }
    async fn stream(&self, request: ModelRequest) -> Result<ModelEventStream, ModelError> {
        let first = {
            let mut requests = self.requests.lock().unwrap();
            requests.push(request);
            requests.len() == 1
        };
        let finish = |reason| {
            Ok(ModelEvent::Finish {
                reason,
                usage: Usage::default(),
            })
        };
        if first && self.first.is_empty() {
            self.started.notify_one();
            let thinking = futures::stream::iter([Ok(ModelEvent::TextDelta("Thinking".into()))]);
            return Ok(Box::pin(thinking.chain(futures::stream::pending())));
        }
        if first {
            let mut events: Vec<_> = self
                .first
                .iter()
                .map(|call| {
                    Ok(ModelEvent::ToolCall(crate::model::ToolCall {
                        id: call["id"].as_str().unwrap().into(),
                        name: call["name"].as_str().unwrap().into(),
                        args: crate::model::ToolArgs::Json(call["args"].clone()),
                    }))
                })
                .collect();
            events.push(finish(FinishReason::ToolCalls));
            return Ok(Box::pin(futures::stream::iter(events)));
        }
        Ok(Box::pin(futures::stream::iter([
            Ok(ModelEvent::TextDelta("Recovered.".into())),
            finish(FinishReason::Stop),
        ])))
    }
}

/// A side-effecting tool that signals when it starts, then waits for `release` before it
/// completes; counts how often it finished and how often it was dropped unfinished.
#[derive(Clone, Default)]
struct SlowTool {
    started: Arc<Notify>,
    release: Arc<Notify>,
    finished: Arc<AtomicUsize>,
    dropped: Arc<AtomicUsize>,
}

/// Counts a drop that happens before [`DropGuard::done`].
struct DropGuard(Arc<AtomicUsize>, bool);

impl DropGuard {
    fn done(mut self) {
        self.1 = true;
    }
}

impl Drop for DropGuard {
    fn drop(&mut self) {
        if !self.1 {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}

#[async_trait]
impl Tool for SlowTool {
    const NAME: &'static str = "slow";
    type Args = CountArgs;
    type Output = Value;
    type Error = std::convert::Infallible;
    fn description(&self) -> String {
        "Takes its time.".into()
    }
    async fn execute(
        &self,
        args: CountArgs,
        _: &ToolContext,
    ) -> Result<Execution<Value>, Self::Error> {
        let guard = DropGuard(self.dropped.clone(), false);
        self.started.notify_one();
        self.release.notified().await;
        self.finished.fetch_add(1, Ordering::SeqCst);
        guard.done();
        Ok(Execution::Complete(
            json!({"label": args.label, "slow": true}),
        ))
    }
}

fn agent_with(
    store: &Arc<dyn RunStore>,
    model: &Arc<SlowModel>,
    slow: &SlowTool,
    counter: &Counter,
) -> Agent {
    Agent::builder("tester")
        .shared_model(model.clone())
        .tool(slow.clone())
        .tool(counter.clone())
        .shared_store(store.clone())
        .build()
        .unwrap()
}

/// Drives `stream` on a task of its own (as a server or another process would), returning
/// every item it yielded.
fn drive(stream: AgentStream) -> tokio::task::JoinHandle<Vec<Result<Chunk, AgentError>>> {
    tokio::spawn(stream.collect::<Vec<_>>())
}

/// Waits (bounded by [`PROMPTLY`]) for the driver's stream to end, and checks that it ended
/// with the cancelled error after no `finish`.
async fn ends_cancelled(driver: tokio::task::JoinHandle<Vec<Result<Chunk, AgentError>>>) {
    let items = tokio::time::timeout(PROMPTLY, driver)
        .await
        .expect("the driver's stream did not end within 5 s of the cancel")
        .unwrap();
    let (last, before) = items.split_last().unwrap();
    match last {
        Err(error @ AgentError::RunCancelled { .. }) => assert_eq!(error.code(), "cancelled"),
        other => panic!("the stream ended with {other:?}"),
    }
    assert!(
        before
            .iter()
            .all(|item| matches!(item, Ok(chunk) if !matches!(chunk, Chunk::Finish { .. }))),
        "{before:?}"
    );
}

/// Every call of `messages` and its results: each call must have exactly one.
fn results_per_call(messages: &[Message]) -> HashMap<String, Vec<Value>> {
    let mut per_call: HashMap<String, Vec<Value>> = HashMap::new();
    for message in messages {
        match message {
            Message::Assistant { parts } => {
                for part in parts {
                    if let AssistantPart::ToolCall(call) = part {
                        per_call.entry(call.id.to_string()).or_default();
                    }
                }
            }
            Message::Tool { results } => {
                for result in results {
                    per_call
                        .entry(result.tool_call_id.to_string())
                        .or_default()
                        .push(result.result.clone());
                }
            }
            _ => {}
        }
    }
    per_call
}

/// The next turn of the thread (through `agent`) answers "Recovered." and its request holds the
/// cancelled run's messages, then the new message.
async fn next_turn_sees(agent: &Agent, model: &SlowModel, thread: &str, cancelled: &[Message]) {
    let output = agent
        .stream_with("go on", RunOptions::new().thread(thread.to_owned()))
        .collect_output()
        .await
        .unwrap();
    assert_eq!(output.text, "Recovered.");
    let request = model.requests().pop().unwrap();
    let mut expected = cancelled.to_vec();
    expected.push(Message::user("go on"));
    assert_eq!(
        request.messages, expected,
        "the next turn sees what was cancelled"
    );
}

/// A run blocked in a slow model call is cancelled through another agent on the same store:
/// the driver drops the call and its stream ends promptly; the run is `cancelled` with only the
/// messages it had committed, and the next turn sees them.
pub(super) async fn issue31_a_running_model_call_is_cancelled_from_another_agent(
    store: Arc<dyn RunStore>,
) {
    let model = SlowModel::new(Vec::new());
    let (slow, counter) = (SlowTool::default(), Counter::default());
    let driver_agent = agent_with(&store, &model, &slow, &counter);
    let canceller = agent_with(&store, &model, &slow, &counter);
    let stream = driver_agent.stream_with("think hard", RunOptions::new().thread("stop-model"));
    let key: RunKey = stream.run_key().clone();
    let started = model.started.notified();
    let driver = drive(stream);
    started.await;
    canceller
        .cancel_run(&key, Some("admin".into()))
        .await
        .unwrap();
    ends_cancelled(driver).await;
    let stored = store.load_run(&key).await.unwrap().state;
    assert_eq!(stored.status, RunStatus::Cancelled);
    assert_eq!(
        stored.error.as_ref().map(|failure| failure.code.as_str()),
        Some("cancelled")
    );
    assert_eq!(
        stored.messages,
        [Message::user("think hard")],
        "nothing of the dropped model call was stored"
    );
    assert!(stored.pending_step.is_none());
    // Cancelled is final: no continue, no second cancel.
    assert!(canceller.continue_stream(&key).await.is_err());
    assert!(canceller.cancel_run(&key, None).await.is_err());
    next_turn_sees(&canceller, &model, "stop-model", &stored.messages).await;
}

/// A run whose side-effecting tool is executing is cancelled through another agent on the
/// same store: the tool's future is dropped (its late result never recorded), every call of the
/// step has exactly one result — the running one "cancelled … outcome unknown" —, the driver's
/// stream ends promptly, and the next turn sees the cancelled step.
pub(super) async fn issue31_a_running_tool_is_cancelled_from_another_agent(
    store: Arc<dyn RunStore>,
) {
    cancel_a_running_tool(store, false).await;
}

/// As above, but the tool finishes right after the cancel was stored, before the driver may
/// have noticed (on SQLite it looks every 250 ms): the driver's commit of the late result
/// conflicts with the cancelled run, the result is not recorded, and the stream still ends as
/// cancelled.
pub(super) async fn issue31_a_tool_result_after_the_cancel_is_not_recorded(
    store: Arc<dyn RunStore>,
) {
    cancel_a_running_tool(store, true).await;
}

async fn cancel_a_running_tool(store: Arc<dyn RunStore>, release_after_cancel: bool) {
    let model = SlowModel::new(vec![
        json!({"id": "s1", "name": "slow", "args": {"label": "deploy"}}),
        json!({"id": "c1", "name": "count", "args": {"label": "quick"}}),
    ]);
    let (slow, counter) = (SlowTool::default(), Counter::default());
    let driver_agent = agent_with(&store, &model, &slow, &counter);
    let canceller = agent_with(&store, &model, &slow, &counter);
    let stream = driver_agent.stream_with("deploy it", RunOptions::new().thread("stop-tool"));
    let key: RunKey = stream.run_key().clone();
    let started = slow.started.notified();
    let driver = drive(stream);
    started.await;
    canceller
        .cancel_run(&key, Some("admin".into()))
        .await
        .unwrap();
    if release_after_cancel {
        slow.release.notify_one();
    }
    ends_cancelled(driver).await;
    let (finished, dropped) = (
        slow.finished.load(Ordering::SeqCst),
        slow.dropped.load(Ordering::SeqCst),
    );
    assert_eq!(
        finished + dropped,
        1,
        "the tool ran once: {finished} {dropped}"
    );
    if !release_after_cancel {
        assert_eq!(dropped, 1, "the tool was stopped");
        // Released now, the tool has nothing left to finish: its future is gone.
        slow.release.notify_waiters();
        tokio::task::yield_now().await;
        assert_eq!(slow.finished.load(Ordering::SeqCst), 0);
    }
    let stored = store.load_run(&key).await.unwrap().state;
    assert_eq!(stored.status, RunStatus::Cancelled);
    assert!(stored.pending_step.is_none());
    let per_call = results_per_call(&stored.messages);
    assert_eq!(per_call.len(), 2, "{per_call:?}");
    for (call, results) in &per_call {
        assert_eq!(results.len(), 1, "call {call}: {results:?}");
    }
    let slow_result = &per_call["s1"][0];
    assert_eq!(slow_result["isError"], true);
    let text = slow_result["content"].as_str().unwrap();
    assert!(
        text.starts_with("the run was cancelled while this tool was running"),
        "{text}"
    );
    let audit: Vec<_> = stored
        .messages
        .iter()
        .filter_map(|message| match message {
            Message::Tool { results } => Some(results),
            _ => None,
        })
        .flatten()
        .filter(|result| result.tool_call_id.as_str() == "s1")
        .flat_map(|result| result.audit.iter().map(|record| record.action))
        .collect();
    assert_eq!(audit, [AuditAction::Cancel]);
    next_turn_sees(&canceller, &model, "stop-tool", &stored.messages).await;
}
