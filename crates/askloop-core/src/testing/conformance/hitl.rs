//! Store scenarios of people in the loop beyond one question: approvals, several answers at
//! once, batches, deadlines, new messages while questions wait, cancel and the audit trail.
//! Listed in `store.rs`'s `SCENARIOS`, so they run on every store.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::{Value, json};

use crate::ids::{RunId, ThreadId, ToolCallId};
use crate::message::AuditAction;
use crate::model::{FinishReason, Message};
use crate::run::{PendingKind, RunStatus};
use crate::store::RunStore;
use crate::testing::conformance::support::*;
use crate::{Agent, AskUser, Chunk, ResumeError, RunOptions, RunOutcome};

fn approving_agent(
    store: &Arc<dyn RunStore>,
    model: &Arc<RecordingModel>,
    counter: &Counter,
) -> Agent {
    Agent::builder("tester")
        .shared_model(model.clone())
        .tool(AskUser::new())
        .tool(counter.clone())
        .require_approval_for("count")
        .shared_store(store.clone())
        .build()
        .unwrap()
}

fn approvals(chunks: &[Chunk]) -> Vec<String> {
    chunks
        .iter()
        .filter_map(|chunk| match chunk {
            Chunk::ToolCallApproval { call, .. } => Some(call.id.to_string()),
            _ => None,
        })
        .collect()
}

/// The tool results of the conversation's `Tool` messages, by call id, in order.
fn results_of(messages: &[Message]) -> Vec<(String, Value)> {
    messages
        .iter()
        .flat_map(|message| match message {
            Message::Tool { results } => results
                .iter()
                .map(|result| (result.tool_call_id.to_string(), result.result.clone()))
                .collect(),
            _ => Vec::new(),
        })
        .collect()
}

/// A declined call never runs, whatever the model wrote in its arguments; the model gets the
/// reason; an approved one runs exactly once and is never asked for approval again.
pub(super) async fn approvals_gate_side_effects(store: Arc<dyn RunStore>) {
    let model = RecordingModel::new(&script(vec![
        json!({"toolCalls": [{"id": "k1", "name": "count", "args": {"label": "wipe", "approved": true}}]}),
        json!({"toolCalls": [{"id": "k2", "name": "count", "args": {"label": "save"}}]}),
        json!({"text": "Done."}),
    ]));
    let counter = Counter::default();
    let agent = approving_agent(&store, &model, &counter);
    let stream = agent.stream("clean up");
    let run_id = stream.run_id().clone();
    let chunks = chunks_of(stream).await;
    assert_eq!(
        approvals(&chunks),
        ["k1"],
        "a model-written approval is ignored"
    );
    assert_eq!(counter.executions.load(Ordering::SeqCst), 0);
    let stored = store.load_run(&unowned(&run_id)).await.unwrap().state;
    assert_eq!(stored.status, RunStatus::Suspended);
    let pending = stored.pending_tool_calls();
    assert_eq!(pending[0].kind, PendingKind::Approval);

    // An answer of the wrong shape is refused and changes nothing.
    let before = store.load_run(&unowned(&run_id)).await.unwrap();
    let error = agent
        .resume_stream(json!("yes"), &run_id, Some(&ToolCallId::new("k1")))
        .await
        .unwrap_err();
    assert!(
        matches!(error, ResumeError::InvalidAnswer { .. }),
        "{error:?}"
    );
    assert_eq!(store.load_run(&unowned(&run_id)).await.unwrap(), before);

    let chunks = chunks_of(
        agent
            .decline_tool_call(&run_id, &ToolCallId::new("k1"), Some("not today".into()))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        counter.executions.load(Ordering::SeqCst),
        0,
        "declined: never ran"
    );
    let results = tool_results(&chunks);
    assert_eq!(results[0].0, "k1");
    assert!(results[0].2, "a decline is an error result");
    assert!(
        results[0].1["content"]
            .as_str()
            .unwrap()
            .contains("not today")
    );
    assert_eq!(approvals(&chunks), ["k2"], "the next call asks again");

    let chunks = chunks_of(
        agent
            .respond(&run_id)
            .by("alice")
            .approve(&ToolCallId::new("k2"))
            .stream()
            .await
            .unwrap(),
    )
    .await;
    assert!(has_finish(&chunks));
    assert_eq!(
        counter.executions.load(Ordering::SeqCst),
        1,
        "approved: ran once"
    );
    let error = agent
        .approve_tool_call(&run_id, &ToolCallId::new("k2"))
        .await
        .unwrap_err();
    assert!(
        matches!(error, ResumeError::AlreadyAnswered { .. }),
        "{error:?}"
    );
    assert_eq!(counter.executions.load(Ordering::SeqCst), 1);

    // The audit trail is kept with the results.
    let stored = store.load_run(&unowned(&run_id)).await.unwrap().state;
    let audits: Vec<_> = stored
        .messages()
        .iter()
        .flat_map(|message| match message {
            Message::Tool { results } => results.clone(),
            _ => Vec::new(),
        })
        .map(|result| {
            (
                result.tool_call_id.to_string(),
                result
                    .audit
                    .iter()
                    .map(|a| (a.action, a.by.clone()))
                    .collect::<Vec<_>>(),
            )
        })
        .collect();
    assert_eq!(
        audits,
        [
            ("k1".to_owned(), vec![(AuditAction::Decline, None)]),
            (
                "k2".to_owned(),
                vec![(AuditAction::Approve, Some("alice".to_owned()))]
            ),
        ]
    );
}

/// Edit, then approve (issue 34): edited arguments that do not fit the tool's schema are
/// refused with every problem and change nothing (the stored run is as it was, the tool never
/// ran); fitting ones run the tool with them, the model is told in the result that the person
/// changed them and to what, its own call stays as it wrote it, and the audit keeps both.
pub(super) async fn issue34_edited_arguments_are_checked_then_run(store: Arc<dyn RunStore>) {
    let model = RecordingModel::new(&script(vec![
        json!({"toolCalls": [{"id": "k1", "name": "count", "args": {"label": "wipe"}}]}),
        json!({"text": "Done."}),
    ]));
    let counter = Counter::default();
    let agent = approving_agent(&store, &model, &counter);
    let stream = agent.stream("clean up");
    let run_id = stream.run_id().clone();
    assert_eq!(approvals(&chunks_of(stream).await), ["k1"]);
    let k1 = ToolCallId::new("k1");
    let before = store.load_run(&unowned(&run_id)).await.unwrap();

    // Invalid edits, through every door: refused with each problem, nothing stored changes.
    let error = agent
        .approve_tool_call_with(&run_id, &k1, json!({"label": 5, "extra": true}))
        .await
        .unwrap_err();
    let ResumeError::InvalidArgs {
        tool_call_id,
        tool_name,
        problems,
        ..
    } = &error
    else {
        panic!("{error:?}");
    };
    assert_eq!((tool_call_id.as_str(), tool_name.as_str()), ("k1", "count"));
    assert!(
        problems.iter().any(|problem| problem.contains("label")),
        "{problems:?}"
    );
    assert_eq!(error.code(), "invalid_args");
    let error = agent
        .respond(&run_id)
        .answer(&k1, json!({"approved": true, "args": {}}))
        .stream()
        .await
        .unwrap_err();
    assert!(
        matches!(error, ResumeError::InvalidArgs { .. }),
        "{error:?}"
    );
    let error = agent
        .respond(&run_id)
        .answer(&k1, json!({"approved": false, "args": {"label": "x"}}))
        .stream()
        .await
        .unwrap_err();
    assert!(
        matches!(error, ResumeError::InvalidAnswer { .. }),
        "a decline takes no args: {error:?}"
    );
    assert_eq!(store.load_run(&unowned(&run_id)).await.unwrap(), before);
    assert_eq!(counter.executions.load(Ordering::SeqCst), 0);

    // A valid edit: the tool runs with it.
    let chunks = chunks_of(
        agent
            .respond(&run_id)
            .by("alice")
            .approve_with(&k1, json!({"label": "archive"}))
            .stream()
            .await
            .unwrap(),
    )
    .await;
    assert!(has_finish(&chunks));
    assert_eq!(counter.executions.load(Ordering::SeqCst), 1);
    let results = tool_results(&chunks);
    assert_eq!(results[0].0, "k1");
    assert_eq!(results[0].1, json!({"label": "archive", "count": 1}));

    // The model's next request: its own call as it wrote it, the note in the result.
    let request = model.last_request();
    let call_args: Vec<Value> = request
        .messages
        .iter()
        .flat_map(|message| match message {
            Message::Assistant { parts } => parts
                .iter()
                .filter_map(|part| match part {
                    crate::message::AssistantPart::ToolCall(call) => Some(call.args.to_value()),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        })
        .collect();
    assert_eq!(call_args, [json!({"label": "wipe"})]);
    let texts: Vec<String> = request
        .messages
        .iter()
        .flat_map(|message| match message {
            Message::Tool { results } => results.iter().map(|r| r.content_text()).collect(),
            _ => Vec::new(),
        })
        .collect();
    assert_eq!(
        texts,
        [format!(
            "Note: the person who approved this call changed its arguments from {{\"label\":\"wipe\"}} \
             to {{\"label\":\"archive\"}}; the tool ran with the changed arguments. Result: {}",
            results[0].1
        )]
    );

    // The audit keeps both versions, stored; the same edited approval again changes nothing.
    let stored = store.load_run(&unowned(&run_id)).await.unwrap().state;
    let result = stored
        .messages()
        .iter()
        .find_map(|message| match message {
            Message::Tool { results } => results.first().cloned(),
            _ => None,
        })
        .unwrap();
    assert_eq!(result.audit.len(), 1);
    assert_eq!(result.audit[0].action, AuditAction::Approve);
    assert_eq!(result.audit[0].by.as_deref(), Some("alice"));
    assert_eq!(
        result.audit[0].args_edit,
        Some(crate::ArgsEdit::new(
            json!({"label": "wipe"}),
            json!({"label": "archive"})
        ))
    );
    assert_eq!(
        result.answer,
        Some(json!({"approved": true, "args": {"label": "archive"}}))
    );
    let error = agent
        .approve_tool_call_with(&run_id, &k1, json!({"label": "archive"}))
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
    assert_eq!(counter.executions.load(Ordering::SeqCst), 1);
}

/// Three questions of one step, answered out of order and two of them at the same moment:
/// each answer lands on its own call, and the model gets the results in call order.
pub(super) async fn answers_to_several_questions_land_on_their_calls(store: Arc<dyn RunStore>) {
    let model = RecordingModel::new(&script(vec![
        json!({"toolCalls": [
            ask("q1", json!({"question": "Name?"})),
            ask("q2", json!({"question": "City?"})),
            ask("q3", json!({"question": "Pet?"}))
        ]}),
        json!({"text": "Thanks."}),
    ]));
    let agent = agent(&store, &model, &Counter::default(), &Gate::default());
    let output = agent.generate("fill the form").await.unwrap();
    let RunOutcome::Suspended { pending } = &output.status else {
        panic!("{:?}", output.status);
    };
    assert_eq!(pending.len(), 3);
    let run_id = output.run_id;
    // The third first: the run waits for the other two, and this stream lists them.
    let third = agent
        .resume_stream(json!("a cat"), &run_id, Some(&ToolCallId::new("q3")))
        .await
        .unwrap()
        .collect_output()
        .await
        .unwrap();
    let RunOutcome::Suspended { pending } = &third.status else {
        panic!("{:?}", third.status);
    };
    let ids: Vec<_> = pending
        .iter()
        .map(|call| call.tool_call_id.to_string())
        .collect();
    assert_eq!(ids, ["q1", "q2"]);
    // The other two at the same moment: both land.
    let answer = |id: &'static str, text: &'static str| {
        let agent = &agent;
        let run_id = &run_id;
        async move {
            let stream = agent
                .resume_stream(json!(text), run_id, Some(&ToolCallId::new(id)))
                .await
                .map_err(|error| error.to_string())?;
            stream
                .collect_output()
                .await
                .map_err(|error| error.to_string())
        }
    };
    let (first, second) = tokio::join!(answer("q1", "Ada"), answer("q2", "Paris"));
    let (first, second) = (first.unwrap(), second.unwrap());
    let finished = [&first, &second]
        .iter()
        .filter(|output| matches!(output.status, RunOutcome::Finished { .. }))
        .count();
    assert_eq!(finished, 1, "the later of the two finishes the run");
    let stored = store.load_run(&unowned(&run_id)).await.unwrap().state;
    assert_eq!(stored.status, RunStatus::Completed);
    assert_eq!(
        results_of(stored.messages()),
        [
            (
                "q1".to_owned(),
                json!({"content": "User answered: Ada", "isError": false})
            ),
            (
                "q2".to_owned(),
                json!({"content": "User answered: Paris", "isError": false})
            ),
            (
                "q3".to_owned(),
                json!({"content": "User answered: a cat", "isError": false})
            ),
        ]
    );
}

/// A batch is checked whole: one invalid answer changes nothing; a valid batch applies every
/// answer in one commit.
pub(super) async fn batch_answers_apply_all_or_none(store: Arc<dyn RunStore>) {
    let model = RecordingModel::new(&script(vec![
        json!({"toolCalls": [
            ask("q1", json!({"question": "Name?"})),
            ask("q2", json!({"question": "Size?", "options": [{"label": "S"}, {"label": "M"}]}))
        ]}),
        json!({"text": "Ordered."}),
    ]));
    let agent = agent(&store, &model, &Counter::default(), &Gate::default());
    let run_id = agent.generate("order a shirt").await.unwrap().run_id;
    let before = store.load_run(&unowned(&run_id)).await.unwrap();
    let (q1, q2) = (ToolCallId::new("q1"), ToolCallId::new("q2"));
    let error = agent
        .respond(&run_id)
        .answer(&q1, json!("Ada"))
        .answer(&q2, json!("XL"))
        .stream()
        .await
        .unwrap_err();
    assert!(
        matches!(error, ResumeError::InvalidAnswer { ref tool_call_id, .. } if tool_call_id == &q2),
        "{error:?}"
    );
    assert_eq!(
        store.load_run(&unowned(&run_id)).await.unwrap(),
        before,
        "nothing changed"
    );
    let error = agent
        .respond(&run_id)
        .answer(&q1, json!("Ada"))
        .answer(&q1, json!("Bob"))
        .stream()
        .await
        .unwrap_err();
    assert!(
        matches!(error, ResumeError::DuplicateToolCall { .. }),
        "{error:?}"
    );
    let chunks = chunks_of(
        agent
            .respond(&run_id)
            .answer(&q2, json!("M"))
            .answer(&q1, json!("Ada"))
            .stream()
            .await
            .unwrap(),
    )
    .await;
    assert!(has_finish(&chunks));
    let stored = store.load_run(&unowned(&run_id)).await.unwrap();
    assert_eq!(
        stored.version,
        before.version + 2,
        "both answers in one commit (the claim), then the completion"
    );
    assert_eq!(
        results_of(stored.state.messages()),
        [
            (
                "q1".to_owned(),
                json!({"content": "User answered: Ada", "isError": false})
            ),
            (
                "q2".to_owned(),
                json!({"content": "User answered: M", "isError": false})
            ),
        ]
    );
}

/// A question with a deadline expires once, however many sweepers race, and the run goes on
/// with a result telling the model that no answer came in time.
pub(super) async fn expired_questions_are_swept_once(store: Arc<dyn RunStore>) {
    let model = RecordingModel::new(&script(vec![
        json!({"toolCalls": [ask("q1", json!({"question": "Still there?"}))]}),
        json!({"text": "No reply; moving on."}),
    ]));
    let agent = Agent::builder("tester")
        .shared_model(model.clone())
        // Due as soon as it is asked: no test waits for a deadline.
        .tool(AskUser::new().timeout(Duration::ZERO))
        .shared_store(store.clone())
        .build()
        .unwrap();
    let output = agent.generate("check in").await.unwrap();
    let RunOutcome::Suspended { pending } = &output.status else {
        panic!("{:?}", output.status);
    };
    let expires = pending[0].expires_at_ms.unwrap();
    assert!(pending[0].suspend_payload["expiresAt"].is_string());
    assert!(
        crate::expired_runs(store.as_ref(), expires - 1)
            .await
            .unwrap()
            .is_empty(),
        "not yet due"
    );
    let due = crate::expired_runs(store.as_ref(), expires).await.unwrap();
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].run_id, output.run_id);
    let (a, b) = tokio::join!(
        agent.expire_due(&due[0], Some("sweep".into())),
        agent.expire_due(&due[0], Some("sweep".into()))
    );
    let (winner, loser) = match (a, b) {
        (Ok(stream), Err(error)) | (Err(error), Ok(stream)) => (stream, error),
        (a, b) => panic!("expected one sweeper to win, got {a:?} and {b:?}"),
    };
    assert!(
        matches!(
            loser,
            ResumeError::Conflict { .. }
                | ResumeError::Expired { .. }
                | ResumeError::NotSuspended { .. }
        ),
        "{loser:?}"
    );
    let chunks = chunks_of(winner).await;
    assert!(has_finish(&chunks));
    let results = tool_results(&chunks);
    assert_eq!(results.len(), 1);
    assert!(
        results[0].1["content"]
            .as_str()
            .unwrap()
            .contains("no answer came in time")
    );
    assert!(
        crate::expired_runs(store.as_ref(), u64::MAX)
            .await
            .unwrap()
            .is_empty()
    );
    let stored = store
        .load_run(&unowned(&output.run_id))
        .await
        .unwrap()
        .state;
    let results: Vec<_> = stored
        .messages()
        .iter()
        .filter(|message| matches!(message, Message::Tool { .. }))
        .collect();
    assert_eq!(results.len(), 1, "expired once");
}

/// A new message to a thread whose run waits on two questions: both calls get a result saying
/// so, the waiting run completes, and a new run goes on from the message with a history in
/// which every tool call has exactly one result.
pub(super) async fn new_message_supersedes_waiting_questions(store: Arc<dyn RunStore>) {
    let model = RecordingModel::new(&script(vec![
        json!({"toolCalls": [
            ask("q1", json!({"question": "Which language?"})),
            ask("q2", json!({"question": "Which editor?"}))
        ]}),
        json!({"text": "Rust it is."}),
    ]));
    let agent = agent(&store, &model, &Counter::default(), &Gate::default());
    let thread = ThreadId::new("thread-supersede");
    let first = agent
        .stream_with("set up a project", RunOptions::new().thread(thread.clone()))
        .collect_output()
        .await
        .unwrap();
    assert!(matches!(first.status, RunOutcome::Suspended { .. }));
    let second = agent
        .stream_with(
            "never mind, just use Rust",
            RunOptions::new().thread(thread.clone()),
        )
        .collect_output()
        .await
        .unwrap();
    assert_eq!(second.text, "Rust it is.");
    let old = store.load_run(&unowned(&first.run_id)).await.unwrap().state;
    assert_eq!(old.status, RunStatus::Completed);
    assert_eq!(old.finish_reason(), Some(FinishReason::Superseded));
    let results = results_of(old.messages());
    assert_eq!(results.len(), 2);
    for (_, result) in &results {
        assert!(
            result["content"]
                .as_str()
                .unwrap()
                .contains("never mind, just use Rust")
        );
    }
    let error = agent
        .resume_stream(json!("Go"), &first.run_id, Some(&ToolCallId::new("q1")))
        .await
        .unwrap_err();
    assert!(
        matches!(error, ResumeError::AlreadyAnswered { .. }),
        "{error:?}"
    );
    // The model's request: every tool call followed by its result, then the new message.
    let request = model.last_request();
    let mut calls = Vec::new();
    let mut answered = Vec::new();
    for message in &request.messages {
        match message {
            Message::Assistant { parts } => {
                calls.extend(parts.iter().filter_map(|part| match part {
                    crate::model::AssistantPart::ToolCall(call) => Some(call.id.to_string()),
                    _ => None,
                }))
            }
            Message::Tool { results } => {
                answered.extend(results.iter().map(|result| result.tool_call_id.to_string()));
            }
            Message::User { .. } => {}
        }
    }
    assert_eq!(calls, answered);
    assert!(
        matches!(request.messages.last(), Some(Message::User { text }) if text == "never mind, just use Rust")
    );
}

/// A cancel resolves the waiting calls and ends the run; a cancelled run refuses resumes.
pub(super) async fn cancelled_runs_refuse_resumes(store: Arc<dyn RunStore>) {
    let model = RecordingModel::new(&script(vec![
        json!({"toolCalls": [ask("q1", json!({"question": "Go on?"}))]}),
        json!({"text": "never"}),
    ]));
    let agent = agent(&store, &model, &Counter::default(), &Gate::default());
    let run_id: RunId = agent.generate("start").await.unwrap().run_id;
    agent.cancel_run(&run_id, Some("cli".into())).await.unwrap();
    let stored = store.load_run(&unowned(&run_id)).await.unwrap().state;
    assert_eq!(stored.status, RunStatus::Cancelled);
    assert!(stored.pending_tool_calls().is_empty());
    let results: Vec<_> = stored
        .messages()
        .iter()
        .flat_map(|message| match message {
            Message::Tool { results } => results.clone(),
            _ => Vec::new(),
        })
        .collect();
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].audit[0].action, AuditAction::Cancel);
    assert_eq!(results[0].audit[0].by.as_deref(), Some("cli"));
    let error = agent
        .resume_stream(json!("yes"), &run_id, None)
        .await
        .unwrap_err();
    assert!(error.to_string().contains("cancelled"), "{error}");
    let error = agent.cancel_run(&run_id, None).await.unwrap_err();
    assert!(
        matches!(error, ResumeError::NotCancellable { .. }),
        "{error:?}"
    );
    assert_eq!(model.calls(), 1, "the model was never called again");
}
