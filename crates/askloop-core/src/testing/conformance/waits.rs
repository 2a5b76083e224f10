//! Store scenarios of deadlines beyond questions (issue 31): an approval that expires is
//! resolved once however many sweeps race, and a late decision says it expired. Listed in
//! `store.rs`'s `SCENARIOS`, so they run on every store.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::json;

use crate::ids::ToolCallId;
use crate::message::AuditAction;
use crate::model::Message;
use crate::run::{PendingKind, RunStatus};
use crate::store::RunStore;
use crate::testing::conformance::support::*;
use crate::{Agent, ResumeError, RunOutcome};

/// How many sweeps race on one expired approval.
const SWEEPERS: usize = 5;

/// An approval with a deadline expires once, however many sweeps race (each with its own
/// agent value, as separate processes would be): one claims it, the others change nothing.
/// The tool never runs, the model reads that no decision came in time and the tool did not
/// run, the run goes on, and a decision that comes afterwards is refused as expired.
pub(super) async fn issue31_expired_approvals_are_swept_once(store: Arc<dyn RunStore>) {
    let model = RecordingModel::new(&script(vec![
        json!({"toolCalls": [{"id": "k1", "name": "count", "args": {"label": "wipe"}}]}),
        json!({"text": "Nobody decided; left as is."}),
    ]));
    let counter = Counter::default();
    let sweeper = || {
        Agent::builder("tester")
            .shared_model(model.clone())
            .tool(counter.clone())
            .require_approval_for("count")
            // Due as soon as it is asked: no test waits for a deadline.
            .approval_timeout_for("count", Duration::ZERO)
            .shared_store(store.clone())
            .build()
            .unwrap()
    };
    let agent = sweeper();
    let output = agent.generate("clean up").await.unwrap();
    let RunOutcome::Suspended { pending } = &output.status else {
        panic!("{:?}", output.status);
    };
    assert_eq!(pending[0].kind, PendingKind::Approval);
    let deadline = pending[0].expires_at_ms.unwrap();
    let stored = store.load_run(&output.run_key()).await.unwrap().state;
    assert_eq!(
        stored.pending_tool_calls()[0].expires_at_ms,
        Some(deadline),
        "the deadline is stored with the call"
    );
    let due = crate::expired_runs(store.as_ref(), deadline).await.unwrap();
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].run_id, output.run_id);
    assert_eq!(due[0].tool_call_ids, [ToolCallId::new("k1")]);

    let barrier = Arc::new(tokio::sync::Barrier::new(SWEEPERS));
    let tasks: Vec<_> = (0..SWEEPERS)
        .map(|_| {
            let agent = sweeper();
            let expired = due[0].clone();
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                match agent.expire_due(&expired, Some("sweep".into())).await {
                    Ok(stream) => Ok(chunks_of(stream).await),
                    Err(error) => Err(error),
                }
            })
        })
        .collect();
    let mut winners = Vec::new();
    for task in tasks {
        match task.await.unwrap() {
            Ok(chunks) => winners.push(chunks),
            Err(ResumeError::Conflict { .. } | ResumeError::Expired { .. }) => {}
            Err(other) => panic!("unexpected refusal of a racing sweep: {other:?}"),
        }
    }
    assert_eq!(winners.len(), 1, "one sweep expires the approval");
    let chunks = &winners[0];
    assert!(has_finish(chunks));
    let results = tool_results(chunks);
    assert_eq!(results.len(), 1);
    let text = results[0].1["content"].as_str().unwrap();
    assert!(text.contains("no decision came in time"), "{text}");
    assert!(text.contains("the tool did not run"), "{text}");
    assert!(results[0].2, "an error result");
    assert_eq!(counter.executions.load(Ordering::SeqCst), 0, "never ran");

    let stored = store.load_run(&output.run_key()).await.unwrap();
    assert_eq!(stored.state.status, RunStatus::Completed);
    let results: Vec<_> = stored
        .state
        .messages()
        .iter()
        .flat_map(|message| match message {
            Message::Tool { results } => results.clone(),
            _ => Vec::new(),
        })
        .collect();
    assert_eq!(results.len(), 1, "expired once");
    assert_eq!(results[0].audit.len(), 1, "one audit record");
    assert_eq!(results[0].audit[0].action, AuditAction::Expire);
    assert_eq!(results[0].audit[0].by.as_deref(), Some("sweep"));
    assert!(
        crate::expired_runs(store.as_ref(), u64::MAX)
            .await
            .unwrap()
            .is_empty()
    );

    // A decision that comes now says the call expired, and changes nothing.
    let error = agent
        .approve_tool_call(&output.run_id, &ToolCallId::new("k1"))
        .await
        .unwrap_err();
    assert!(
        matches!(error, ResumeError::Expired { expired_at_ms, .. } if expired_at_ms == deadline),
        "{error:?}"
    );
    assert_eq!(store.load_run(&output.run_key()).await.unwrap(), stored);
    assert_eq!(counter.executions.load(Ordering::SeqCst), 0);
}
