//! A running turn can be stopped (issue 31): `POST /api/runs/{runId}/cancel` through another
//! server on the same store stops a run whose tool is executing; the driving server's stream
//! ends with the `cancelled` error chunk, and the run is `cancelled` with one result per call.

use std::time::Duration;

use askloop_core::RunStatus;
use askloop_core::model::Message;
use axum::http::StatusCode;
use http_body_util::BodyExt;
use serde_json::json;
use tower::ServiceExt;

use crate::on_both_stores;
use crate::support::*;

on_both_stores!(
    issue31_cancel_stops_a_running_run_through_another_server,
    issue31_a_server_without_the_runs_agent_cancels_it
);

async fn issue31_cancel_stops_a_running_run_through_another_server(backend: Backend) {
    let place = Place::new(backend).await;
    let (store_a, store_b) = (place.open().await, place.open().await);
    let (server_a, hold) = server(&store_a, Vec::new());
    let (server_b, _) = server(&store_b, Vec::new());
    let (router_a, router_b) = (server_a.router(), server_b.router());
    let response = router_a
        .clone()
        .oneshot(request(
            "POST",
            "/api/agents/waiter/stream",
            Some(json!({"messages": "go", "runId": "held"})),
            None,
        ))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let client = tokio::spawn(async move {
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        frames(std::str::from_utf8(&bytes).unwrap())
    });
    // The `hold` call is journaled as running before its tool executes.
    eventually("the tool runs", || async {
        let stored = load(&store_b, "held").await;
        stored.state.status() == RunStatus::Running && stored.state.messages().len() > 1
    })
    .await;
    let (status, body) = call(&router_b, "POST", "/api/runs/held/cancel", None, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, json!({"runId": "held", "status": "cancelled"}));
    let chunks = tokio::time::timeout(Duration::from_secs(5), client)
        .await
        .expect("the driving server's stream ended within 5 s of the cancel")
        .unwrap();
    let last = chunks.last().unwrap();
    assert_eq!(last["type"], "error", "{chunks:?}");
    assert_eq!(last["payload"]["error"]["code"], "cancelled");
    assert!(!types(&chunks).contains(&"finish"));
    let stored = load(&store_a, "held").await.state;
    assert_eq!(stored.status(), RunStatus::Cancelled);
    let results: Vec<_> = stored
        .messages()
        .iter()
        .flat_map(|message| match message {
            Message::Tool { results } => results.clone(),
            _ => Vec::new(),
        })
        .collect();
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(results[0].tool_call_id.as_str(), "h1");
    assert!(results[0].is_error);
    // Released late, the tool's result is not recorded: the run stays as cancelled.
    hold.release.notify_one();
    let (_, run) = call(&router_a, "GET", "/api/runs/held", None, None).await;
    assert_eq!(run["status"], "cancelled");
    // A second cancel is refused: the run has ended.
    let (status, error) = call(&router_a, "POST", "/api/runs/held/cancel", None, None).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(error["code"], "not_cancellable");
    eventually("the driving server let the run go", || async {
        server_a.live_runs() == 0
    })
    .await;
}

/// A server that does not define the run's agent still cancels it (cancelling runs no tool and
/// calls no model); the driving server stops, and the thread takes a new turn.
async fn issue31_a_server_without_the_runs_agent_cancels_it(backend: Backend) {
    let place = Place::new(backend).await;
    let (store_a, store_b) = (place.open().await, place.open().await);
    let (server_a, _hold) = server(&store_a, Vec::new());
    let assistant = askloop_core::Agent::builder("assistant")
        .model(askloop_core::testing::ScriptedModel::from_json(ASK_SCRIPT).unwrap())
        .tool(askloop_core::AskUser::new())
        .shared_store(store_b.clone())
        .build()
        .unwrap();
    let server_b = askloop_server::Server::builder(
        std::sync::Arc::new(askloop_core::registry::AgentSet::new().with(assistant)),
        store_b.clone(),
    )
    .build();
    let (router_a, router_b) = (server_a.router(), server_b.router());
    let response = router_a
        .clone()
        .oneshot(request(
            "POST",
            "/api/agents/waiter/stream",
            Some(json!({"messages": "go", "runId": "elsewhere", "threadId": "t-else"})),
            None,
        ))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let client = tokio::spawn(async move {
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        frames(std::str::from_utf8(&bytes).unwrap())
    });
    eventually("the tool runs", || async {
        let stored = load(&store_b, "elsewhere").await;
        stored.state.status() == RunStatus::Running && stored.state.messages().len() > 1
    })
    .await;
    let (status, body) = call(&router_b, "POST", "/api/runs/elsewhere/cancel", None, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let chunks = tokio::time::timeout(Duration::from_secs(5), client)
        .await
        .expect("the driving server's stream ended within 5 s of the cancel")
        .unwrap();
    assert_eq!(
        chunks.last().unwrap()["payload"]["error"]["code"],
        "cancelled"
    );
    assert_eq!(
        load(&store_b, "elsewhere").await.state.status(),
        RunStatus::Cancelled
    );
}
