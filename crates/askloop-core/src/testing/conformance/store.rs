//! The store scenarios: what every [`RunStore`] must do, alone (versions, compare-and-swap,
//! listing, threads) and under the agent loop (commit before emit, one winner of concurrent
//! resumes, refusals that change nothing, recovery after a failure or a crash).
//!
//! Each scenario is private and reachable only through [`SCENARIOS`], so one that is not listed
//! there is dead code, which the lints refuse.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::StreamExt;
use serde_json::json;

use crate::ids::{RunId, ThreadId, ToolCallId};
use crate::model::{Message, ModelError};
use crate::run::RunStatus;
use crate::store::{RunFilter, RunStore, StoreError};
use crate::testing::ScriptedModel;
use crate::testing::conformance::Scenario;
use crate::testing::conformance::support::*;
use crate::{Agent, AgentError, AskUser, Chunk, ResumeError, RunOptions};

macro_rules! scenarios {
    ($($name:ident),* $(,)?) => {
        /// Every store scenario, by name.
        pub(super) const SCENARIOS: &[(&str, Scenario)] = &[
            $((stringify!($name), |store| Box::pin($name(store)))),*
        ];
    };
}

scenarios![
    insert_then_load_round_trips,
    load_of_unknown_run_is_not_found,
    insert_of_existing_id_is_refused,
    stale_update_conflicts_and_changes_nothing,
    update_of_unknown_run_is_not_found,
    list_filters_and_orders_newest_first,
    list_pages_with_a_cursor,
    thread_gets_messages_of_completed_runs_once,
    concurrent_updates_have_one_winner,
    commit_happens_before_suspended_chunk,
    concurrent_resumes_have_exactly_one_winner,
    repeated_answers_by_id_never_land_on_a_later_question,
    resume_errors_change_nothing,
    later_runs_of_a_thread_see_its_history,
    failed_model_call_after_resume_keeps_the_answer,
    cancelled_model_call_fails_the_run_and_can_continue,
    crash_after_resume_never_reruns_a_side_effecting_resume,
];

async fn insert_then_load_round_trips(store: Arc<dyn RunStore>) {
    let original = state("r1", "t1", RunStatus::Running, 1);
    assert_eq!(store.insert_run(&original).await.unwrap(), 1);
    let loaded = store.load_run(&RunId::new("r1")).await.unwrap();
    assert_eq!(loaded.version, 1);
    assert_eq!(loaded.state, original);
}

async fn load_of_unknown_run_is_not_found(store: Arc<dyn RunStore>) {
    let error = store.load_run(&RunId::new("nope")).await.unwrap_err();
    assert!(
        matches!(error, StoreError::NotFound { ref run_id } if run_id.as_str() == "nope"),
        "{error:?}"
    );
}

async fn insert_of_existing_id_is_refused(store: Arc<dyn RunStore>) {
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

async fn stale_update_conflicts_and_changes_nothing(store: Arc<dyn RunStore>) {
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

async fn update_of_unknown_run_is_not_found(store: Arc<dyn RunStore>) {
    let error = store
        .update_run(&state("ghost", "t", RunStatus::Running, 1), 1)
        .await
        .unwrap_err();
    assert!(matches!(error, StoreError::NotFound { .. }), "{error:?}");
}

async fn list_filters_and_orders_newest_first(store: Arc<dyn RunStore>) {
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
    other.agent_id = "other-agent".into();
    store.insert_run(&other).await.unwrap();
    let ids = |page: crate::store::RunPage| {
        page.runs
            .iter()
            .map(|run| run.run_id().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        ids(store.list_runs(&RunFilter::new()).await.unwrap()),
        ["c", "b", "a"]
    );
    let suspended = RunFilter::new().status(RunStatus::Suspended);
    assert_eq!(ids(store.list_runs(&suspended).await.unwrap()), ["c", "a"]);
    let thread = RunFilter::new().thread("t1");
    assert_eq!(ids(store.list_runs(&thread).await.unwrap()), ["b", "a"]);
    let resource = RunFilter::new().resource("tenant-2");
    assert_eq!(ids(store.list_runs(&resource).await.unwrap()), ["c"]);
    let agent = RunFilter::new().agent("tester");
    assert_eq!(ids(store.list_runs(&agent).await.unwrap()), ["b", "a"]);
    let limited = RunFilter::new().limit(1);
    assert_eq!(ids(store.list_runs(&limited).await.unwrap()), ["c"]);
    let all = store.list_runs(&RunFilter::new()).await.unwrap();
    let summary = all.runs[0].summary().unwrap();
    assert_eq!(
        (
            summary.agent_id.as_str(),
            summary.thread_id.as_str(),
            summary.status
        ),
        ("other-agent", "t2", RunStatus::Suspended)
    );
    assert_eq!(
        summary.resource_id.as_ref().map(|id| id.as_str()),
        Some("tenant-2")
    );
    assert_eq!(summary.created_at_ms, 30);
    assert!(all.next_cursor.is_none(), "one page holds everything");
}

async fn list_pages_with_a_cursor(store: Arc<dyn RunStore>) {
    // Two runs share a creation time: the id breaks the tie.
    for (id, created) in [("a", 10), ("b", 20), ("c", 20), ("d", 30), ("e", 40)] {
        store
            .insert_run(&state(id, "t", RunStatus::Suspended, created))
            .await
            .unwrap();
    }
    let mut seen = Vec::new();
    let mut filter = RunFilter::new().limit(2);
    let mut pages = 0;
    loop {
        let page = store.list_runs(&filter).await.unwrap();
        pages += 1;
        assert!(page.runs.len() <= 2);
        seen.extend(page.runs.iter().map(|run| run.run_id().to_string()));
        let Some(cursor) = page.next_cursor else {
            break;
        };
        let text = cursor.to_string();
        filter = RunFilter::new().limit(2).after(text.parse().unwrap());
    }
    assert_eq!(seen, ["e", "d", "c", "b", "a"]);
    assert_eq!(pages, 3, "the last page has no cursor");
    let exact = store.list_runs(&RunFilter::new().limit(5)).await.unwrap();
    assert_eq!(exact.runs.len(), 5);
    assert!(
        exact.next_cursor.is_none(),
        "no empty page after an exact fit"
    );
    let filtered = store
        .list_runs(&RunFilter::new().status(RunStatus::Completed).limit(2))
        .await
        .unwrap();
    assert!(filtered.runs.is_empty() && filtered.next_cursor.is_none());
}

async fn thread_gets_messages_of_completed_runs_once(store: Arc<dyn RunStore>) {
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
        parts: vec![crate::model::AssistantPart::Text { text: "hi".into() }],
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

async fn concurrent_updates_have_one_winner(store: Arc<dyn RunStore>) {
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

async fn commit_happens_before_suspended_chunk(store: Arc<dyn RunStore>) {
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

async fn concurrent_resumes_have_exactly_one_winner(store: Arc<dyn RunStore>) {
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

async fn repeated_answers_by_id_never_land_on_a_later_question(store: Arc<dyn RunStore>) {
    let model = RecordingModel::new(&script(vec![
        json!({"toolCalls": [ask("q1", json!({"question": "First?"}))]}),
        json!({"toolCalls": [ask("q2", json!({"question": "Second?"}))]}),
        json!({"text": "done"}),
    ]));
    let agent = agent(&store, &model, &Counter::default(), &Gate::default());
    let run_id = agent.generate("go").await.unwrap().run_id;
    let q1 = ToolCallId::new("q1");
    // Ten copies of the same answer to q1 at once (a double submit, a retry after a timeout):
    // exactly one is applied; the others are refused and q2 never sees them.
    let attempts = futures::future::join_all(
        (0..10).map(|_| agent.resume_stream(json!("one"), &run_id, Some(&q1))),
    )
    .await;
    let mut winners = Vec::new();
    for attempt in attempts {
        match attempt {
            Ok(stream) => winners.push(stream),
            Err(error) => assert!(
                matches!(
                    error,
                    ResumeError::Conflict { .. } | ResumeError::AlreadyAnswered { .. }
                ),
                "{error:?}"
            ),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one winner");
    for winner in winners {
        chunks_of(winner).await;
    }
    let stored = store.load_run(&run_id).await.unwrap().state;
    let pending = stored.pending_tool_calls();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].tool_call_id.as_str(), "q2");
    // A late repeat naming q1 is refused as answered; q2 is untouched.
    let error = agent
        .resume_stream(json!("one"), &run_id, Some(&q1))
        .await
        .unwrap_err();
    assert!(
        matches!(error, ResumeError::AlreadyAnswered { .. }),
        "{error:?}"
    );
    assert_eq!(store.load_run(&run_id).await.unwrap().state, stored);
}

async fn resume_errors_change_nothing(store: Arc<dyn RunStore>) {
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

async fn later_runs_of_a_thread_see_its_history(store: Arc<dyn RunStore>) {
    let model = RecordingModel::new(&script(vec![
        json!({"text": "first answer"}),
        json!({"text": "second answer"}),
    ]));
    let agent = agent(&store, &model, &Counter::default(), &Gate::default());
    let thread = ThreadId::new("conversation-1");
    let options = RunOptions::new().thread(thread.clone()).resource("user-7");
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

async fn failed_model_call_after_resume_keeps_the_answer(store: Arc<dyn RunStore>) {
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

async fn cancelled_model_call_fails_the_run_and_can_continue(store: Arc<dyn RunStore>) {
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

async fn crash_after_resume_never_reruns_a_side_effecting_resume(store: Arc<dyn RunStore>) {
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
