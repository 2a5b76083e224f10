//! Who answered, as the audit records it (issue 33): the caller's resource with a key, `web`
//! on an open server (the page's person, a script), never nothing.

use askloop_server::ApiKey;
use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::on_both_stores;
use crate::support::*;

on_both_stores!(issue33_an_answer_over_http_records_who_answered);

/// The `by` of the audit records of the run's tool results.
async fn answered_by(router: &axum::Router, run_id: &str, key: Option<&str>) -> Vec<Value> {
    let (status, detail) = call(router, "GET", &format!("/api/runs/{run_id}"), None, key).await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    detail["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|message| message["role"] == "tool")
        .flat_map(|message| message["results"].as_array().cloned().unwrap_or_default())
        .flat_map(|result| result["audit"].as_array().cloned().unwrap_or_default())
        .map(|record| record["by"].clone())
        .collect()
}

/// Starts the `assistant` (it asks which repo) and answers it over the resume-stream route.
async fn ask_and_answer(router: &axum::Router, key: Option<&str>) -> String {
    let body = json!({"messages": "Summarize my project"});
    let (status, chunks, _) = stream(
        router,
        "POST",
        "/api/agents/assistant/stream",
        Some(body),
        key,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let run_id = chunks[0]["runId"].as_str().unwrap().to_owned();
    let answer = json!({"runId": run_id, "toolCallId": "c1", "resumeData": "main"});
    let (status, chunks, _) = stream(
        router,
        "POST",
        "/api/agents/assistant/resume-stream",
        Some(answer),
        key,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(types(&chunks).last(), Some(&"finish"), "{chunks:?}");
    run_id
}

async fn issue33_an_answer_over_http_records_who_answered(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;

    // An open server: the answer is the page's or a script's, recorded as `web`.
    let (open, _hold) = server(&store, Vec::new());
    let router = open.router();
    let run_id = ask_and_answer(&router, None).await;
    assert_eq!(
        answered_by(&router, &run_id, None).await,
        vec![json!("web")]
    );

    // With keys: the key's resource.
    let secret = ApiKey::new_secret();
    let (keyed, _hold) = server(&store, vec![ApiKey::from_secret(&secret, "alice".into())]);
    let router = keyed.router();
    let run_id = ask_and_answer(&router, Some(&secret)).await;
    assert_eq!(
        answered_by(&router, &run_id, Some(&secret)).await,
        vec![json!("alice")]
    );
}
