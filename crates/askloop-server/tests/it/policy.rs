//! Who may answer over HTTP (issue 34): keys with labels and roles act as actors; an agent's
//! approver policy refuses the run's starter (403 `not_permitted`, `self_approval`), a key
//! without the role (`missing_role`) and a second vote of one key (`already_approved`); a
//! quorum of two records the first approval (the run stays suspended, the stream and the run
//! say 1 of 2) and runs the tool once at the second; the run's JSON says who decided, when,
//! from which route.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use askloop_core::registry::AgentSet;
use askloop_core::testing::ScriptedModel;
use askloop_core::testing::conformance::support::Counter;
use askloop_core::{Agent, ApproverPolicy, RunStatus, RunStore};
use askloop_server::{ApiKey, Server};
use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::on_both_stores;
use crate::support::*;

on_both_stores!(
    issue34_approver_policy_over_http,
    issue34_a_quorum_through_the_chat_route,
    issue34_answer_links_act_with_the_role_they_were_issued_for,
    issue34_an_open_servers_links_are_its_one_party,
    issue34_an_edited_vote_shows_its_arguments_over_http,
);

const SCRIPT: &str = r#"{"steps":[
  {"toolCalls":[{"id":"d1","name":"count","args":{"label":"deploy"}}]},
  {"text":"Deployed."}]}"#;

fn guarded_server(store: &Arc<dyn RunStore>, counter: &Counter, keys: Vec<ApiKey>) -> Server {
    let agent = Agent::builder("guarded")
        .model(ScriptedModel::from_json(SCRIPT).unwrap())
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
        .unwrap();
    Server::builder(Arc::new(AgentSet::new().with(agent)), store.clone())
        .keys(keys)
        .build()
}

async fn approve(
    router: &axum::Router,
    run_id: &str,
    key: &str,
) -> (StatusCode, Vec<Value>, Value) {
    stream(
        router,
        "POST",
        "/api/agents/guarded/approve-tool-call",
        Some(json!({"runId": run_id, "toolCallId": "d1"})),
        Some(key),
    )
    .await
}

async fn issue34_approver_policy_over_http(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    let counter = Counter::default();
    let secrets: Vec<String> = (0..4).map(|_| ApiKey::new_secret()).collect();
    let key = |index: usize, label: &str, roles: &[&str]| {
        ApiKey::from_secret(&secrets[index], "team".into())
            .label(label)
            .roles(roles.iter().copied())
    };
    let server = guarded_server(
        &store,
        &counter,
        vec![
            key(0, "alice", &["ops"]),
            key(1, "bob", &["ops"]),
            key(2, "carol", &["ops", "admin"]),
            key(3, "dave", &[]),
        ],
    );
    let router = server.router();
    let (alice, bob, carol, dave) = (&secrets[0], &secrets[1], &secrets[2], &secrets[3]);

    let (status, chunks, _) = stream(
        &router,
        "POST",
        "/api/agents/guarded/stream",
        Some(json!({"messages": "deploy"})),
        Some(alice),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let run_id = chunks[0]["runId"].as_str().unwrap().to_owned();
    assert_eq!(types(&chunks).last(), Some(&"tool-call-approval"));
    assert_eq!(chunks.last().unwrap()["payload"]["quorum"], 2);
    let before = load(&store, &run_id).await;

    // The starter may not approve its own run's call.
    let (status, _, body) = approve(&router, &run_id, alice).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["code"], "not_permitted");
    assert_eq!(body["details"]["reason"], "self_approval");
    assert_eq!(body["details"]["actor"], "alice");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("alice started this run"),
        "{body}"
    );
    // Nor a key without the role.
    let (status, _, body) = approve(&router, &run_id, dave).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(body["details"]["reason"], "missing_role");
    assert_eq!(body["details"]["requiredRoles"], json!(["ops"]));
    assert_eq!(
        load(&store, &run_id).await,
        before,
        "refusals change nothing"
    );

    // The first of two approvals is recorded; the run still waits.
    let (status, chunks, _) = approve(&router, &run_id, bob).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(types(&chunks), ["tool-call-approval"], "{chunks:?}");
    assert_eq!(chunks[0]["payload"]["approvals"][0]["by"], "bob");
    assert_eq!(chunks[0]["payload"]["quorum"], 2);
    assert_eq!(counter.executions.load(Ordering::SeqCst), 0);
    let (status, detail) = call(
        &router,
        "GET",
        &format!("/api/runs/{run_id}"),
        None,
        Some(bob),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(detail["status"], "suspended");
    assert_eq!(detail["startedBy"]["id"], "alice");
    let waiting = &detail["pendingToolCalls"][0];
    assert_eq!(waiting["quorum"], 2);
    assert_eq!(waiting["approvals"][0]["by"], "bob");
    assert!(waiting["approvals"][0]["at"].is_string());

    // The same approver again is refused.
    let (status, _, body) = approve(&router, &run_id, bob).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(body["details"]["reason"], "already_approved");

    // A second, distinct approver: the tool runs once.
    let (status, chunks, _) = approve(&router, &run_id, carol).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(types(&chunks).last(), Some(&"finish"), "{chunks:?}");
    assert_eq!(counter.executions.load(Ordering::SeqCst), 1);

    // Who decided, when, from where.
    let (_, detail) = call(
        &router,
        "GET",
        &format!("/api/runs/{run_id}"),
        None,
        Some(carol),
    )
    .await;
    let decisions = detail["decisions"].as_array().unwrap();
    assert_eq!(decisions.len(), 2, "{detail}");
    for (decision, who) in decisions.iter().zip(["bob", "carol"]) {
        assert_eq!(decision["action"], "approve");
        assert_eq!(decision["by"], who);
        assert_eq!(decision["toolCallId"], "d1");
        assert_eq!(decision["resource"], "team");
        assert_eq!(
            decision["route"],
            "POST /api/agents/{agentId}/approve-tool-call"
        );
        assert!(decision["at"].as_str().unwrap().ends_with('Z'));
    }
    assert_eq!(decisions[1]["roles"], json!(["ops", "admin"]));
    // The same records in the stored messages' audit.
    let audit: Vec<Value> = detail["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|message| message["role"] == "tool")
        .flat_map(|message| message["results"][0]["audit"].as_array().cloned().unwrap())
        .collect();
    assert_eq!(audit[0]["by"], "bob");
    assert_eq!(
        audit[1]["route"],
        "POST /api/agents/{agentId}/approve-tool-call"
    );
}

/// A vote that edited the arguments: the run's waiting call lists it with the arguments it
/// approved (`approvals[0].args`, beside the model's `args`), and a plain approval after it is
/// refused 403 `args_differ` with a message naming them.
async fn issue34_an_edited_vote_shows_its_arguments_over_http(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    let counter = Counter::default();
    let secrets: Vec<String> = (0..3).map(|_| ApiKey::new_secret()).collect();
    let keys = ["alice", "bob", "carol"]
        .iter()
        .zip(&secrets)
        .map(|(label, secret)| {
            ApiKey::from_secret(secret, "team".into())
                .label(*label)
                .roles(["ops"])
        })
        .collect();
    let router = guarded_server(&store, &counter, keys).router();
    let (alice, bob, carol) = (&secrets[0], &secrets[1], &secrets[2]);
    let (_, chunks, _) = stream(
        &router,
        "POST",
        "/api/agents/guarded/stream",
        Some(json!({"messages": "deploy"})),
        Some(alice),
    )
    .await;
    let run_id = chunks[0]["runId"].as_str().unwrap().to_owned();
    let edited = json!({"label": "staging"});
    let (status, chunks, body) = stream(
        &router,
        "POST",
        "/api/agents/guarded/approve-tool-call",
        Some(json!({"runId": run_id, "toolCallId": "d1", "args": edited})),
        Some(bob),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(chunks[0]["payload"]["approvals"][0]["args"], edited);
    let (_, detail) = call(
        &router,
        "GET",
        &format!("/api/runs/{run_id}"),
        None,
        Some(bob),
    )
    .await;
    let waiting = &detail["pendingToolCalls"][0];
    assert_eq!(waiting["args"], json!({"label": "deploy"}), "the model's");
    assert_eq!(waiting["approvals"][0]["by"], "bob");
    assert_eq!(waiting["approvals"][0]["args"], edited);

    let (status, _, body) = approve(&router, &run_id, carol).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["details"]["reason"], "args_differ");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains(r#"approved other arguments: {"label":"staging"}"#),
        "{body}"
    );
    assert_eq!(counter.executions.load(Ordering::SeqCst), 0);
}

/// The AI SDK chat route: an `approval-responded` part of a call that needs two approvers is a
/// vote (200, the run still waits, listing it), the same key again is refused (in the stream, as
/// the chat route says refusals), a second key's approval runs the tool.
async fn issue34_a_quorum_through_the_chat_route(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    let counter = Counter::default();
    let secrets: Vec<String> = (0..3).map(|_| ApiKey::new_secret()).collect();
    let keys = ["alice", "bob", "carol"]
        .iter()
        .zip(&secrets)
        .map(|(label, secret)| {
            ApiKey::from_secret(secret, "team".into())
                .label(*label)
                .roles(["ops"])
        })
        .collect();
    let router = guarded_server(&store, &counter, keys).router();
    let chat = |parts: Value| {
        json!({"id": "c-quorum", "trigger": "submit-message", "messages": [
            {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "deploy"}]},
            {"id": "a1", "role": "assistant", "parts": parts}]})
    };
    let start = json!({"id": "c-quorum", "trigger": "submit-message",
        "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "deploy"}]}]});
    let (status, _, error) = stream(
        &router,
        "POST",
        "/api/agents/guarded/chat",
        Some(start),
        Some(&secrets[0]),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{error}");
    let approve = json!([{"type": "tool-count", "toolCallId": "d1", "state": "approval-responded",
        "input": {"label": "deploy"}, "approval": {"id": "d1", "approved": true}}]);
    let (status, _, error) = stream(
        &router,
        "POST",
        "/api/agents/guarded/chat",
        Some(chat(approve.clone())),
        Some(&secrets[1]),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{error}");
    let (_, listed) = call(
        &router,
        "GET",
        "/api/runs?threadId=c-quorum",
        None,
        Some(&secrets[1]),
    )
    .await;
    let run = &listed["runs"][0];
    assert_eq!(run["status"], "suspended", "{run}");
    assert_eq!(run["pendingToolCalls"][0]["approvals"][0]["by"], "bob");
    assert_eq!(counter.executions.load(Ordering::SeqCst), 0);

    let (status, chunks, error) = stream(
        &router,
        "POST",
        "/api/agents/guarded/chat",
        Some(chat(approve.clone())),
        Some(&secrets[1]),
    )
    .await;
    // The chat route says a refusal in its stream, as for every refusal of an answer: a
    // `data-askloop-rejection` part and an `error` chunk.
    assert_eq!(status, StatusCode::OK, "{error}");
    let rejection = chunks
        .iter()
        .find(|chunk| chunk["type"] == "data-askloop-rejection")
        .unwrap_or_else(|| panic!("{chunks:?}"));
    assert!(
        rejection["data"]["message"]
            .as_str()
            .unwrap()
            .contains("bob already approved this call"),
        "{rejection}"
    );

    let (status, _, error) = stream(
        &router,
        "POST",
        "/api/agents/guarded/chat",
        Some(chat(approve)),
        Some(&secrets[2]),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{error}");
    let run_id = run["runId"].as_str().unwrap().to_owned();
    eventually("the run completes", || {
        let store = store.clone();
        let run_id = run_id.clone();
        async move { status_of(&store, &run_id).await == askloop_core::RunStatus::Completed }
    })
    .await;
    assert_eq!(counter.executions.load(Ordering::SeqCst), 1);
}

/// Answer links under an approver policy: a key may issue a link only for a role it holds; a
/// link acts as its issuer, with the role it was issued for only. A link without the role is
/// refused (403, the link still works); the starter's own link is refused as self-approval
/// (and still works); two links of one issuer are one approver (the second is refused
/// `already_approved`); a second, distinct issuer completes the quorum. The audit shows the
/// issuer and the link's route.
async fn issue34_answer_links_act_with_the_role_they_were_issued_for(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    let counter = Counter::default();
    let secrets: Vec<String> = (0..4).map(|_| ApiKey::new_secret()).collect();
    let key = |index: usize, label: &str, roles: &[&str]| {
        ApiKey::from_secret(&secrets[index], "team".into())
            .label(label)
            .roles(roles.iter().copied())
    };
    let server = guarded_server(
        &store,
        &counter,
        vec![
            key(0, "alice", &["ops"]),
            key(1, "bob", &["ops"]),
            key(2, "dave", &[]),
            key(3, "carol", &["ops"]),
        ],
    );
    let router = server.router();
    let (alice, bob, dave, carol) = (&secrets[0], &secrets[1], &secrets[2], &secrets[3]);
    let (_, chunks, _) = stream(
        &router,
        "POST",
        "/api/agents/guarded/stream",
        Some(json!({"messages": "deploy"})),
        Some(alice),
    )
    .await;
    let run_id = chunks[0]["runId"].as_str().unwrap().to_owned();
    let link = format!("/api/runs/{run_id}/calls/d1/link");

    // dave holds no role: he cannot vouch for `ops`.
    let (status, body) = call(
        &router,
        "POST",
        &link,
        Some(json!({"role": "ops"})),
        Some(dave),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["code"], "not_permitted");

    // A link without a role is refused by the policy, and still works afterwards.
    let (status, plain) = call(&router, "POST", &link, None, Some(alice)).await;
    assert_eq!(status, StatusCode::CREATED, "{plain}");
    let plain = plain["path"].as_str().unwrap().to_owned();
    let (status, body) = call(
        &router,
        "POST",
        &plain,
        Some(json!({"approved": true})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["details"]["reason"], "missing_role");
    let (status, _) = call(&router, "GET", &plain, None, None).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "a refused answer leaves the link working"
    );

    // Links issued by `who` for `ops`: their paths.
    let ops_link = async |who: &str| {
        let (status, body) = call(
            &router,
            "POST",
            &link,
            Some(json!({"role": "ops"})),
            Some(who),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        body["path"].as_str().unwrap().to_owned()
    };
    let approve_through =
        async |path: &str| call(&router, "POST", path, Some(json!({"approved": true})), None).await;

    // A link for `ops` issued by the starter acts as alice: a self-approval, refused, and the
    // link still works (twice over: neither counts).
    for _ in 0..2 {
        let own = ops_link(alice).await;
        let (status, body) = approve_through(&own).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
        assert_eq!(body["code"], "not_permitted");
        assert_eq!(body["details"]["reason"], "self_approval");
        assert_eq!(body["details"]["actor"], "alice");
        let (status, _) = call(&router, "GET", &own, None, None).await;
        assert_eq!(
            status,
            StatusCode::OK,
            "a refused answer leaves the link working"
        );
    }
    assert_eq!(counter.executions.load(Ordering::SeqCst), 0);

    // bob's link votes as bob; bob's second link is bob again.
    let (first, second) = (ops_link(bob).await, ops_link(bob).await);
    let (status, body) = approve_through(&first).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(counter.executions.load(Ordering::SeqCst), 0, "1 of 2");
    let (status, body) = approve_through(&second).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["details"]["reason"], "already_approved");
    assert_eq!(body["details"]["actor"], "bob");
    // Nor does bob's key count again once his link has.
    let (status, _, body) = approve(&router, &run_id, bob).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["details"]["reason"], "already_approved");
    assert_eq!(counter.executions.load(Ordering::SeqCst), 0);

    // A distinct issuer's link completes the quorum.
    let carols = ops_link(carol).await;
    let (status, body) = approve_through(&carols).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    eventually("the run completes", || async {
        status_of(&store, &run_id).await == RunStatus::Completed
    })
    .await;
    assert_eq!(counter.executions.load(Ordering::SeqCst), 1);
    let (_, detail) = call(
        &router,
        "GET",
        &format!("/api/runs/{run_id}"),
        None,
        Some(bob),
    )
    .await;
    let decisions = detail["decisions"].as_array().unwrap();
    assert_eq!(decisions.len(), 2, "{detail}");
    for (decision, who) in decisions.iter().zip(["bob", "carol"]) {
        assert_eq!(decision["by"], who, "{detail}");
        assert_eq!(decision["resource"], "team", "{detail}");
        assert_eq!(decision["roles"], json!(["ops"]), "only the link's role");
        let route = decision["route"].as_str().unwrap();
        assert!(
            route.starts_with("POST /answer/{token} (link ") && route.contains("link"),
            "{detail}"
        );
    }
}

/// On a server without keys every caller is `web`, the run's starter included: links made
/// there act as `web` too, so under `self_approval = false` they are refused, however many.
async fn issue34_an_open_servers_links_are_its_one_party(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    let counter = Counter::default();
    let agent = Agent::builder("guarded")
        .model(ScriptedModel::from_json(SCRIPT).unwrap())
        .tool(counter.clone())
        .require_approval_for("count")
        .approvers(ApproverPolicy::new().self_approval(false).quorum(2))
        .shared_store(store.clone())
        .build()
        .unwrap();
    let server = Server::builder(Arc::new(AgentSet::new().with(agent)), store.clone()).build();
    let router = server.router();
    let (status, chunks, _) = stream(
        &router,
        "POST",
        "/api/agents/guarded/stream",
        Some(json!({"messages": "deploy"})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let run_id = chunks[0]["runId"].as_str().unwrap().to_owned();
    let before = load(&store, &run_id).await;
    for _ in 0..2 {
        let (status, made) = call(
            &router,
            "POST",
            &format!("/api/runs/{run_id}/calls/d1/link"),
            None,
            None,
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{made}");
        let path = made["path"].as_str().unwrap();
        let (status, body) =
            call(&router, "POST", path, Some(json!({"approved": true})), None).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
        assert_eq!(body["details"]["reason"], "self_approval");
        assert_eq!(body["details"]["actor"], "web");
    }
    assert_eq!(
        load(&store, &run_id).await,
        before,
        "refusals change nothing"
    );
    assert_eq!(counter.executions.load(Ordering::SeqCst), 0);
}
