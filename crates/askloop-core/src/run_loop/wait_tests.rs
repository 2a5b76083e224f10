//! Deadlines of every kind of wait (issue 31), on the memory store: approvals carry theirs from
//! the agent's and the tool's rules, expire into a result the model reads, and a late answer to
//! an expired call — a question or an approval, before or after a sweep, while the step waits
//! or after it closed — says that it expired and changes nothing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};

use crate::ids::{RunId, RunKey, ToolCallId};
use crate::message::AuditAction;
use crate::model::Message;
use crate::run::{PendingKind, RunStatus};
use crate::store::{MemoryStore, RunFilter, RunStore, codec};
use crate::testing::conformance::YieldingStore;
use crate::testing::conformance::support::*;
use crate::{Agent, AskUser, Chunk, Execution, ResumeError, Tool, ToolContext};

const HOUR: Duration = Duration::from_secs(3600);
const TEN_MINUTES: Duration = Duration::from_secs(600);

fn store() -> Arc<dyn RunStore> {
    Arc::new(YieldingStore::new(Arc::new(MemoryStore::new())))
}

/// A tool that always needs approval and sets its own approval deadline: ten minutes.
#[derive(Clone, Default)]
struct Wire;

#[async_trait]
impl Tool for Wire {
    const NAME: &'static str = "wire";
    type Args = CountArgs;
    type Output = Value;
    type Error = std::convert::Infallible;
    fn description(&self) -> String {
        "Wires money.".into()
    }
    fn requires_approval(&self, _: &Value) -> bool {
        true
    }
    fn approval_timeout(&self) -> Option<Duration> {
        Some(TEN_MINUTES)
    }
    async fn execute(
        &self,
        args: CountArgs,
        _: &ToolContext,
    ) -> Result<Execution<Value>, Self::Error> {
        Ok(Execution::Complete(json!({"wired": args.label})))
    }
}

/// The deadlines of a stream's `tool-call-approval` chunks, by call id.
fn approval_deadlines(chunks: &[Chunk]) -> Vec<(String, Option<u64>)> {
    chunks
        .iter()
        .filter_map(|chunk| match chunk {
            Chunk::ToolCallApproval {
                call,
                expires_at_ms,
                ..
            } => Some((call.id.to_string(), *expires_at_ms)),
            _ => None,
        })
        .collect()
}

/// Every tool result of the run's own messages.
fn stored_results(messages: &[Message]) -> Vec<crate::model::ToolResult> {
    messages
        .iter()
        .flat_map(|message| match message {
            Message::Tool { results } => results.clone(),
            _ => Vec::new(),
        })
        .collect()
}

/// Asserts that `refusal` is `Expired` for `call` at `deadline`, says when, and that the stored
/// run is byte-for-byte what it was before.
async fn assert_expired_and_unchanged(
    store: &Arc<dyn RunStore>,
    run_id: &RunId,
    before: &crate::store::StoredRun,
    refusal: ResumeError,
    call: &str,
    deadline: u64,
) {
    match &refusal {
        ResumeError::Expired {
            run_id: refused_run,
            tool_call_id,
            expired_at_ms,
        } => {
            assert_eq!(refused_run, run_id);
            assert_eq!(tool_call_id.as_str(), call);
            assert_eq!(*expired_at_ms, deadline, "it expired at its deadline");
        }
        other => panic!("expected Expired for {call}, got {other:?}"),
    }
    assert_eq!(refusal.code(), "expired");
    let text = refusal.to_string();
    assert!(
        text.contains(&format!("expired at {}", crate::time::rfc3339(deadline))),
        "{text}"
    );
    let after = store.load_run(&unowned(run_id)).await.unwrap();
    assert_eq!(&after, before, "a refusal changes nothing");
    assert_eq!(
        codec::encode_state(&after.state).unwrap(),
        codec::encode_state(&before.state).unwrap(),
        "byte for byte"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue31_approvals_carry_the_deadline_of_the_most_specific_rule() {
    let store = store();
    let step = json!({"toolCalls": [
        {"id": "k1", "name": "count", "args": {"label": "a"}},
        {"id": "w1", "name": "wire", "args": {"label": "b"}},
        {"id": "k2", "name": "count", "args": {"label": "c"}}
    ]});
    let build = |per_tool: bool| {
        let model = RecordingModel::new(&script(vec![step.clone(), json!({"text": "Done."})]));
        let mut builder = Agent::builder("tester")
            .shared_model(model)
            .tool(Counter::default())
            .tool(Wire)
            .require_approval_for("count")
            .approval_timeout(HOUR)
            .shared_store(store.clone());
        if per_tool {
            builder = builder
                .approval_timeout_for("wire", Duration::from_secs(60))
                .approval_timeout_for("count", Duration::from_secs(120))
                .approval_timeout_for("count", Duration::from_secs(30));
        }
        builder.build().unwrap()
    };
    for per_tool in [false, true] {
        let agent = build(per_tool);
        let before = crate::time::lease_now_ms();
        let stream = agent.stream("pay the bills");
        let run_id = stream.run_id().clone();
        let chunks = chunks_of(stream).await;
        let after = crate::time::lease_now_ms();
        let deadlines = approval_deadlines(&chunks);
        let expected = if per_tool {
            [("k1", 30), ("w1", 60), ("k2", 30)]
        } else {
            // The agent's default for `count`; the tool's own ten minutes for `wire`.
            [("k1", 3600), ("w1", 600), ("k2", 3600)]
        };
        assert_eq!(deadlines.len(), 3, "{chunks:?}");
        for ((id, at), (expected_id, seconds)) in deadlines.iter().zip(expected) {
            assert_eq!(id, expected_id);
            let at = at.unwrap();
            assert!(
                before + seconds * 1000 <= at && at <= after + seconds * 1000,
                "{id}: {at} not {seconds} s after {before}..{after}"
            );
        }
        // On the wire, as a question's: `expiresAt` in RFC 3339.
        let wire: Vec<Value> = chunks
            .iter()
            .filter(|chunk| matches!(chunk, Chunk::ToolCallApproval { .. }))
            .map(|chunk| crate::wire::chunk_to_json(&run_id, chunk))
            .collect();
        for (json, (_, at)) in wire.iter().zip(&deadlines) {
            assert_eq!(
                json["payload"]["expiresAt"],
                json!(crate::time::rfc3339(at.unwrap())),
                "{json}"
            );
        }
        // Stored with the call, in the listing's summary and the state alike.
        let stored = store.load_run(&unowned(&run_id)).await.unwrap().state;
        assert_eq!(stored.status, RunStatus::Suspended);
        let pending = stored.pending_tool_calls();
        let listed = store
            .list_runs(&RunFilter::new().status(RunStatus::Suspended))
            .await
            .unwrap()
            .runs
            .into_iter()
            .filter_map(|listed| listed.summary().cloned())
            .find(|summary| summary.run_id == run_id)
            .unwrap()
            .pending;
        assert_eq!(listed, pending);
        for (call, (_, at)) in pending.iter().zip(&deadlines) {
            assert_eq!(call.kind, PendingKind::Approval);
            assert_eq!(call.expires_at_ms, *at);
            assert_eq!(
                call.suspend_payload["expiresAt"],
                json!(crate::time::rfc3339(at.unwrap()))
            );
        }
    }
    // Without a deadline nothing changes on the wire: the reference's payload exactly.
    let model = RecordingModel::new(&script(vec![
        json!({"toolCalls": [{"id": "k1", "name": "count", "args": {"label": "a"}}]}),
    ]));
    let agent = Agent::builder("plain")
        .shared_model(model)
        .tool(Counter::default())
        .require_approval_for("count")
        .shared_store(store.clone())
        .build()
        .unwrap();
    let stream = agent.stream("count");
    let run_id = stream.run_id().clone();
    let chunks = chunks_of(stream).await;
    assert_eq!(approval_deadlines(&chunks), [("k1".to_owned(), None)]);
    let json = crate::wire::chunk_to_json(&run_id, chunks.last().unwrap());
    let mut keys: Vec<&str> = json["payload"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(keys, ["args", "resumeSchema", "toolCallId", "toolName"]);
    let pending = store
        .load_run(&unowned(&run_id))
        .await
        .unwrap()
        .state
        .pending_tool_calls();
    assert_eq!(pending[0].expires_at_ms, None);
    assert_eq!(
        pending[0].suspend_payload,
        json!({"toolName": "count", "args": {"label": "a"}})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue31_an_expired_approval_tells_the_model_the_tool_did_not_run() {
    let store = store();
    let model = RecordingModel::new(&script(vec![
        json!({"toolCalls": [{"id": "k1", "name": "count", "args": {"label": "wipe"}}]}),
        json!({"text": "Nobody decided; I left it."}),
    ]));
    let counter = Counter::default();
    let agent = Agent::builder("tester")
        .shared_model(model.clone())
        .tool(counter.clone())
        .require_approval_for("count")
        // Due as soon as it is asked: no test waits for a deadline.
        .approval_timeout(Duration::ZERO)
        .shared_store(store.clone())
        .build()
        .unwrap();
    let output = agent.generate("clean up").await.unwrap();
    let crate::RunOutcome::Suspended { pending } = &output.status else {
        panic!("{:?}", output.status);
    };
    let deadline = pending[0].expires_at_ms.unwrap();
    assert_eq!(pending[0].kind, PendingKind::Approval);
    assert!(
        crate::expired_runs(store.as_ref(), deadline - 1)
            .await
            .unwrap()
            .is_empty(),
        "not yet due"
    );
    let due = crate::expired_runs(store.as_ref(), deadline).await.unwrap();
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].tool_call_ids, [ToolCallId::new("k1")]);
    let chunks = chunks_of(
        agent
            .expire_due(&due[0], Some("sweep".into()))
            .await
            .unwrap(),
    )
    .await;
    assert!(has_finish(&chunks));
    assert_eq!(counter.executions.load(Ordering::SeqCst), 0, "never ran");
    let expected = json!({
        "content": format!(
            "no decision came in time: the approval of this tool call expired at {}; the tool did not run",
            crate::time::rfc3339(deadline)
        ),
        "isError": true,
        "expiredAt": crate::time::rfc3339(deadline),
    });
    assert_eq!(
        tool_results(&chunks),
        [("k1".to_owned(), expected.clone(), true)]
    );
    // The model read it, paired with its call.
    let request = model.last_request();
    let results = stored_results(&request.messages);
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].result, expected);
    // Kept with its audit: an expiry by the sweep.
    let stored = store
        .load_run(&unowned(&output.run_id))
        .await
        .unwrap()
        .state;
    assert_eq!(stored.status, RunStatus::Completed);
    let results = stored_results(stored.messages());
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].audit.len(), 1);
    assert_eq!(results[0].audit[0].action, AuditAction::Expire);
    assert_eq!(results[0].audit[0].by.as_deref(), Some("sweep"));
    assert!(
        crate::expired_runs(store.as_ref(), u64::MAX)
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue31_a_late_answer_to_an_expired_call_says_it_expired_and_changes_nothing() {
    let store = store();
    // One step: an approval and a question that expire at once, and a question without a
    // deadline that keeps the step waiting after the sweep.
    let model = RecordingModel::new(&script(vec![
        json!({"toolCalls": [
            {"id": "k1", "name": "count", "args": {"label": "wipe"}},
            {"id": "g1", "name": "gate", "args": {"action": "deploy"}},
            ask("q1", json!({"question": "Which folder?"}))
        ]}),
        json!({"text": "Done."}),
    ]));
    let counter = Counter::default();
    let gate = Gate::default();
    let agent = Agent::builder("tester")
        .shared_model(model.clone())
        .tool(AskUser::new().timeout(Duration::ZERO))
        .tool(counter.clone())
        .tool(gate.clone())
        .require_approval_for("count")
        .approval_timeout(Duration::ZERO)
        .shared_store(store.clone())
        .build()
        .unwrap();
    let stream = agent.stream("tidy up");
    let run_id = stream.run_id().clone();
    chunks_of(stream).await;
    let pending = store
        .load_run(&unowned(&run_id))
        .await
        .unwrap()
        .state
        .pending_tool_calls();
    let deadline = |id: &str| {
        pending
            .iter()
            .find(|call| call.tool_call_id.as_str() == id)
            .and_then(|call| call.expires_at_ms)
    };
    let (k1, q1) = (deadline("k1").unwrap(), deadline("q1").unwrap());
    assert_eq!(deadline("g1"), None, "the gate's question has no deadline");
    let k1_id = ToolCallId::new("k1");
    let q1_id = ToolCallId::new("q1");

    // Past the deadline, before any sweep: refused as expired, nothing changes (the sweep
    // gives the result).
    let before = store.load_run(&unowned(&run_id)).await.unwrap();
    let refusal = agent.approve_tool_call(&run_id, &k1_id).await.unwrap_err();
    assert_expired_and_unchanged(&store, &run_id, &before, refusal, "k1", k1).await;
    let refusal = agent
        .decline_tool_call(&run_id, &k1_id, Some("no".into()))
        .await
        .unwrap_err();
    assert_expired_and_unchanged(&store, &run_id, &before, refusal, "k1", k1).await;
    let refusal = agent
        .resume_stream(json!("docs"), &run_id, Some(&q1_id))
        .await
        .unwrap_err();
    assert_expired_and_unchanged(&store, &run_id, &before, refusal, "q1", q1).await;
    // A batch with one expired response is refused whole.
    let refusal = agent
        .respond(&run_id)
        .answer(&ToolCallId::new("g1"), json!({"approved": true}))
        .approve(&k1_id)
        .stream()
        .await
        .unwrap_err();
    assert_expired_and_unchanged(&store, &run_id, &before, refusal, "k1", k1).await;
    assert_eq!(counter.executions.load(Ordering::SeqCst), 0);

    // The sweep expires both; the step still waits for the gate.
    let due = crate::expired_runs(store.as_ref(), k1.max(q1))
        .await
        .unwrap();
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].tool_call_ids, [k1_id.clone(), q1_id.clone()]);
    let chunks = chunks_of(
        agent
            .expire_due(&due[0], Some("sweep".into()))
            .await
            .unwrap(),
    )
    .await;
    assert!(!has_finish(&chunks));
    let stored = store.load_run(&unowned(&run_id)).await.unwrap();
    assert_eq!(stored.state.status, RunStatus::Suspended);
    assert_eq!(
        stored.state.pending_tool_calls()[0].tool_call_id.as_str(),
        "g1"
    );

    // While the step waits: an answer or a decision for an expired call says it expired, not
    // that it was answered.
    assert_eq!(stored.state.expired_at_ms(&k1_id), Some(k1));
    assert_eq!(stored.state.expired_at_ms(&q1_id), Some(q1));
    assert_eq!(stored.state.expired_at_ms(&ToolCallId::new("g1")), None);
    let before = stored;
    let refusal = agent.approve_tool_call(&run_id, &k1_id).await.unwrap_err();
    assert_expired_and_unchanged(&store, &run_id, &before, refusal, "k1", k1).await;
    let refusal = agent
        .resume_stream(json!("docs"), &run_id, Some(&q1_id))
        .await
        .unwrap_err();
    assert_expired_and_unchanged(&store, &run_id, &before, refusal, "q1", q1).await;
    // A sweep that comes late changes nothing either.
    let refusal = agent
        .expire_due(&due[0], Some("sweep".into()))
        .await
        .unwrap_err();
    assert_expired_and_unchanged(&store, &run_id, &before, refusal, "k1", k1).await;

    // The step closes once the gate is answered; the run completes.
    let chunks = chunks_of(
        agent
            .resume_stream(
                json!({"approved": true}),
                &run_id,
                Some(&ToolCallId::new("g1")),
            )
            .await
            .unwrap(),
    )
    .await;
    assert!(has_finish(&chunks));
    assert_eq!(gate.resumes.load(Ordering::SeqCst), 1);
    assert_eq!(counter.executions.load(Ordering::SeqCst), 0);

    // After the step closed: still "expired", never "already answered".
    let before = store.load_run(&unowned(&run_id)).await.unwrap();
    assert_eq!(before.state.status, RunStatus::Completed);
    assert_eq!(before.state.expired_at_ms(&k1_id), Some(k1));
    assert_eq!(before.state.expired_at_ms(&q1_id), Some(q1));
    assert_eq!(before.state.expired_at_ms(&ToolCallId::new("g1")), None);
    let refusal = agent.approve_tool_call(&run_id, &k1_id).await.unwrap_err();
    assert_expired_and_unchanged(&store, &run_id, &before, refusal, "k1", k1).await;
    let refusal = agent
        .resume_stream(json!("docs"), &run_id, Some(&q1_id))
        .await
        .unwrap_err();
    assert_expired_and_unchanged(&store, &run_id, &before, refusal, "q1", q1).await;
    // The call that was answered still says so.
    let refusal = agent
        .resume_stream(
            json!({"approved": true}),
            &run_id,
            Some(&ToolCallId::new("g1")),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            refusal,
            ResumeError::AlreadyAnswered {
                same_answer: true,
                ..
            }
        ),
        "{refusal:?}"
    );
    let results = stored_results(before.state.messages());
    let question = results
        .iter()
        .find(|result| result.tool_call_id == q1_id)
        .unwrap();
    assert_eq!(
        question.result,
        json!({
            "content": format!("no answer came in time: the question expired at {}", crate::time::rfc3339(q1)),
            "isError": true,
            "expiredAt": crate::time::rfc3339(q1),
        })
    );
}

/// The key of a run without a resource (every run of these tests).
fn unowned(run_id: &RunId) -> RunKey {
    RunKey::new(None, run_id.clone())
}

/// A new message that supersedes a waiting approval gives the model an error result saying
/// plainly that the person did not decide and the tool did not run; a question waiting beside
/// it keeps its "did not answer" text (issue 31).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue31_a_superseded_approval_says_the_tool_did_not_run() {
    let store = store();
    let model = RecordingModel::new(&script(vec![
        json!({"toolCalls": [
            {"id": "k1", "name": "count", "args": {"label": "wipe"}},
            ask("q1", json!({"question": "Why?"}))
        ]}),
        json!({"text": "Understood, nothing wiped."}),
    ]));
    let counter = Counter::default();
    let agent = Agent::builder("tester")
        .shared_model(model.clone())
        .tool(AskUser::new())
        .tool(counter.clone())
        .require_approval_for("count")
        .shared_store(store.clone())
        .build()
        .unwrap();
    let options = crate::RunOptions::new().thread("superseded-approval");
    let first = agent.stream_with("wipe the disk", options.clone());
    let first_id = first.run_id().clone();
    chunks_of(first).await;
    let second = agent
        .stream_with("stop, keep the disk", options)
        .collect_output()
        .await
        .unwrap();
    assert_eq!(second.text, "Understood, nothing wiped.");
    assert_eq!(counter.executions.load(Ordering::SeqCst), 0);
    let old = store.load_run(&unowned(&first_id)).await.unwrap().state;
    let results: Vec<_> = old
        .messages()
        .iter()
        .flat_map(|message| match message {
            Message::Tool { results } => results.clone(),
            _ => Vec::new(),
        })
        .collect();
    assert_eq!(results.len(), 2, "{results:?}");
    let approval = results
        .iter()
        .find(|r| r.tool_call_id.as_str() == "k1")
        .unwrap();
    assert!(approval.is_error);
    assert_eq!(
        approval.result["content"],
        "the person did not decide on this tool call and wrote instead: \"stop, keep the disk\"; the tool did not run"
    );
    assert_eq!(approval.audit[0].action, AuditAction::Message);
    let question = results
        .iter()
        .find(|r| r.tool_call_id.as_str() == "q1")
        .unwrap();
    assert!(!question.is_error);
    assert_eq!(
        question.result["content"],
        "the person did not answer and wrote instead: \"stop, keep the disk\""
    );
    // The model reads both in the next turn's request.
    let request = model.last_request();
    let read: Vec<_> = request
        .messages
        .iter()
        .flat_map(|message| match message {
            Message::Tool { results } => results.clone(),
            _ => Vec::new(),
        })
        .collect();
    assert_eq!(read, results);
}
