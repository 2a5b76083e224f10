//! Store scenarios of issue 31, "trust at the edges": resources are namespaces (a run id or a
//! thread id used by two resources names two runs or two threads), a thread has one turn at a
//! time (exactly, however requests race), and a cancelled run joins its thread's history.
//! Listed in `store.rs`'s `SCENARIOS`, so they run on every store.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde_json::json;

use crate::ids::{ResourceId, RunId, RunKey, ThreadId, ThreadKey, ToolCallId};
use crate::model::Message;
use crate::run::RunStatus;
use crate::store::{ListedRun, ResourceFilter, RunFilter, RunStore, StoreError, running_run_of};
use crate::testing::conformance::support::*;
use crate::{Agent, AgentError, AskUser, Chunk, ResumeError, RunOptions, RunOutcome};

/// The key of `run_id` in `resource`.
fn key(resource: Option<&str>, run_id: &str) -> RunKey {
    RunKey::new(resource.map(ResourceId::new), RunId::new(run_id))
}

/// The key of `thread_id` in `resource`.
fn thread(resource: Option<&str>, thread_id: &str) -> ThreadKey {
    ThreadKey::new(resource.map(ResourceId::new), ThreadId::new(thread_id))
}

/// A state like [`state`]'s, of `resource`.
fn state_of(
    resource: Option<&str>,
    run_id: &str,
    thread_id: &str,
    status: RunStatus,
    created: u64,
) -> crate::run::RunState {
    let mut run = state(run_id, thread_id, status, created);
    run.resource_id = resource.map(ResourceId::new);
    run
}

/// An agent over `store` with `model` and the `ask_user` tool.
fn turn_agent(store: &Arc<dyn RunStore>, model: &Arc<TurnModel>) -> Agent {
    Agent::builder("tester")
        .shared_model(model.clone())
        .tool(AskUser::new())
        .shared_store(store.clone())
        .build()
        .unwrap()
}

/// The keys of a listing page.
fn keys(page: &crate::store::RunPage) -> Vec<RunKey> {
    page.runs.iter().map(ListedRun::key).collect()
}

/// The same run id in two resources (and without one) is three runs: each is inserted, loaded,
/// updated, leased and listed on its own; a cursor between two of them created at the same
/// moment loses neither; a bare id finds all three keys.
pub(super) async fn issue31_run_ids_are_per_resource(store: Arc<dyn RunStore>) {
    let (a, b, none) = (key(Some("a"), "r1"), key(Some("b"), "r1"), key(None, "r1"));
    let mut run_a = state_of(Some("a"), "r1", "t", RunStatus::Suspended, 10);
    let run_b = state_of(Some("b"), "r1", "t", RunStatus::Running, 10);
    let run_none = state_of(None, "r1", "t", RunStatus::Failed, 10);
    for run in [&run_a, &run_b, &run_none] {
        assert_eq!(store.insert_run(run, None).await.unwrap(), 1);
    }
    let error = store
        .insert_run(&state_of(Some("a"), "r1", "u", RunStatus::Failed, 11), None)
        .await
        .unwrap_err();
    assert!(
        matches!(error, StoreError::AlreadyExists { .. }),
        "{error:?}"
    );
    assert_eq!(store.load_run(&a).await.unwrap().state, run_a);
    assert_eq!(store.load_run(&b).await.unwrap().state, run_b);
    assert_eq!(store.load_run(&none).await.unwrap().state, run_none);
    let error = store.load_run(&key(Some("c"), "r1")).await.unwrap_err();
    assert!(matches!(error, StoreError::NotFound { .. }), "{error:?}");

    // An update, a stale update and a lease renewal touch their own run only.
    run_a.messages.push(Message::user("more"));
    run_a.status = RunStatus::Completed;
    assert_eq!(store.update_run(&run_a, 1, None).await.unwrap(), 2);
    let error = store.update_run(&run_a, 1, None).await.unwrap_err();
    assert!(matches!(error, StoreError::Conflict { .. }), "{error:?}");
    let lease = crate::store::Lease::new("holder".into(), 99);
    store.renew_lease(&b, 1, &lease).await.unwrap();
    let loaded_b = store.load_run(&b).await.unwrap();
    assert_eq!((loaded_b.version, loaded_b.lease), (1, Some(lease)));
    assert_eq!(store.load_run(&none).await.unwrap().lease, None);
    assert_eq!(store.load_run(&a).await.unwrap().state, run_a);
    assert_eq!(store.load_run(&b).await.unwrap().state.messages().len(), 1);

    // Listed apart, newest first, the resource breaking the tie (descending, none last).
    let all = store.list_runs(&RunFilter::new()).await.unwrap();
    assert_eq!(keys(&all), [b.clone(), a.clone(), none.clone()]);
    let mut walked = Vec::new();
    let mut filter = RunFilter::new().limit(1);
    loop {
        let page = store.list_runs(&filter).await.unwrap();
        walked.extend(keys(&page));
        let Some(cursor) = page.next_cursor else {
            break;
        };
        filter = RunFilter::new()
            .limit(1)
            .after(cursor.to_string().parse().unwrap());
    }
    assert_eq!(
        walked,
        [b.clone(), a.clone(), none.clone()],
        "pages lose none"
    );
    let without = RunFilter::new().resource_filter(ResourceFilter::Without);
    assert_eq!(
        keys(&store.list_runs(&without).await.unwrap()),
        std::slice::from_ref(&none)
    );
    let only_a = RunFilter::new().resource("a");
    assert_eq!(
        keys(&store.list_runs(&only_a).await.unwrap()),
        std::slice::from_ref(&a)
    );
    // A bare id finds every run with it, and nothing else.
    store
        .insert_run(&state_of(Some("a"), "r2", "t", RunStatus::Failed, 12), None)
        .await
        .unwrap();
    let mut found = store.keys_of_run(&RunId::new("r1")).await.unwrap();
    found.sort();
    let mut expected = vec![a.clone(), b.clone(), none.clone()];
    expected.sort();
    assert_eq!(found, expected);
    assert!(
        store
            .keys_of_run(&RunId::new("r3"))
            .await
            .unwrap()
            .is_empty()
    );
    // The thread "t" of each resource has its own history.
    assert_eq!(
        store
            .thread_history(&thread(Some("a"), "t"), None)
            .await
            .unwrap()
            .messages,
        run_a.messages
    );
    for other in [thread(Some("b"), "t"), thread(None, "t")] {
        assert!(
            store
                .thread_history(&other, None)
                .await
                .unwrap()
                .messages
                .is_empty()
        );
    }
}

/// At most one run of a thread is running: an insert or update that would make a second one
/// running is refused (naming the running run) and changes nothing; the same thread id in
/// another resource is another thread; a run that stays running is not refused; once the
/// running run ends, another may run. Of many inserts racing on one new thread, one wins.
pub(super) async fn issue31_one_running_run_per_thread(store: Arc<dyn RunStore>) {
    let first = state_of(Some("a"), "first", "t", RunStatus::Running, 1);
    store.insert_run(&first, None).await.unwrap();
    let error = store
        .insert_run(
            &state_of(Some("a"), "second", "t", RunStatus::Running, 2),
            None,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&error, StoreError::ThreadBusy { thread_id, running_run_id }
            if thread_id.as_str() == "t" && running_run_id.as_ref().map(RunId::as_str) == Some("first")),
        "{error:?}"
    );
    let error = store.load_run(&key(Some("a"), "second")).await.unwrap_err();
    assert!(
        matches!(error, StoreError::NotFound { .. }),
        "nothing stored"
    );
    // Another resource's thread "t", another thread of "a": no conflict.
    store
        .insert_run(
            &state_of(Some("b"), "second", "t", RunStatus::Running, 2),
            None,
        )
        .await
        .unwrap();
    store
        .insert_run(&state_of(None, "third", "t", RunStatus::Running, 2), None)
        .await
        .unwrap();
    store
        .insert_run(
            &state_of(Some("a"), "other", "u", RunStatus::Running, 2),
            None,
        )
        .await
        .unwrap();
    // A waiting run of the thread may be stored, but not become running.
    let mut waiting = state_of(Some("a"), "waiting", "t", RunStatus::Suspended, 3);
    store.insert_run(&waiting, None).await.unwrap();
    waiting.status = RunStatus::Running;
    let error = store.update_run(&waiting, 1, None).await.unwrap_err();
    assert!(
        matches!(&error, StoreError::ThreadBusy { running_run_id, .. }
            if running_run_id.as_ref().map(RunId::as_str) == Some("first")),
        "{error:?}"
    );
    let stored = store.load_run(&key(Some("a"), "waiting")).await.unwrap();
    assert_eq!(
        (stored.version, stored.state.status),
        (1, RunStatus::Suspended)
    );
    assert_eq!(
        running_run_of(store.as_ref(), &thread(Some("a"), "t"))
            .await
            .unwrap()
            .map(|id| id.to_string()),
        Some("first".to_owned())
    );
    // The running run commits as it goes; then it ends, and the waiting one may run.
    let mut first = first;
    first.messages.push(Message::user("step"));
    assert_eq!(store.update_run(&first, 1, None).await.unwrap(), 2);
    first.status = RunStatus::Failed;
    assert_eq!(store.update_run(&first, 2, None).await.unwrap(), 3);
    assert_eq!(store.update_run(&waiting, 1, None).await.unwrap(), 2);
    first.status = RunStatus::Running;
    let error = store.update_run(&first, 3, None).await.unwrap_err();
    assert!(
        matches!(&error, StoreError::ThreadBusy { running_run_id, .. }
            if running_run_id.as_ref().map(RunId::as_str) == Some("waiting")),
        "{error:?}"
    );

    // Ten inserts racing on each of ten new threads: one runs, the others are refused.
    for round in 0..10u64 {
        let thread_id = format!("race-{round}");
        let inserts = (0..10u64).map(|index| {
            let run = state_of(
                Some("a"),
                &format!("race-{round}-{index}"),
                &thread_id,
                RunStatus::Running,
                100 + round,
            );
            let store = store.clone();
            async move { store.insert_run(&run, None).await }
        });
        let results = futures::future::join_all(inserts).await;
        let won = results.iter().filter(|result| result.is_ok()).count();
        assert_eq!(won, 1, "round {round}: {results:?}");
        for result in results {
            if let Err(error) = result {
                assert!(
                    matches!(error, StoreError::ThreadBusy { .. }),
                    "round {round}: {error:?}"
                );
            }
        }
        let running = RunFilter::in_thread(&thread(Some("a"), &thread_id));
        assert_eq!(store.list_runs(&running).await.unwrap().runs.len(), 1);
    }
}

/// Two resources using one thread id have two threads: one's question is not superseded by
/// the other's message, each model request and each history holds its own resource's messages
/// only, and each thread's listing its own runs.
pub(super) async fn issue31_threads_are_per_resource(store: Arc<dyn RunStore>) {
    let model = TurnModel::new(store.clone(), Duration::ZERO);
    let agent = turn_agent(&store, &model);
    let options = |resource: &str| {
        RunOptions::new()
            .thread("shared")
            .resource(resource.to_owned())
    };
    let ask = |resource: &str| turn_text(Some(resource), "shared", "which one?");
    let first_a = agent
        .stream_with(ask("a"), options("a"))
        .collect_output()
        .await
        .unwrap();
    assert!(matches!(first_a.status, RunOutcome::Suspended { .. }));
    let first_b = agent
        .stream_with(ask("b"), options("b"))
        .collect_output()
        .await
        .unwrap();
    assert!(matches!(first_b.status, RunOutcome::Suspended { .. }));
    assert_eq!(
        store
            .load_run(&first_a.run_key())
            .await
            .unwrap()
            .state
            .status,
        RunStatus::Suspended,
        "b's message did not supersede a's question"
    );
    // b writes again: its own question is superseded, a's is not.
    let second_b = agent
        .stream_with(turn_text(Some("b"), "shared", "never mind"), options("b"))
        .collect_output()
        .await
        .unwrap();
    assert!(matches!(second_b.status, RunOutcome::Finished { .. }));
    let superseded = store.load_run(&first_b.run_key()).await.unwrap().state;
    assert_eq!(superseded.status, RunStatus::Completed);
    assert_eq!(
        store
            .load_run(&first_a.run_key())
            .await
            .unwrap()
            .state
            .status,
        RunStatus::Suspended
    );
    // a answers its question by key.
    let answered = agent
        .resume_stream(json!("this one"), &first_a.run_key(), None)
        .await
        .unwrap()
        .collect_output()
        .await
        .unwrap();
    assert_eq!(answered.text, "ok");
    assert_eq!(model.violations(), Vec::<String>::new());
    for resource in ["a", "b"] {
        let history = store
            .thread_history(&thread(Some(resource), "shared"), None)
            .await
            .unwrap();
        let users: Vec<_> = history
            .messages
            .iter()
            .filter_map(|message| match message {
                Message::User { text } => Some(text.clone()),
                _ => None,
            })
            .collect();
        assert!(!users.is_empty());
        assert!(
            users
                .iter()
                .all(|text| text.starts_with(&format!("{resource}/"))),
            "{resource}: {users:?}"
        );
        let listed = store
            .list_runs(&RunFilter::in_thread(&thread(Some(resource), "shared")))
            .await
            .unwrap();
        assert!(
            listed
                .runs
                .iter()
                .all(|run| run.key().resource_id.as_ref().map(ResourceId::as_str)
                    == Some(resource))
        );
    }
}

/// Many first messages of two resources racing on each of several new thread ids: every
/// accepted turn's model request holds its own resource's messages only, no two turns of one
/// thread ever run side by side, and a refused message is refused as busy, with nothing
/// stored.
pub(super) async fn issue31_first_messages_of_two_resources_race_on_one_thread_id(
    store: Arc<dyn RunStore>,
) {
    let model = TurnModel::new(store.clone(), Duration::from_millis(2));
    let agent = turn_agent(&store, &model);
    for round in 0..10 {
        let thread_id = format!("new-{round}");
        let messages = (0..8).map(|index| {
            let resource = if index % 2 == 0 { "a" } else { "b" };
            let text = if index < 2 {
                turn_text(Some(resource), &thread_id, &format!("question {index}?"))
            } else {
                turn_text(Some(resource), &thread_id, &format!("message {index}"))
            };
            let options = RunOptions::new()
                .thread(thread_id.clone())
                .resource(resource.to_owned());
            let agent = agent.clone();
            async move {
                match agent.stream_with(text, options).started().await {
                    Ok(stream) => Ok(stream.collect_output().await.unwrap()),
                    Err(error) => Err(error),
                }
            }
        });
        let results = futures::future::join_all(messages).await;
        for result in &results {
            if let Err(error) = result {
                assert!(
                    matches!(error, AgentError::ThreadBusy { .. }),
                    "round {round}: {error:?}"
                );
            }
        }
        for resource in ["a", "b"] {
            let key = thread(Some(resource), &thread_id);
            let runs = store.list_runs(&RunFilter::in_thread(&key)).await.unwrap();
            let accepted = results
                .iter()
                .filter(|result| {
                    result.as_ref().is_ok_and(|output| {
                        output.resource_id.as_ref().map(ResourceId::as_str) == Some(resource)
                    })
                })
                .count();
            assert!(accepted >= 1, "round {round}: {resource} got no turn");
            assert_eq!(runs.runs.len(), accepted, "refused messages store nothing");
        }
    }
    assert_eq!(model.violations(), Vec::<String>::new());
}

/// A new message while the thread's run is running is refused (busy, naming the running run)
/// and stores nothing; the same thread id in another resource starts at once.
pub(super) async fn issue31_a_new_message_while_a_turn_runs_is_refused(store: Arc<dyn RunStore>) {
    let model = Arc::new(HangingModel {
        calls: std::sync::atomic::AtomicUsize::new(0),
    });
    let agent = Agent::builder("tester")
        .shared_model(model.clone())
        .shared_store(store.clone())
        .build()
        .unwrap();
    let options = RunOptions::new().thread("busy").resource("a");
    let mut running = agent.stream_with("first", options.clone());
    let running_key = running.run_key().clone();
    // Until its first text: the run is running (the model hangs).
    while let Some(chunk) = running.next().await {
        if matches!(chunk.unwrap(), Chunk::TextDelta { .. }) {
            break;
        }
    }
    let refused = agent.stream_with("second", options.clone());
    let refused_key = refused.run_key().clone();
    let error = refused.started().await.unwrap_err();
    assert!(
        matches!(&error, AgentError::ThreadBusy { thread_id, running_run_id }
            if thread_id.as_str() == "busy" && running_run_id.as_ref() == Some(&running_key.run_id)),
        "{error:?}"
    );
    assert_eq!(error.code(), "thread_busy");
    let missing = store.load_run(&refused_key).await.unwrap_err();
    assert!(
        matches!(missing, StoreError::NotFound { .. }),
        "{missing:?}"
    );
    // Collecting a refused stream gives the same error.
    let error = agent
        .stream_with("third", options)
        .collect_output()
        .await
        .unwrap_err();
    assert!(matches!(error, AgentError::ThreadBusy { .. }), "{error:?}");
    // Another resource's thread "busy" is another thread.
    let other = agent
        .stream_with("elsewhere", RunOptions::new().thread("busy").resource("b"))
        .started()
        .await
        .unwrap();
    drop(other);
    drop(running);
}

/// A resume and a new message racing on a thread's waiting run never run side by side: either
/// the resume claims the run first (the message is refused as busy and supersedes nothing, or
/// comes after the resumed turn ended and sees it in its history), or the message holds the
/// turn first (the resume is refused: busy, or the call was already superseded).
pub(super) async fn issue31_a_resume_racing_a_new_message_never_runs_beside_it(
    store: Arc<dyn RunStore>,
) {
    let model = TurnModel::new(store.clone(), Duration::from_millis(2));
    let agent = turn_agent(&store, &model);
    let (mut resumed, mut messaged) = (0, 0);
    for round in 0..20 {
        let thread_id = format!("race-{round}");
        let options = RunOptions::new().thread(thread_id.clone()).resource("a");
        let waiting = agent
            .stream_with(
                turn_text(Some("a"), &thread_id, "which one?"),
                options.clone(),
            )
            .collect_output()
            .await
            .unwrap();
        let waiting_key = waiting.run_key();
        let resume = async {
            match agent
                .resume_stream(
                    json!("the first"),
                    &waiting_key,
                    Some(&ToolCallId::new("q")),
                )
                .await
            {
                Ok(stream) => Ok(stream.collect_output().await.unwrap()),
                Err(error) => Err(error),
            }
        };
        let message = async {
            match agent
                .stream_with(
                    turn_text(Some("a"), &thread_id, "something else"),
                    options.clone(),
                )
                .started()
                .await
            {
                Ok(stream) => Ok(stream.collect_output().await.unwrap()),
                Err(error) => Err(error),
            }
        };
        let (resume, message) = tokio::join!(resume, message);
        let old = store.load_run(&waiting_key).await.unwrap().state;
        let result = old.result_for(&ToolCallId::new("q")).unwrap().result["content"]
            .as_str()
            .unwrap()
            .to_owned();
        match (&resume, &message) {
            (Ok(_), Ok(_)) => {
                // Both went on: one after the other, the resumed turn first.
                assert_eq!(result, "User answered: the first", "round {round}");
                resumed += 1;
                messaged += 1;
            }
            (Ok(_), Err(error)) => {
                assert!(
                    matches!(error, AgentError::ThreadBusy { .. }),
                    "round {round}: {error:?}"
                );
                assert_eq!(result, "User answered: the first", "round {round}");
                resumed += 1;
            }
            (Err(error), Ok(_)) => {
                assert!(
                    matches!(
                        error,
                        ResumeError::ThreadBusy { .. }
                            | ResumeError::AlreadyAnswered { .. }
                            | ResumeError::NotSuspended { .. }
                            | ResumeError::Conflict { .. }
                    ),
                    "round {round}: {error:?}"
                );
                assert!(result.contains("something else"), "round {round}: {result}");
                messaged += 1;
            }
            (Err(a), Err(b)) => panic!("round {round}: both refused: {a:?} / {b:?}"),
        }
        assert_eq!(old.status, RunStatus::Completed, "round {round}");
    }
    assert_eq!(model.violations(), Vec::<String>::new());
    assert!(resumed + messaged >= 20);
}

/// A cancelled run gets a completion sequence: its messages (the question and its cancelled
/// result) join the thread's history, and the next turn sees them.
pub(super) async fn issue31_cancelled_runs_join_the_thread_history(store: Arc<dyn RunStore>) {
    let model = TurnModel::new(store.clone(), Duration::ZERO);
    let agent = turn_agent(&store, &model);
    let options = RunOptions::new().thread("cancelled").resource("a");
    let waiting = agent
        .stream_with(
            turn_text(Some("a"), "cancelled", "which one?"),
            options.clone(),
        )
        .collect_output()
        .await
        .unwrap();
    agent
        .cancel_run(&waiting.run_key(), Some("a".into()))
        .await
        .unwrap();
    let history = store
        .thread_history(&thread(Some("a"), "cancelled"), None)
        .await
        .unwrap();
    let cancelled = store.load_run(&waiting.run_key()).await.unwrap().state;
    assert_eq!(cancelled.status, RunStatus::Cancelled);
    assert_eq!(history.messages, cancelled.messages);
    assert!(history.through.is_some());
    let next = agent.stream_with(turn_text(Some("a"), "cancelled", "start over"), options);
    let next_key = next.run_key().clone();
    chunks_of(next).await;
    let request = model.requests().pop().unwrap();
    let mut expected = cancelled.messages.clone();
    expected.push(Message::user(turn_text(
        Some("a"),
        "cancelled",
        "start over",
    )));
    assert_eq!(
        request.messages, expected,
        "the next turn sees what was cancelled"
    );
    assert_eq!(
        store
            .load_run(&next_key)
            .await
            .unwrap()
            .state
            .history_through,
        history.through
    );
}

/// A bare run id names the one run with it, whatever its resource; once another resource uses
/// the id too, it is ambiguous (naming both), and the key names each. A resource that reuses
/// its own run id is refused; another resource's run with that id is its own run.
pub(super) async fn issue31_bare_run_ids_resolve_when_unique(store: Arc<dyn RunStore>) {
    let model = TurnModel::new(store.clone(), Duration::ZERO);
    let agent = turn_agent(&store, &model);
    let start = |resource: &str, thread_id: &str| {
        agent.stream_with(
            turn_text(Some(resource), thread_id, "which one?"),
            RunOptions::new()
                .run_id("chosen")
                .thread(thread_id.to_owned())
                .resource(resource.to_owned()),
        )
    };
    let first = start("a", "ta").collect_output().await.unwrap();
    assert!(matches!(first.status, RunOutcome::Suspended { .. }));
    let bare = RunId::new("chosen");
    // Unique: the bare id works (here for a refusal that changes nothing).
    let error = agent
        .resume_stream(json!("x"), &bare, Some(&ToolCallId::new("nope")))
        .await
        .unwrap_err();
    assert!(
        matches!(error, ResumeError::UnknownToolCall { .. }),
        "{error:?}"
    );
    // The same resource again: refused before anything is stored.
    let error = start("a", "other").started().await.unwrap_err();
    assert!(
        matches!(error, AgentError::Store(StoreError::AlreadyExists { .. })),
        "{error:?}"
    );
    // Another resource: its own run.
    let second = start("b", "tb").collect_output().await.unwrap();
    assert!(matches!(second.status, RunOutcome::Suspended { .. }));
    assert_ne!(first.run_key(), second.run_key());
    for error in [
        agent
            .resume_stream(json!("x"), &bare, None)
            .await
            .unwrap_err(),
        agent.continue_stream(&bare).await.unwrap_err(),
        agent.cancel_run(&bare, None).await.unwrap_err(),
    ] {
        match &error {
            ResumeError::AmbiguousRun { run_id, resources } => {
                assert_eq!(run_id, &bare);
                let mut resources: Vec<_> = resources
                    .iter()
                    .map(|resource| resource.as_ref().map(ResourceId::as_str))
                    .collect();
                resources.sort();
                assert_eq!(resources, [Some("a"), Some("b")]);
                assert_eq!(error.code(), "ambiguous_run");
            }
            other => panic!("{other:?}"),
        }
    }
    for output in [&first, &second] {
        let done = agent
            .resume_stream(json!("this"), &output.run_key(), None)
            .await
            .unwrap()
            .collect_output()
            .await
            .unwrap();
        assert_eq!(done.text, "ok");
    }
    assert_eq!(model.violations(), Vec::<String>::new());
}
