//! The conformance suite every [`RunStore`] must pass: store semantics (versions, compare-and-swap,
//! threads) and the agent's suspension semantics on top of that store.
//!
//! Run it on a store with [`crate::store_conformance_tests!`], which expands to one
//! `#[tokio::test]` per scenario:
//!
//! ```text
//! askloop_core::store_conformance_tests!(async { std::sync::Arc::new(MyStore::new()) as _ });
//! ```
//!
//! Every scenario panics (fails the test) on a broken promise; none is skipped.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use futures::StreamExt;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::{
    Agent, AgentError, AskUser, Chunk, Execution, LanguageModel, Message, ModelError,
    ModelEventStream, ModelRequest, ResumeError, RunFilter, RunId, RunOptions, RunOutcome,
    RunState, RunStatus, RunStore, ScriptedModel, StoreError, ThreadId, Tool, ToolCallId,
    ToolContext,
};

/// Expands to one `#[tokio::test]` per conformance scenario, each on a fresh store made by
/// `$make` (an expression of type `impl Future<Output = Arc<dyn RunStore>>`).
#[macro_export]
macro_rules! store_conformance_tests {
    ($make:expr) => {
        $crate::store_conformance_tests!(@each $make;
            insert_then_load_round_trips,
            load_of_unknown_run_is_not_found,
            insert_of_existing_id_is_refused,
            stale_update_conflicts_and_changes_nothing,
            update_of_unknown_run_is_not_found,
            list_filters_and_orders_newest_first,
            thread_gets_messages_of_completed_runs_once,
            concurrent_updates_have_one_winner,
            ask_user_free_text_suspends_and_resumes,
            ask_user_single_select_checks_labels,
            ask_user_multi_select_checks_labels,
            ask_user_bad_arguments_become_error_results,
            commit_happens_before_suspended_chunk,
            parallel_calls_each_suspend_and_resume_separately,
            completed_tool_never_runs_again_on_resume,
            run_can_suspend_and_resume_many_times,
            concurrent_resumes_have_exactly_one_winner,
            resume_errors_change_nothing,
            invalid_tool_arguments_name_each_field,
            later_runs_of_a_thread_see_its_history,
            failed_model_call_after_resume_keeps_the_answer,
            cancelled_model_call_fails_the_run_and_can_continue,
            crash_after_resume_never_reruns_a_side_effecting_resume,
            repeated_tool_call_ids_are_made_distinct,
        );
    };
    (@each $make:expr; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let store: ::std::sync::Arc<dyn $crate::RunStore> = $make.await;
                $crate::conformance::$name(store).await;
            }
        )*
    };
}

// ---------------------------------------------------------------- helpers

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

fn agent(
    store: &Arc<dyn RunStore>,
    model: &Arc<RecordingModel>,
    counter: &Counter,
    gate: &Gate,
) -> Agent {
    Agent::builder("tester")
        .shared_model(model.clone())
        .tool(AskUser)
        .tool(counter.clone())
        .tool(gate.clone())
        .shared_store(store.clone())
        .build()
        .unwrap()
}

async fn chunks_of(stream: crate::AgentStream) -> Vec<Chunk> {
    stream.map(|item| item.unwrap()).collect().await
}

fn suspended_payloads(chunks: &[Chunk]) -> Vec<(String, Value, Option<Value>)> {
    chunks
        .iter()
        .filter_map(|chunk| match chunk {
            Chunk::ToolCallSuspended { call, suspension } => Some((
                call.id.to_string(),
                suspension.payload.clone(),
                suspension.resume_schema.clone(),
            )),
            _ => None,
        })
        .collect()
}

fn tool_results(chunks: &[Chunk]) -> Vec<(String, Value, bool)> {
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

fn has_finish(chunks: &[Chunk]) -> bool {
    chunks
        .iter()
        .any(|chunk| matches!(chunk, Chunk::Finish { .. }))
}

fn state(run_id: &str, thread: &str, status: RunStatus, created: u64) -> RunState {
    let mut state = RunState::new(
        RunId::new(run_id),
        ThreadId::new(thread),
        Some("tenant-1".into()),
        "tester".into(),
        Some("scripted:x.json".into()),
        vec![Message::user("hello")],
        0,
    );
    state.status = status;
    state.created_at_ms = created;
    state
}

fn ask(id: &str, args: Value) -> Value {
    json!({"id": id, "name": "ask_user", "args": args})
}

fn script(steps: Vec<Value>) -> String {
    json!({ "steps": steps }).to_string()
}

// ---------------------------------------------------------------- store scenarios

pub async fn insert_then_load_round_trips(store: Arc<dyn RunStore>) {
    let original = state("r1", "t1", RunStatus::Running, 1);
    assert_eq!(store.insert_run(&original).await.unwrap(), 1);
    let loaded = store.load_run(&RunId::new("r1")).await.unwrap();
    assert_eq!(loaded.version, 1);
    assert_eq!(loaded.state, original);
}

pub async fn load_of_unknown_run_is_not_found(store: Arc<dyn RunStore>) {
    let error = store.load_run(&RunId::new("nope")).await.unwrap_err();
    assert!(
        matches!(error, StoreError::NotFound { ref run_id } if run_id.as_str() == "nope"),
        "{error:?}"
    );
}

pub async fn insert_of_existing_id_is_refused(store: Arc<dyn RunStore>) {
    store
        .insert_run(&state("r1", "t1", RunStatus::Running, 1))
        .await
        .unwrap();
    let error = store
        .insert_run(&state("r1", "t2", RunStatus::Failed, 2))
        .await
        .unwrap_err();
    assert!(
        matches!(error, StoreError::AlreadyExists { .. }),
        "{error:?}"
    );
    assert_eq!(
        store
            .load_run(&RunId::new("r1"))
            .await
            .unwrap()
            .state
            .thread_id
            .as_str(),
        "t1"
    );
}

pub async fn stale_update_conflicts_and_changes_nothing(store: Arc<dyn RunStore>) {
    let mut run = state("r1", "t1", RunStatus::Running, 1);
    store.insert_run(&run).await.unwrap();
    run.status = RunStatus::Suspended;
    assert_eq!(store.update_run(&run, 1).await.unwrap(), 2);
    let mut stale = run.clone();
    stale.status = RunStatus::Failed;
    let error = store.update_run(&stale, 1).await.unwrap_err();
    assert!(
        matches!(
            error,
            StoreError::Conflict {
                expected_version: 1,
                ..
            }
        ),
        "{error:?}"
    );
    let loaded = store.load_run(&RunId::new("r1")).await.unwrap();
    assert_eq!(
        (loaded.version, loaded.state.status),
        (2, RunStatus::Suspended)
    );
}

pub async fn update_of_unknown_run_is_not_found(store: Arc<dyn RunStore>) {
    let error = store
        .update_run(&state("ghost", "t", RunStatus::Running, 1), 1)
        .await
        .unwrap_err();
    assert!(matches!(error, StoreError::NotFound { .. }), "{error:?}");
}

pub async fn list_filters_and_orders_newest_first(store: Arc<dyn RunStore>) {
    store
        .insert_run(&state("a", "t1", RunStatus::Suspended, 10))
        .await
        .unwrap();
    store
        .insert_run(&state("b", "t1", RunStatus::Completed, 20))
        .await
        .unwrap();
    let mut other = state("c", "t2", RunStatus::Suspended, 30);
    other.resource_id = Some("tenant-2".into());
    store.insert_run(&other).await.unwrap();
    let ids = |runs: Vec<RunState>| {
        runs.into_iter()
            .map(|run| run.run_id.to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        ids(store.list_runs(&RunFilter::default()).await.unwrap()),
        ["c", "b", "a"]
    );
    let suspended = RunFilter {
        status: Some(RunStatus::Suspended),
        ..Default::default()
    };
    assert_eq!(ids(store.list_runs(&suspended).await.unwrap()), ["c", "a"]);
    let thread = RunFilter {
        thread_id: Some("t1".into()),
        ..Default::default()
    };
    assert_eq!(ids(store.list_runs(&thread).await.unwrap()), ["b", "a"]);
    let resource = RunFilter {
        resource_id: Some("tenant-2".into()),
        ..Default::default()
    };
    assert_eq!(ids(store.list_runs(&resource).await.unwrap()), ["c"]);
    let limited = RunFilter {
        limit: Some(1),
        ..Default::default()
    };
    assert_eq!(ids(store.list_runs(&limited).await.unwrap()), ["c"]);
}

pub async fn thread_gets_messages_of_completed_runs_once(store: Arc<dyn RunStore>) {
    let mut run = state("r1", "t1", RunStatus::Running, 1);
    store.insert_run(&run).await.unwrap();
    assert!(
        store
            .thread_messages(&"t1".into())
            .await
            .unwrap()
            .is_empty()
    );
    run.messages.push(Message::Assistant {
        parts: vec![crate::AssistantPart::Text { text: "hi".into() }],
    });
    run.status = RunStatus::Completed;
    store.update_run(&run, 1).await.unwrap();
    run.touch();
    store.update_run(&run, 2).await.unwrap();
    let messages = store.thread_messages(&"t1".into()).await.unwrap();
    assert_eq!(messages, run.messages, "appended once, in order");
    assert!(
        store
            .thread_messages(&"unknown".into())
            .await
            .unwrap()
            .is_empty()
    );
}

pub async fn concurrent_updates_have_one_winner(store: Arc<dyn RunStore>) {
    for round in 0..50 {
        let id = format!("race-{round}");
        let run = state(&id, "t", RunStatus::Suspended, round);
        store.insert_run(&run).await.unwrap();
        let (a, b) = tokio::join!(store.update_run(&run, 1), store.update_run(&run, 1));
        let winners = [a.is_ok(), b.is_ok()].iter().filter(|ok| **ok).count();
        assert_eq!(winners, 1, "round {round}: {a:?} {b:?}");
        for result in [a, b] {
            if let Err(error) = result {
                assert!(matches!(error, StoreError::Conflict { .. }), "{error:?}");
            }
        }
        assert_eq!(store.load_run(&RunId::new(id)).await.unwrap().version, 2);
    }
}

// ---------------------------------------------------------------- ask_user scenarios

pub async fn ask_user_free_text_suspends_and_resumes(store: Arc<dyn RunStore>) {
    let model = RecordingModel::new(&script(vec![
        json!({"toolCalls": [ask("c1", json!({"question": "Which repo?", "options": []}))]}),
        json!({"text": "Thanks."}),
    ]));
    let agent = agent(&store, &model, &Counter::default(), &Gate::default());
    let stream = agent.stream("Summarize my project");
    let run_id = stream.run_id().clone();
    let chunks = chunks_of(stream).await;
    assert!(!has_finish(&chunks));
    let suspended = suspended_payloads(&chunks);
    assert_eq!(suspended.len(), 1);
    assert_eq!(
        suspended[0].1,
        json!({"question": "Which repo?"}),
        "empty options mean free text"
    );
    let schema = suspended[0].2.clone().unwrap();
    assert_eq!(schema["type"], "string");

    for blank in [json!(""), json!("   "), json!(["main"]), json!(null)] {
        let error = agent
            .resume_stream(blank.clone(), &run_id, None)
            .await
            .unwrap_err();
        assert!(
            matches!(error, ResumeError::InvalidAnswer { .. }),
            "{blank}: {error:?}"
        );
        assert!(error.to_string().contains("non-empty text"), "{error}");
    }
    let chunks = chunks_of(
        agent
            .resume_stream(json!("The main repo"), &run_id, None)
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        tool_results(&chunks),
        [(
            "c1".to_owned(),
            json!({"content": "User answered: The main repo", "isError": false}),
            false
        )]
    );
    assert!(has_finish(&chunks));
    let stored = store.load_run(&run_id).await.unwrap().state;
    assert_eq!(stored.status, RunStatus::Completed);
}

pub async fn ask_user_single_select_checks_labels(store: Arc<dyn RunStore>) {
    let options = json!([{"label": "main"}, {"label": "docs", "description": "The docs site"}]);
    let model = RecordingModel::new(&script(vec![
        json!({"toolCalls": [ask("c1", json!({"question": "Which repo?", "options": options}))]}),
        json!({"text": "Summary of main."}),
    ]));
    let agent = agent(&store, &model, &Counter::default(), &Gate::default());
    let stream = agent.stream("Summarize my project");
    let run_id = stream.run_id().clone();
    let chunks = chunks_of(stream).await;
    let (_, payload, schema) = suspended_payloads(&chunks).remove(0);
    assert_eq!(
        payload,
        json!({"question": "Which repo?", "options": options, "selectionMode": "single_select"})
    );
    assert_eq!(schema.unwrap()["enum"], json!(["main", "docs"]));
    let before = store.load_run(&run_id).await.unwrap();

    for (answer, needle) in [
        (json!("master"), "\"master\" is not one of the labels"),
        (json!(["main"]), "got an array"),
        (json!(42), "got a number"),
    ] {
        let error = agent
            .resume_stream(answer, &run_id, None)
            .await
            .unwrap_err();
        assert!(
            matches!(error, ResumeError::InvalidAnswer { .. }),
            "{error:?}"
        );
        let text = error.to_string();
        assert!(
            text.contains("\"main\", \"docs\"") && text.contains(needle),
            "{text}"
        );
    }
    assert_eq!(
        store.load_run(&run_id).await.unwrap(),
        before,
        "invalid answers change nothing"
    );
    assert_eq!(model.calls(), 1);

    let chunks = chunks_of(
        agent
            .resume_stream(json!("main"), &run_id, Some(&"c1".into()))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        tool_results(&chunks)[0].1,
        json!({"content": "User answered: main", "isError": false})
    );
    let text: String = chunks
        .iter()
        .filter_map(|chunk| match chunk {
            Chunk::TextDelta { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(text, "Summary of main.");
}

pub async fn ask_user_multi_select_checks_labels(store: Arc<dyn RunStore>) {
    let options = json!([{"label": "Add tests"}, {"label": "Update docs"}, {"label": "Ship"}]);
    let model = RecordingModel::new(&script(vec![
        json!({"toolCalls": [ask("c1", json!({"question": "What next?", "options": options, "selectionMode": "multi_select"}))]}),
        json!({"text": "On it."}),
    ]));
    let agent = agent(&store, &model, &Counter::default(), &Gate::default());
    let outcome = agent.generate("Plan").await.unwrap();
    let RunOutcome::Suspended { pending } = &outcome.status else {
        panic!("{outcome:?}")
    };
    assert_eq!(pending[0].suspend_payload["selectionMode"], "multi_select");
    let run_id = outcome.run_id;

    for (answer, needle) in [
        (json!("Add tests"), "got the string"),
        (json!([]), "no label was selected"),
        (json!(["Add tests", "Add tests"]), "selected more than once"),
        (
            json!(["Add tests", "Nope"]),
            "\"Nope\" is not one of the labels",
        ),
        (json!(["Add tests", 3]), "an item is a number"),
    ] {
        let error = agent
            .resume_stream(answer.clone(), &run_id, None)
            .await
            .unwrap_err();
        let text = error.to_string();
        assert!(
            text.contains(needle) && text.contains("\"Add tests\", \"Update docs\", \"Ship\""),
            "{answer}: {text}"
        );
    }
    let chunks = chunks_of(
        agent
            .resume_stream(json!(["Add tests", "Update docs"]), &run_id, None)
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        tool_results(&chunks)[0].1["content"],
        "User answered: Add tests, Update docs"
    );
}

pub async fn ask_user_bad_arguments_become_error_results(store: Arc<dyn RunStore>) {
    let model = RecordingModel::new(&script(vec![
        json!({"toolCalls": [
            ask("c1", json!({"question": "Pick", "selectionMode": "multi_select"})),
            ask("c2", json!({"question": "Pick", "options": [{"label": "a"}, {"label": "a"}]})),
            ask("c3", json!({"question": "Pick", "options": [{"label": " "}]})),
            ask("c4", json!({"question": ""})),
        ]}),
        json!({"text": "ok"}),
    ]));
    let agent = agent(&store, &model, &Counter::default(), &Gate::default());
    let chunks = chunks_of(agent.stream("go")).await;
    let results = tool_results(&chunks);
    assert_eq!(
        results[0].1,
        json!({"content": "Failed to ask user: selectionMode requires options.", "isError": true})
    );
    assert!(results[0].2, "isError is reported on the result");
    assert!(
        results[1].1["content"].as_str().unwrap().contains("unique"),
        "{results:?}"
    );
    assert!(
        results[2].1["content"]
            .as_str()
            .unwrap()
            .contains("non-empty"),
        "{results:?}"
    );
    assert!(
        results[3].2
            && results[3].1["content"]
                .as_str()
                .unwrap()
                .contains("question"),
        "{results:?}"
    );
    assert!(has_finish(&chunks), "nothing suspended, the loop went on");
}

// ---------------------------------------------------------------- suspension semantics

pub async fn commit_happens_before_suspended_chunk(store: Arc<dyn RunStore>) {
    let model = RecordingModel::new(&script(vec![
        json!({"toolCalls": [ask("c1", json!({"question": "Q?"}))]}),
    ]));
    let agent = agent(&store, &model, &Counter::default(), &Gate::default());
    let mut stream = agent.stream("hi");
    let run_id = stream.run_id().clone();
    let mut seen = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.unwrap();
        if let Chunk::ToolCallSuspended { call, .. } = &chunk {
            let stored = store.load_run(&run_id).await.unwrap().state;
            assert_eq!(
                stored.status,
                RunStatus::Suspended,
                "stored before it is announced"
            );
            assert_eq!(stored.pending_tool_calls()[0].tool_call_id, call.id);
        }
        seen.push(chunk);
    }
    assert!(
        matches!(seen.last(), Some(Chunk::ToolCallSuspended { .. })),
        "the stream ends after it"
    );
    assert!(matches!(seen.first(), Some(Chunk::Start { .. })));
}

pub async fn parallel_calls_each_suspend_and_resume_separately(store: Arc<dyn RunStore>) {
    let model = RecordingModel::new(&script(vec![
        json!({"text": "Let me check.", "toolCalls": [
            ask("q1", json!({"question": "First?"})),
            {"id": "n1", "name": "count", "args": {"label": "x"}},
            ask("q2", json!({"question": "Second?", "options": [{"label": "yes"}, {"label": "no"}]})),
        ]}),
        json!({"text": "All answered."}),
    ]));
    let counter = Counter::default();
    let agent = agent(&store, &model, &counter, &Gate::default());
    let stream = agent.stream("go");
    let run_id = stream.run_id().clone();
    let chunks = chunks_of(stream).await;
    let ids: Vec<String> = suspended_payloads(&chunks)
        .into_iter()
        .map(|(id, ..)| id)
        .collect();
    assert_eq!(ids, ["q1", "q2"]);
    assert_eq!(
        tool_results(&chunks).len(),
        1,
        "the completed call's result is emitted"
    );

    let error = agent
        .resume_stream(json!("a"), &run_id, None)
        .await
        .unwrap_err();
    match &error {
        ResumeError::Ambiguous { pending, .. } => {
            assert_eq!(pending, &[ToolCallId::new("q1"), ToolCallId::new("q2")])
        }
        other => panic!("{other:?}"),
    }
    assert!(error.to_string().contains("q1, q2"));

    // Answer the second first: routed by id, never by tool name.
    let chunks = chunks_of(
        agent
            .resume_stream(json!("no"), &run_id, Some(&"q2".into()))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        tool_results(&chunks),
        [(
            "q2".to_owned(),
            json!({"content": "User answered: no", "isError": false}),
            false
        )]
    );
    assert!(!has_finish(&chunks));
    assert_eq!(model.calls(), 1, "no model call while a call is pending");
    let stored = store.load_run(&run_id).await.unwrap().state;
    assert_eq!(stored.status, RunStatus::Suspended);
    assert_eq!(stored.pending_tool_calls().len(), 1);

    let error = agent
        .resume_stream(json!("yes"), &run_id, Some(&"q2".into()))
        .await
        .unwrap_err();
    assert!(
        matches!(error, ResumeError::AlreadyAnswered { .. }),
        "{error:?}"
    );

    let chunks = chunks_of(
        agent
            .resume_stream(json!("free text"), &run_id, None)
            .await
            .unwrap(),
    )
    .await;
    assert!(has_finish(&chunks));
    assert_eq!(model.calls(), 2);
    let request = model.last_request();
    let Some(Message::Tool { results }) = request.messages.last() else {
        panic!("{:?}", request.messages)
    };
    let ids: Vec<&str> = results
        .iter()
        .map(|result| result.tool_call_id.as_str())
        .collect();
    assert_eq!(ids, ["q1", "n1", "q2"], "every result, in call order");
    assert_eq!(results[0].result["content"], "User answered: free text");
    assert_eq!(results[2].result["content"], "User answered: no");
    assert_eq!(counter.executions.load(Ordering::SeqCst), 1);
}

pub async fn completed_tool_never_runs_again_on_resume(store: Arc<dyn RunStore>) {
    let model = RecordingModel::new(&script(vec![
        json!({"toolCalls": [
            {"id": "n1", "name": "count", "args": {"label": "side effect"}},
            {"id": "g1", "name": "gate", "args": {"action": "deploy"}},
        ]}),
        json!({"text": "Deployed."}),
    ]));
    let counter = Counter::default();
    let gate = Gate::default();
    let agent = agent(&store, &model, &counter, &gate);
    let outcome = agent.generate("deploy").await.unwrap();
    assert_eq!(counter.executions.load(Ordering::SeqCst), 1);

    let error = agent
        .resume_stream(json!({"approved": "yes"}), &outcome.run_id, None)
        .await
        .unwrap_err();
    assert!(
        matches!(error, ResumeError::InvalidAnswer { .. }),
        "schema-checked: {error:?}"
    );

    let chunks = chunks_of(
        agent
            .resume_stream(json!({"approved": true}), &outcome.run_id, None)
            .await
            .unwrap(),
    )
    .await;
    assert!(has_finish(&chunks));
    assert_eq!(
        counter.executions.load(Ordering::SeqCst),
        1,
        "not run again"
    );
    assert_eq!(gate.resumes.load(Ordering::SeqCst), 1);
}

pub async fn run_can_suspend_and_resume_many_times(store: Arc<dyn RunStore>) {
    let model = RecordingModel::new(&script(vec![
        json!({"toolCalls": [ask("c1", json!({"question": "Name?"}))]}),
        json!({"toolCalls": [ask("c2", json!({"question": "Color?", "options": [{"label": "red"}, {"label": "blue"}]}))]}),
        json!({"toolCalls": [ask("c3", json!({"question": "Size?"}))]}),
        json!({"text": "Done."}),
    ]));
    let agent = agent(&store, &model, &Counter::default(), &Gate::default());
    let run_id = agent.generate("start").await.unwrap().run_id;
    for (answer, expected) in [(json!("Ada"), "c2"), (json!("blue"), "c3")] {
        let output = agent
            .resume_stream(answer, &run_id, None)
            .await
            .unwrap()
            .collect_output()
            .await
            .unwrap();
        let RunOutcome::Suspended { pending } = output.status else {
            panic!("{output:?}")
        };
        assert_eq!(pending[0].tool_call_id.as_str(), expected);
    }
    let error = agent
        .resume_stream(json!("x"), &run_id, Some(&"c1".into()))
        .await
        .unwrap_err();
    assert!(
        matches!(error, ResumeError::AlreadyAnswered { .. }),
        "{error:?}"
    );
    let output = agent
        .resume_stream(json!("XL"), &run_id, None)
        .await
        .unwrap()
        .collect_output()
        .await
        .unwrap();
    assert_eq!(
        output.status,
        RunOutcome::Finished {
            reason: crate::FinishReason::Stop
        }
    );
    assert_eq!(output.text, "Done.");
    let stored = store.load_run(&run_id).await.unwrap().state;
    assert_eq!(
        stored.messages.len(),
        8,
        "user + 3×(assistant, tool) + final assistant"
    );
}

pub async fn concurrent_resumes_have_exactly_one_winner(store: Arc<dyn RunStore>) {
    let model = RecordingModel::new(&script(vec![
        json!({"toolCalls": [{"id": "g1", "name": "gate", "args": {"action": "pay"}}]}),
        json!({"text": "Paid."}),
    ]));
    let gate = Gate::default();
    let agent = agent(&store, &model, &Counter::default(), &gate);
    for round in 0..50 {
        let run_id = agent
            .generate(format!("round {round}"))
            .await
            .unwrap()
            .run_id;
        let answer = json!({"approved": true});
        let call = ToolCallId::new("g1");
        let (a, b) = tokio::join!(
            agent.resume_stream(answer.clone(), &run_id, None),
            agent.resume_stream(answer.clone(), &run_id, Some(&call))
        );
        let (winner, loser) = match (a, b) {
            (Ok(stream), Err(error)) | (Err(error), Ok(stream)) => (stream, error),
            (a, b) => panic!("round {round}: expected one winner, got {a:?} and {b:?}"),
        };
        assert!(
            matches!(loser, ResumeError::Conflict { .. }),
            "round {round}: {loser:?}"
        );
        assert!(has_finish(&chunks_of(winner).await));
        assert_eq!(
            gate.resumes.load(Ordering::SeqCst),
            round + 1,
            "the resume path ran once"
        );
    }
}

pub async fn resume_errors_change_nothing(store: Arc<dyn RunStore>) {
    let model = RecordingModel::new(&script(vec![
        json!({"toolCalls": [ask("c1", json!({"question": "Q?", "options": [{"label": "a"}]}))]}),
        json!({"text": "done"}),
        json!({"text": "second run"}),
    ]));
    let gate = Gate::default();
    let agent = agent(&store, &model, &Counter::default(), &gate);
    let run_id = agent.generate("x").await.unwrap().run_id;
    let before = store.load_run(&run_id).await.unwrap();

    let error = agent
        .resume_stream(json!("a"), &RunId::new("no-such-run"), None)
        .await
        .unwrap_err();
    assert!(
        matches!(error, ResumeError::RunNotFound { .. }),
        "{error:?}"
    );
    let error = agent
        .resume_stream(json!("a"), &run_id, Some(&"zz".into()))
        .await
        .unwrap_err();
    assert!(
        matches!(error, ResumeError::UnknownToolCall { ref pending, .. } if pending == &[ToolCallId::new("c1")]),
        "{error:?}"
    );
    let error = agent
        .resume_stream(json!("b"), &run_id, None)
        .await
        .unwrap_err();
    assert!(
        matches!(error, ResumeError::InvalidAnswer { .. }),
        "{error:?}"
    );
    let other_agent = Agent::builder("someone-else")
        .shared_model(model.clone())
        .tool(AskUser)
        .shared_store(store.clone())
        .build()
        .unwrap();
    let error = other_agent
        .resume_stream(json!("a"), &run_id, None)
        .await
        .unwrap_err();
    assert!(matches!(error, ResumeError::WrongAgent { .. }), "{error:?}");
    assert_eq!(store.load_run(&run_id).await.unwrap(), before);
    assert_eq!(model.calls(), 1, "no model work on refused resumes");

    chunks_of(
        agent
            .resume_stream(json!("a"), &run_id, None)
            .await
            .unwrap(),
    )
    .await;
    let completed = store.load_run(&run_id).await.unwrap();
    let error = agent
        .resume_stream(json!("a"), &run_id, None)
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            ResumeError::NotSuspended {
                status: RunStatus::Completed,
                ..
            }
        ),
        "{error:?}"
    );
    let error = agent
        .resume_stream(json!("a"), &run_id, Some(&"c1".into()))
        .await
        .unwrap_err();
    assert!(
        matches!(error, ResumeError::AlreadyAnswered { .. }),
        "{error:?}"
    );
    assert_eq!(store.load_run(&run_id).await.unwrap(), completed);
    assert_eq!(gate.resumes.load(Ordering::SeqCst), 0);
}

pub async fn invalid_tool_arguments_name_each_field(store: Arc<dyn RunStore>) {
    let model = RecordingModel::new(&script(vec![
        json!({"toolCalls": [
            {"id": "m1", "name": "ask_user", "args": "{\"question\": \"Which"},
            {"id": "m2", "name": "ask_user", "args": {"question": 5, "options": [{"description": "no label"}]}},
            {"id": "m3", "name": "no_such_tool", "args": {}},
        ]}),
        json!({"text": "retrying"}),
    ]));
    let agent = agent(&store, &model, &Counter::default(), &Gate::default());
    let chunks = chunks_of(agent.stream("x")).await;
    let results = tool_results(&chunks);
    assert_eq!(results.len(), 3);
    assert!(results.iter().all(|(_, _, is_error)| *is_error));
    let text = |index: usize| results[index].1["content"].as_str().unwrap().to_owned();
    assert!(text(0).contains("not valid JSON"), "{}", text(0));
    assert!(
        text(1).contains("/question") && text(1).contains("/options/0"),
        "{}",
        text(1)
    );
    assert!(
        text(2).contains("unknown tool no_such_tool") && text(2).contains("ask_user"),
        "{}",
        text(2)
    );
    // The model saw all three errors and could retry.
    let request = model.last_request();
    assert!(
        matches!(request.messages.last(), Some(Message::Tool { results }) if results.len() == 3)
    );
    assert!(has_finish(&chunks));
}

pub async fn later_runs_of_a_thread_see_its_history(store: Arc<dyn RunStore>) {
    let model = RecordingModel::new(&script(vec![
        json!({"text": "first answer"}),
        json!({"text": "second answer"}),
    ]));
    let agent = agent(&store, &model, &Counter::default(), &Gate::default());
    let thread = ThreadId::new("conversation-1");
    let options = RunOptions {
        thread_id: Some(thread.clone()),
        resource_id: Some("user-7".into()),
    };
    chunks_of(agent.stream_with("hello", options.clone())).await;
    let second = agent.stream_with("and again", options);
    let second_id = second.run_id().clone();
    chunks_of(second).await;
    let request = model.last_request();
    assert_eq!(request.messages.len(), 3, "{:?}", request.messages);
    assert_eq!(request.messages[0], Message::user("hello"));
    let stored = store.load_run(&second_id).await.unwrap().state;
    assert_eq!(
        stored.resource_id.as_ref().map(|id| id.as_str()),
        Some("user-7")
    );
    assert_eq!(store.thread_messages(&thread).await.unwrap().len(), 4);
}

pub async fn failed_model_call_after_resume_keeps_the_answer(store: Arc<dyn RunStore>) {
    let model = RecordingModel::new(&script(vec![
        json!({"toolCalls": [ask("c1", json!({"question": "Q?"}))]}),
        json!({"text": "Finally."}),
    ]));
    let agent = agent(&store, &model, &Counter::default(), &Gate::default());
    let run_id = agent.generate("x").await.unwrap().run_id;
    model.fail_next(1);
    let mut stream = agent
        .resume_stream(json!("my answer"), &run_id, None)
        .await
        .unwrap();
    let mut error = None;
    while let Some(item) = stream.next().await {
        if let Err(failure) = item {
            error = Some(failure);
        }
    }
    assert!(matches!(error, Some(AgentError::Model(_))), "{error:?}");
    let stored = store.load_run(&run_id).await.unwrap().state;
    assert_eq!(stored.status, RunStatus::Failed);
    assert!(
        matches!(stored.messages.last(), Some(Message::Tool { results }) if results[0].result["content"] == "User answered: my answer")
    );

    let error = agent
        .resume_stream(json!("again"), &run_id, None)
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            ResumeError::NotSuspended {
                status: RunStatus::Failed,
                ..
            }
        ),
        "{error:?}"
    );
    let output = agent
        .continue_stream(&run_id)
        .await
        .unwrap()
        .collect_output()
        .await
        .unwrap();
    assert_eq!(output.text, "Finally.");
    let request = model.last_request();
    assert!(
        matches!(request.messages.last(), Some(Message::Tool { results }) if results[0].result["content"] == "User answered: my answer")
    );
    assert_eq!(
        store.load_run(&run_id).await.unwrap().state.status,
        RunStatus::Completed
    );
}

/// A model whose first call streams one delta and then hangs; later calls answer "Recovered.".
struct HangingModel {
    calls: AtomicUsize,
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
        use crate::{FinishReason, ModelEvent, Usage};
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

pub async fn cancelled_model_call_fails_the_run_and_can_continue(store: Arc<dyn RunStore>) {
    let agent = Agent::builder("tester")
        .model(HangingModel {
            calls: AtomicUsize::new(0),
        })
        .shared_store(store.clone())
        .build()
        .unwrap();
    let mut stream = agent.stream("hello");
    let run_id = stream.run_id().clone();
    let cancel = stream.cancel_handle();
    let mut saw_text = false;
    let mut error = None;
    while let Some(item) = stream.next().await {
        match item {
            Ok(Chunk::TextDelta { .. }) => {
                saw_text = true;
                cancel.cancel();
            }
            Ok(_) => {}
            Err(failure) => error = Some(failure),
        }
    }
    assert!(saw_text);
    assert!(
        matches!(error, Some(AgentError::Model(ModelError::Cancelled))),
        "{error:?}"
    );
    let stored = store.load_run(&run_id).await.unwrap().state;
    assert_eq!(stored.status, RunStatus::Failed);
    assert_eq!(
        stored.error.as_ref().map(|failure| failure.code.as_str()),
        Some("cancelled")
    );
    assert_eq!(
        stored.messages.len(),
        1,
        "the cancelled step left no partial message"
    );
    let output = agent
        .continue_stream(&run_id)
        .await
        .unwrap()
        .collect_output()
        .await
        .unwrap();
    assert_eq!(output.text, "Recovered.");
}

pub async fn crash_after_resume_never_reruns_a_side_effecting_resume(store: Arc<dyn RunStore>) {
    let steps = script(vec![
        json!({"toolCalls": [{"id": "g1", "name": "gate", "args": {"action": "pay"}}, ask("q1", json!({"question": "Note?"}))]}),
        json!({"text": "Paid."}),
    ]);
    let gate = Gate::default();
    let agent = Agent::builder("tester")
        .model(ScriptedModel::from_json(&steps).unwrap())
        .tool(AskUser)
        .tool(gate.clone())
        .shared_store(store.clone())
        .build()
        .unwrap();
    let run_id = agent.generate("pay").await.unwrap().run_id;
    chunks_of(
        agent
            .resume_stream(json!("thanks"), &run_id, Some(&"q1".into()))
            .await
            .unwrap(),
    )
    .await;
    // The second answer completes the step; the process "dies" as the next model step starts:
    // the stream is dropped, with no chance to record anything more.
    let mut stream = agent
        .resume_stream(json!({"approved": true}), &run_id, Some(&"g1".into()))
        .await
        .unwrap();
    while let Some(chunk) = stream.next().await {
        if matches!(chunk.unwrap(), Chunk::StepStart { .. }) {
            break;
        }
    }
    drop(stream);
    assert_eq!(gate.resumes.load(Ordering::SeqCst), 1);
    let stored = store.load_run(&run_id).await.unwrap().state;
    assert_eq!(stored.status, RunStatus::Running);
    assert!(
        stored.pending_step.is_none(),
        "the side-effecting result was committed before the model call"
    );

    let output = agent
        .continue_stream(&run_id)
        .await
        .unwrap()
        .collect_output()
        .await
        .unwrap();
    assert_eq!(output.text, "Paid.");
    assert_eq!(
        gate.resumes.load(Ordering::SeqCst),
        1,
        "not run again after the crash"
    );
}

pub async fn repeated_tool_call_ids_are_made_distinct(store: Arc<dyn RunStore>) {
    let model = RecordingModel::new(&script(vec![
        json!({"toolCalls": [ask("q", json!({"question": "a?"})), ask("q", json!({"question": "b?"}))]}),
        json!({"text": "done"}),
    ]));
    let agent = agent(&store, &model, &Counter::default(), &Gate::default());
    let stream = agent.stream("x");
    let run_id = stream.run_id().clone();
    let suspended = suspended_payloads(&chunks_of(stream).await);
    assert_eq!(suspended.len(), 2);
    assert_eq!(suspended[0].0, "q");
    assert_ne!(suspended[1].0, "q", "the repeated id was replaced");
    for (id, ..) in &suspended {
        chunks_of(
            agent
                .resume_stream(
                    json!("answer"),
                    &run_id,
                    Some(&ToolCallId::new(id.as_str())),
                )
                .await
                .unwrap(),
        )
        .await;
    }
    assert_eq!(
        store.load_run(&run_id).await.unwrap().state.status,
        RunStatus::Completed
    );
}
