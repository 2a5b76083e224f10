//! Fork from a question over HTTP (issue 34), on both stores: `POST /api/runs/{runId}/fork`
//! makes a new run that goes on with the new answer, the original stays byte-for-byte as it
//! was, another tenant's run is 404, a refused fork creates nothing, and both `GET` routes show
//! the relation.

use askloop_core::store::{RunFilter, codec};
use askloop_server::ApiKey;
use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::on_both_stores;
use crate::support::*;

on_both_stores!(issue34_a_fork_over_http_goes_on_and_leaves_the_original);

async fn issue34_a_fork_over_http_goes_on_and_leaves_the_original(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    let (alice, bob) = (ApiKey::new_secret(), ApiKey::new_secret());
    let keys = vec![
        ApiKey::from_secret(&alice, "alice".into()),
        ApiKey::from_secret(&bob, "bob".into()),
    ];
    let (server, _) = server(&store, keys);
    let router = server.router();
    let (status, chunks, _) = stream(
        &router,
        "POST",
        "/api/agents/assistant/stream",
        Some(json!({"messages": "Summarize"})),
        Some(&alice),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let run_id = chunks[0]["runId"].as_str().unwrap().to_owned();
    let (status, chunks, _) = stream(
        &router,
        "POST",
        "/api/agents/assistant/resume-stream",
        Some(json!({"runId": run_id, "toolCallId": "c1", "resumeData": "main"})),
        Some(&alice),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(types(&chunks).last(), Some(&"finish"));
    let original = load(&store, &run_id).await;
    let before = (
        codec::encode_state(&original.state).unwrap(),
        original.version,
    );
    let count = || async { store.list_runs(&RunFilter::new()).await.unwrap().runs.len() };
    let runs_before = count().await;
    let path = format!("/api/runs/{run_id}/fork");

    let refusals = [
        (
            Some(&bob),
            json!({"toolCallId": "c1", "resumeData": "docs"}),
            StatusCode::NOT_FOUND,
            "run_not_found",
        ),
        (
            Some(&alice),
            json!({"toolCallId": "c1", "resumeData": 42}),
            StatusCode::BAD_REQUEST,
            "invalid_answer",
        ),
        (
            Some(&alice),
            json!({"toolCallId": "zz", "resumeData": "docs"}),
            StatusCode::BAD_REQUEST,
            "not_a_question",
        ),
    ];
    for (key, body, expected, code) in refusals {
        let (status, error) = call(
            &router,
            "POST",
            &path,
            Some(body.clone()),
            key.map(String::as_str),
        )
        .await;
        assert_eq!(status, expected, "{body}: {error}");
        assert_eq!(error["code"], code, "{body}: {error}");
    }
    assert_eq!(count().await, runs_before, "a refused fork creates nothing");

    let (status, chunks, error) = stream(
        &router,
        "POST",
        &path,
        Some(json!({"toolCallId": "c1", "resumeData": "docs"})),
        Some(&alice),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{error}");
    assert_eq!(types(&chunks).last(), Some(&"finish"), "{chunks:?}");
    let fork_id = chunks[0]["runId"].as_str().unwrap().to_owned();
    assert_ne!(fork_id, run_id);
    assert!(
        chunks
            .iter()
            .all(|chunk| chunk["runId"] == fork_id.as_str())
    );

    let after = load(&store, &run_id).await;
    assert_eq!(
        (codec::encode_state(&after.state).unwrap(), after.version),
        before,
        "the original is untouched"
    );
    assert_eq!(count().await, runs_before + 1);

    let (status, detail) = call(
        &router,
        "GET",
        &format!("/api/runs/{fork_id}"),
        None,
        Some(&alice),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    assert_eq!(
        detail["forkedFrom"],
        json!({"runId": run_id, "toolCallId": "c1"})
    );
    assert_eq!(detail["status"], "completed");
    let answers: Vec<&Value> = detail["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|message| message["role"] == "tool")
        .flat_map(|message| message["results"].as_array().unwrap())
        .map(|result| &result["answer"])
        .collect();
    assert_eq!(
        answers,
        [&json!("docs")],
        "the fork's history holds the new answer only"
    );
    let questions = detail["questions"].as_array().unwrap();
    assert_eq!(questions.len(), 1, "{detail}");
    assert_eq!(questions[0]["toolCallId"], "c1");
    assert_eq!(questions[0]["payload"]["question"], "Which repo?");
    let (status, detail) = call(
        &router,
        "GET",
        &format!("/api/runs/{run_id}"),
        None,
        Some(&alice),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(detail.get("forkedFrom").is_none(), "{detail}");

    let listing = format!("/api/runs?forkedFrom={run_id}");
    let (status, page) = call(&router, "GET", &listing, None, Some(&alice)).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let listed: Vec<&Value> = page["runs"].as_array().unwrap().iter().collect();
    assert_eq!(listed.len(), 1, "{page}");
    assert_eq!(listed[0]["runId"], fork_id.as_str());
    assert_eq!(listed[0]["forkedFrom"]["runId"], run_id.as_str());
    let (status, page) = call(&router, "GET", &listing, None, Some(&bob)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(page["runs"], json!([]), "another tenant sees no fork");
}
