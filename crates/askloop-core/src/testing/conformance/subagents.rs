//! Sub-agent scenarios: a supervisor whose sub-agents' questions and approvals wait at the root,
//! are answered through it from another "process" (other agent values on the same store), in
//! any order, survive a crash of the child's model call, and end with a cancel of the root.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use serde_json::{Value, json};

use crate::ids::{RunId, RunKey, ToolCallId};
use crate::model::{LanguageModel, ModelError, ModelEventStream, ModelRequest};
use crate::run::{RunStatus, SubagentOrigin};
use crate::store::{ListedRun, RunFilter, RunStore, RunSummary};
use crate::testing::ScriptedModel;
use crate::testing::conformance::support::*;
use crate::{Agent, AskUser, Chunk, ResumeError};

/// A sub-agent built on `store`: `ask_user` and the counting tool (needing approval when
/// `approval`), its model `model`.
fn subagent(
    id: &str,
    store: &Arc<dyn RunStore>,
    model: Arc<dyn LanguageModel>,
    counter: &Counter,
    approval: bool,
) -> Agent {
    let mut builder = Agent::builder(id)
        .shared_model(model)
        .tool(AskUser::new())
        .tool(counter.clone())
        .shared_store(store.clone())
        .lease(SHORT_LEASE);
    if approval {
        builder = builder.require_approval_for("count");
    }
    builder.build().unwrap()
}

/// The supervisor: its script `steps`, offering `subagents`.
fn supervisor(store: &Arc<dyn RunStore>, steps: Vec<Value>, subagents: Vec<Agent>) -> Agent {
    let mut builder = Agent::builder("supervisor")
        .model(ScriptedModel::from_json(&script(steps)).unwrap())
        .shared_store(store.clone())
        .lease(SHORT_LEASE);
    for child in subagents {
        builder = builder.subagent(child);
    }
    builder.build().unwrap()
}

fn scripted(steps: Vec<Value>) -> Arc<dyn LanguageModel> {
    Arc::new(ScriptedModel::from_json(&script(steps)).unwrap())
}

fn delegate(id: &str, to: &str, prompt: &str) -> Value {
    json!({"id": id, "name": to, "args": {"prompt": prompt}})
}

/// The waiting calls a stream ended with: (id, origin).
fn waiting(chunks: &[Chunk]) -> Vec<(String, Option<SubagentOrigin>)> {
    chunks
        .iter()
        .filter_map(|chunk| match chunk {
            Chunk::ToolCallSuspended { call, subagent, .. }
            | Chunk::ToolCallApproval { call, subagent, .. } => {
                Some((call.id.to_string(), subagent.clone()))
            }
            _ => None,
        })
        .collect()
}

/// The child chunks of a stream (their run), in order.
fn nested_runs(chunks: &[Chunk]) -> Vec<RunId> {
    chunks
        .iter()
        .filter_map(|chunk| match chunk {
            Chunk::Subagent { run_id, .. } => Some(run_id.clone()),
            _ => None,
        })
        .collect()
}

async fn listed(store: &Arc<dyn RunStore>, filter: RunFilter) -> Vec<RunSummary> {
    store
        .list_runs(&filter)
        .await
        .unwrap()
        .runs
        .into_iter()
        .filter_map(|listed| match listed {
            ListedRun::Run(summary) => Some(summary),
            _ => None,
        })
        .collect()
}

async fn status_of(store: &Arc<dyn RunStore>, run_id: &RunId) -> RunStatus {
    store
        .load_run(&RunKey::new(None, run_id.clone()))
        .await
        .unwrap()
        .state
        .status
}

fn researcher_steps() -> Vec<Value> {
    vec![
        json!({"toolCalls": [ask("r1", json!({"question": "Which repo?", "options": [{"label": "main"}, {"label": "docs"}]}))]}),
        json!({"toolCalls": [{"id": "r2", "name": "count", "args": {"label": "files"}}]}),
        json!({"text": "main has 3 files"}),
    ]
}

pub(super) async fn issue35_a_nested_question_is_answered_through_the_root(
    store: Arc<dyn RunStore>,
) {
    let counter = Counter::default();
    let sup_steps = vec![
        json!({"toolCalls": [delegate("s1", "researcher", "Find the repo's size")]}),
        json!({"text": "Done."}),
    ];
    let researcher = subagent(
        "researcher",
        &store,
        scripted(researcher_steps()),
        &counter,
        false,
    );
    let root_agent = supervisor(&store, sup_steps.clone(), vec![researcher]);
    let stream = root_agent.stream("How big is the repo?");
    let root = stream.run_id().clone();
    let chunks = chunks_of(stream).await;
    assert!(!has_finish(&chunks));
    let child_runs = nested_runs(&chunks);
    assert!(
        !child_runs.is_empty(),
        "the child's chunks stream at the root"
    );
    let child = child_runs[0].clone();
    let waits = waiting(&chunks);
    assert_eq!(waits.len(), 1, "{waits:?}");
    assert_eq!(waits[0].0, "s1~r1");
    let origin = waits[0].1.clone().expect("an origin");
    assert_eq!(origin.run_id, child);
    assert_eq!(origin.tool_call_id.as_str(), "r1");
    assert_eq!(origin.path, vec!["researcher".into()]);

    // One entry at the root; the child is a real run, linked to it.
    let roots = listed(
        &store,
        RunFilter::new().status(RunStatus::Suspended).top_level(),
    )
    .await;
    assert_eq!(roots.len(), 1);
    assert_eq!(roots[0].run_id, root);
    assert_eq!(roots[0].pending.len(), 1);
    assert_eq!(roots[0].pending[0].tool_call_id.as_str(), "s1~r1");
    let children = listed(&store, RunFilter::new().children_of(root.clone())).await;
    assert_eq!(children.len(), 1);
    let link = children[0].parent.clone().expect("a parent link");
    assert_eq!(
        (
            link.run_id,
            link.tool_call_id.as_str(),
            link.root_run_id,
            link.depth
        ),
        (root.clone(), "s1", root.clone(), 1)
    );
    assert_eq!(status_of(&store, &child).await, RunStatus::Suspended);

    // Another process: the same agents built again on the same store.
    let researcher = subagent(
        "researcher",
        &store,
        scripted(researcher_steps()),
        &counter,
        false,
    );
    let direct = researcher
        .resume_stream(json!("main"), &child, Some(&ToolCallId::new("r1")))
        .await
        .unwrap_err();
    assert!(
        matches!(direct, ResumeError::ChildRun { ref root_run_id, .. } if *root_run_id == root),
        "{direct:?}"
    );
    let other = supervisor(&store, sup_steps, vec![researcher]);
    let refused = other
        .resume_stream(json!("nope"), &root, Some(&ToolCallId::new("s1~r1")))
        .await
        .unwrap_err();
    assert!(
        matches!(refused, ResumeError::InvalidAnswer { .. }),
        "checked against the child's question: {refused:?}"
    );
    assert_eq!(status_of(&store, &root).await, RunStatus::Suspended);
    assert_eq!(status_of(&store, &child).await, RunStatus::Suspended);

    let chunks = chunks_of(
        other
            .resume_stream(json!("main"), &root, Some(&ToolCallId::new("s1~r1")))
            .await
            .unwrap(),
    )
    .await;
    assert!(has_finish(&chunks), "one resume finishes the tree");
    assert!(nested_runs(&chunks).iter().all(|run| *run == child));
    let results = tool_results(&chunks);
    assert_eq!(
        results,
        [("s1".to_owned(), json!("main has 3 files"), false)],
        "the child's final text is the parent's result"
    );
    assert_eq!(counter.executions.load(Ordering::SeqCst), 1);
    assert_eq!(status_of(&store, &child).await, RunStatus::Completed);
    assert_eq!(status_of(&store, &root).await, RunStatus::Completed);
}

pub(super) async fn issue35_two_children_waiting_are_answered_in_reverse_order(
    store: Arc<dyn RunStore>,
) {
    let counter = Counter::default();
    let ask_then = |call: &str, text: &str| {
        vec![
            json!({"toolCalls": [ask(call, json!({"question": format!("{call}?")}))]}),
            json!({"text": text}),
        ]
    };
    let researcher = subagent(
        "researcher",
        &store,
        scripted(ask_then("r1", "researched")),
        &counter,
        false,
    );
    let writer = subagent(
        "writer",
        &store,
        scripted(ask_then("w1", "written")),
        &counter,
        false,
    );
    let root_agent = supervisor(
        &store,
        vec![
            json!({"toolCalls": [delegate("s1", "researcher", "a"), delegate("s2", "writer", "b")]}),
            json!({"text": "Both done."}),
        ],
        vec![researcher, writer],
    );
    let stream = root_agent.stream("Do both");
    let root = stream.run_id().clone();
    let chunks = chunks_of(stream).await;
    let ids: Vec<String> = waiting(&chunks).into_iter().map(|(id, _)| id).collect();
    assert_eq!(ids, ["s1~r1", "s2~w1"]);

    let second = chunks_of(
        root_agent
            .resume_stream(json!("second"), &root, Some(&ToolCallId::new("s2~w1")))
            .await
            .unwrap(),
    )
    .await;
    assert!(!has_finish(&second));
    let ids: Vec<String> = waiting(&second).into_iter().map(|(id, _)| id).collect();
    assert_eq!(ids, ["s1~r1"], "the other child still waits");
    let first = chunks_of(
        root_agent
            .resume_stream(json!("first"), &root, None)
            .await
            .unwrap(),
    )
    .await;
    assert!(
        has_finish(&first),
        "an unnamed answer goes to the only waiting call"
    );
    let stored = store
        .load_run(&RunKey::new(None, root.clone()))
        .await
        .unwrap()
        .state;
    assert_eq!(stored.status(), RunStatus::Completed);
    let results: Vec<Value> = stored
        .messages()
        .iter()
        .filter_map(|message| match message {
            crate::model::Message::Tool { results } => Some(
                results
                    .iter()
                    .map(|result| result.result.clone())
                    .collect::<Vec<_>>(),
            ),
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(results, [json!("researched"), json!("written")]);
}

pub(super) async fn issue35_a_childs_approval_waits_at_the_root(store: Arc<dyn RunStore>) {
    let counter = Counter::default();
    let researcher = subagent(
        "researcher",
        &store,
        scripted(vec![
            json!({"toolCalls": [{"id": "r1", "name": "count", "args": {"label": "x"}}]}),
            json!({"text": "counted"}),
        ]),
        &counter,
        true,
    );
    let root_agent = supervisor(
        &store,
        vec![
            json!({"toolCalls": [delegate("s1", "researcher", "count")]}),
            json!({"text": "Done."}),
        ],
        vec![researcher],
    );
    let stream = root_agent.stream("Count");
    let root = stream.run_id().clone();
    let chunks = chunks_of(stream).await;
    assert!(
        chunks.iter().any(|chunk| matches!(
            chunk,
            Chunk::ToolCallApproval { call, subagent: Some(_), .. } if call.id.as_str() == "s1~r1"
        )),
        "the child's approval is the root's"
    );
    assert_eq!(counter.executions.load(Ordering::SeqCst), 0);
    let chunks = chunks_of(
        root_agent
            .respond(&root)
            .approve(&ToolCallId::new("s1~r1"))
            .stream()
            .await
            .unwrap(),
    )
    .await;
    assert!(has_finish(&chunks));
    assert_eq!(counter.executions.load(Ordering::SeqCst), 1);
}

/// A supervisor whose run waits on its researcher's question: the agent, the root run, the
/// child run.
async fn root_waiting_on_its_child(store: &Arc<dyn RunStore>) -> (Agent, RunId, RunId) {
    let counter = Counter::default();
    let researcher = subagent(
        "researcher",
        store,
        scripted(researcher_steps()),
        &counter,
        false,
    );
    let root_agent = supervisor(
        store,
        vec![json!({"toolCalls": [delegate("s1", "researcher", "x")]})],
        vec![researcher],
    );
    let stream = root_agent.stream("Go");
    let root = stream.run_id().clone();
    let chunks = chunks_of(stream).await;
    let child = nested_runs(&chunks)[0].clone();
    (root_agent, root, child)
}

pub(super) async fn issue35_cancel_of_the_root_cancels_its_waiting_child(store: Arc<dyn RunStore>) {
    let (root_agent, root, child) = root_waiting_on_its_child(&store).await;
    let refused = crate::cancel_run_in(store.as_ref(), &child, None)
        .await
        .unwrap_err();
    assert!(
        matches!(refused, ResumeError::ChildRun { .. }),
        "a child is cancelled through its root: {refused:?}"
    );
    assert_eq!(status_of(&store, &child).await, RunStatus::Suspended);
    root_agent.cancel_run(&root, None).await.unwrap();
    assert_eq!(status_of(&store, &root).await, RunStatus::Cancelled);
    assert_eq!(status_of(&store, &child).await, RunStatus::Cancelled);
}

/// A model that replays a script but hangs, once, on the call of step `hang_at`.
struct HangOnce {
    inner: ScriptedModel,
    hang_at: usize,
    hung: AtomicBool,
    /// Woken when the call hangs.
    hanging: tokio::sync::Notify,
}

#[async_trait]
impl LanguageModel for HangOnce {
    fn provider(&self) -> &str {
        "test"
    }
    fn model_id(&self) -> &str {
        "hang-once"
    }
    async fn stream(&self, request: ModelRequest) -> Result<ModelEventStream, ModelError> {
        let step = request
            .messages
            .iter()
            .filter(|message| message.is_assistant())
            .count();
        if step == self.hang_at && !self.hung.swap(true, Ordering::SeqCst) {
            self.hanging.notify_one();
            return Ok(Box::pin(futures::stream::pending()));
        }
        self.inner.stream(request).await
    }
}

pub(super) async fn issue35_a_crash_in_the_childs_model_call_is_recovered_at_the_root(
    store: Arc<dyn RunStore>,
) {
    let counter = Counter::default();
    let steps = vec![
        json!({"toolCalls": [{"id": "r1", "name": "count", "args": {"label": "once"}}]}),
        json!({"text": "counted once"}),
    ];
    let hanging = Arc::new(HangOnce {
        inner: ScriptedModel::from_json(&script(steps.clone())).unwrap(),
        hang_at: 1,
        hung: AtomicBool::new(false),
        hanging: tokio::sync::Notify::new(),
    });
    let sup_steps = vec![
        json!({"toolCalls": [delegate("s1", "researcher", "count")]}),
        json!({"text": "Done."}),
    ];
    let watched = Arc::clone(&hanging);
    let researcher = subagent("researcher", &store, hanging, &counter, false);
    let root_agent = supervisor(&store, sup_steps.clone(), vec![researcher]);
    let mut stream = root_agent.stream("Count");
    let root = stream.run_id().clone();
    // Drive until the child's counting tool ran and its second model call hangs, then "die".
    use futures::StreamExt;
    let drive = std::pin::pin!(async { while stream.next().await.is_some() {} });
    let hung = std::pin::pin!(watched.hanging.notified());
    futures::future::select(drive, hung).await;
    drop(stream);
    assert_eq!(counter.executions.load(Ordering::SeqCst), 1);

    let researcher = subagent("researcher", &store, scripted(steps), &counter, false);
    let other = supervisor(&store, sup_steps, vec![researcher]);
    let chunks = chunks_of(continue_after_lease(&other, &root).await).await;
    assert!(has_finish(&chunks), "the tree finishes: {chunks:?}");
    assert_eq!(
        counter.executions.load(Ordering::SeqCst),
        1,
        "the child's finished tool never runs again"
    );
    let children = listed(&store, RunFilter::new().children_of(root.clone())).await;
    assert_eq!(children.len(), 1, "one child, never a second");
    assert_eq!(children[0].status, RunStatus::Completed);
}

pub(super) async fn issue35_a_refused_nested_decision_changes_nothing_in_the_tree(
    store: Arc<dyn RunStore>,
) {
    let counter = Counter::default();
    let researcher = Agent::builder("researcher")
        .shared_model(scripted(vec![
            json!({"toolCalls": [{"id": "r1", "name": "count", "args": {"label": "x"}}]}),
            json!({"text": "counted"}),
        ]))
        .tool(counter.clone())
        .require_approval_for("count")
        .approvers(crate::ApproverPolicy::new().roles(["ops"]))
        .shared_store(store.clone())
        .build()
        .unwrap();
    let root_agent = supervisor(
        &store,
        vec![
            json!({"toolCalls": [delegate("s1", "researcher", "count")]}),
            json!({"text": "Done."}),
        ],
        vec![researcher],
    );
    let stream = root_agent.stream("Count");
    let root = stream.run_id().clone();
    let chunks = chunks_of(stream).await;
    let child = nested_runs(&chunks)[0].clone();
    let version = |run: RunId| {
        let store = store.clone();
        async move {
            store
                .load_run(&RunKey::new(None, run))
                .await
                .unwrap()
                .version
        }
    };
    let (root_before, child_before) = (version(root.clone()).await, version(child.clone()).await);
    let call = ToolCallId::new("s1~r1");
    let refused = root_agent
        .respond(&root)
        .actor(crate::Actor::new("intern").roles(["dev"]))
        .approve(&call)
        .stream()
        .await
        .unwrap_err();
    assert!(
        matches!(refused, ResumeError::NotPermitted { .. }),
        "the child's policy holds at the root: {refused:?}"
    );
    assert_eq!(version(root.clone()).await, root_before);
    assert_eq!(version(child.clone()).await, child_before);
    assert_eq!(counter.executions.load(Ordering::SeqCst), 0);
    let chunks = chunks_of(
        root_agent
            .respond(&root)
            .actor(crate::Actor::new("oncall").roles(["ops"]))
            .approve(&call)
            .stream()
            .await
            .unwrap(),
    )
    .await;
    assert!(has_finish(&chunks));
    assert_eq!(counter.executions.load(Ordering::SeqCst), 1);
    let decisions = store
        .load_run(&RunKey::new(None, child))
        .await
        .unwrap()
        .state;
    assert!(
        decisions
            .decisions()
            .iter()
            .any(|decision| decision.record.by.as_deref() == Some("oncall")),
        "the child's audit names who approved"
    );
}

pub(super) async fn issue35_a_childs_deadline_is_swept_through_the_root(store: Arc<dyn RunStore>) {
    let counter = Counter::default();
    let researcher = Agent::builder("researcher")
        .shared_model(scripted(vec![
            json!({"toolCalls": [{"id": "r1", "name": "count", "args": {"label": "x"}}]}),
            json!({"text": "gave up"}),
        ]))
        .tool(counter.clone())
        .require_approval_for("count")
        .approval_timeout(std::time::Duration::from_millis(20))
        .shared_store(store.clone())
        .build()
        .unwrap();
    let root_agent = supervisor(
        &store,
        vec![
            json!({"toolCalls": [delegate("s1", "researcher", "count")]}),
            json!({"text": "Done."}),
        ],
        vec![researcher],
    );
    let stream = root_agent.stream("Count");
    let root = stream.run_id().clone();
    chunks_of(stream).await;
    // Until the child's approval is due (20 ms after it was asked for).
    let due = loop {
        let due = crate::expired_runs(store.as_ref(), crate::time::lease_now_ms())
            .await
            .unwrap();
        if !due.is_empty() {
            break due;
        }
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    };
    assert_eq!(due.len(), 1, "only the root is due: {due:?}");
    assert_eq!(due[0].run_id, root);
    assert_eq!(due[0].tool_call_ids, [ToolCallId::new("s1~r1")]);
    let chunks = chunks_of(root_agent.expire_due(&due[0], None).await.unwrap()).await;
    assert!(has_finish(&chunks));
    assert_eq!(counter.executions.load(Ordering::SeqCst), 0);
    assert_eq!(
        tool_results(&chunks)
            .last()
            .map(|(_, result, _)| result.clone()),
        Some(json!("gave up"))
    );
}

pub(super) async fn issue35_a_message_to_a_childs_thread_leaves_the_tree_answerable(
    store: Arc<dyn RunStore>,
) {
    let counter = Counter::default();
    let researcher = subagent(
        "researcher",
        &store,
        scripted(researcher_steps()),
        &counter,
        false,
    );
    let sup_steps = vec![
        json!({"toolCalls": [delegate("s1", "researcher", "x")]}),
        json!({"text": "Done."}),
    ];
    let root_agent = supervisor(&store, sup_steps, vec![researcher.clone()]);
    let stream = root_agent.stream("Go");
    let root = stream.run_id().clone();
    let chunks = chunks_of(stream).await;
    let child = nested_runs(&chunks)[0].clone();
    // Someone who saw the child's id (its thread's) writes to that thread.
    let hijack = researcher.stream_with(
        "hijack",
        crate::RunOptions::new().thread(crate::ThreadId::new(child.as_str())),
    );
    chunks_of(hijack).await;
    assert_eq!(
        status_of(&store, &child).await,
        RunStatus::Suspended,
        "a message to a child's thread supersedes nothing"
    );
    let chunks = chunks_of(
        root_agent
            .resume_stream(json!("main"), &root, Some(&ToolCallId::new("s1~r1")))
            .await
            .unwrap(),
    )
    .await;
    assert!(has_finish(&chunks));
}

pub(super) async fn issue35_a_cancel_cut_short_is_finished_by_cancelling_again(
    store: Arc<dyn RunStore>,
) {
    let (root_agent, root, child) = root_waiting_on_its_child(&store).await;
    // The process that cancelled the root stopped before it cancelled the child.
    let stored = store
        .load_run(&RunKey::new(None, root.clone()))
        .await
        .unwrap();
    let mut state = stored.state;
    state.status = RunStatus::Cancelled;
    store
        .update_run(&state, stored.version, None)
        .await
        .unwrap();
    assert_eq!(status_of(&store, &child).await, RunStatus::Suspended);
    let again = root_agent.cancel_run(&root, None).await.unwrap_err();
    assert!(
        matches!(again, ResumeError::NotCancellable { .. }),
        "{again:?}"
    );
    assert_eq!(
        status_of(&store, &child).await,
        RunStatus::Cancelled,
        "cancelling the ended root again cancels what it left behind"
    );
}
