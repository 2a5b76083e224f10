//! The loop's own scenarios (ask_user, parallel calls, argument checks, ids, limits, errors),
//! run once on the memory store; what depends on the store is in the conformance suite, run on
//! every store.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures::StreamExt;
use serde_json::json;

use crate::ids::ToolCallId;
use crate::model::{FinishReason, Message};
use crate::run::RunStatus;
use crate::store::{MemoryStore, RunStore};
use crate::testing::conformance::YieldingStore;
use crate::testing::conformance::support::*;
use crate::{Agent, Chunk, ResumeError, RunOutcome};

fn store() -> Arc<dyn RunStore> {
    Arc::new(YieldingStore::new(Arc::new(MemoryStore::new())))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_user_free_text_suspends_and_resumes() {
    let store = store();
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
    let stored = store.load_run(&unowned(&run_id)).await.unwrap().state;
    assert_eq!(stored.status, RunStatus::Completed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_user_single_select_checks_labels() {
    let store = store();
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
    let before = store.load_run(&unowned(&run_id)).await.unwrap();

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
        store.load_run(&unowned(&run_id)).await.unwrap(),
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_user_multi_select_checks_labels() {
    let store = store();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_user_bad_arguments_become_error_results() {
    let store = store();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_calls_each_suspend_and_resume_separately() {
    let store = store();
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
    let stored = store.load_run(&unowned(&run_id)).await.unwrap().state;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completed_tool_never_runs_again_on_resume() {
    let store = store();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_can_suspend_and_resume_many_times() {
    let store = store();
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
            reason: crate::model::FinishReason::Stop
        }
    );
    assert_eq!(output.text, "Done.");
    let stored = store.load_run(&unowned(&run_id)).await.unwrap().state;
    assert_eq!(
        stored.messages.len(),
        8,
        "user + 3×(assistant, tool) + final assistant"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_tool_arguments_name_each_field() {
    let store = store();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_tool_call_ids_are_made_distinct() {
    let store = store();
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
        store
            .load_run(&unowned(&run_id))
            .await
            .unwrap()
            .state
            .status,
        RunStatus::Completed
    );
}

#[tokio::test]
async fn issue7_fault1_empty_and_repeated_ids_become_distinct_across_the_run() {
    let store = store();
    let model = RecordingModel::new(&script(vec![
        json!({"toolCalls": [ask("", json!({"question": "a?"})), ask("", json!({"question": "b?"}))]}),
        json!({"toolCalls": [{"id": "n1", "name": "count", "args": {"label": "x"}}]}),
        // The model reuses an id of an earlier step: answers are routed by id, so it is renamed.
        json!({"toolCalls": [{"id": "n1", "name": "count", "args": {"label": "y"}}]}),
        json!({"text": "done"}),
    ]));
    let counter = Counter::default();
    let agent = agent(&store, &model, &counter, &Gate::default());
    let stream = agent.stream("x");
    let run_id = stream.run_id().clone();
    let suspended = suspended_payloads(&chunks_of(stream).await);
    assert_eq!(suspended.len(), 2, "both calls survive");
    assert_eq!(suspended[0].1["question"], "a?");
    assert_eq!(suspended[1].1["question"], "b?");
    assert!(!suspended[0].0.is_empty() && !suspended[1].0.is_empty());
    assert_ne!(suspended[0].0, suspended[1].0);
    for (id, ..) in &suspended {
        let stream = agent
            .resume_stream(
                json!("answer"),
                &run_id,
                Some(&ToolCallId::new(id.as_str())),
            )
            .await
            .unwrap();
        chunks_of(stream).await;
    }
    let stored = store.load_run(&unowned(&run_id)).await.unwrap().state;
    assert_eq!(stored.status, RunStatus::Completed);
    let ids: Vec<String> = stored.tool_call_ids().map(ToString::to_string).collect();
    let distinct: std::collections::HashSet<&String> = ids.iter().collect();
    assert_eq!(ids.len(), 4, "{ids:?}");
    assert_eq!(
        distinct.len(),
        ids.len(),
        "ids are unique in the run: {ids:?}"
    );
    assert_eq!(counter.executions.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn issue7_continue_of_a_suspended_or_completed_run_is_not_continuable() {
    let store = store();
    let model = RecordingModel::new(&script(vec![
        json!({"toolCalls": [ask("c1", json!({"question": "Q?"}))]}),
        json!({"text": "done"}),
    ]));
    let agent = agent(&store, &model, &Counter::default(), &Gate::default());
    let run_id = agent.generate("x").await.unwrap().run_id;
    let error = agent.continue_stream(&run_id).await.unwrap_err();
    assert!(
        matches!(
            error,
            ResumeError::NotContinuable {
                status: RunStatus::Suspended,
                ..
            }
        ),
        "{error:?}"
    );
    chunks_of(
        agent
            .resume_stream(json!("a"), &run_id, None)
            .await
            .unwrap(),
    )
    .await;
    let error = agent.continue_stream(&run_id).await.unwrap_err();
    assert!(
        matches!(
            error,
            ResumeError::NotContinuable {
                status: RunStatus::Completed,
                ..
            }
        ),
        "{error:?}"
    );
    assert_eq!(error.code(), "not_continuable");
}

#[tokio::test]
async fn issue7_fault8_invisible_answers_and_questions_are_blank() {
    let store = store();
    let model = RecordingModel::new(&script(vec![
        json!({"toolCalls": [
            ask("c1", json!({"question": "Name?"})),
            ask("c2", json!({"question": "\u{200B}\u{0}"})),
            ask("c3", json!({"question": "Pick", "options": [{"label": "\u{FEFF}"}]})),
        ]}),
        json!({"text": "done"}),
    ]));
    let agent = agent(&store, &model, &Counter::default(), &Gate::default());
    let stream = agent.stream("x");
    let run_id = stream.run_id().clone();
    let chunks = chunks_of(stream).await;
    let results = tool_results(&chunks);
    assert_eq!(results.len(), 2, "{results:?}");
    assert!(results.iter().all(|(_, _, is_error)| *is_error));
    let before = store.load_run(&unowned(&run_id)).await.unwrap();
    for blank in ["\u{0}", "\u{200B}", " \u{2060}\t", "\u{1b}"] {
        let error = agent
            .resume_stream(json!(blank), &run_id, Some(&"c1".into()))
            .await
            .unwrap_err();
        assert!(
            matches!(error, ResumeError::InvalidAnswer { .. }),
            "{blank:?}: {error:?}"
        );
        assert!(error.to_string().contains("blank"), "{error}");
    }
    assert_eq!(store.load_run(&unowned(&run_id)).await.unwrap(), before);
    let schema = suspended_payloads(&chunks)[0].2.clone().unwrap();
    let validator = crate::schema::SchemaValidator::new(&schema).unwrap();
    assert!(validator.problems(&json!("\u{200B}")).len() == 1);
    assert!(validator.problems(&json!("Ada")).is_empty());
}

#[tokio::test]
async fn issue7_fault4_the_step_limit_is_recorded() {
    let store = store();
    let model = RecordingModel::new(&script(vec![
        json!({"toolCalls": [{"id": "n1", "name": "count", "args": {"label": "x"}}]}),
        json!({"toolCalls": [{"id": "n2", "name": "count", "args": {"label": "y"}}]}),
        json!({"text": "never reached"}),
    ]));
    let agent = Agent::builder("tester")
        .shared_model(model.clone())
        .tool(Counter::default())
        .shared_store(store.clone())
        .max_steps(2)
        .build()
        .unwrap();
    let stream = agent.stream("x");
    let run_id = stream.run_id().clone();
    let chunks = chunks_of(stream).await;
    assert!(matches!(
        chunks.last(),
        Some(Chunk::Finish {
            reason: FinishReason::MaxSteps,
            ..
        })
    ));
    let stored = store.load_run(&unowned(&run_id)).await.unwrap().state;
    assert_eq!(stored.status, RunStatus::Completed);
    assert_eq!(stored.finish_reason(), Some(FinishReason::MaxSteps));
    assert_eq!(model.calls(), 2);
}

#[derive(Debug, thiserror::Error)]
#[error("could not reach the payment service")]
struct PaymentError(#[source] std::io::Error);

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct PayArgs {
    /// Amount in cents.
    amount: u64,
}

struct FailingPayment;

#[async_trait::async_trait]
impl crate::Tool for FailingPayment {
    const NAME: &'static str = "pay";
    type Args = PayArgs;
    type Output = serde_json::Value;
    type Error = PaymentError;
    fn description(&self) -> String {
        "Pays.".into()
    }
    async fn execute(
        &self,
        args: PayArgs,
        _: &crate::ToolContext,
    ) -> Result<crate::Execution<serde_json::Value>, PaymentError> {
        assert_eq!(args.amount, 5);
        Err(PaymentError(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "connection refused",
        )))
    }
}

#[tokio::test]
async fn issue7_a_failed_tool_shows_the_model_each_cause_once() {
    let store = store();
    let model = RecordingModel::new(&script(vec![
        json!({"toolCalls": [{"id": "p1", "name": "pay", "args": {"amount": 5}}]}),
        json!({"text": "sorry"}),
    ]));
    let agent = Agent::builder("tester")
        .shared_model(model.clone())
        .tool(FailingPayment)
        .shared_store(store.clone())
        .build()
        .unwrap();
    let chunks = chunks_of(agent.stream("pay")).await;
    let results = tool_results(&chunks);
    assert_eq!(
        results[0].1["content"],
        "tool pay failed: could not reach the payment service: connection refused"
    );
    assert!(results[0].2);
    let Some(Message::Tool { results }) = model.last_request().messages.last().cloned() else {
        panic!()
    };
    assert!(results[0].is_error);
}

#[tokio::test]
async fn issue8_the_question_budget_stops_questions() {
    let store = store();
    let model = RecordingModel::new(&script(vec![
        json!({"toolCalls": [ask("q1", json!({"question": "First?"})), ask("q2", json!({"question": "Second?"}))]}),
        json!({"toolCalls": [ask("q3", json!({"question": "Third?"}))]}),
        json!({"text": "Here is my answer."}),
    ]));
    let agent = Agent::builder("tester")
        .shared_model(model.clone())
        .tool(crate::AskUser::new())
        .tool(Counter::default())
        .settings(
            crate::model::ModelSettings::new()
                .with_first_step_tool_choice(crate::model::ToolChoice::Tool("ask_user".into())),
        )
        .shared_store(store.clone())
        .max_questions(1)
        .build()
        .unwrap();
    let stream = agent.stream("x");
    let run_id = stream.run_id().clone();
    let chunks = chunks_of(stream).await;
    // Two questions in one step with a budget of one: the first is asked, the second refused.
    let suspended = suspended_payloads(&chunks);
    assert_eq!(suspended.len(), 1);
    assert_eq!(suspended[0].0, "q1");
    let results = tool_results(&chunks);
    assert_eq!(results.len(), 1);
    assert!(results[0].2);
    assert!(
        results[0].1["content"]
            .as_str()
            .unwrap()
            .contains("question budget"),
        "{results:?}"
    );
    assert_eq!(
        model.last_request().tools.len(),
        2,
        "ask_user was offered on the first step"
    );
    chunks_of(
        agent
            .resume_stream(json!("a"), &run_id, Some(&"q1".into()))
            .await
            .unwrap(),
    )
    .await;
    // The budget is spent: ask_user is no longer offered, and a call anyway is refused.
    let request = model.last_request();
    let names: Vec<&str> = request
        .tools
        .iter()
        .map(|tool| tool.name.as_str())
        .collect();
    assert_eq!(names, ["count"]);
    assert_eq!(request.settings.tool_choice, crate::model::ToolChoice::Auto);
    let stored = store.load_run(&unowned(&run_id)).await.unwrap().state;
    assert_eq!(stored.status, RunStatus::Completed);
    assert!(stored.pending_tool_calls().is_empty());
    assert_eq!(model.calls(), 3);
}

// ---- Issue 9: journal, leases, claims after a crash ----

/// A tool that suspends for approval; its resume path counts and then never returns (the
/// process "dies" while it runs) unless `finish` is set.
#[derive(Clone, Default)]
struct SlowGate {
    resumes: Arc<std::sync::atomic::AtomicUsize>,
    finish: bool,
}

#[async_trait::async_trait]
impl crate::Tool for SlowGate {
    const NAME: &'static str = "slow_gate";
    type Args = GateArgs;
    type Output = serde_json::Value;
    type Error = std::convert::Infallible;
    fn description(&self) -> String {
        "Waits for approval, then acts slowly.".into()
    }
    async fn execute(
        &self,
        args: GateArgs,
        context: &crate::ToolContext,
    ) -> Result<crate::Execution<serde_json::Value>, Self::Error> {
        match context.resume_data() {
            None => Ok(context.suspend(json!({"action": args.action}))),
            Some(answer) => {
                self.resumes.fetch_add(1, Ordering::SeqCst);
                if !self.finish {
                    futures::future::pending::<()>().await;
                }
                Ok(crate::Execution::Complete(json!({"approved": answer})))
            }
        }
    }
}

/// A side-effecting tool that looks at its own journal entry in the store while it runs.
struct Probe {
    store: Arc<dyn RunStore>,
    seen: Arc<std::sync::Mutex<Vec<String>>>,
}

#[async_trait::async_trait]
impl crate::Tool for Probe {
    const NAME: &'static str = "probe";
    type Args = CountArgs;
    type Output = serde_json::Value;
    type Error = std::convert::Infallible;
    fn description(&self) -> String {
        "Looks at the store.".into()
    }
    async fn execute(
        &self,
        _: CountArgs,
        context: &crate::ToolContext,
    ) -> Result<crate::Execution<serde_json::Value>, Self::Error> {
        let run_id = context.run_id().unwrap().clone();
        let stored = self.store.load_run(&unowned(&run_id)).await.unwrap().state;
        let states = stored
            .pending_step
            .iter()
            .flat_map(|step| step.calls.iter())
            .map(|slot| {
                let status = serde_json::to_value(&slot.state).unwrap()["status"].clone();
                format!("{}={}", slot.call.id, status.as_str().unwrap())
            })
            .collect::<Vec<_>>()
            .join(",");
        self.seen.lock().unwrap().push(states);
        Ok(crate::Execution::Complete(json!("probed")))
    }
}

#[test]
fn only_ask_user_is_idempotent_by_default() {
    use crate::DynTool;
    assert!(crate::AskUser::new().idempotent());
    assert!(!DynTool::idempotent(&Counter::default()));
    assert!(!DynTool::idempotent(&Gate::default()));
}

#[tokio::test]
async fn side_effecting_calls_are_journaled_before_they_run_and_recorded_as_they_finish() {
    let store = store();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let model = RecordingModel::new(&script(vec![
        json!({"toolCalls": [
            {"id": "k1", "name": "count", "args": {"label": "a"}},
            {"id": "p1", "name": "probe", "args": {"label": "b"}},
            ask("q1", json!({"question": "Note?"}))
        ]}),
        json!({"text": "done"}),
    ]));
    let counter = Counter::default();
    let agent = Agent::builder("tester")
        .shared_model(model.clone())
        .tool(crate::AskUser::new())
        .tool(counter.clone())
        .tool(Probe {
            store: store.clone(),
            seen: seen.clone(),
        })
        .shared_store(store.clone())
        .build()
        .unwrap();
    let chunks = chunks_of(agent.stream("go")).await;
    assert_eq!(suspended_payloads(&chunks).len(), 1);
    let seen = seen.lock().unwrap().clone();
    // The probe ran after the journal commit: itself `running`; the counter (run first, or
    // concurrently) either still running or already recorded.
    assert_eq!(seen.len(), 1);
    assert!(
        seen[0] == "k1=running,p1=running,q1=running"
            || seen[0] == "k1=completed,p1=running,q1=running",
        "{seen:?}"
    );
}

#[tokio::test]
async fn a_steps_results_are_committed_one_by_one_as_they_exist() {
    let store = store();
    let model = RecordingModel::new(&script(vec![
        json!({"toolCalls": [
            {"id": "k1", "name": "count", "args": {"label": "a"}},
            {"id": "g1", "name": "slow_gate", "args": {"action": "deploy"}}
        ]}),
        json!({"text": "done"}),
    ]));
    let gate = SlowGate::default();
    let agent = Agent::builder("tester")
        .shared_model(model.clone())
        .tool(Counter::default())
        .tool(gate.clone())
        .shared_store(store.clone())
        .build()
        .unwrap();
    let output = agent.generate("go").await.unwrap();
    // The gate suspended and the counter completed; both were recorded before the suspension.
    let stored = store
        .load_run(&unowned(&output.run_id))
        .await
        .unwrap()
        .state;
    assert_eq!(stored.status, RunStatus::Suspended);
    assert_eq!(stored.pending_tool_calls()[0].tool_call_id.as_str(), "g1");
}

#[tokio::test(start_paused = true)]
async fn a_live_lease_is_renewed_and_a_dead_one_expires() {
    let store = store();
    let model = Arc::new(HangingModel {
        calls: std::sync::atomic::AtomicUsize::new(0),
    });
    let build = || {
        Agent::builder("tester")
            .shared_model(model.clone())
            .shared_store(store.clone())
            .build()
            .unwrap()
    };
    let driver = build();
    let mut stream = driver.stream("hello");
    let run_id = stream.run_id().clone();
    assert!(matches!(
        stream.next().await.unwrap().unwrap(),
        Chunk::Start { .. }
    ));
    let task = tokio::spawn(async move { while stream.next().await.is_some() {} });
    // Ten lease durations pass while the model hangs: the heartbeat keeps the lease live.
    for _ in 0..10 {
        tokio::time::sleep(crate::DEFAULT_LEASE).await;
        let error = build().continue_stream(&run_id).await.unwrap_err();
        assert!(matches!(error, ResumeError::InProgress { .. }), "{error:?}");
    }
    let version = store.load_run(&unowned(&run_id)).await.unwrap().version;
    assert_eq!(version, 1, "renewals never bump the version");
    // The process dies: nobody renews; the lease still holds until it expires.
    task.abort();
    let _ = task.await;
    let error = build().continue_stream(&run_id).await.unwrap_err();
    let ResumeError::InProgress {
        lease_expires_at_ms,
        ..
    } = error
    else {
        panic!("{error:?}")
    };
    assert!(lease_expires_at_ms > crate::time::lease_now_ms());
    tokio::time::sleep(crate::DEFAULT_LEASE).await;
    let output = build()
        .continue_stream(&run_id)
        .await
        .unwrap()
        .collect_output()
        .await
        .unwrap();
    assert_eq!(output.text, "Recovered.");
}

#[tokio::test(start_paused = true)]
async fn resumes_after_a_resumer_died_say_what_happened() {
    let store = store();
    let model = RecordingModel::new(&script(vec![
        json!({"toolCalls": [{"id": "g1", "name": "slow_gate", "args": {"action": "deploy"}}]}),
        json!({"text": "done"}),
    ]));
    let gate = SlowGate::default();
    let build = |gate: SlowGate| {
        Agent::builder("tester")
            .shared_model(model.clone())
            .tool(gate)
            .shared_store(store.clone())
            .build()
            .unwrap()
    };
    let run_id = build(gate.clone()).generate("go").await.unwrap().run_id;
    let g1 = ToolCallId::new("g1");
    let yes = json!({"approved": true});
    let no = json!({"approved": false});
    // A resume claims the call; its process dies while the resume path runs.
    let mut stream = build(gate.clone())
        .resume_stream(yes.clone(), &run_id, Some(&g1))
        .await
        .unwrap();
    // The stream re-announces the call first, then runs its resume path.
    assert!(matches!(
        futures::poll!(stream.next()),
        std::task::Poll::Ready(Some(Ok(Chunk::ToolCall { .. })))
    ));
    let _ = futures::poll!(stream.next());
    assert_eq!(gate.resumes.load(Ordering::SeqCst), 1);
    drop(stream);
    let other = build(gate.clone());
    // While its lease lives: the same answer is a harmless repeat, another is a conflict.
    let error = other
        .resume_stream(yes.clone(), &run_id, Some(&g1))
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
    let error = other
        .resume_stream(no.clone(), &run_id, Some(&g1))
        .await
        .unwrap_err();
    assert!(matches!(error, ResumeError::Conflict { .. }), "{error:?}");
    assert!(matches!(
        other.continue_stream(&run_id).await.unwrap_err(),
        ResumeError::InProgress { .. }
    ));
    // Once it expired: another answer is told the call was interrupted.
    tokio::time::sleep(crate::DEFAULT_LEASE).await;
    let error = other
        .resume_stream(no.clone(), &run_id, Some(&g1))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, ResumeError::Interrupted { tool_call_id, .. } if tool_call_id == &g1),
        "{error:?}"
    );
    assert!(error.to_string().contains("continue the run"), "{error}");
    let error = other
        .resume_stream(yes.clone(), &run_id, Some(&g1))
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
    // The kept answer is visible.
    let stored = store.load_run(&unowned(&run_id)).await.unwrap().state;
    assert_eq!(stored.unfinished_calls()[0].answer, Some(yes.clone()));
    // Continue: the side-effecting resume path is not run again; the model is told.
    let finishing = SlowGate {
        finish: true,
        ..gate.clone()
    };
    let output = build(finishing)
        .continue_stream(&run_id)
        .await
        .unwrap()
        .collect_output()
        .await
        .unwrap();
    assert_eq!(output.text, "done");
    assert_eq!(gate.resumes.load(Ordering::SeqCst), 1);
    let Some(Message::Tool { results }) = model.last_request().messages.last().cloned() else {
        panic!()
    };
    assert_eq!(
        results[0].result["content"],
        crate::run_loop::OUTCOME_UNKNOWN
    );
    assert_eq!(results[0].answer, Some(yes), "the answer is kept with it");
}

#[tokio::test(start_paused = true)]
async fn an_idempotent_resume_interrupted_by_a_crash_runs_again() {
    let store = store();
    let model = RecordingModel::new(&script(vec![
        json!({"toolCalls": [ask("q1", json!({"question": "Which repo?"}))]}),
        json!({"text": "done"}),
    ]));
    let build = || {
        Agent::builder("tester")
            .shared_model(model.clone())
            .tool(crate::AskUser::new())
            .shared_store(store.clone())
            .build()
            .unwrap()
    };
    let run_id = build().generate("go").await.unwrap().run_id;
    // Claimed, then the process dies before anything runs.
    drop(
        build()
            .resume_stream(json!("main"), &run_id, Some(&"q1".into()))
            .await
            .unwrap(),
    );
    tokio::time::sleep(crate::DEFAULT_LEASE).await;
    let chunks = chunks_of(build().continue_stream(&run_id).await.unwrap()).await;
    assert_eq!(
        tool_results(&chunks),
        [(
            "q1".to_owned(),
            json!({"content": "User answered: main", "isError": false}),
            false
        )]
    );
    assert!(has_finish(&chunks));
}

#[tokio::test]
async fn a_new_run_takes_the_id_its_caller_chose() {
    let store = store();
    let model = RecordingModel::new(&script(vec![json!({"text": "Hi."})]));
    let agent = agent(&store, &model, &Counter::default(), &Gate::default());
    let stream = agent.stream_with("hello", crate::RunOptions::new().run_id("chosen-1"));
    assert_eq!(stream.run_id().as_str(), "chosen-1");
    let chunks = chunks_of(stream).await;
    assert!(has_finish(&chunks));
    let stored = store
        .load_run(&unowned(&crate::RunId::new("chosen-1")))
        .await
        .unwrap();
    assert_eq!(stored.state.status(), RunStatus::Completed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_from_the_callers_copy_decides_as_a_fresh_read_would() {
    let store = store();
    let model = RecordingModel::new(&script(vec![
        json!({"toolCalls": [ask("c1", json!({"question": "Which repo?"}))]}),
        json!({"toolCalls": [ask("c2", json!({"question": "Which branch?"}))]}),
        json!({"text": "Thanks."}),
    ]));
    let agent = agent(&store, &model, &Counter::default(), &Gate::default());
    let stream = agent.stream("Summarize my project");
    let run_id = stream.run_id().clone();
    chunks_of(stream).await;
    let at_c1 = store.load_run(&unowned(&run_id)).await.unwrap();
    let other = agent.stream("Another request");
    let other_id = other.run_id().clone();
    chunks_of(other).await;
    let other_copy = store.load_run(&unowned(&other_id)).await.unwrap();

    // The current copy: claimed from it. A copy of another run is ignored.
    let chunks = chunks_of(
        agent
            .respond(&run_id)
            .loaded(other_copy)
            .answer(&ToolCallId::new("c1"), json!("main"))
            .stream()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(tool_results(&chunks)[0].0, "c1");
    assert_eq!(suspended_payloads(&chunks).len(), 1, "c2 asks next");

    // A stale copy (it knows no c2): decided again on a fresh read, and the claim lands.
    let chunks = chunks_of(
        agent
            .respond(&run_id)
            .loaded(at_c1.clone())
            .answer(&ToolCallId::new("c2"), json!("dev"))
            .stream()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(tool_results(&chunks)[0].0, "c2");
    assert!(has_finish(&chunks));
    let finished = store.load_run(&unowned(&run_id)).await.unwrap();

    // A stale copy on which the answer fits (c1 still waits there): the compare-and-swap
    // fails, and the refusal is the one a fresh read gives, not a lost race.
    let from_copy = agent
        .respond(&run_id)
        .loaded(at_c1)
        .answer(&ToolCallId::new("c1"), json!("other"))
        .stream()
        .await
        .unwrap_err();
    let fresh = agent
        .respond(&run_id)
        .answer(&ToolCallId::new("c1"), json!("other"))
        .stream()
        .await
        .unwrap_err();
    assert_eq!(format!("{from_copy:?}"), format!("{fresh:?}"));
    assert!(!matches!(fresh, ResumeError::Conflict { .. }), "{fresh:?}");
    assert_eq!(
        store.load_run(&unowned(&run_id)).await.unwrap(),
        finished,
        "nothing changed"
    );
}

/// Run, thread and resource ids from outside are checked at every entry point: a blank,
/// invisible, control-character or over-long one is a typed error, and nothing is stored or
/// changed.
#[tokio::test]
async fn issue31_blank_ids_are_refused_at_the_door() {
    use crate::ids::{IdKind, IdProblem, RunId, RunKey};
    use crate::{AgentError, RunOptions};

    let store = store();
    let model = RecordingModel::new(&script(vec![json!({"toolCalls": [ask(
        "c1",
        json!({"question": "Which repo?"})
    )]})]));
    let agent = agent(&store, &model, &Counter::default(), &Gate::default());
    let long = "x".repeat(crate::MAX_ID_BYTES + 1);
    let bad = [
        (" ", IdProblem::Blank),
        ("\u{200b}\u{feff}", IdProblem::Blank),
        ("a\u{1b}[2Jb", IdProblem::ControlCharacter),
        (long.as_str(), IdProblem::TooLong { bytes: long.len() }),
    ];
    for (id, problem) in &bad {
        for (options, kind) in [
            (RunOptions::new().run_id(*id), IdKind::Run),
            (RunOptions::new().thread(*id), IdKind::Thread),
            (RunOptions::new().resource(*id), IdKind::Resource),
        ] {
            let error = agent
                .stream_with("hello", options)
                .started()
                .await
                .unwrap_err();
            assert!(
                matches!(&error, AgentError::InvalidId(invalid)
                    if invalid.kind == kind && invalid.problem == *problem),
                "{kind} {id:?}: {error:?}"
            );
            assert_eq!(error.code(), "invalid_id");
        }
    }
    assert!(
        store
            .list_runs(&crate::store::RunFilter::new())
            .await
            .unwrap()
            .runs
            .is_empty(),
        "nothing stored"
    );
    assert_eq!(model.calls(), 0);

    let run_id = agent.generate("go").await.unwrap().run_id;
    let before = store.load_run(&unowned(&run_id)).await.unwrap();
    for (id, problem) in &bad {
        let keyed = RunKey::new(Some((*id).into()), run_id.clone());
        let errors = [
            agent
                .resume_stream(json!("main"), &RunId::new(*id), None)
                .await
                .unwrap_err(),
            agent
                .resume_stream(json!("main"), &keyed, None)
                .await
                .unwrap_err(),
            agent.continue_stream(&RunId::new(*id)).await.unwrap_err(),
            agent.cancel_run(&keyed, None).await.unwrap_err(),
            agent
                .approve_tool_call(&RunId::new(*id), &ToolCallId::new("c1"))
                .await
                .unwrap_err(),
        ];
        for error in errors {
            assert!(
                matches!(&error, ResumeError::InvalidId(invalid) if invalid.problem == *problem),
                "{id:?}: {error:?}"
            );
            assert_eq!(error.code(), "invalid_id");
        }
    }
    assert_eq!(store.load_run(&unowned(&run_id)).await.unwrap(), before);
}

/// A failed run is not continued once its thread moved on: a newer turn exists, and the
/// failed run's reply would land after it in the thread's history (issue 31).
#[tokio::test]
async fn issue31_a_failed_run_is_not_continued_after_a_newer_turn() {
    let store = store();
    let flaky = RecordingModel::new(&script(vec![
        json!({"text": "one"}),
        json!({"error": "HTTP 500"}),
        json!({"text": "late reply to two"}),
    ]));
    let steady = RecordingModel::new(&script(vec![
        json!({"text": "unused"}),
        json!({"text": "three"}),
    ]));
    let first = agent(&store, &flaky, &Counter::default(), &Gate::default());
    let second = agent(&store, &steady, &Counter::default(), &Gate::default());
    let options = crate::RunOptions::new().thread("moved-on");
    first
        .stream_with("msg1", options.clone())
        .collect_output()
        .await
        .unwrap();
    let failed = first.stream_with("msg2", options.clone());
    let failed_id = failed.run_id().clone();
    assert!(failed.collect_output().await.is_err());
    // While it is the thread's newest run, it may be continued (not done here).
    let third = second
        .stream_with("msg3", options)
        .collect_output()
        .await
        .unwrap();
    assert_eq!(third.text, "three");
    let error = first.continue_stream(&failed_id).await.unwrap_err();
    assert!(
        matches!(&error, ResumeError::ThreadMovedOn { newer_run_id, .. } if *newer_run_id == third.run_id),
        "{error:?}"
    );
    assert_eq!(error.code(), "thread_moved_on");
    let stored = store.load_run(&unowned(&failed_id)).await.unwrap().state;
    assert_eq!(stored.status, RunStatus::Failed, "refused: nothing changed");
}

// ---- Issue 33: a tool call when no tool is offered is a model error ----

/// A model that answers each call with the next of its responses (each a list of events), and
/// records the requests.
struct QueuedModel {
    responses: std::sync::Mutex<std::collections::VecDeque<Vec<crate::model::ModelEvent>>>,
    requests: std::sync::Mutex<Vec<crate::model::ModelRequest>>,
}

impl QueuedModel {
    fn new(responses: Vec<Vec<crate::model::ModelEvent>>) -> Arc<Self> {
        Arc::new(Self {
            responses: std::sync::Mutex::new(responses.into()),
            requests: std::sync::Mutex::new(Vec::new()),
        })
    }

    fn requests(&self) -> Vec<crate::model::ModelRequest> {
        self.requests.lock().unwrap().clone()
    }
}

#[async_trait::async_trait]
impl crate::model::LanguageModel for QueuedModel {
    fn provider(&self) -> &str {
        "test"
    }
    fn model_id(&self) -> &str {
        "queued"
    }
    async fn stream(
        &self,
        request: crate::model::ModelRequest,
    ) -> Result<crate::model::ModelEventStream, crate::model::ModelError> {
        self.requests.lock().unwrap().push(request);
        let events = self.responses.lock().unwrap().pop_front().unwrap();
        Ok(Box::pin(futures::stream::iter(events.into_iter().map(Ok))))
    }
}

fn ask_event(id: &str, question: &str) -> crate::model::ModelEvent {
    crate::model::ModelEvent::ToolCall(crate::model::ToolCall {
        id: id.into(),
        name: "ask_user".into(),
        args: crate::model::ToolArgs::Json(json!({"question": question})),
    })
}

fn finish_event(reason: FinishReason) -> crate::model::ModelEvent {
    crate::model::ModelEvent::Finish {
        reason,
        usage: crate::model::Usage::default(),
    }
}

fn text_event(text: &str) -> crate::model::ModelEvent {
    crate::model::ModelEvent::TextDelta(text.into())
}

/// The built-in agent's shape: `ask_user` only, a budget of one question, so that once it is
/// asked no tool is offered.
fn one_question_agent(
    store: &Arc<dyn RunStore>,
    model: Arc<dyn crate::model::LanguageModel>,
) -> Agent {
    Agent::builder("tester")
        .shared_model(model)
        .tool(crate::AskUser::new())
        .shared_store(store.clone())
        .max_questions(1)
        .build()
        .unwrap()
}

/// Runs `agent` on "Plan a trip", answers its question with "Lisbon", and returns the run's id,
/// the resumed stream's chunks and its error.
async fn ask_then_answer(agent: &Agent) -> (crate::RunId, Vec<Chunk>, Option<crate::AgentError>) {
    let stream = agent.stream("Plan a trip");
    let run_id = stream.run_id().clone();
    assert_eq!(suspended_payloads(&chunks_of(stream).await).len(), 1);
    let mut stream = agent
        .resume_stream(json!("Lisbon"), &run_id, None)
        .await
        .unwrap();
    let (mut chunks, mut error) = (Vec::new(), None);
    while let Some(item) = stream.next().await {
        match item {
            Ok(chunk) => chunks.push(chunk),
            Err(failure) => error = Some(failure),
        }
    }
    (run_id, chunks, error)
}

/// Whether the only call the chunks announce is the answered question `q1` (a resumed stream
/// announces it again).
fn no_new_call(chunks: &[Chunk]) -> bool {
    chunks.iter().all(|chunk| match chunk {
        Chunk::ToolCall { call } => call.id.as_str() == "q1",
        _ => true,
    })
}

#[tokio::test]
async fn issue33_a_tool_call_when_none_is_offered_is_asked_again_once() {
    let store = store();
    let model = QueuedModel::new(vec![
        vec![
            ask_event("q1", "Where to?"),
            finish_event(FinishReason::ToolCalls),
        ],
        vec![
            ask_event("q2", "When?"),
            finish_event(FinishReason::ToolCalls),
        ],
        vec![
            text_event("Three days in Lisbon."),
            finish_event(FinishReason::Stop),
        ],
    ]);
    let agent = one_question_agent(&store, model.clone());
    let (run_id, chunks, error) = ask_then_answer(&agent).await;
    assert!(error.is_none(), "{error:?}");
    let requests = model.requests();
    assert_eq!(requests.len(), 3);
    for request in &requests[1..] {
        assert!(request.tools.is_empty() && !request.offers_tools());
    }
    assert_eq!(requests[1], requests[2], "the same request, asked again");
    let finished: Vec<&str> = chunks
        .iter()
        .filter_map(|chunk| match chunk {
            Chunk::Finish { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(finished, ["Three days in Lisbon."]);
    let starts = chunks
        .iter()
        .filter(|chunk| matches!(chunk, Chunk::StepStart { .. }))
        .count();
    assert_eq!(starts, 1, "one step, whatever its attempts");
    assert!(no_new_call(&chunks), "{chunks:?}");
    let stored = store.load_run(&unowned(&run_id)).await.unwrap().state;
    assert_eq!(stored.status, RunStatus::Completed);
    let calls: Vec<&str> = stored
        .messages
        .iter()
        .flat_map(|message| match message {
            Message::Assistant { parts } => parts.as_slice(),
            _ => &[],
        })
        .filter_map(|part| match part {
            crate::model::AssistantPart::ToolCall(call) => Some(call.id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(calls, ["q1"], "the refused call is in no message");
    assert_eq!(stored.steps, 2);
}

#[tokio::test]
async fn issue33_a_repeated_tool_call_when_none_is_offered_fails_the_run() {
    let store = store();
    // The script replays its second step on every call that follows the answer.
    let model = RecordingModel::new(&script(vec![
        json!({"toolCalls": [ask("q1", json!({"question": "Where to?"}))]}),
        json!({"toolCalls": [ask("q2", json!({"question": "When?"}))]}),
    ]));
    let agent = one_question_agent(&store, model.clone());
    let (run_id, chunks, error) = ask_then_answer(&agent).await;
    let Some(crate::AgentError::Model(crate::model::ModelError::ToolNotOffered { tool, .. })) =
        &error
    else {
        panic!("{error:?}");
    };
    assert_eq!(tool, "ask_user");
    let text = error.as_ref().unwrap().to_string();
    assert!(
        text.contains("`ask_user`") && text.contains("not offered at this step"),
        "{text}"
    );
    assert_eq!(model.calls(), 3, "asked once more, then failed");
    assert!(no_new_call(&chunks), "{chunks:?}");
    assert!(
        !chunks
            .iter()
            .any(|chunk| matches!(chunk, Chunk::Finish { .. }))
    );
    let stored = store.load_run(&unowned(&run_id)).await.unwrap().state;
    assert_eq!(stored.status, RunStatus::Failed);
    let failure = stored.error.as_ref().unwrap();
    assert_eq!(failure.code, "model_error");
    assert!(failure.message.contains("not offered"), "{failure:?}");
    assert!(
        matches!(stored.messages.last(), Some(Message::Tool { results }) if results[0].result["content"] == "User answered: Lisbon"),
        "the answer is kept, the refused call is not: {:?}",
        stored.messages
    );
    assert!(stored.pending_tool_calls().is_empty());
}

#[tokio::test]
async fn issue33_a_tool_call_after_streamed_text_fails_without_asking_again() {
    let store = store();
    let model = QueuedModel::new(vec![
        vec![
            ask_event("q1", "Where to?"),
            finish_event(FinishReason::ToolCalls),
        ],
        vec![
            text_event("Let me ask: "),
            ask_event("q2", "When?"),
            finish_event(FinishReason::ToolCalls),
        ],
        vec![
            text_event("never asked for"),
            finish_event(FinishReason::Stop),
        ],
    ]);
    let agent = one_question_agent(&store, model.clone());
    let (run_id, chunks, error) = ask_then_answer(&agent).await;
    assert!(
        matches!(
            error,
            Some(crate::AgentError::Model(
                crate::model::ModelError::ToolNotOffered { .. }
            ))
        ),
        "{error:?}"
    );
    assert_eq!(
        model.requests().len(),
        2,
        "the text was streamed: no second try"
    );
    assert!(
        chunks
            .iter()
            .any(|chunk| matches!(chunk, Chunk::TextDelta { text } if text == "Let me ask: "))
    );
    let stored = store.load_run(&unowned(&run_id)).await.unwrap().state;
    assert_eq!(stored.status, RunStatus::Failed);
    assert!(matches!(stored.messages.last(), Some(Message::Tool { .. })));
}
