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

use crate::ids::{RunId, ThreadId, ThreadKey, ToolCallId};
use crate::model::{Message, ModelError};
use crate::run::RunStatus;
use crate::store::{RunFilter, RunStore, StoreError};
use crate::testing::ScriptedModel;
use crate::testing::conformance::Scenario;
use crate::testing::conformance::cancel::*;
use crate::testing::conformance::changes::*;
use crate::testing::conformance::fork::*;
use crate::testing::conformance::hitl::*;
use crate::testing::conformance::links::*;
use crate::testing::conformance::outbox::*;
use crate::testing::conformance::policy::*;
use crate::testing::conformance::subagent_listing::*;
use crate::testing::conformance::subagents::*;
use crate::testing::conformance::support::*;
use crate::testing::conformance::tenancy::*;
use crate::testing::conformance::waits::*;
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
    issue34_commits_write_exactly_their_events,
    issue34_cancel_and_decline_events,
    issue34_deliveries_are_claimed_once_and_recorded,
    issue34_prune_keeps_pending_and_deletes_old_finished,
    issue34_answer_links_are_used_once_and_given_back_by_their_user,
    issue34_racing_link_uses_have_one_winner,
    issue34_links_keep_their_issuer,
    issue34_links_are_revoked_per_call_within_their_tenant,
    issue34_old_links_are_pruned_in_batches,
    insert_then_load_round_trips,
    load_of_unknown_run_is_not_found,
    insert_of_existing_id_is_refused,
    stale_update_conflicts_and_changes_nothing,
    update_of_unknown_run_is_not_found,
    list_filters_and_orders_newest_first,
    list_pages_with_a_cursor,
    run_counts_count_each_status,
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
    thread_history_follows_completion_order,
    thread_history_stops_at_through,
    commits_append_only_new_messages,
    leases_are_kept_renewed_and_cleared,
    newer_format_rows_are_refused_and_untouched,
    listing_summaries_carry_pending_questions,
    issue33_listing_summaries_carry_the_first_message,
    live_lease_refuses_claims_until_it_expires,
    concurrent_takeovers_have_one_winner,
    unfinished_side_effect_is_never_repeated,
    heartbeat_keeps_a_long_run_leased,
    approvals_gate_side_effects,
    issue34_edited_arguments_are_checked_then_run,
    answers_to_several_questions_land_on_their_calls,
    batch_answers_apply_all_or_none,
    expired_questions_are_swept_once,
    issue31_expired_approvals_are_swept_once,
    new_message_supersedes_waiting_questions,
    cancelled_runs_refuse_resumes,
    issue31_run_ids_are_per_resource,
    issue31_one_running_run_per_thread,
    issue31_threads_are_per_resource,
    issue31_first_messages_of_two_resources_race_on_one_thread_id,
    issue31_a_new_message_while_a_turn_runs_is_refused,
    issue31_a_resume_racing_a_new_message_never_runs_beside_it,
    issue31_cancelled_runs_join_the_thread_history,
    issue31_bare_run_ids_resolve_when_unique,
    issue31_a_running_model_call_is_cancelled_from_another_agent,
    issue31_a_running_tool_is_cancelled_from_another_agent,
    issue31_a_tool_result_after_the_cancel_is_not_recorded,
    issue31_changed_runs_are_listed_after_a_cursor,
    issue31_a_watcher_of_the_change_cursor_misses_no_commit,
    issue34_a_fork_goes_on_with_the_new_answer_and_leaves_the_original,
    issue34_a_refused_fork_creates_nothing,
    issue34_self_approval_is_refused,
    issue34_roles_gate_answers_of_a_tool_with_a_policy,
    issue34_a_quorum_of_two,
    issue34_one_decline_declines_a_quorum_call,
    issue34_concurrent_approvals_reach_the_quorum_once,
    issue34_a_fork_carries_no_votes,
    issue34_an_edited_vote_shows_what_it_approved,
    issue35_a_nested_question_is_answered_through_the_root,
    issue35_two_children_waiting_are_answered_in_reverse_order,
    issue35_a_childs_approval_waits_at_the_root,
    issue35_cancel_of_the_root_cancels_its_waiting_child,
    issue35_a_crash_in_the_childs_model_call_is_recovered_at_the_root,
    issue35_a_refused_nested_decision_changes_nothing_in_the_tree,
    issue35_a_childs_deadline_is_swept_through_the_root,
    issue35_a_message_to_a_childs_thread_leaves_the_tree_answerable,
    issue35_a_cancel_cut_short_is_finished_by_cancelling_again,
    issue35_summaries_carry_the_parent_link,
    issue35_children_are_listed_by_parent_within_their_resource,
    issue35_top_level_and_children_page_with_status_and_cursor,
];

async fn insert_then_load_round_trips(store: Arc<dyn RunStore>) {
    let original = state("r1", "t1", RunStatus::Running, 1);
    assert_eq!(store.insert_run(&original, None).await.unwrap(), 1);
    let loaded = store.load_run(&owned("r1")).await.unwrap();
    assert_eq!(loaded.version, 1);
    assert_eq!(loaded.state, original);
}

async fn load_of_unknown_run_is_not_found(store: Arc<dyn RunStore>) {
    let error = store.load_run(&owned("nope")).await.unwrap_err();
    assert!(
        matches!(error, StoreError::NotFound { ref run_id } if run_id.as_str() == "nope"),
        "{error:?}"
    );
}

async fn insert_of_existing_id_is_refused(store: Arc<dyn RunStore>) {
    store
        .insert_run(&state("r1", "t1", RunStatus::Running, 1), None)
        .await
        .unwrap();
    let error = store
        .insert_run(&state("r1", "t2", RunStatus::Failed, 2), None)
        .await
        .unwrap_err();
    assert!(
        matches!(error, StoreError::AlreadyExists { .. }),
        "{error:?}"
    );
    assert_eq!(
        store
            .load_run(&owned("r1"))
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
    store.insert_run(&run, None).await.unwrap();
    run.status = RunStatus::Suspended;
    assert_eq!(store.update_run(&run, 1, None).await.unwrap(), 2);
    let mut stale = run.clone();
    stale.status = RunStatus::Failed;
    let error = store.update_run(&stale, 1, None).await.unwrap_err();
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
    let loaded = store.load_run(&owned("r1")).await.unwrap();
    assert_eq!(
        (loaded.version, loaded.state.status),
        (2, RunStatus::Suspended)
    );
}

async fn update_of_unknown_run_is_not_found(store: Arc<dyn RunStore>) {
    let error = store
        .update_run(&state("ghost", "t", RunStatus::Running, 1), 1, None)
        .await
        .unwrap_err();
    assert!(matches!(error, StoreError::NotFound { .. }), "{error:?}");
}

async fn run_counts_count_each_status(store: Arc<dyn RunStore>) {
    assert_eq!(store.run_counts().await.unwrap().total(), 0);
    let runs = [
        ("a", RunStatus::Suspended),
        ("b", RunStatus::Suspended),
        ("c", RunStatus::Completed),
        ("d", RunStatus::Running),
        ("e", RunStatus::Failed),
        ("f", RunStatus::Suspended),
    ];
    for (index, (id, status)) in runs.iter().enumerate() {
        let created = u64::try_from(index).unwrap() * 10;
        store
            .insert_run(&state(id, "t1", *status, created), None)
            .await
            .unwrap();
    }
    let counts = store.run_counts().await.unwrap();
    assert_eq!(counts.get(RunStatus::Suspended), 3);
    assert_eq!(counts.get(RunStatus::Completed), 1);
    assert_eq!(counts.get(RunStatus::Running), 1);
    assert_eq!(counts.get(RunStatus::Failed), 1);
    assert_eq!(counts.get(RunStatus::Cancelled), 0);
    assert_eq!((counts.total(), counts.unreadable), (6, 0));
    // A commit moves a run from one count to another.
    let mut moved = store.load_run(&owned("a")).await.unwrap();
    moved.state.status = RunStatus::Completed;
    store
        .update_run(&moved.state, moved.version, None)
        .await
        .unwrap();
    let counts = store.run_counts().await.unwrap();
    assert_eq!(counts.get(RunStatus::Suspended), 2);
    assert_eq!(counts.get(RunStatus::Completed), 2);
}

async fn list_filters_and_orders_newest_first(store: Arc<dyn RunStore>) {
    store
        .insert_run(&state("a", "t1", RunStatus::Suspended, 10), None)
        .await
        .unwrap();
    store
        .insert_run(&state("b", "t1", RunStatus::Completed, 20), None)
        .await
        .unwrap();
    let mut other = state("c", "t2", RunStatus::Suspended, 30);
    other.resource_id = Some("tenant-2".into());
    other.agent_id = "other-agent".into();
    store.insert_run(&other, None).await.unwrap();
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
            .insert_run(&state(id, "t", RunStatus::Suspended, created), None)
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
    store.insert_run(&run, None).await.unwrap();
    assert!(
        store
            .thread_history(&owned_thread("t1"), None)
            .await
            .unwrap()
            .messages
            .is_empty()
    );
    run.messages.push(Message::Assistant {
        parts: vec![crate::model::AssistantPart::Text { text: "hi".into() }],
    });
    run.status = RunStatus::Completed;
    store.update_run(&run, 1, None).await.unwrap();
    run.touch();
    store.update_run(&run, 2, None).await.unwrap();
    let messages = store
        .thread_history(&owned_thread("t1"), None)
        .await
        .unwrap()
        .messages;
    assert_eq!(messages, run.messages, "appended once, in order");
    assert!(
        store
            .thread_history(&owned_thread("unknown"), None)
            .await
            .unwrap()
            .messages
            .is_empty()
    );
}

async fn concurrent_updates_have_one_winner(store: Arc<dyn RunStore>) {
    for round in 0..50 {
        let id = format!("race-{round}");
        let run = state(&id, "t", RunStatus::Suspended, round);
        store.insert_run(&run, None).await.unwrap();
        let (a, b) = tokio::join!(
            store.update_run(&run, 1, None),
            store.update_run(&run, 1, None)
        );
        let winners = [a.is_ok(), b.is_ok()].iter().filter(|ok| **ok).count();
        assert_eq!(winners, 1, "round {round}: {a:?} {b:?}");
        for result in [a, b] {
            if let Err(error) = result {
                assert!(matches!(error, StoreError::Conflict { .. }), "{error:?}");
            }
        }
        assert_eq!(store.load_run(&owned(&id)).await.unwrap().version, 2);
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
            let stored = store.load_run(&unowned(&run_id)).await.unwrap().state;
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
            matches!(
                loser,
                ResumeError::Conflict { .. }
                    | ResumeError::AlreadyAnswered {
                        same_answer: true,
                        ..
                    }
            ),
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
    let stored = store.load_run(&unowned(&run_id)).await.unwrap().state;
    let pending = stored.pending_tool_calls();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].tool_call_id.as_str(), "q2");
    // A late repeat naming q1 is refused as answered; q2 is untouched.
    let error = agent
        .resume_stream(json!("one"), &run_id, Some(&q1))
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            ResumeError::AlreadyAnswered {
                same_answer: true,
                ..
            }
        ),
        "{error:?}"
    );
    let error = agent
        .resume_stream(json!("two"), &run_id, Some(&q1))
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            ResumeError::AlreadyAnswered {
                same_answer: false,
                ..
            }
        ),
        "{error:?}"
    );
    assert_eq!(
        store.load_run(&unowned(&run_id)).await.unwrap().state,
        stored
    );
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
    let before = store.load_run(&unowned(&run_id)).await.unwrap();

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
        .tool(AskUser::new())
        .shared_store(store.clone())
        .build()
        .unwrap();
    let error = other_agent
        .resume_stream(json!("a"), &run_id, None)
        .await
        .unwrap_err();
    assert!(matches!(error, ResumeError::WrongAgent { .. }), "{error:?}");
    assert_eq!(store.load_run(&unowned(&run_id)).await.unwrap(), before);
    assert_eq!(model.calls(), 1, "no model work on refused resumes");

    chunks_of(
        agent
            .resume_stream(json!("a"), &run_id, None)
            .await
            .unwrap(),
    )
    .await;
    let completed = store.load_run(&unowned(&run_id)).await.unwrap();
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
    assert_eq!(store.load_run(&unowned(&run_id)).await.unwrap(), completed);
    assert_eq!(gate.resumes.load(Ordering::SeqCst), 0);
}

async fn later_runs_of_a_thread_see_its_history(store: Arc<dyn RunStore>) {
    let model = RecordingModel::new(&script(vec![
        json!({"text": "first answer"}),
        json!({"text": "second answer"}),
    ]));
    let agent = agent(&store, &model, &Counter::default(), &Gate::default());
    let thread = ThreadKey::new(Some("user-7".into()), ThreadId::new("conversation-1"));
    let options = RunOptions::new()
        .thread(thread.thread_id.clone())
        .resource("user-7");
    chunks_of(agent.stream_with("hello", options.clone())).await;
    let second = agent.stream_with("and again", options);
    let second_id = second.run_key().clone();
    chunks_of(second).await;
    let request = model.last_request();
    assert_eq!(request.messages.len(), 3, "{:?}", request.messages);
    assert_eq!(request.messages[0], Message::user("hello"));
    let stored = store.load_run(&second_id).await.unwrap().state;
    assert_eq!(
        stored.resource_id.as_ref().map(|id| id.as_str()),
        Some("user-7")
    );
    assert_eq!(
        store
            .thread_history(&thread, None)
            .await
            .unwrap()
            .messages
            .len(),
        4
    );
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
    let stored = store.load_run(&unowned(&run_id)).await.unwrap().state;
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
        store
            .load_run(&unowned(&run_id))
            .await
            .unwrap()
            .state
            .status,
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
    let stored = store.load_run(&unowned(&run_id)).await.unwrap().state;
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
        .tool(AskUser::new())
        .tool(gate.clone())
        .shared_store(store.clone())
        .lease(SHORT_LEASE)
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
    let stored = store.load_run(&unowned(&run_id)).await.unwrap().state;
    assert_eq!(stored.status, RunStatus::Running);
    let journal = stored.pending_step.as_ref().expect("the step's journal");
    assert!(
        journal
            .calls
            .iter()
            .all(|slot| matches!(slot.state, crate::run::CallState::Completed { .. })),
        "the side-effecting result was committed as soon as it existed: {journal:?}"
    );

    let output = continue_after_lease(&agent, &run_id)
        .await
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

/// Completes `run` (its own messages plus one assistant reply) at `version`.
async fn complete(store: &Arc<dyn RunStore>, run: &mut crate::run::RunState, version: u64) {
    run.messages.push(Message::Assistant {
        parts: vec![crate::model::AssistantPart::Text {
            text: format!("reply of {}", run.run_id),
        }],
    });
    run.status = RunStatus::Completed;
    store.update_run(run, version, None).await.unwrap();
}

async fn thread_history_follows_completion_order(store: Arc<dyn RunStore>) {
    // Created first, completed last: the thread reads it last. (Suspended: a thread has one
    // running run at a time.)
    let mut first = state("first", "t", RunStatus::Suspended, 1);
    let mut second = state("second", "t", RunStatus::Suspended, 2);
    store.insert_run(&first, None).await.unwrap();
    store.insert_run(&second, None).await.unwrap();
    complete(&store, &mut second, 1).await;
    complete(&store, &mut first, 1).await;
    let history = store
        .thread_history(&owned_thread("t"), None)
        .await
        .unwrap();
    let mut expected = second.messages.clone();
    expected.extend(first.messages.clone());
    assert_eq!(
        history.messages, expected,
        "completion order, not creation order"
    );
    assert!(history.through.is_some());
    // A completed run's later update does not move it in the thread.
    first.touch();
    store.update_run(&first, 2, None).await.unwrap();
    assert_eq!(
        store
            .thread_history(&owned_thread("t"), None)
            .await
            .unwrap(),
        history
    );
}

async fn thread_history_stops_at_through(store: Arc<dyn RunStore>) {
    let empty = store
        .thread_history(&owned_thread("t"), None)
        .await
        .unwrap();
    assert!(empty.messages.is_empty() && empty.through.is_none());
    let mut a = state("a", "t", RunStatus::Running, 1);
    store.insert_run(&a, None).await.unwrap();
    complete(&store, &mut a, 1).await;
    let after_a = store
        .thread_history(&owned_thread("t"), None)
        .await
        .unwrap();
    let through_a = after_a.through.expect("a completed");
    // Another thread's completion and a later one of this thread.
    let mut other = state("other", "u", RunStatus::Running, 2);
    store.insert_run(&other, None).await.unwrap();
    complete(&store, &mut other, 1).await;
    let mut b = state("b", "t", RunStatus::Running, 3);
    store.insert_run(&b, None).await.unwrap();
    complete(&store, &mut b, 1).await;
    let all = store
        .thread_history(&owned_thread("t"), None)
        .await
        .unwrap();
    assert!(all.through.unwrap() > through_a, "sequences increase");
    assert_eq!(all.messages.len(), 4);
    let up_to_a = store
        .thread_history(&owned_thread("t"), Some(through_a))
        .await
        .unwrap();
    assert_eq!(
        up_to_a, after_a,
        "a run started after a sees a's history only"
    );
    let up_to_other = store
        .thread_history(&owned_thread("u"), all.through)
        .await
        .unwrap();
    assert_eq!(up_to_other.messages, other.messages);
    // A run inserted as completed gets its sequence too.
    let mut inserted = state("inserted", "v", RunStatus::Completed, 4);
    inserted.messages.push(Message::user("more"));
    store.insert_run(&inserted, None).await.unwrap();
    let history = store
        .thread_history(&owned_thread("v"), None)
        .await
        .unwrap();
    assert_eq!(history.messages, inserted.messages);
    assert!(history.through.unwrap() > all.through.unwrap());
}

async fn commits_append_only_new_messages(store: Arc<dyn RunStore>) {
    let mut run = state("long", "t", RunStatus::Running, 1);
    let mut version = store.insert_run(&run, None).await.unwrap();
    for index in 0..120 {
        run.messages.push(Message::user(format!("message {index}")));
        if index % 3 == 0 {
            run.messages.push(Message::Assistant {
                parts: vec![crate::model::AssistantPart::Text {
                    text: format!("reply {index} {}", "x".repeat(200)),
                }],
            });
        }
        version = store.update_run(&run, version, None).await.unwrap();
    }
    let loaded = store.load_run(&owned("long")).await.unwrap();
    assert_eq!(loaded.state, run);
    assert_eq!(loaded.version, version);
    // A stale update with more messages conflicts and appends nothing.
    let mut stale = run.clone();
    stale.messages.push(Message::user("never stored"));
    let error = store
        .update_run(&stale, version - 1, None)
        .await
        .unwrap_err();
    assert!(matches!(error, StoreError::Conflict { .. }), "{error:?}");
    assert_eq!(store.load_run(&owned("long")).await.unwrap().state, run);
    // The next real commit appends exactly its own new message.
    run.messages.push(Message::user("stored"));
    store.update_run(&run, version, None).await.unwrap();
    assert_eq!(store.load_run(&owned("long")).await.unwrap().state, run);
    // An update that adds no message changes only the head.
    run.status = RunStatus::Suspended;
    store.update_run(&run, version + 1, None).await.unwrap();
    assert_eq!(store.load_run(&owned("long")).await.unwrap().state, run);
}

async fn leases_are_kept_renewed_and_cleared(store: Arc<dyn RunStore>) {
    let id = owned("leased");
    let first = crate::store::Lease::new("holder-a".into(), 1_000);
    let run = state("leased", "t", RunStatus::Running, 1);
    store.insert_run(&run, Some(&first)).await.unwrap();
    let loaded = store.load_run(&id).await.unwrap();
    assert_eq!(loaded.lease, Some(first.clone()));
    // Renewal at the current version keeps the version.
    let renewed = crate::store::Lease::new("holder-a".into(), 2_000);
    store.renew_lease(&id, 1, &renewed).await.unwrap();
    let loaded = store.load_run(&id).await.unwrap();
    assert_eq!((loaded.version, loaded.lease), (1, Some(renewed.clone())));
    // A commit sets the lease it carries.
    let other = crate::store::Lease::new("holder-b".into(), 3_000);
    store.update_run(&run, 1, Some(&other)).await.unwrap();
    assert_eq!(
        store.load_run(&id).await.unwrap().lease,
        Some(other.clone())
    );
    // Renewal at a version that moved conflicts and changes nothing.
    let error = store.renew_lease(&id, 1, &first).await.unwrap_err();
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
    let loaded = store.load_run(&id).await.unwrap();
    assert_eq!((loaded.version, loaded.lease), (2, Some(other)));
    // Suspending clears it.
    let mut suspended = run.clone();
    suspended.status = RunStatus::Suspended;
    store.update_run(&suspended, 2, None).await.unwrap();
    assert_eq!(store.load_run(&id).await.unwrap().lease, None);
    let error = store
        .renew_lease(&owned("ghost"), 1, &first)
        .await
        .unwrap_err();
    assert!(matches!(error, StoreError::NotFound { .. }), "{error:?}");
    // Renewals racing a commit: the commit always lands, renewals at the old version fail.
    for round in 0..20 {
        let version = store.load_run(&id).await.unwrap().version;
        let lease = crate::store::Lease::new("holder-c".into(), 5_000 + round);
        let (renewal, commit) = tokio::join!(
            store.renew_lease(&id, version, &lease),
            store.update_run(&suspended, version, None)
        );
        assert_eq!(commit.unwrap(), version + 1);
        if let Err(error) = renewal {
            assert!(matches!(error, StoreError::Conflict { .. }), "{error:?}");
        }
        let loaded = store.load_run(&id).await.unwrap();
        assert_eq!(loaded.version, version + 1);
    }
}

async fn newer_format_rows_are_refused_and_untouched(store: Arc<dyn RunStore>) {
    let mut future = state("future", "t", RunStatus::Suspended, 5);
    future.format_version = crate::run::RUN_FORMAT_VERSION + 1;
    store.insert_run(&future, None).await.unwrap();
    store
        .insert_run(&state("today", "t", RunStatus::Suspended, 1), None)
        .await
        .unwrap();
    let id = owned("future");
    let unsupported = |error: &StoreError| {
        matches!(error, StoreError::UnsupportedFormat { format_version, .. }
            if *format_version == crate::run::RUN_FORMAT_VERSION + 1)
    };
    let error = store.load_run(&id).await.unwrap_err();
    assert!(unsupported(&error), "{error:?}");
    let page = store.list_runs(&RunFilter::new()).await.unwrap();
    assert_eq!(page.runs.len(), 2, "one unreadable row hides nothing");
    assert!(
        matches!(&page.runs[0], crate::store::ListedRun::Unreadable { run_id, error, .. }
            if run_id == &id.run_id && unsupported(error))
    );
    // The agent refuses it without writing.
    let model = RecordingModel::new(&script(vec![json!({"text": "never"})]));
    let agent = agent(&store, &model, &Counter::default(), &Gate::default());
    for error in [
        agent
            .resume_stream(json!("x"), &id, None)
            .await
            .unwrap_err(),
        agent.continue_stream(&id).await.unwrap_err(),
        // A bare id finds the unreadable row too.
        agent.continue_stream(&id.run_id).await.unwrap_err(),
    ] {
        assert!(
            matches!(&error, ResumeError::Store(error) if unsupported(error)),
            "{error:?}"
        );
    }
    assert_eq!(model.calls(), 0);
    let error = store.load_run(&id).await.unwrap_err();
    assert!(unsupported(&error), "still the newer format: {error:?}");
}

async fn listing_summaries_carry_pending_questions(store: Arc<dyn RunStore>) {
    let model = RecordingModel::new(&script(vec![json!({"toolCalls": [
        ask("q1", json!({"question": "Which repo?", "options": [{"label": "main"}, {"label": "docs"}]})),
        {"id": "g1", "name": "gate", "args": {"action": "deploy"}}
    ]})]));
    let agent = agent(&store, &model, &Counter::default(), &Gate::default());
    let run_id = agent.generate("go").await.unwrap().run_id;
    let page = store
        .list_runs(
            &RunFilter::new()
                .status(RunStatus::Suspended)
                .agent("tester"),
        )
        .await
        .unwrap();
    assert_eq!(page.runs.len(), 1);
    let summary = page.runs[0].summary().unwrap();
    assert_eq!(summary.run_id, run_id);
    let pending: Vec<_> = summary
        .pending
        .iter()
        .map(|call| (call.tool_call_id.as_str(), call.suspend_payload.clone()))
        .collect();
    assert_eq!(
        pending,
        [
            (
                "q1",
                json!({"question": "Which repo?", "options": [{"label": "main"}, {"label": "docs"}], "selectionMode": "single_select"})
            ),
            ("g1", json!({"action": "deploy"}))
        ]
    );
    assert!(summary.pending[0].resume_schema.is_some());
    assert!(
        store
            .list_runs(&RunFilter::new().status(RunStatus::Running))
            .await
            .unwrap()
            .runs
            .is_empty()
    );
}

async fn issue33_listing_summaries_carry_the_first_message(store: Arc<dyn RunStore>) {
    use crate::model::AssistantPart;
    use crate::store::FIRST_MESSAGE_CHARS;
    // Long, multi-byte, with white space: cut at 200 characters (not bytes), kept as written.
    let long = format!("Plan\n  a trip:\t{}", "naïve 北京 🙂 \"q\" \\ ".repeat(30));
    assert!(long.chars().count() > FIRST_MESSAGE_CHARS);
    let mut asked = state("asked", "t1", RunStatus::Suspended, 10);
    asked.messages = vec![Message::user(long.clone())];
    store.insert_run(&asked, None).await.unwrap();
    // Later messages leave it as it was.
    let mut grown = state("grown", "t2", RunStatus::Running, 20);
    let version = store.insert_run(&grown, None).await.unwrap();
    complete(&store, &mut grown, version).await;
    // A run whose first message is not the user's has none.
    let mut other = state("other", "t3", RunStatus::Completed, 30);
    other.messages = vec![Message::Assistant {
        parts: vec![AssistantPart::Text {
            text: "Hello first".into(),
        }],
    }];
    store.insert_run(&other, None).await.unwrap();
    let cut: String = long.chars().take(FIRST_MESSAGE_CHARS).collect();
    let expected = [
        ("other", None),
        ("grown", Some("hello")),
        ("asked", Some(cut.as_str())),
    ];
    let listed = |page: crate::store::RunPage| {
        page.runs
            .iter()
            .map(|run| {
                let summary = run.summary().unwrap();
                (summary.run_id.to_string(), summary.first_message.clone())
            })
            .collect::<Vec<_>>()
    };
    let as_owned = |rows: &[(&str, Option<&str>)]| {
        rows.iter()
            .map(|(id, message)| (id.to_string(), message.map(str::to_owned)))
            .collect::<Vec<_>>()
    };
    let all = store.list_runs(&RunFilter::new()).await.unwrap();
    assert_eq!(listed(all), as_owned(&expected));
    // Every kind of listing carries it: filtered, paged, by change.
    let suspended = RunFilter::new().status(RunStatus::Suspended).limit(1);
    assert_eq!(
        listed(store.list_runs(&suspended).await.unwrap()),
        as_owned(&expected[2..])
    );
    let changed = store
        .list_runs(&RunFilter::new().changed_after(0))
        .await
        .unwrap();
    let mut changed = listed(changed);
    changed.sort();
    let mut all_sorted = as_owned(&expected);
    all_sorted.sort();
    assert_eq!(changed, all_sorted);
    // The same as the stored run's own summary.
    for (id, message) in expected {
        let stored = store.load_run(&owned(id)).await.unwrap();
        assert_eq!(
            stored.state.summary().first_message.as_deref(),
            message,
            "{id}"
        );
    }
}

/// An agent on `store` with a hanging model (first call streams one delta and hangs; later
/// calls answer "Recovered.") and the short lease.
fn hanging_agent(store: &Arc<dyn RunStore>, model: &Arc<HangingModel>) -> Agent {
    Agent::builder("tester")
        .shared_model(model.clone())
        .tool(AskUser::new())
        .shared_store(store.clone())
        .lease(SHORT_LEASE)
        .build()
        .unwrap()
}

async fn live_lease_refuses_claims_until_it_expires(store: Arc<dyn RunStore>) {
    let model = Arc::new(HangingModel {
        calls: AtomicUsize::new(0),
    });
    let driver = hanging_agent(&store, &model);
    let other = hanging_agent(&store, &model);
    let mut stream = driver.stream("hello");
    let run_id = stream.run_id().clone();
    // Streaming: the model hangs after its first delta.
    while let Some(chunk) = stream.next().await {
        if matches!(chunk.unwrap(), Chunk::TextDelta { .. }) {
            break;
        }
    }
    // Alive for several lease durations (the heartbeat renews it while the stream is polled):
    // every claim is refused and changes nothing.
    let polled = async {
        loop {
            stream.next().await;
        }
    };
    let claims = async {
        for _ in 0..4 {
            let before = store.load_run(&unowned(&run_id)).await.unwrap();
            for error in [
                other.continue_stream(&run_id).await.unwrap_err(),
                other
                    .resume_stream(json!("x"), &run_id, Some(&"c1".into()))
                    .await
                    .unwrap_err(),
            ] {
                assert!(
                    matches!(&error, ResumeError::InProgress { run_id: id, lease_expires_at_ms }
                        if id == &run_id && *lease_expires_at_ms > 0),
                    "{error:?}"
                );
            }
            assert_eq!(
                store.load_run(&unowned(&run_id)).await.unwrap().version,
                before.version
            );
            tokio::time::sleep(SHORT_LEASE).await;
        }
    };
    tokio::select! {
        () = polled => unreachable!(),
        () = claims => {}
    }
    // The driver "dies": once its lease expired, another process takes the run over.
    drop(stream);
    let output = continue_after_lease(&other, &run_id)
        .await
        .collect_output()
        .await
        .unwrap();
    assert_eq!(output.text, "Recovered.");
    let stored = store.load_run(&unowned(&run_id)).await.unwrap();
    assert_eq!(stored.state.status, RunStatus::Completed);
    assert_eq!(stored.lease, None, "a completed run holds no lease");
}

async fn concurrent_takeovers_have_one_winner(store: Arc<dyn RunStore>) {
    let model = Arc::new(HangingModel {
        calls: AtomicUsize::new(0),
    });
    let driver = hanging_agent(&store, &model);
    let mut stream = driver.stream("hello");
    let run_id = stream.run_id().clone();
    while let Some(chunk) = stream.next().await {
        if matches!(chunk.unwrap(), Chunk::TextDelta { .. }) {
            break;
        }
    }
    drop(stream);
    // Wait for the expiry without claiming.
    loop {
        let lease = store
            .load_run(&unowned(&run_id))
            .await
            .unwrap()
            .lease
            .unwrap();
        if !lease.is_live() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let takers: Vec<Agent> = (0..4).map(|_| hanging_agent(&store, &model)).collect();
    let claims =
        futures::future::join_all(takers.iter().map(|agent| agent.continue_stream(&run_id))).await;
    let mut winners = Vec::new();
    for claim in claims {
        match claim {
            Ok(stream) => winners.push(stream),
            Err(error) => assert!(
                matches!(
                    error,
                    ResumeError::Conflict { .. } | ResumeError::InProgress { .. }
                ),
                "{error:?}"
            ),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one process takes the run over");
    let output = winners.pop().unwrap().collect_output().await.unwrap();
    assert_eq!(output.text, "Recovered.");
}

/// A side-effecting tool that blocks until released, counting its executions.
#[derive(Clone, Default)]
struct Transfer {
    started: Arc<AtomicUsize>,
    release: Arc<tokio::sync::Notify>,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct TransferArgs {
    /// Cents.
    amount: u64,
}

#[async_trait::async_trait]
impl crate::Tool for Transfer {
    const NAME: &'static str = "transfer";
    type Args = TransferArgs;
    type Output = serde_json::Value;
    type Error = std::convert::Infallible;
    fn description(&self) -> String {
        "Transfers money.".into()
    }
    async fn execute(
        &self,
        args: TransferArgs,
        _: &crate::ToolContext,
    ) -> Result<crate::Execution<serde_json::Value>, Self::Error> {
        self.started.fetch_add(1, Ordering::SeqCst);
        self.release.notified().await;
        Ok(crate::Execution::Complete(json!({"sent": args.amount})))
    }
}

async fn unfinished_side_effect_is_never_repeated(store: Arc<dyn RunStore>) {
    let model = RecordingModel::new(&script(vec![
        json!({"toolCalls": [
            {"id": "t1", "name": "transfer", "args": {"amount": 5}},
            {"id": "k1", "name": "count", "args": {"label": "a"}},
            ask("q1", json!({"question": "Note?"}))
        ]}),
        json!({"text": "Done."}),
    ]));
    let transfer = Transfer::default();
    let counter = Counter::default();
    let build = || {
        Agent::builder("tester")
            .shared_model(model.clone())
            .tool(AskUser::new())
            .tool(counter.clone())
            .tool(transfer.clone())
            .shared_store(store.clone())
            .lease(SHORT_LEASE)
            .build()
            .unwrap()
    };
    let mut stream = build().stream("pay");
    let run_id = stream.run_id().clone();
    // Drive until the transfer started and the counter's result is committed.
    let driving = async {
        while let Some(chunk) = stream.next().await {
            chunk.unwrap();
        }
    };
    let watching = async {
        loop {
            // The stream inserts the run on its first poll, which a durable store with several
            // connections may run after this load.
            let stored = match store.load_run(&unowned(&run_id)).await {
                Ok(stored) => stored.state,
                Err(StoreError::NotFound { .. }) => {
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                    continue;
                }
                Err(error) => panic!("{error:?}"),
            };
            let states: Vec<_> = stored
                .pending_step
                .iter()
                .flat_map(|step| step.calls.iter().map(|slot| slot.state.clone()))
                .collect();
            if transfer.started.load(Ordering::SeqCst) == 1
                && matches!(
                    states.as_slice(),
                    [
                        crate::run::CallState::Running { .. },
                        crate::run::CallState::Completed { .. },
                        _
                    ]
                )
            {
                return stored;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    };
    let stored = tokio::select! {
        () = driving => panic!("the transfer never returns"),
        stored = watching => stored,
    };
    assert_eq!(stored.status, RunStatus::Running);
    assert_eq!(
        stored.unfinished_calls()[0].tool_call_id.as_str(),
        "t1",
        "the transfer was journaled as running before it executed"
    );
    // The process dies mid-transfer.
    drop(stream);
    let chunks = chunks_of(continue_after_lease(&build(), &run_id).await).await;
    assert_eq!(
        transfer.started.load(Ordering::SeqCst),
        1,
        "never run again"
    );
    assert_eq!(
        counter.executions.load(Ordering::SeqCst),
        1,
        "its result was kept"
    );
    assert_eq!(suspended_payloads(&chunks).len(), 1, "ask_user asks again");
    let stored = store.load_run(&unowned(&run_id)).await.unwrap().state;
    let step = stored.pending_step.as_ref().unwrap();
    let crate::run::CallState::Completed { result } = &step.calls[0].state else {
        panic!("{step:?}")
    };
    assert!(result.is_error);
    assert_eq!(
        result.result["content"],
        crate::run_loop::OUTCOME_UNKNOWN,
        "the model is told the outcome is unknown"
    );
    let output = build()
        .resume_stream(json!("thanks"), &run_id, Some(&"q1".into()))
        .await
        .unwrap()
        .collect_output()
        .await
        .unwrap();
    assert_eq!(output.text, "Done.");
    assert_eq!(transfer.started.load(Ordering::SeqCst), 1);
}

async fn heartbeat_keeps_a_long_run_leased(store: Arc<dyn RunStore>) {
    let model = RecordingModel::new(&script(vec![
        json!({"toolCalls": [{"id": "t1", "name": "transfer", "args": {"amount": 5}}]}),
        json!({"text": "Sent."}),
    ]));
    let transfer = Transfer::default();
    let build = || {
        Agent::builder("tester")
            .shared_model(model.clone())
            .tool(transfer.clone())
            .shared_store(store.clone())
            .lease(SHORT_LEASE)
            .build()
            .unwrap()
    };
    let driver = build();
    let stream = driver.stream("pay");
    let run_id = stream.run_id().clone();
    let driving = stream.collect_output();
    let checking = async {
        while transfer.started.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        // The tool runs for six lease durations; the lease stays live all along.
        for _ in 0..6 {
            tokio::time::sleep(SHORT_LEASE).await;
            let error = build().continue_stream(&run_id).await.unwrap_err();
            assert!(matches!(error, ResumeError::InProgress { .. }), "{error:?}");
        }
        transfer.release.notify_one();
    };
    let (output, ()) = tokio::join!(driving, checking);
    assert_eq!(output.unwrap().text, "Sent.");
    assert_eq!(transfer.started.load(Ordering::SeqCst), 1);
}
