//! Store scenarios of forks (issue 34): a run forked at a question goes on with the new answer
//! in a new run and thread, the original stays byte-for-byte as it was, and a refused fork
//! creates nothing. Listed in `store.rs`'s `SCENARIOS`, so they run on every store.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use async_trait::async_trait;
use serde_json::{Value, json};

use crate::ids::{RunKey, ThreadId, ToolCallId};
use crate::model::{LanguageModel, Message, ModelError, ModelEventStream, ModelRequest};
use crate::run::{ForkedFrom, RunStatus};
use crate::store::{ListedRun, RunFilter, RunStore, codec};
use crate::testing::ScriptedModel;
use crate::testing::conformance::support::*;
use crate::{Agent, AskUser, ResumeError, RunOptions};

/// The resource of the scenarios' runs.
const OWNER: &str = "tenant-fork";

/// A model whose script depends on the answer to question `q1`: `"No"` leads to a text answer,
/// anything else to a `count` call "after" the question and then a text. Step 0 answers a first
/// turn ("Hi."); step 1 calls `count` ("before") beside the question `q1`.
struct BranchModel {
    yes: ScriptedModel,
    no: ScriptedModel,
}

impl BranchModel {
    fn new() -> Arc<Self> {
        let question = ask(
            "q1",
            json!({"question": "Count it?", "options": [{"label": "Yes"}, {"label": "No"}]}),
        );
        let before = json!({"id": "k1", "name": "count", "args": {"label": "before"}});
        let yes = script(vec![
            json!({"text": "Hi."}),
            json!({"toolCalls": [before, question]}),
            json!({"toolCalls": [{"id": "k2", "name": "count", "args": {"label": "after"}}]}),
            json!({"text": "Counted."}),
        ]);
        let no = script(vec![
            json!({"text": "Hi."}),
            json!({"toolCalls": [before, question]}),
            json!({"text": "Not counted."}),
        ]);
        Arc::new(Self {
            yes: ScriptedModel::from_json(&yes).unwrap(),
            no: ScriptedModel::from_json(&no).unwrap(),
        })
    }
}

#[async_trait]
impl LanguageModel for BranchModel {
    fn provider(&self) -> &str {
        "scripted"
    }
    fn model_id(&self) -> &str {
        "branch"
    }
    async fn stream(&self, request: ModelRequest) -> Result<ModelEventStream, ModelError> {
        let answered_no = request.messages.iter().any(|message| match message {
            Message::Tool { results } => results.iter().any(|result| {
                result.tool_call_id.as_str() == "q1" && result.answer == Some(json!("No"))
            }),
            _ => false,
        });
        if answered_no {
            self.no.stream(request).await
        } else {
            self.yes.stream(request).await
        }
    }
}

fn fork_agent(store: &Arc<dyn RunStore>, counter: &Counter) -> Agent {
    Agent::builder("tester")
        .shared_model(BranchModel::new())
        .tool(AskUser::new())
        .tool(counter.clone())
        .shared_store(store.clone())
        .build()
        .unwrap()
}

/// The stored text of a run (head and messages, as the codec writes them) and its version.
async fn stored_text(store: &Arc<dyn RunStore>, key: &RunKey) -> (String, u64) {
    let stored = store.load_run(key).await.unwrap();
    (codec::encode_state(&stored.state).unwrap(), stored.version)
}

/// How many runs the store lists in every resource.
async fn run_count(store: &Arc<dyn RunStore>) -> usize {
    store.list_runs(&RunFilter::new()).await.unwrap().runs.len()
}

/// A first turn in thread `t-fork` (so the run has a history), then a run of that thread
/// suspended at `q1` (its `count` "before" already ran); returns the run's key.
async fn suspended_at_question(agent: &Agent) -> RunKey {
    let options = || {
        RunOptions::new()
            .thread(ThreadId::new("t-fork"))
            .resource(OWNER)
    };
    let first = agent.stream_with("hello", options());
    chunks_of(first).await;
    let stream = agent.stream_with("go", options());
    let key = stream.run_key().clone();
    chunks_of(stream).await;
    key
}

/// A fork at an answered question: the original is byte-for-byte as it was; the fork is a new
/// run in a new thread of the same resource, whose conversation is the thread's history, the
/// original's messages up to the question and the new answer's result; the calls of the
/// question's step that had results keep them (not run again), and the tool the original ran
/// after the question does not run in the fork (the model does not call it again); the fork
/// records where it comes from and a listing of the original's forks finds it.
pub(super) async fn issue34_a_fork_goes_on_with_the_new_answer_and_leaves_the_original(
    store: Arc<dyn RunStore>,
) {
    let counter = Counter::default();
    let agent = fork_agent(&store, &counter);
    let original = suspended_at_question(&agent).await;
    let answered = agent
        .resume_stream(json!("Yes"), &original, Some(&ToolCallId::new("q1")))
        .await
        .unwrap();
    chunks_of(answered).await;
    assert_eq!(
        counter.executions.load(Ordering::SeqCst),
        2,
        "before and after"
    );
    let before = stored_text(&store, &original).await;
    let runs_before = run_count(&store).await;

    let fork = agent
        .fork(&original, &ToolCallId::new("q1"), json!("No"))
        .by("alice")
        .stream()
        .await
        .unwrap();
    let fork_key = fork.run_key().clone();
    let chunks = chunks_of(fork).await;
    assert!(has_finish(&chunks), "the fork finishes: {chunks:?}");
    assert_ne!(fork_key.run_id, original.run_id);
    assert_eq!(fork_key.resource_id, original.resource_id);
    assert_eq!(
        counter.executions.load(Ordering::SeqCst),
        2,
        "neither the step's other call nor the tool after the question ran again"
    );
    assert_eq!(
        stored_text(&store, &original).await,
        before,
        "the original is untouched"
    );
    assert_eq!(
        run_count(&store).await,
        runs_before + 1,
        "one run more: the fork"
    );

    let forked = store.load_run(&fork_key).await.unwrap().state;
    let original_state = store.load_run(&original).await.unwrap().state;
    assert_eq!(forked.status(), RunStatus::Completed);
    assert_eq!(
        forked.forked_from(),
        Some(&ForkedFrom::new(original.run_id.clone(), "q1".into()))
    );
    assert_ne!(
        forked.thread_id(),
        original_state.thread_id(),
        "a new thread"
    );
    assert_eq!(
        forked.question(&"q1".into()),
        original_state.question(&"q1".into()),
        "the question as it was asked"
    );
    assert!(forked.question(&"q1".into()).is_some());
    let messages = forked.messages();
    assert_eq!(
        messages.first(),
        Some(&Message::user("hello")),
        "the thread's history first"
    );
    let results: Vec<(String, Option<Value>)> = messages
        .iter()
        .flat_map(|message| match message {
            Message::Tool { results } => results
                .iter()
                .map(|result| (result.tool_call_id.to_string(), result.answer.clone()))
                .collect(),
            _ => Vec::new(),
        })
        .collect();
    assert_eq!(
        results,
        [
            ("k1".to_owned(), None),
            ("q1".to_owned(), Some(json!("No")))
        ],
        "the step's other result as recorded, then the new answer; nothing of the original after it"
    );
    let k1 = messages.iter().find_map(|message| match message {
        Message::Tool { results } => results
            .iter()
            .find(|result| result.tool_call_id.as_str() == "k1"),
        _ => None,
    });
    assert_eq!(
        k1.unwrap().result["count"],
        json!(1),
        "k1 keeps its first result"
    );
    let last = messages.last().unwrap();
    assert!(
        matches!(last, Message::Assistant { .. }),
        "the model answered after the new answer: {last:?}"
    );
    let forks = store
        .list_runs(
            &RunFilter::new()
                .resource(OWNER)
                .forked_from(original.run_id.clone()),
        )
        .await
        .unwrap();
    let listed: Vec<_> = forks.runs.iter().filter_map(ListedRun::summary).collect();
    assert_eq!(listed.len(), 1, "one fork listed: {listed:?}");
    assert_eq!(listed[0].run_id, fork_key.run_id);
    assert_eq!(
        listed[0].forked_from,
        Some(ForkedFrom::new(original.run_id.clone(), "q1".into()))
    );
    let history = store
        .thread_history(&forked.thread_key(), None)
        .await
        .unwrap();
    assert_eq!(
        history.messages.first(),
        Some(&Message::user("hello")),
        "the fork's thread holds the whole branch"
    );
}

/// Refused forks create nothing and change nothing: an invalid answer, a call that is not a
/// question, an unknown call, another resource's run. A fork of a question that still waits
/// works, and the original keeps waiting.
pub(super) async fn issue34_a_refused_fork_creates_nothing(store: Arc<dyn RunStore>) {
    let counter = Counter::default();
    let agent = fork_agent(&store, &counter);
    let original = suspended_at_question(&agent).await;
    let before = stored_text(&store, &original).await;
    let runs_before = run_count(&store).await;
    let refused = [
        ("q1", json!(42)),
        ("q1", json!("Maybe")),
        ("k1", json!("Yes")),
        ("nope", json!("Yes")),
    ];
    for (call, answer) in refused {
        let error = agent
            .fork(&original, &ToolCallId::new(call), answer.clone())
            .stream()
            .await
            .map(|_| ())
            .unwrap_err();
        match call {
            "q1" => assert!(
                matches!(error, ResumeError::InvalidAnswer { .. }),
                "{answer}: {error:?}"
            ),
            _ => assert!(
                matches!(error, ResumeError::NotAQuestion { .. }),
                "{call}: {error:?}"
            ),
        }
    }
    let elsewhere = RunKey::new(Some("tenant-other".into()), original.run_id.clone());
    let error = agent
        .fork(elsewhere, &ToolCallId::new("q1"), json!("No"))
        .stream()
        .await
        .map(|_| ())
        .unwrap_err();
    assert!(
        matches!(error, ResumeError::RunNotFound { .. }),
        "{error:?}"
    );
    assert_eq!(run_count(&store).await, runs_before, "nothing was created");
    assert_eq!(stored_text(&store, &original).await, before);

    let fork = agent
        .fork(&original, &ToolCallId::new("q1"), json!("No"))
        .stream()
        .await
        .unwrap();
    let fork_key = fork.run_key().clone();
    assert!(has_finish(&chunks_of(fork).await));
    assert_eq!(
        store.load_run(&fork_key).await.unwrap().state.status(),
        RunStatus::Completed
    );
    assert_eq!(
        stored_text(&store, &original).await,
        before,
        "the waiting original is untouched"
    );
    assert_eq!(
        counter.executions.load(Ordering::SeqCst),
        1,
        "only the first k1"
    );
}
