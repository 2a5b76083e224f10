//! One rule for repeats (issue 33): the answer a call already has, given again over HTTP — as
//! it was, by the option's number or in another case — is a harmless 200 with a note that
//! resumes nothing; a different answer stays 409 `already_answered`. On both routes that
//! answer (`resume-stream` and the batch `responses`).

use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::on_both_stores;
use crate::support::*;

on_both_stores!(an_identical_repeat_is_a_harmless_note_and_another_answer_409);

async fn an_identical_repeat_is_a_harmless_note_and_another_answer_409(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    let (server, _) = server(&store, Vec::new());
    let router = server.router();
    let (status, chunks, _) = stream(
        &router,
        "POST",
        "/api/agents/assistant/stream",
        Some(json!({"messages": "Summarize"})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let run_id = chunks[0]["runId"].as_str().unwrap().to_owned();
    let resume = |data: Value| json!({"runId": run_id, "toolCallId": "c1", "resumeData": data});
    let (status, chunks, _) = stream(
        &router,
        "POST",
        "/api/agents/assistant/resume-stream",
        Some(resume(json!("main"))),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(types(&chunks).last(), Some(&"finish"));
    let answered = load(&store, &run_id).await;

    // The same answer: as it was, by the option's number, in another case; on both routes.
    let repeats = [json!("main"), json!("1"), json!("MAIN"), json!(" Main ")];
    for repeat in &repeats {
        let (status, note) = call(
            &router,
            "POST",
            "/api/agents/assistant/resume-stream",
            Some(resume(repeat.clone())),
            None,
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{repeat}: {note}");
        assert_eq!(note["runId"], run_id.as_str());
        assert_eq!(note["toolCallIds"], json!(["c1"]));
        assert_eq!(note["status"], "completed");
        let text = note["note"].as_str().unwrap();
        assert!(text.contains("already answered with this answer"), "{text}");
        let (status, note) = call(
            &router,
            "POST",
            &format!("/api/runs/{run_id}/responses"),
            Some(json!({"responses": [{"toolCallId": "c1", "answer": repeat}]})),
            None,
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{repeat}: {note}");
        assert_eq!(note["toolCallIds"], json!(["c1"]));
    }
    // Nothing was resumed again: the run is as it was after the answer.
    let after = load(&store, &run_id).await;
    assert_eq!(after.version, answered.version);
    assert_eq!(
        after.state.messages().len(),
        answered.state.messages().len()
    );

    // A different answer, by label or by number, stays refused.
    for other in [json!("docs"), json!("2")] {
        let (status, error) = call(
            &router,
            "POST",
            "/api/agents/assistant/resume-stream",
            Some(resume(other.clone())),
            None,
        )
        .await;
        assert_eq!(status, StatusCode::CONFLICT, "{other}: {error}");
        assert_eq!(error["code"], "already_answered");
        let (status, error) = call(
            &router,
            "POST",
            &format!("/api/runs/{run_id}/responses"),
            Some(json!({"responses": [{"toolCallId": "c1", "answer": other}]})),
            None,
        )
        .await;
        assert_eq!(status, StatusCode::CONFLICT, "{other}: {error}");
        assert_eq!(error["code"], "already_answered");
    }
}

on_both_stores!(own_words_repeated_as_a_plain_string_are_the_same_answer);

/// Own words recorded as `{"other": "…"}`, repeated as the plain string they hold (or again as
/// own words): the harmless note, not 409; other words stay refused.
async fn own_words_repeated_as_a_plain_string_are_the_same_answer(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    // The assistant, its question taking the person's own words.
    let assistant = askloop_core::Agent::builder("assistant")
        .model(askloop_core::testing::ScriptedModel::from_json(ASK_SCRIPT).unwrap())
        .tool(askloop_core::AskUser::new().allow_other(true))
        .shared_store(store.clone())
        .build()
        .unwrap();
    let agents = askloop_core::registry::AgentSet::new().with(assistant);
    let server =
        askloop_server::Server::builder(std::sync::Arc::new(agents), store.clone()).build();
    let router = server.router();
    let (status, chunks, _) = stream(
        &router,
        "POST",
        "/api/agents/assistant/stream",
        Some(json!({"messages": "Summarize"})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let run_id = chunks[0]["runId"].as_str().unwrap().to_owned();
    let resume = |data: Value| json!({"runId": run_id, "toolCallId": "c1", "resumeData": data});
    let (status, chunks, _) = stream(
        &router,
        "POST",
        "/api/agents/assistant/resume-stream",
        Some(resume(json!({"other": "Porto, slowly"}))),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{chunks:?}");
    assert_eq!(types(&chunks).last(), Some(&"finish"));
    for repeat in [
        json!("Porto, slowly"),
        json!(" Porto, slowly "),
        json!({"other": "Porto, slowly"}),
    ] {
        // (each repeat of the own words recorded by the first answer)
        let (status, note) = call(
            &router,
            "POST",
            "/api/agents/assistant/resume-stream",
            Some(resume(repeat.clone())),
            None,
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{repeat}: {note}");
        let text = note["note"].as_str().unwrap();
        assert!(text.contains("already answered with this answer"), "{text}");
    }
    let (status, error) = call(
        &router,
        "POST",
        "/api/agents/assistant/resume-stream",
        Some(resume(json!("Lisbon"))),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{error}");
    assert_eq!(error["code"], "already_answered");
}
