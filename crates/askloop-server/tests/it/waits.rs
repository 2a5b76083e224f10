//! Deadlines over HTTP (issue 31): an approval carries its deadline, and an answer, approval or
//! decline after a call's deadline is 410 `expired` on every route that answers calls, before
//! and after the sweep.

use std::sync::Arc;
use std::time::Duration;

use askloop_core::registry::AgentSet;
use askloop_core::testing::ScriptedModel;
use askloop_core::testing::conformance::support::Counter;
use askloop_core::{Agent, AskUser, RunStatus, RunStore};
use askloop_server::Server;
use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::on_both_stores;
use crate::support::*;

on_both_stores!(issue31_a_response_after_the_deadline_is_410_expired);

/// `files`: a `count` call whose approval expires as soon as it is asked; `asker`: a question
/// that does too.
fn expiring_server(store: &Arc<dyn RunStore>) -> Server {
    let files = Agent::builder("files")
        .model(
            ScriptedModel::from_json(
                r#"{"steps":[
                  {"toolCalls":[{"id":"w1","name":"count","args":{"label":"write"}}]},
                  {"text":"Nobody decided."}]}"#,
            )
            .unwrap(),
        )
        .tool(Counter::default())
        .require_approval_for("count")
        .approval_timeout(Duration::ZERO)
        .shared_store(store.clone())
        .build()
        .unwrap();
    let asker = Agent::builder("asker")
        .model(ScriptedModel::from_json(ASK_SCRIPT).unwrap())
        .tool(AskUser::new().timeout(Duration::ZERO))
        .shared_store(store.clone())
        .build()
        .unwrap();
    Server::builder(
        Arc::new(AgentSet::new().with(files).with(asker)),
        store.clone(),
    )
    .build()
}

/// Asserts a 410 `expired` body for call `tool_call_id`, expired at `expires_at`.
fn assert_expired(status: StatusCode, body: &Value, tool_call_id: &str, expires_at: &Value) {
    assert_eq!(status, StatusCode::GONE, "{body}");
    assert_eq!(body["code"], "expired", "{body}");
    assert_eq!(body["details"]["toolCallId"], tool_call_id, "{body}");
    assert_eq!(&body["details"]["expiredAt"], expires_at, "{body}");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("expired at {}", expires_at.as_str().unwrap())),
        "{message}"
    );
}

async fn issue31_a_response_after_the_deadline_is_410_expired(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    let server = expiring_server(&store);
    let router = server.router();

    // The approval announces its deadline, and the runs API lists it.
    let (status, chunks, _) = stream(
        &router,
        "POST",
        "/api/agents/files/stream",
        Some(json!({"messages": "write it"})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let approval = chunks.last().unwrap();
    assert_eq!(approval["type"], "tool-call-approval");
    let expires_at = approval["payload"]["expiresAt"].clone();
    assert!(expires_at.is_string(), "{approval}");
    let run_id = approval["runId"].as_str().unwrap().to_owned();
    let (status, run) = call(&router, "GET", &format!("/api/runs/{run_id}"), None, None).await;
    assert_eq!(status, StatusCode::OK);
    let pending = &run["pendingToolCalls"][0];
    assert_eq!(pending["kind"], "approval", "{run}");
    assert_eq!(pending["expiresAt"], expires_at, "{run}");

    // Before the sweep: every route that decides says it expired.
    let decide = |path: &'static str, body: Value| {
        let router = router.clone();
        async move {
            let (status, _, error) = stream(&router, "POST", path, Some(body), None).await;
            (status, error)
        }
    };
    let approve = json!({"runId": run_id, "toolCallId": "w1"});
    let (status, error) = decide("/api/agents/files/approve-tool-call", approve.clone()).await;
    assert_expired(status, &error, "w1", &expires_at);
    let (status, error) = decide(
        "/api/agents/files/decline-tool-call",
        json!({"runId": run_id, "toolCallId": "w1", "reason": "late"}),
    )
    .await;
    assert_expired(status, &error, "w1", &expires_at);
    let responses = format!("/api/runs/{run_id}/responses");
    let (status, _, error) = stream(
        &router,
        "POST",
        &responses,
        Some(json!({"responses": [{"toolCallId": "w1", "approved": true}]})),
        None,
    )
    .await;
    assert_expired(status, &error, "w1", &expires_at);
    assert_eq!(status_of(&store, &run_id).await, RunStatus::Suspended);

    // The sweep expires it; the run goes on to its end.
    server.sweep_once().await;
    eventually("the expired run completes", || async {
        status_of(&store, &run_id).await == RunStatus::Completed
    })
    .await;
    let (status, error) = decide("/api/agents/files/approve-tool-call", approve).await;
    assert_expired(status, &error, "w1", &expires_at);

    // A question's late answer, through resume-stream, likewise.
    let (status, chunks, _) = stream(
        &router,
        "POST",
        "/api/agents/asker/stream",
        Some(json!({"messages": "summarize"})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let question = chunks.last().unwrap();
    assert_eq!(question["type"], "tool-call-suspended");
    let asked = question["runId"].as_str().unwrap().to_owned();
    let expires_at = question["payload"]["suspendPayload"]["expiresAt"].clone();
    let (status, _, error) = stream(
        &router,
        "POST",
        "/api/agents/asker/resume-stream",
        Some(json!({"runId": asked, "toolCallId": "c1", "resumeData": "main"})),
        None,
    )
    .await;
    assert_expired(status, &error, "c1", &expires_at);

    // The OpenAPI document says so for each of these routes.
    let (status, document) = call(&router, "GET", "/openapi.json", None, None).await;
    assert_eq!(status, StatusCode::OK);
    for path in [
        "/api/agents/{agentId}/resume-stream",
        "/api/agents/{agentId}/approve-tool-call",
        "/api/agents/{agentId}/decline-tool-call",
        "/api/runs/{runId}/responses",
    ] {
        let description = &document["paths"][path]["post"]["responses"]["410"]["description"];
        assert!(
            description
                .as_str()
                .is_some_and(|text| text.contains("expired")),
            "{path}: {description}"
        );
    }
}
