//! The outbox scenarios (issue 34): a committed change writes exactly its events in its own
//! transaction, a refused one writes none; deliveries are fanned out once per endpoint and
//! event, claimed by one deliverer at a time, their attempts recorded, listed per tenant and
//! replayed; pruning deletes old finished events only, a bounded batch at a time.

use std::sync::Arc;

use serde_json::json;

use crate::event::{RunEvent, RunEventKind};
use crate::ids::{LeaseHolder, ResourceId, RunId, ToolCallId};
use crate::run::RunStatus;
use crate::store::{
    DeliveryAttempt, DeliveryClaim, DeliveryFilter, DeliveryNext, DeliveryStatus, FanOut,
    ResourceFilter, RunStore, StoreError, StoredEvent, outbox_of,
};
use crate::testing::conformance::support::*;
use crate::{Agent, AskUser, RunOptions};

/// Every event of the outbox about run `run_id`, in order.
async fn events_of(store: &Arc<dyn RunStore>, run_id: &RunId) -> Vec<RunEvent> {
    all_events(store)
        .await
        .into_iter()
        .map(|stored| stored.event)
        .filter(|event| &event.data.run_id == run_id)
        .collect()
}

async fn all_events(store: &Arc<dyn RunStore>) -> Vec<StoredEvent> {
    outbox_of(store.as_ref())
        .unwrap()
        .list_events(0, 10_000)
        .await
        .unwrap()
}

fn kinds(events: &[RunEvent]) -> Vec<&'static str> {
    events.iter().map(|event| event.kind.as_str()).collect()
}

fn asking_agent(store: &Arc<dyn RunStore>, script: &str) -> Agent {
    Agent::builder("tester")
        .shared_model(RecordingModel::new(script))
        .tool(AskUser::new())
        .tool(Counter::default())
        .require_approval_for("count")
        .shared_store(store.clone())
        .build()
        .unwrap()
}

/// A question, its answer, an approval, its decision and the run's end each write exactly
/// their events, in order, with the run's key and the call in the one wire shape; a refused
/// insert or compare-and-swap writes none.
pub(super) async fn issue34_commits_write_exactly_their_events(store: Arc<dyn RunStore>) {
    let agent = asking_agent(
        &store,
        &script(vec![
            json!({"toolCalls": [ask("q1", json!({"question": "Which repo?",
                "options": [{"label": "main"}, {"label": "docs"}]}))]}),
            json!({"toolCalls": [{"id": "k1", "name": "count", "args": {"label": "wipe"}}]}),
            json!({"text": "Done."}),
        ]),
    );
    let options = RunOptions::new().resource(TENANT);
    let stream = agent.stream_with("hello", options);
    let run_id = stream.run_id().clone();
    chunks_of(stream).await;
    let events = events_of(&store, &run_id).await;
    assert_eq!(kinds(&events), ["question.raised"], "{events:#?}");
    let raised = &events[0];
    assert!(raised.id.starts_with("evt_"));
    assert_eq!(
        raised.data.resource_id.as_ref().map(ResourceId::as_str),
        Some(TENANT)
    );
    assert_eq!(raised.data.agent_id.as_str(), "tester");
    let call = raised.data.call.as_ref().expect("the question's call");
    assert_eq!(call.tool_call_id.as_str(), "q1");
    assert_eq!(call.payload["question"], "Which repo?");
    assert_eq!(raised.data.answer_url, None);
    let wire = serde_json::to_value(raised).unwrap();
    assert_eq!(wire["type"], "question.raised");
    assert_eq!(wire["data"]["call"]["toolCallId"], "q1");

    // A refused compare-and-swap and a refused insert write nothing.
    let stored = store.load_run(&owned(run_id.as_str())).await.unwrap();
    let before = all_events(&store).await;
    let error = store
        .update_run_with_events(
            &stored.state,
            stored.version + 7,
            None,
            std::slice::from_ref(raised),
        )
        .await
        .unwrap_err();
    assert!(matches!(error, StoreError::Conflict { .. }), "{error:?}");
    let error = store
        .insert_run_with_events(&stored.state, None, std::slice::from_ref(raised))
        .await
        .unwrap_err();
    assert!(
        matches!(error, StoreError::AlreadyExists { .. }),
        "{error:?}"
    );
    assert_eq!(
        all_events(&store).await,
        before,
        "a refused write wrote events"
    );

    chunks_of(
        agent
            .resume_stream(json!("main"), &run_id, Some(&ToolCallId::new("q1")))
            .await
            .unwrap(),
    )
    .await;
    let events = events_of(&store, &run_id).await;
    assert_eq!(
        kinds(&events),
        ["question.raised", "question.answered", "approval.requested"],
        "{events:#?}"
    );
    assert_eq!(events[1].data.answer, Some(json!("main")));
    assert_eq!(
        events[2]
            .data
            .call
            .as_ref()
            .map(|call| call.tool_call_id.as_str()),
        Some("k1")
    );

    chunks_of(
        agent
            .approve_tool_call(&run_id, &ToolCallId::new("k1"))
            .await
            .unwrap(),
    )
    .await;
    let events = events_of(&store, &run_id).await;
    assert_eq!(
        kinds(&events),
        [
            "question.raised",
            "question.answered",
            "approval.requested",
            "approval.decided",
            "run.completed"
        ],
        "{events:#?}"
    );
    assert_eq!(events[3].data.approved, Some(true));
    assert_eq!(events[4].data.call, None);
    let ids: std::collections::HashSet<&str> =
        events.iter().map(|event| event.id.as_str()).collect();
    assert_eq!(ids.len(), events.len(), "event ids are unique");
    let seqs: Vec<u64> = all_events(&store)
        .await
        .iter()
        .map(|event| event.seq)
        .collect();
    assert!(seqs.windows(2).all(|pair| pair[0] < pair[1]), "{seqs:?}");
}

/// A cancel writes `run.cancelled` (not the calls it settled); a decline writes
/// `approval.decided` with `approved: false`.
pub(super) async fn issue34_cancel_and_decline_events(store: Arc<dyn RunStore>) {
    let agent = asking_agent(
        &store,
        &script(vec![
            json!({"toolCalls": [{"id": "k1", "name": "count", "args": {"label": "wipe"}}]}),
            json!({"toolCalls": [ask("q1", json!({"question": "Why?"}))]}),
        ]),
    );
    let stream = agent.stream("clean up");
    let run_id = stream.run_id().clone();
    chunks_of(stream).await;
    chunks_of(
        agent
            .decline_tool_call(&run_id, &ToolCallId::new("k1"), Some("no".into()))
            .await
            .unwrap(),
    )
    .await;
    agent.cancel_run(&run_id, None).await.unwrap();
    let events = events_of(&store, &run_id).await;
    assert_eq!(
        kinds(&events),
        [
            "approval.requested",
            "approval.decided",
            "question.raised",
            "run.cancelled"
        ],
        "{events:#?}"
    );
    assert_eq!(events[1].data.approved, Some(false));
    assert_eq!(events[3].data.resource_id, None);
    assert_eq!(
        store
            .load_run(&unowned(&run_id))
            .await
            .unwrap()
            .state
            .status,
        RunStatus::Cancelled
    );
}

/// Fan-out creates one delivery per endpoint and event however often it runs; concurrent
/// claims split the due deliveries; an attempt needs the claim; a retry is due at its time;
/// listings and replays are tenant-scoped.
pub(super) async fn issue34_deliveries_are_claimed_once_and_recorded(store: Arc<dyn RunStore>) {
    let agent = asking_agent(
        &store,
        &script(vec![
            json!({"toolCalls": [ask("q1", json!({"question": "Why?"}))]}),
        ]),
    );
    let options = RunOptions::new().resource(TENANT);
    chunks_of(agent.stream_with("hello", options)).await;
    chunks_of(agent.stream("other tenant")).await;
    let events = outbox_of(store.as_ref())
        .unwrap()
        .unfanned_events(100)
        .await
        .unwrap();
    assert_eq!(events.len(), 2, "{events:#?}");
    let routes: Vec<FanOut> = events
        .iter()
        .map(|event| FanOut::new(event.seq, vec!["a".into(), "b".into()]))
        .collect();
    let now = 1_000_000;
    outbox_of(store.as_ref())
        .unwrap()
        .fan_out(&routes, now)
        .await
        .unwrap();
    outbox_of(store.as_ref())
        .unwrap()
        .fan_out(&routes, now)
        .await
        .unwrap();
    assert!(
        outbox_of(store.as_ref())
            .unwrap()
            .unfanned_events(100)
            .await
            .unwrap()
            .is_empty()
    );
    let all = outbox_of(store.as_ref())
        .unwrap()
        .list_deliveries(&DeliveryFilter::new())
        .await
        .unwrap();
    assert_eq!(
        all.len(),
        4,
        "one delivery per endpoint and event: {all:#?}"
    );

    let (one, two) = (LeaseHolder::new("one"), LeaseHolder::new("two"));
    let claim =
        |holder: &LeaseHolder, at: u64| DeliveryClaim::new(holder.clone(), at, at + 60_000, 3);
    let (claim_one, claim_two) = (claim(&one, now), claim(&two, now));
    let (first, second) = futures::join!(
        outbox_of(store.as_ref())
            .unwrap()
            .claim_deliveries(&claim_one),
        outbox_of(store.as_ref())
            .unwrap()
            .claim_deliveries(&claim_two)
    );
    let (first, second) = (first.unwrap(), second.unwrap());
    assert_eq!(first.len() + second.len(), 4, "{first:#?} {second:#?}");
    assert!(
        first
            .iter()
            .all(|mine| second.iter().all(|theirs| theirs.id != mine.id))
    );
    assert!(
        outbox_of(store.as_ref())
            .unwrap()
            .claim_deliveries(&claim(&one, now))
            .await
            .unwrap()
            .is_empty()
    );

    let (holder, taken) = if first.is_empty() {
        (&two, &second)
    } else {
        (&one, &first)
    };
    let other = if first.is_empty() { &one } else { &two };
    let target = taken[0].clone();
    let attempt = DeliveryAttempt::new(now, Some(503), 12, Some("busy".into()));
    let error = outbox_of(store.as_ref())
        .unwrap()
        .record_attempt(target.id, other, &attempt, DeliveryNext::Delivered)
        .await
        .unwrap_err();
    assert!(
        matches!(error, StoreError::DeliveryNotHeld { .. }),
        "{error:?}"
    );
    outbox_of(store.as_ref())
        .unwrap()
        .record_attempt(
            target.id,
            holder,
            &attempt,
            DeliveryNext::RetryAt(now + 5_000),
        )
        .await
        .unwrap();
    // Due again only at its time; the other claims still hold until they expire.
    assert!(
        outbox_of(store.as_ref())
            .unwrap()
            .claim_deliveries(&claim(&one, now + 4_999))
            .await
            .unwrap()
            .is_empty()
    );
    let again = outbox_of(store.as_ref())
        .unwrap()
        .claim_deliveries(&claim(&one, now + 5_000))
        .await
        .unwrap();
    assert_eq!(
        again.iter().map(|delivery| delivery.id).collect::<Vec<_>>(),
        [target.id]
    );
    assert_eq!(again[0].attempts, std::slice::from_ref(&attempt));
    assert_eq!(again[0].event, target.event);
    let ok = DeliveryAttempt::new(now + 5_000, Some(200), 3, None);
    outbox_of(store.as_ref())
        .unwrap()
        .record_attempt(target.id, &one, &ok, DeliveryNext::Delivered)
        .await
        .unwrap();
    // Expired claims are taken over.
    let late = outbox_of(store.as_ref())
        .unwrap()
        .claim_deliveries(&claim(&one, now + 61_000))
        .await
        .unwrap();
    assert_eq!(late.len(), 3, "{late:#?}");

    let tenant = ResourceFilter::Is(ResourceId::new(TENANT));
    let mine = outbox_of(store.as_ref())
        .unwrap()
        .list_deliveries(&DeliveryFilter::new().resource(tenant.clone()))
        .await
        .unwrap();
    assert_eq!(mine.len(), 2);
    assert!(
        mine.iter()
            .all(|delivery| delivery.event.resource_id().map(ResourceId::as_str) == Some(TENANT))
    );
    assert!(mine[0].id > mine[1].id, "newest first");
    let delivered = outbox_of(store.as_ref())
        .unwrap()
        .list_deliveries(&DeliveryFilter::new().status(DeliveryStatus::Delivered))
        .await
        .unwrap();
    assert_eq!(delivered.len(), 1);
    assert_eq!(delivered[0].attempts, [attempt, ok]);
    let page = outbox_of(store.as_ref())
        .unwrap()
        .list_deliveries(&DeliveryFilter::new().limit(1).before(all[0].id))
        .await
        .unwrap();
    assert_eq!(page.len(), 1);
    assert!(page[0].id < all[0].id);

    // Replay: another tenant's delivery is not found and unchanged; one's own is due again.
    let foreign = all
        .iter()
        .find(|delivery| delivery.event.resource_id().is_none())
        .unwrap()
        .id;
    let error = outbox_of(store.as_ref())
        .unwrap()
        .replay_delivery(foreign, &tenant, now)
        .await
        .unwrap_err();
    assert!(
        matches!(error, StoreError::DeliveryNotFound { .. }),
        "{error:?}"
    );
    // The delivered one is whichever delivery the first claim took: of the tenant or not
    // (the two concurrent claims may run in either order), replayed in its own namespace.
    let own = ResourceFilter::exactly(delivered[0].event.resource_id().cloned());
    outbox_of(store.as_ref())
        .unwrap()
        .replay_delivery(delivered[0].id, &own, now + 70_000)
        .await
        .unwrap();
    let replayed = outbox_of(store.as_ref())
        .unwrap()
        .claim_deliveries(&claim(&two, now + 70_000))
        .await
        .unwrap();
    assert!(replayed.iter().any(
        |delivery| delivery.id == delivered[0].id && delivery.status == DeliveryStatus::Pending
    ));
    let kind = replayed[0].event.kind;
    assert_eq!(kind, RunEventKind::QuestionRaised);
}

/// Pruning deletes, oldest first and at most `limit` a call, the events fanned out before the
/// cutoff whose deliveries are all finished (delivered, failed, or none), with their
/// deliveries; events with a pending delivery, events fanned out later and events not fanned
/// out stay; new events never reuse a pruned sequence.
pub(super) async fn issue34_prune_keeps_pending_and_deletes_old_finished(store: Arc<dyn RunStore>) {
    let agent = asking_agent(
        &store,
        &script(vec![
            json!({"toolCalls": [ask("q1", json!({"question": "Why?"}))]}),
        ]),
    );
    for _ in 0..5 {
        chunks_of(agent.stream("hello")).await;
    }
    let events = outbox_of(store.as_ref())
        .unwrap()
        .unfanned_events(100)
        .await
        .unwrap();
    assert_eq!(events.len(), 5, "{events:#?}");
    let seqs: Vec<u64> = events.iter().map(|event| event.seq).collect();
    // Events 0 and 1: to nobody. 2: delivered to "a", failed to "b". 3: delivered to "a",
    // pending to "b". 4: fanned out late, delivered.
    let old = 1_000_000;
    let late = 5_000_000;
    let routes = vec![
        FanOut::new(seqs[0], vec![]),
        FanOut::new(seqs[1], vec![]),
        FanOut::new(seqs[2], vec!["a".into(), "b".into()]),
        FanOut::new(seqs[3], vec!["a".into(), "b".into()]),
    ];
    outbox_of(store.as_ref())
        .unwrap()
        .fan_out(&routes, old)
        .await
        .unwrap();
    outbox_of(store.as_ref())
        .unwrap()
        .fan_out(&[FanOut::new(seqs[4], vec!["a".into()])], late)
        .await
        .unwrap();
    let holder = LeaseHolder::new("pruner");
    let claimed = outbox_of(store.as_ref())
        .unwrap()
        .claim_deliveries(&DeliveryClaim::new(holder.clone(), late, late + 60_000, 10))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 5, "{claimed:#?}");
    for delivery in &claimed {
        let pending = delivery.event_seq == seqs[3] && delivery.endpoint == "b";
        let failed = delivery.event_seq == seqs[2] && delivery.endpoint == "b";
        let next = if pending {
            DeliveryNext::RetryAt(late + 1_000)
        } else if failed {
            DeliveryNext::Failed
        } else {
            DeliveryNext::Delivered
        };
        let attempt = DeliveryAttempt::new(late, Some(200), 1, None);
        outbox_of(store.as_ref())
            .unwrap()
            .record_attempt(delivery.id, &holder, &attempt, next)
            .await
            .unwrap();
    }
    chunks_of(agent.stream("not fanned out")).await;

    let cutoff = late;
    assert_eq!(
        outbox_of(store.as_ref())
            .unwrap()
            .prune_outbox(cutoff, 2)
            .await
            .unwrap(),
        2,
        "the limit"
    );
    let remaining =
        |events: Vec<StoredEvent>| -> Vec<u64> { events.iter().map(|event| event.seq).collect() };
    let left = remaining(all_events(&store).await);
    assert_eq!(
        left[..3],
        [seqs[2], seqs[3], seqs[4]],
        "oldest first: {left:?}"
    );
    assert_eq!(left.len(), 4, "the unfanned event stays: {left:?}");
    assert_eq!(
        outbox_of(store.as_ref())
            .unwrap()
            .prune_outbox(cutoff, 1000)
            .await
            .unwrap(),
        1
    );
    let left = remaining(all_events(&store).await);
    assert_eq!(left[..2], [seqs[3], seqs[4]], "{left:?}");
    assert_eq!(
        outbox_of(store.as_ref())
            .unwrap()
            .prune_outbox(cutoff, 1000)
            .await
            .unwrap(),
        0
    );
    let deliveries = outbox_of(store.as_ref())
        .unwrap()
        .list_deliveries(&DeliveryFilter::new())
        .await
        .unwrap();
    let mut kept: Vec<(u64, &str)> = deliveries
        .iter()
        .map(|delivery| (delivery.event_seq, delivery.endpoint.as_str()))
        .collect();
    kept.sort_unstable();
    assert_eq!(
        kept,
        [(seqs[3], "a"), (seqs[3], "b"), (seqs[4], "a")],
        "the pruned event's deliveries went with it, the pending one's stayed"
    );

    // Once the pending delivery finishes its event goes too; the late one when its time comes.
    let again = outbox_of(store.as_ref())
        .unwrap()
        .claim_deliveries(&DeliveryClaim::new(
            holder.clone(),
            late + 1_000,
            late + 60_000,
            10,
        ))
        .await
        .unwrap();
    assert_eq!(again.len(), 1, "{again:#?}");
    let attempt = DeliveryAttempt::new(late + 1_000, Some(200), 1, None);
    outbox_of(store.as_ref())
        .unwrap()
        .record_attempt(again[0].id, &holder, &attempt, DeliveryNext::Delivered)
        .await
        .unwrap();
    assert_eq!(
        outbox_of(store.as_ref())
            .unwrap()
            .prune_outbox(cutoff, 1000)
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        outbox_of(store.as_ref())
            .unwrap()
            .prune_outbox(late + 1, 1000)
            .await
            .unwrap(),
        1
    );
    let left = all_events(&store).await;
    assert_eq!(left.len(), 1, "only the unfanned event: {left:#?}");
    assert!(left[0].seq > seqs[4]);
    assert!(
        outbox_of(store.as_ref())
            .unwrap()
            .list_deliveries(&DeliveryFilter::new())
            .await
            .unwrap()
            .is_empty()
    );
    chunks_of(agent.stream("after pruning")).await;
    let newest = all_events(&store).await;
    assert!(
        newest.last().unwrap().seq > left[0].seq,
        "no sequence reused: {newest:#?}"
    );
}
