//! Sub-agents over HTTP (issue 35), on both stores: a supervisor whose researcher sub-agent asks
//! the user. The root's stream ends with the researcher's question under a composite id and its
//! origin; the API shows the child under its root (and only the root in listings and the
//! inbox); the question is answered through the root (askloop's responses route, the reference
//! framework's resume-stream) in one stream of the child's chunks then the root's finish; a
//! direct answer to the child is 409 `child_run`. The AI SDK chat route shows the child's work
//! as a `data-askloop-subagent` part and its question as the root's.

use std::sync::Arc;
use std::time::Duration;

use askloop_core::registry::AgentSet;
use askloop_core::testing::ScriptedModel;
use askloop_core::{Agent, AskUser, RunStore};
use askloop_server::Server;
use axum::Router;
use axum::http::StatusCode;
use futures::StreamExt;
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::on_both_stores;
use crate::support::*;

const RESEARCHER_SCRIPT: &str = r#"{"steps":[
  {"text":"Looking into it.","toolCalls":[{"id":"r1","name":"ask_user","args":{"question":"Which source?","options":[{"label":"arxiv"},{"label":"web"}]}}]},
  {"text":"Found it in arxiv."}]}"#;
const SUPERVISOR_SCRIPT: &str = r#"{"steps":[
  {"toolCalls":[{"id":"s1","name":"researcher","args":{"prompt":"Find the paper."}}]},
  {"text":"Report done."}]}"#;

/// A server whose `supervisor` offers the `researcher` (which asks the user) as a sub-agent.
fn team_server(store: &Arc<dyn RunStore>) -> Server {
    let researcher = || {
        Agent::builder("researcher")
            .description("Finds papers; may ask which source to use.")
            .model(ScriptedModel::from_json(RESEARCHER_SCRIPT).unwrap())
            .tool(AskUser::new())
            .shared_store(store.clone())
            .build()
            .unwrap()
    };
    let supervisor = Agent::builder("supervisor")
        .model(ScriptedModel::from_json(SUPERVISOR_SCRIPT).unwrap())
        .subagent(researcher())
        .shared_store(store.clone())
        .build()
        .unwrap();
    let agents = AgentSet::new().with(supervisor).with(researcher());
    Server::builder(Arc::new(agents), store.clone()).build()
}

/// Starts the supervisor; its root run id, the child's, and the stream's chunks.
async fn start_team(router: &Router) -> (String, String, Vec<Value>) {
    let (status, chunks, body) = stream(
        router,
        "POST",
        "/api/agents/supervisor/stream",
        Some(json!({"messages": "Write the report."})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let root = chunks[0]["runId"].as_str().unwrap().to_owned();
    let waiting = chunks.last().unwrap();
    assert_eq!(waiting["type"], "tool-call-suspended", "{chunks:#?}");
    assert_eq!(waiting["runId"], root.as_str());
    let payload = &waiting["payload"];
    assert_eq!(payload["toolCallId"], "s1~r1");
    assert_eq!(payload["toolName"], "ask_user");
    assert_eq!(payload["suspendPayload"]["question"], "Which source?");
    assert_eq!(payload["subagent"]["path"], json!(["researcher"]));
    assert_eq!(payload["subagent"]["toolCallId"], "r1");
    let child = payload["subagent"]["runId"].as_str().unwrap().to_owned();
    assert_ne!(child, root);
    // The child's chunks came before, marked with their run.
    let nested: Vec<&Value> = chunks
        .iter()
        .filter(|chunk| chunk["type"] == "subagent-chunk")
        .collect();
    assert!(!nested.is_empty(), "{chunks:#?}");
    for chunk in &nested {
        assert_eq!(chunk["runId"], root.as_str());
        assert_eq!(chunk["payload"]["runId"], child.as_str());
        assert_eq!(chunk["payload"]["agentId"], "researcher");
        assert_eq!(chunk["payload"]["toolCallId"], "s1");
        assert_eq!(chunk["payload"]["chunk"]["runId"], child.as_str());
    }
    assert!(
        nested
            .iter()
            .any(|chunk| chunk["payload"]["chunk"]["type"] == "text-delta"),
        "{nested:#?}"
    );
    (root, child, chunks)
}

/// The inbox events of the first `window` after it opens.
async fn inbox_events(router: &Router, window: Duration) -> Vec<Value> {
    let response = router
        .clone()
        .oneshot(request("GET", "/api/inbox/events", None, None))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body().into_data_stream();
    let mut text = String::new();
    let _ = tokio::time::timeout(window, async {
        while let Some(Ok(bytes)) = body.next().await {
            text.push_str(std::str::from_utf8(&bytes).unwrap());
        }
    })
    .await;
    text.split("\n\n")
        .filter_map(|frame| frame.trim_end().strip_prefix("data: "))
        .map(|data| serde_json::from_str(data).unwrap())
        .collect()
}

/// Checks a resumed tree's stream: the child's chunks (its result of `r1`, its text), then the
/// root's own, ending with its finish.
fn assert_resumed(chunks: &[Value], root: &str, child: &str) {
    let kinds = types(chunks);
    let first_nested = kinds.iter().position(|kind| *kind == "subagent-chunk");
    let finish = kinds.iter().rposition(|kind| *kind == "finish");
    assert!(
        matches!((first_nested, finish), (Some(nested), Some(finish)) if nested < finish),
        "{kinds:?}"
    );
    assert_eq!(kinds.last(), Some(&"finish"), "{kinds:?}");
    assert!(chunks.iter().all(|chunk| chunk["runId"] == root));
    let inner: Vec<&Value> = chunks
        .iter()
        .filter(|chunk| chunk["type"] == "subagent-chunk")
        .map(|chunk| &chunk["payload"]["chunk"])
        .collect();
    assert!(inner.iter().all(|chunk| chunk["runId"] == child));
    assert!(
        inner.iter().any(|chunk| chunk["type"] == "tool-result"
            && chunk["payload"]["toolCallId"] == "r1"
            && chunk["payload"]["result"].to_string().contains("arxiv")),
        "{inner:#?}"
    );
    let child_text: String = inner
        .iter()
        .filter(|chunk| chunk["type"] == "text-delta")
        .map(|chunk| chunk["payload"]["text"].as_str().unwrap())
        .collect();
    assert!(child_text.contains("Found it in arxiv."), "{child_text}");
    assert!(inner.iter().any(|chunk| chunk["type"] == "finish"));
    let root_text: String = chunks
        .iter()
        .filter(|chunk| chunk["type"] == "text-delta")
        .map(|chunk| chunk["payload"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(root_text, "Report done.");
}

on_both_stores!(
    issue35_a_nested_question_is_the_roots_and_is_answered_through_it,
    issue35_resume_stream_answers_a_nested_question,
    issue35_the_chat_shows_a_subagents_work_and_question,
);

async fn issue35_a_nested_question_is_the_roots_and_is_answered_through_it(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    let router = team_server(&store).router();
    let (root, child, _) = start_team(&router).await;

    // The root waits for the researcher's question: one pending call, under its composite id.
    let (status, run) = call(&router, "GET", &format!("/api/runs/{root}"), None, None).await;
    assert_eq!(status, StatusCode::OK, "{run}");
    assert_eq!(run["status"], "suspended");
    assert!(run.get("parentRunId").is_none(), "{run}");
    assert!(run.get("rootRunId").is_none(), "{run}");
    let pending = run["pendingToolCalls"].as_array().unwrap();
    assert_eq!(pending.len(), 1, "{run}");
    assert_eq!(pending[0]["toolCallId"], "s1~r1");
    assert_eq!(pending[0]["runId"], root.as_str());
    assert_eq!(pending[0]["subagent"]["path"], json!(["researcher"]));
    assert_eq!(pending[0]["subagent"]["runId"], child.as_str());
    assert_eq!(pending[0]["subagent"]["toolCallId"], "r1");
    assert_eq!(
        run["children"],
        json!([{"runId": child, "agentId": "researcher", "status": "suspended", "toolCallId": "s1"}])
    );

    // The child is a run of its own, linked to its parent and root.
    let (status, detail) = call(&router, "GET", &format!("/api/runs/{child}"), None, None).await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    assert_eq!(detail["agentId"], "researcher");
    assert_eq!(detail["status"], "suspended");
    assert_eq!(detail["parentRunId"], root.as_str());
    assert_eq!(detail["parentToolCallId"], "s1");
    assert_eq!(detail["rootRunId"], root.as_str());
    assert_eq!(detail["children"], json!([]));

    // Listings: the child only under its parent; the suspended runs and the inbox: the root.
    let (status, children) = call(
        &router,
        "GET",
        &format!("/api/runs?parentRunId={root}"),
        None,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let listed: Vec<&str> = children["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|run| run["runId"].as_str().unwrap())
        .collect();
    assert_eq!(listed, [child.as_str()]);
    assert_eq!(children["runs"][0]["parentRunId"], root.as_str());
    assert_eq!(children["runs"][0]["rootRunId"], root.as_str());
    for path in ["/api/runs", "/api/runs?status=suspended"] {
        let (status, page) = call(&router, "GET", path, None, None).await;
        assert_eq!(status, StatusCode::OK);
        let listed: Vec<&str> = page["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|run| run["runId"].as_str().unwrap())
            .collect();
        assert_eq!(listed, [root.as_str()], "{path}: {page}");
    }
    let (status, suspended) = call(
        &router,
        "GET",
        "/api/agents/supervisor/suspended-runs",
        None,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(suspended["total"], 1, "{suspended}");
    let calls = &suspended["runs"][0]["toolCalls"];
    assert_eq!(calls[0]["toolCallId"], "s1~r1");
    assert_eq!(calls[0]["subagent"]["path"], json!(["researcher"]));
    let (_, researcher_suspended) = call(
        &router,
        "GET",
        "/api/agents/researcher/suspended-runs",
        None,
        None,
    )
    .await;
    assert_eq!(researcher_suspended["total"], 0, "{researcher_suspended}");
    let events = inbox_events(&router, Duration::from_millis(1500)).await;
    let raised: Vec<(&str, &str)> = events
        .iter()
        .filter(|event| event["type"] == "question-raised")
        .map(|event| {
            (
                event["runId"].as_str().unwrap(),
                event["toolCallId"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(raised, [(root.as_str(), "s1~r1")], "{events:#?}");
    assert_eq!(events[0]["subagent"]["path"], json!(["researcher"]));

    // The child is answered and continued only through its root.
    let refusals = [
        (
            "/api/agents/researcher/resume-stream".to_owned(),
            json!({"runId": child, "toolCallId": "r1", "resumeData": "arxiv"}),
        ),
        (
            format!("/api/runs/{child}/responses"),
            json!({"responses": [{"toolCallId": "r1", "answer": "arxiv"}]}),
        ),
        (format!("/api/runs/{child}/continue"), Value::Null),
    ];
    for (path, body) in refusals {
        let body = (!body.is_null()).then_some(body);
        let (status, error) = call(&router, "POST", &path, body, None).await;
        assert_eq!(status, StatusCode::CONFLICT, "{path}: {error}");
        assert_eq!(error["code"], "child_run", "{path}: {error}");
        assert_eq!(error["details"]["rootRunId"], root.as_str());
        assert!(
            error["message"].as_str().unwrap().contains(&root),
            "{error}"
        );
    }
    assert_eq!(
        status_of(&store, &child).await,
        askloop_core::RunStatus::Suspended
    );

    // One answer to the root: the child's chunks, then the root's finish.
    let (status, chunks, body) = stream(
        &router,
        "POST",
        &format!("/api/runs/{root}/responses"),
        Some(json!({"responses": [{"toolCallId": "s1~r1", "answer": "arxiv"}]})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_resumed(&chunks, &root, &child);
    assert_eq!(
        status_of(&store, &root).await,
        askloop_core::RunStatus::Completed
    );
    assert_eq!(
        status_of(&store, &child).await,
        askloop_core::RunStatus::Completed
    );
    let (_, run) = call(&router, "GET", &format!("/api/runs/{root}"), None, None).await;
    assert_eq!(run["children"][0]["status"], "completed", "{run}");
    let (_, page) = call(&router, "GET", "/api/runs?status=suspended", None, None).await;
    assert_eq!(page["runs"], json!([]), "{page}");
}

async fn issue35_resume_stream_answers_a_nested_question(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    let router = team_server(&store).router();
    // Named by its composite id, and as the only pending call (no toolCallId).
    for tool_call_id in [Some("s1~r1"), None] {
        let (root, child, _) = start_team(&router).await;
        let mut body = json!({"runId": root, "resumeData": "arxiv"});
        if let Some(id) = tool_call_id {
            body["toolCallId"] = json!(id);
        }
        let (status, chunks, error) = stream(
            &router,
            "POST",
            "/api/agents/supervisor/resume-stream",
            Some(body),
            None,
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{error}");
        assert_resumed(&chunks, &root, &child);
        // Given again, the same answer is a harmless repeat (nothing runs twice).
        let (status, note) = call(
            &router,
            "POST",
            "/api/agents/supervisor/resume-stream",
            Some(json!({"runId": root, "toolCallId": "s1~r1", "resumeData": "arxiv"})),
            None,
        )
        .await;
        assert!(
            status == StatusCode::OK || status == StatusCode::CONFLICT,
            "{status} {note}"
        );
    }
}

async fn issue35_the_chat_shows_a_subagents_work_and_question(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    let router = team_server(&store).router();
    let chat = "team-chat";
    let (status, chunks, body) = stream(
        &router,
        "POST",
        "/api/agents/supervisor/chat",
        Some(json!({"id": chat, "trigger": "submit-message", "messages": [
            {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "Write the report."}]}
        ]})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let root = chunks[0]["messageMetadata"]["runId"]
        .as_str()
        .unwrap()
        .to_owned();
    // The child's work: one data part, its text, waiting at the end; never the root's text.
    let updates: Vec<&Value> = chunks
        .iter()
        .filter(|chunk| chunk["type"] == "data-askloop-subagent")
        .collect();
    assert!(!updates.is_empty(), "{chunks:#?}");
    let last = updates.last().unwrap();
    let child = last["id"].as_str().unwrap().to_owned();
    assert_eq!(last["data"]["runId"], child.as_str());
    assert_eq!(last["data"]["agentId"], "researcher");
    assert_eq!(last["data"]["parentRunId"], root.as_str());
    assert_eq!(last["data"]["toolCallId"], "s1");
    assert_eq!(last["data"]["path"], json!(["researcher"]));
    assert_eq!(last["data"]["text"], "Looking into it.");
    assert_eq!(last["data"]["status"], "suspended");
    assert!(
        !chunks.iter().any(|chunk| chunk["type"] == "text-delta"),
        "{chunks:#?}"
    );
    // Its question: a tool part of the composite id with the root's question data.
    let announced = chunks
        .iter()
        .find(|chunk| chunk["type"] == "tool-input-available" && chunk["toolCallId"] == "s1~r1")
        .unwrap_or_else(|| panic!("{chunks:#?}"));
    assert_eq!(announced["toolName"], "ask_user");
    let question = chunks
        .iter()
        .find(|chunk| chunk["type"] == "data-askloop-question")
        .unwrap();
    assert_eq!(question["id"], "s1~r1");
    assert_eq!(question["data"]["runId"], root.as_str());
    assert_eq!(question["data"]["toolCallId"], "s1~r1");
    assert_eq!(question["data"]["subagent"]["path"], json!(["researcher"]));
    assert_eq!(question["data"]["subagent"]["runId"], child.as_str());
    assert_eq!(chunks.last().unwrap()["finishReason"], "tool-calls");

    // A reloaded chat shows the same question, answerable through its tool part.
    let (status, messages) = call(
        &router,
        "GET",
        &format!("/api/agents/supervisor/chat/{chat}/messages"),
        None,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let assistant = messages["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    let parts = assistant["parts"].as_array().unwrap();
    assert!(
        parts.iter().any(|part| part["type"] == "tool-ask_user"
            && part["toolCallId"] == "s1~r1"
            && part["state"] == "input-available"),
        "{parts:#?}"
    );
    assert!(
        parts
            .iter()
            .any(|part| part["type"] == "data-askloop-question"
                && part["data"]["subagent"]["toolCallId"] == "r1")
    );
    // … and the child's work as the stream last showed it.
    let work: Vec<&Value> = parts
        .iter()
        .filter(|part| part["type"] == "data-askloop-subagent")
        .collect();
    assert_eq!(work.len(), 1, "{parts:#?}");
    assert_eq!(work[0]["id"], child.as_str());
    assert_eq!(work[0]["data"], last["data"]);

    // The answer, as `addToolOutput` sends it (with the child's data part the client shows).
    let shown = last["data"].clone();
    let mut answered = parts.clone();
    for part in &mut answered {
        if part["toolCallId"] == "s1~r1" {
            part["state"] = json!("output-available");
            part["output"] = json!("arxiv");
        }
    }
    let (status, chunks, body) = stream(
        &router,
        "POST",
        "/api/agents/supervisor/chat",
        Some(json!({"id": chat, "trigger": "submit-message", "messages": [
            {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "Write the report."}]},
            {"id": assistant["id"], "role": "assistant", "parts": answered},
        ]})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let kinds = types(&chunks);
    let nested_done = chunks
        .iter()
        .position(|chunk| {
            chunk["type"] == "tool-output-available" && chunk["toolCallId"] == "s1~r1"
        })
        .unwrap_or_else(|| panic!("{chunks:#?}"));
    let parent_done = chunks
        .iter()
        .position(|chunk| chunk["type"] == "tool-output-available" && chunk["toolCallId"] == "s1")
        .unwrap_or_else(|| panic!("{chunks:#?}"));
    assert!(nested_done < parent_done, "{kinds:?}");
    let last = chunks
        .iter()
        .rfind(|chunk| chunk["type"] == "data-askloop-subagent")
        .unwrap();
    assert_eq!(last["data"]["status"], "completed");
    assert_eq!(last["data"]["text"], "Looking into it.\nFound it in arxiv.");
    let text: String = chunks
        .iter()
        .filter(|chunk| chunk["type"] == "text-delta")
        .map(|chunk| chunk["delta"].as_str().unwrap())
        .collect();
    assert_eq!(text, "Report done.");
    assert_eq!(chunks.last().unwrap()["finishReason"], "stop");
    let (_, messages) = call(
        &router,
        "GET",
        &format!("/api/agents/supervisor/chat/{chat}/messages"),
        None,
        None,
    )
    .await;
    let parts = messages["messages"][1]["parts"].as_array().unwrap();
    let work = parts
        .iter()
        .find(|part| part["type"] == "data-askloop-subagent")
        .unwrap_or_else(|| panic!("{parts:#?}"));
    let mut done = shown;
    done["status"] = json!("completed");
    done["text"] = json!("Looking into it.\nFound it in arxiv.");
    assert_eq!(work["data"], done);
}
