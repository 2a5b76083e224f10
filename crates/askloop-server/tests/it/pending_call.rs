//! One pending call, one JSON shape (issue 32): a question and an approval with deadlines are
//! the same object (`askloop_core::wire::PendingCall`) in the runs API, the run's detail, the
//! inbox's `question-raised` event, the `/chat` stream's `data-askloop-question` part and the
//! chat's messages; the OpenAPI document describes it once.

use std::sync::Arc;
use std::time::Duration;

use askloop_core::registry::AgentSet;
use askloop_core::testing::ScriptedModel;
use askloop_core::testing::conformance::support::Counter;
use askloop_core::{Agent, AskUser, RunStore};
use askloop_server::Server;
use axum::Router;
use axum::http::StatusCode;
use futures::StreamExt;
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::on_both_stores;
use crate::support::*;

on_both_stores!(issue32_a_pending_call_is_one_shape_everywhere);

const ASKER_SCRIPT: &str = r#"{"steps":[
  {"toolCalls":[{"id":"c1","name":"ask_user","args":{"question":"Which repo?","options":[
    {"label":"main","description":"The application"},{"label":"docs","description":"The website"}]}}]},
  {"text":"Summary of docs."}]}"#;
const FILES_SCRIPT: &str = r#"{"steps":[
  {"toolCalls":[{"id":"w1","name":"count","args":{"label":"write"}}]},
  {"text":"Noted."}]}"#;

/// `asker`: a question with options and descriptions, due in an hour; `files`: a `count` call
/// whose approval is due in an hour.
fn deadline_server(store: &Arc<dyn RunStore>) -> Server {
    let asker = Agent::builder("asker")
        .model(ScriptedModel::from_json(ASKER_SCRIPT).unwrap())
        .tool(AskUser::new().timeout(Duration::from_secs(3600)))
        .shared_store(store.clone())
        .build()
        .unwrap();
    let files = Agent::builder("files")
        .model(ScriptedModel::from_json(FILES_SCRIPT).unwrap())
        .tool(Counter::default())
        .require_approval_for("count")
        .approval_timeout(Duration::from_secs(3600))
        .shared_store(store.clone())
        .build()
        .unwrap();
    Server::builder(
        Arc::new(AgentSet::new().with(asker).with(files)),
        store.clone(),
    )
    .build()
}

/// Starts a chat turn of `agent` in chat `chat`; the `data` of its `data-askloop-question` part.
async fn chat_question(router: &Router, agent: &str, chat: &str) -> Value {
    let body = json!({"id": chat, "messages": [{"id": "m1", "role": "user", "parts": [{"type": "text", "text": "Go"}]}]});
    let path = format!("/api/agents/{agent}/chat");
    let (status, chunks, error) = stream(router, "POST", &path, Some(body), None).await;
    assert_eq!(status, StatusCode::OK, "{error}");
    let part = chunks
        .iter()
        .find(|chunk| chunk["type"] == "data-askloop-question")
        .unwrap_or_else(|| panic!("no question part: {chunks:?}"));
    part["data"].clone()
}

/// The `data` of the question part of a chat's messages (a reloaded page).
async fn replayed_question(router: &Router, agent: &str, chat: &str) -> Value {
    let path = format!("/api/agents/{agent}/chat/{chat}/messages");
    let (status, body) = call(router, "GET", &path, None, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let parts = body["messages"].as_array().unwrap().last().unwrap()["parts"].clone();
    let part = parts
        .as_array()
        .unwrap()
        .iter()
        .find(|part| part["type"] == "data-askloop-question")
        .unwrap_or_else(|| panic!("no question part: {parts}"))
        .clone();
    part["data"].clone()
}

/// The inbox's `question-raised` event of `run_id`, without the event's own keys.
async fn inbox_question(router: &Router, run_id: &str) -> Value {
    let response = router
        .clone()
        .oneshot(request("GET", "/api/inbox/events", None, None))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut events = response.into_body().into_data_stream();
    let mut text = String::new();
    tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let bytes = events.next().await.unwrap().unwrap();
            text.push_str(std::str::from_utf8(&bytes).unwrap());
            while let Some(end) = text.find("\n\n") {
                let frame: String = text.drain(..end + 2).collect();
                let Some(data) = frame.trim_end().strip_prefix("data: ") else {
                    continue;
                };
                let mut event: Value = serde_json::from_str(data).unwrap();
                if event["type"] == "question-raised" && event["runId"] == run_id {
                    let fields = event.as_object_mut().unwrap();
                    for key in ["type", "agentId", "threadId", "resourceId"] {
                        fields.remove(key);
                    }
                    return event;
                }
            }
        }
    })
    .await
    .unwrap()
}

/// Asserts that every view of the run's one pending call is `expected`.
async fn assert_one_shape(router: &Router, agent: &str, chat: &str, expected: &Value) {
    let run_id = expected["runId"].as_str().unwrap();
    let (status, page) = call(
        router,
        "GET",
        &format!("/api/runs?status=suspended&agentId={agent}"),
        None,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(
        &page["runs"][0]["pendingToolCalls"][0], expected,
        "GET /api/runs"
    );
    let (status, run) = call(router, "GET", &format!("/api/runs/{run_id}"), None, None).await;
    assert_eq!(status, StatusCode::OK, "{run}");
    assert_eq!(
        &run["pendingToolCalls"][0], expected,
        "GET /api/runs/{{runId}}"
    );
    assert_eq!(
        &replayed_question(router, agent, chat).await,
        expected,
        "chat messages"
    );
    assert_eq!(
        &inbox_question(router, run_id).await,
        expected,
        "inbox event"
    );
}

async fn issue32_a_pending_call_is_one_shape_everywhere(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    let server = deadline_server(&store);
    let router = server.router();

    // A question: what it asked, its options with their descriptions, its form, its deadline.
    let question = chat_question(&router, "asker", "chat-ask").await;
    let mut keys: Vec<&str> = question
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "args",
            "expiresAt",
            "form",
            "kind",
            "payload",
            "resumeSchema",
            "runId",
            "toolCallId",
            "toolName"
        ],
        "{question}"
    );
    assert_eq!(question["toolCallId"], "c1");
    assert_eq!(question["toolName"], "ask_user");
    assert_eq!(question["kind"], "answer");
    assert_eq!(question["payload"]["question"], "Which repo?");
    assert_eq!(
        question["payload"]["options"][1]["description"],
        "The website"
    );
    assert_eq!(question["form"]["kind"], "select");
    assert_eq!(question["form"]["choices"][1]["label"], "docs");
    let expires_at = question["expiresAt"].as_str().unwrap();
    assert_eq!(question["payload"]["expiresAt"], expires_at);
    assert!(
        expires_at.len() == "2026-12-05T14:00:00.000Z".len() && expires_at.ends_with('Z'),
        "RFC 3339 UTC with milliseconds: {expires_at}"
    );
    assert_one_shape(&router, "asker", "chat-ask", &question).await;

    // An approval: the tool's arguments as its payload, the approval form, its deadline.
    let approval = chat_question(&router, "files", "chat-approve").await;
    assert_eq!(approval["kind"], "approval");
    assert_eq!(approval["toolName"], "count");
    assert_eq!(approval["args"]["label"], "write");
    assert_eq!(approval["payload"]["args"]["label"], "write");
    assert_eq!(approval["form"]["kind"], "object");
    assert!(approval["expiresAt"].is_string(), "{approval}");
    assert_one_shape(&router, "files", "chat-approve", &approval).await;

    // The OpenAPI document describes it once, and the runs API refers to it.
    let (status, document) = call(&router, "GET", "/openapi.json", None, None).await;
    assert_eq!(status, StatusCode::OK);
    let schemas = &document["components"]["schemas"];
    let properties = schemas["PendingCall"]["properties"].as_object().unwrap();
    let mut documented: Vec<&str> = properties.keys().map(String::as_str).collect();
    documented.sort_unstable();
    // Besides a question's keys: a quorum's, which only an approval needing several
    // approvers carries (issue 34), and the origin of a sub-agent's call (issue 35).
    let mut expected = keys.clone();
    expected.extend(["approvals", "quorum", "subagent"]);
    expected.sort_unstable();
    assert_eq!(documented, expected);
    let description = schemas["PendingCall"]["description"].as_str().unwrap();
    assert!(
        description.contains("data-askloop-question"),
        "{description}"
    );
    assert!(
        !description.contains("```"),
        "no Rust example in the document: {description}"
    );
    assert_eq!(
        schemas["RunSummaryBody"]["properties"]["pendingToolCalls"]["items"]["$ref"],
        "#/components/schemas/PendingCall"
    );
    let first_message = &schemas["RunSummaryBody"]["properties"]["firstMessage"];
    assert!(
        first_message["type"].to_string().contains("string"),
        "{first_message}"
    );
}
