//! Store scenarios of who may answer (issue 34): an approver policy's roles, self-approval and
//! quorum, checked in the claim against the starter the store kept, each vote committed, two
//! approvers at once reaching a quorum exactly once. Listed in `store.rs`'s `SCENARIOS`.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use serde_json::json;

use crate::event::RunEventKind;
use crate::ids::{RunId, ToolCallId};
use crate::message::AuditAction;
use crate::run::{RunState, RunStatus};
use crate::store::RunStore;
use crate::testing::conformance::support::*;
use crate::{Actor, Agent, ApproverPolicy, AskUser, Chunk, PolicyRefusal, ResumeError, RunOptions};

const RESOURCE: &str = "tenant-p";

fn agent_with(
    store: &Arc<dyn RunStore>,
    steps: Vec<serde_json::Value>,
    counter: &Counter,
    policy: ApproverPolicy,
) -> Agent {
    Agent::builder("tester")
        .shared_model(RecordingModel::new(&script(steps)))
        .tool(AskUser::new())
        .tool(counter.clone())
        .require_approval_for("count")
        .approvers_for("count", policy)
        .shared_store(store.clone())
        .build()
        .unwrap()
}

fn one_count() -> Vec<serde_json::Value> {
    vec![
        json!({"toolCalls": [{"id": "k1", "name": "count", "args": {"label": "deploy"}}]}),
        json!({"text": "Done."}),
    ]
}

fn key(run_id: &RunId) -> crate::RunKey {
    crate::RunKey::new(Some(RESOURCE.into()), run_id.clone())
}

fn ops(id: &str) -> Actor {
    Actor::new(id)
        .resource(RESOURCE)
        .roles(["ops"])
        .route("test approve")
}

/// Starts a run as `starter` and runs it to its approval of `k1`.
async fn started_by(agent: &Agent, starter: Actor) -> RunId {
    let stream = agent.stream_with(
        "deploy",
        RunOptions::new().resource(RESOURCE).actor(starter),
    );
    let run_id = stream.run_id().clone();
    chunks_of(stream).await;
    run_id
}

async fn stored(store: &Arc<dyn RunStore>, run_id: &RunId) -> RunState {
    store.load_run(&key(run_id)).await.unwrap().state
}

fn refusal(error: ResumeError) -> PolicyRefusal {
    match error {
        ResumeError::NotPermitted { reason, .. } => *reason,
        other => panic!("expected not_permitted, got {other:?}"),
    }
}

/// The run's starter is stored with it; the starter may not approve its own call (a refusal
/// that changes nothing), another approver with the role may, and the audit says who, from
/// where.
pub(super) async fn issue34_self_approval_is_refused(store: Arc<dyn RunStore>) {
    let counter = Counter::default();
    let policy = ApproverPolicy::new().roles(["ops"]).self_approval(false);
    let agent = agent_with(&store, one_count(), &counter, policy);
    let run_id = started_by(&agent, ops("alice")).await;
    let before = store.load_run(&key(&run_id)).await.unwrap();
    assert_eq!(
        before.state.started_by().map(|actor| actor.id.as_str()),
        Some("alice"),
        "the starter is stored with the run"
    );
    let k1 = ToolCallId::new("k1");
    let error = agent
        .respond(key(&run_id))
        .actor(ops("alice"))
        .approve(&k1)
        .stream()
        .await
        .unwrap_err();
    assert_eq!(error.code(), "not_permitted");
    assert!(
        matches!(refusal(error), PolicyRefusal::SelfApproval { starter } if starter == "alice")
    );
    assert_eq!(
        store.load_run(&key(&run_id)).await.unwrap(),
        before,
        "a refusal changes nothing"
    );
    // Without the role: refused too.
    let error = agent
        .respond(key(&run_id))
        .actor(Actor::new("mallory").resource(RESOURCE))
        .approve(&k1)
        .stream()
        .await
        .unwrap_err();
    assert!(
        matches!(refusal(error), PolicyRefusal::MissingRole { required } if required == ["ops"])
    );
    // An actor-less approval: the policy must know who approves.
    let error = agent
        .approve_tool_call(key(&run_id), &k1)
        .await
        .unwrap_err();
    assert_eq!(refusal(error), PolicyRefusal::Unidentified);
    assert_eq!(counter.executions.load(Ordering::SeqCst), 0);

    let chunks = chunks_of(
        agent
            .respond(key(&run_id))
            .actor(ops("bob"))
            .approve(&k1)
            .stream()
            .await
            .unwrap(),
    )
    .await;
    assert!(has_finish(&chunks));
    assert_eq!(counter.executions.load(Ordering::SeqCst), 1);
    let state = stored(&store, &run_id).await;
    let decisions = state.decisions();
    let record = decisions
        .iter()
        .find(|decision| decision.record.action == AuditAction::Approve)
        .unwrap()
        .record;
    assert_eq!(record.by.as_deref(), Some("bob"));
    assert_eq!(
        record.resource.as_ref().map(|id| id.as_str()),
        Some(RESOURCE)
    );
    assert_eq!(record.roles, ["ops"]);
    assert_eq!(record.route.as_deref(), Some("test approve"));
}

/// A tool's own policy gates the answers to its questions by role: refused without the role
/// (nothing changes), accepted with it.
pub(super) async fn issue34_roles_gate_answers_of_a_tool_with_a_policy(store: Arc<dyn RunStore>) {
    let agent = Agent::builder("tester")
        .shared_model(RecordingModel::new(&script(vec![
            json!({"toolCalls": [ask("q1", json!({"question": "Which region?"}))]}),
            json!({"text": "Done."}),
        ])))
        .tool(AskUser::new())
        .approvers_for("ask_user", ApproverPolicy::new().roles(["ops", "sre"]))
        .shared_store(store.clone())
        .build()
        .unwrap();
    let run_id = started_by(&agent, Actor::new("alice").resource(RESOURCE)).await;
    let before = store.load_run(&key(&run_id)).await.unwrap();
    let q1 = ToolCallId::new("q1");
    let error = agent
        .respond(key(&run_id))
        .actor(Actor::new("alice").resource(RESOURCE))
        .answer(&q1, json!("eu"))
        .stream()
        .await
        .unwrap_err();
    assert!(matches!(refusal(error), PolicyRefusal::MissingRole { .. }));
    assert_eq!(store.load_run(&key(&run_id)).await.unwrap(), before);
    let chunks = chunks_of(
        agent
            .respond(key(&run_id))
            .actor(Actor::new("sam").roles(["sre"]))
            .answer(&q1, json!("eu"))
            .stream()
            .await
            .unwrap(),
    )
    .await;
    assert!(has_finish(&chunks));
}

/// A quorum of two: the first approval is committed as a vote (the run stays suspended, the
/// stream says 1 of 2, the waiting call lists it), the same approver again is refused, a second
/// distinct approver runs the tool once; both approvals are in the audit.
pub(super) async fn issue34_a_quorum_of_two(store: Arc<dyn RunStore>) {
    let counter = Counter::default();
    let policy = ApproverPolicy::new().roles(["ops"]).quorum(2);
    let agent = agent_with(&store, one_count(), &counter, policy);
    let run_id = started_by(&agent, Actor::new("dev").resource(RESOURCE)).await;
    let k1 = ToolCallId::new("k1");
    let waiting = stored(&store, &run_id).await.pending_tool_calls();
    assert_eq!(waiting[0].quorum, Some(2));
    assert!(waiting[0].approvals.is_empty());

    let chunks = chunks_of(
        agent
            .respond(key(&run_id))
            .actor(ops("bob"))
            .approve(&k1)
            .stream()
            .await
            .unwrap(),
    )
    .await;
    let Some(Chunk::ToolCallApproval {
        approvals, quorum, ..
    }) = chunks.first()
    else {
        panic!("a vote's stream re-announces the waiting call: {chunks:?}");
    };
    assert_eq!((approvals.len(), *quorum), (1, Some(2)), "approval 1 of 2");
    assert_eq!(approvals[0].by.as_deref(), Some("bob"));
    assert!(!has_finish(&chunks));
    let state = stored(&store, &run_id).await;
    assert_eq!(state.status(), RunStatus::Suspended, "still waiting");
    assert_eq!(state.pending_tool_calls()[0].approvals.len(), 1);
    assert_eq!(counter.executions.load(Ordering::SeqCst), 0);
    let wire = crate::wire::PendingCall::of(&run_id, &state.pending_tool_calls()[0]);
    let wire = serde_json::to_value(wire).unwrap();
    assert_eq!(wire["quorum"], 2);
    assert_eq!(wire["approvals"][0]["by"], "bob");

    let before = store.load_run(&key(&run_id)).await.unwrap();
    let error = agent
        .respond(key(&run_id))
        .actor(ops("bob"))
        .approve(&k1)
        .stream()
        .await
        .unwrap_err();
    assert!(matches!(
        refusal(error),
        PolicyRefusal::AlreadyApproved { .. }
    ));
    assert_eq!(store.load_run(&key(&run_id)).await.unwrap(), before);

    let chunks = chunks_of(
        agent
            .respond(key(&run_id))
            .actor(ops("carol"))
            .approve(&k1)
            .stream()
            .await
            .unwrap(),
    )
    .await;
    assert!(has_finish(&chunks));
    assert_eq!(counter.executions.load(Ordering::SeqCst), 1, "ran once");
    let state = stored(&store, &run_id).await;
    let approvers: Vec<Option<&str>> = state
        .decisions()
        .iter()
        .filter(|decision| decision.record.action == AuditAction::Approve)
        .map(|decision| decision.record.by.as_deref())
        .collect();
    assert_eq!(approvers, [Some("bob"), Some("carol")]);
}

/// One decline declines a quorum call, after a vote: the tool never runs.
pub(super) async fn issue34_one_decline_declines_a_quorum_call(store: Arc<dyn RunStore>) {
    let counter = Counter::default();
    let agent = agent_with(
        &store,
        one_count(),
        &counter,
        ApproverPolicy::new().quorum(3),
    );
    let run_id = started_by(&agent, Actor::new("dev").resource(RESOURCE)).await;
    let k1 = ToolCallId::new("k1");
    chunks_of(
        agent
            .respond(key(&run_id))
            .actor(ops("bob"))
            .approve(&k1)
            .stream()
            .await
            .unwrap(),
    )
    .await;
    let chunks = chunks_of(
        agent
            .respond(key(&run_id))
            .actor(ops("carol"))
            .decline(&k1, Some("not now".into()))
            .stream()
            .await
            .unwrap(),
    )
    .await;
    assert!(has_finish(&chunks));
    let results = tool_results(&chunks);
    assert!(results[0].2, "declined");
    assert_eq!(counter.executions.load(Ordering::SeqCst), 0);
    let state = stored(&store, &run_id).await;
    let actions: Vec<(AuditAction, Option<&str>)> = state
        .decisions()
        .iter()
        .map(|decision| (decision.record.action, decision.record.by.as_deref()))
        .collect();
    assert_eq!(
        actions,
        [
            (AuditAction::Approve, Some("bob")),
            (AuditAction::Decline, Some("carol"))
        ]
    );
}

/// Two approvers at once on a quorum of two: both votes land (a lost compare-and-swap re-reads
/// and lands on top of the other; a `conflict` is retried), the quorum is reached exactly once
/// and the tool runs once.
pub(super) async fn issue34_concurrent_approvals_reach_the_quorum_once(store: Arc<dyn RunStore>) {
    let counter = Counter::default();
    let agent = agent_with(
        &store,
        one_count(),
        &counter,
        ApproverPolicy::new().quorum(2),
    );
    let run_id = started_by(&agent, Actor::new("dev").resource(RESOURCE)).await;
    let approve = |who: &'static str| {
        let agent = agent.clone();
        let run_id = run_id.clone();
        async move {
            let k1 = ToolCallId::new("k1");
            for _ in 0..20 {
                match agent
                    .respond(key(&run_id))
                    .actor(Actor::new(who))
                    .approve(&k1)
                    .stream()
                    .await
                {
                    Ok(stream) => return chunks_of(stream).await,
                    Err(ResumeError::Conflict { .. } | ResumeError::InProgress { .. }) => {
                        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                    }
                    Err(other) => panic!("{who}: {other:?}"),
                }
            }
            panic!("{who}: no vote landed")
        }
    };
    let (first, second) =
        tokio::join!(tokio::spawn(approve("bob")), tokio::spawn(approve("carol")));
    let finished = [first.unwrap(), second.unwrap()]
        .iter()
        .filter(|chunks| has_finish(chunks))
        .count();
    assert_eq!(finished, 1, "one of the two approvals completed the quorum");
    assert_eq!(counter.executions.load(Ordering::SeqCst), 1, "ran once");
    let state = stored(&store, &run_id).await;
    assert_eq!(state.status(), RunStatus::Completed);
    let mut approvers: Vec<String> = state
        .decisions()
        .iter()
        .filter(|decision| decision.record.action == AuditAction::Approve)
        .filter_map(|decision| decision.record.by.clone())
        .collect();
    approvers.sort();
    assert_eq!(approvers, ["bob", "carol"]);
}

/// Agent `mix`: the agent's policy (role `ops`, no self-approval, a quorum of two) governs the
/// approval of `count`; its one step asks `c1` and calls `count` (`d1`) beside it.
fn mix_agent(store: &Arc<dyn RunStore>, counter: &Counter) -> Agent {
    let steps = vec![
        json!({"toolCalls": [
            ask("c1", json!({"question": "Which env?"})),
            {"id": "d1", "name": "count", "args": {"label": "deploy"}}
        ]}),
        json!({"text": "Done."}),
    ];
    Agent::builder("mix")
        .shared_model(RecordingModel::new(&script(steps)))
        .tool(AskUser::new())
        .tool(counter.clone())
        .require_approval_for("count")
        .approvers(
            ApproverPolicy::new()
                .roles(["ops"])
                .self_approval(false)
                .quorum(2),
        )
        .shared_store(store.clone())
        .build()
        .unwrap()
}

/// The votes (approvers) recorded on the waiting call `id` of a run.
fn votes_on(state: &RunState, id: &str) -> Vec<Option<String>> {
    state
        .pending_tool_calls()
        .into_iter()
        .find(|call| call.tool_call_id.as_str() == id)
        .map(|call| call.approvals.into_iter().map(|vote| vote.by).collect())
        .unwrap_or_default()
}

/// A fork carries no votes: bob votes on `d1`, then forks the run at `c1`. The fork (bob's run
/// now) waits on `d1` with no votes and announces it (`approval.requested`, once, and no
/// `question.raised` for the question it answered); bob may not approve his own run's call;
/// alice and dan complete the fork's quorum. The original keeps bob's vote.
pub(super) async fn issue34_a_fork_carries_no_votes(store: Arc<dyn RunStore>) {
    let counter = Counter::default();
    let agent = mix_agent(&store, &counter);
    let run_id = started_by(&agent, ops("carol")).await;
    let d1 = ToolCallId::new("d1");
    chunks_of(
        agent
            .respond(key(&run_id))
            .actor(ops("bob"))
            .approve(&d1)
            .stream()
            .await
            .unwrap(),
    )
    .await;
    let original = stored(&store, &run_id).await;
    assert_eq!(votes_on(&original, "d1"), [Some("bob".to_owned())]);

    let fork = agent
        .fork(key(&run_id), &ToolCallId::new("c1"), json!("dev"))
        .actor(ops("bob"))
        .stream()
        .await
        .unwrap();
    let fork_id = fork.run_id().clone();
    chunks_of(fork).await;
    let forked = stored(&store, &fork_id).await;
    assert_eq!(
        forked.started_by().map(|actor| actor.id.as_str()),
        Some("bob")
    );
    assert_eq!(forked.status(), RunStatus::Suspended, "d1 still waits");
    assert!(
        votes_on(&forked, "d1").is_empty(),
        "the fork's d1 has no votes"
    );
    let announced: Vec<(RunEventKind, String)> = fork_events(&store, &fork_id).await;
    assert_eq!(
        announced,
        [(RunEventKind::ApprovalRequested, "d1".to_owned())],
        "the fork announces d1 once and nothing of c1"
    );

    let error = agent
        .respond(key(&fork_id))
        .actor(ops("bob"))
        .approve(&d1)
        .stream()
        .await
        .unwrap_err();
    assert!(
        matches!(refusal(error), PolicyRefusal::SelfApproval { starter } if starter == "bob"),
        "bob started the fork"
    );
    for approver in ["alice", "dan"] {
        chunks_of(
            agent
                .respond(key(&fork_id))
                .actor(ops(approver))
                .approve(&d1)
                .stream()
                .await
                .unwrap(),
        )
        .await;
    }
    assert_eq!(counter.executions.load(Ordering::SeqCst), 1, "ran once");
    let forked = stored(&store, &fork_id).await;
    assert_eq!(forked.status(), RunStatus::Completed);
    let approvers: Vec<Option<&str>> = forked
        .decisions()
        .iter()
        .filter(|decision| decision.record.action == AuditAction::Approve)
        .map(|decision| decision.record.by.as_deref())
        .collect();
    assert_eq!(approvers, [Some("alice"), Some("dan")]);
    assert_eq!(
        stored(&store, &run_id).await,
        original,
        "the original keeps its own vote"
    );
}

/// The call events of the outbox about run `run_id`: each one's kind and call.
async fn fork_events(store: &Arc<dyn RunStore>, run_id: &RunId) -> Vec<(RunEventKind, String)> {
    crate::store::outbox_of(store.as_ref())
        .unwrap()
        .list_events(0, 10_000)
        .await
        .unwrap()
        .into_iter()
        .filter(|stored| &stored.event.data.run_id == run_id)
        .filter_map(|stored| {
            let call = stored.event.data.call?;
            Some((stored.event.kind, call.tool_call_id.to_string()))
        })
        .collect()
}

/// A vote that edited the arguments shows them: the waiting call lists it with `args` (in the
/// stored state and on the wire), a plain approval after it is refused `args_differ` naming
/// them (nothing changes), and an approval of the same arguments completes the quorum.
pub(super) async fn issue34_an_edited_vote_shows_what_it_approved(store: Arc<dyn RunStore>) {
    let counter = Counter::default();
    let agent = agent_with(
        &store,
        one_count(),
        &counter,
        ApproverPolicy::new().quorum(2),
    );
    let run_id = started_by(&agent, Actor::new("dev").resource(RESOURCE)).await;
    let k1 = ToolCallId::new("k1");
    let edited = json!({"label": "staging"});
    chunks_of(
        agent
            .respond(key(&run_id))
            .actor(ops("bob"))
            .approve_with(&k1, edited.clone())
            .stream()
            .await
            .unwrap(),
    )
    .await;
    let waiting = stored(&store, &run_id).await.pending_tool_calls();
    assert_eq!(waiting[0].args, json!({"label": "deploy"}), "the model's");
    assert_eq!(waiting[0].approvals[0].args.as_ref(), Some(&edited));
    let wire = serde_json::to_value(crate::wire::PendingCall::of(&run_id, &waiting[0])).unwrap();
    assert_eq!(wire["approvals"][0]["args"], edited);

    let before = store.load_run(&key(&run_id)).await.unwrap();
    let error = agent
        .respond(key(&run_id))
        .actor(ops("carol"))
        .approve(&k1)
        .stream()
        .await
        .unwrap_err();
    let message = error.to_string();
    assert!(
        message.contains(r#"{"label":"staging"}"#),
        "the refusal names the approved arguments: {message}"
    );
    assert_eq!(refusal(error).code(), "args_differ");
    assert_eq!(store.load_run(&key(&run_id)).await.unwrap(), before);

    let chunks = chunks_of(
        agent
            .respond(key(&run_id))
            .actor(ops("carol"))
            .approve_with(&k1, edited)
            .stream()
            .await
            .unwrap(),
    )
    .await;
    assert!(has_finish(&chunks));
    assert_eq!(counter.executions.load(Ordering::SeqCst), 1, "ran once");
}
