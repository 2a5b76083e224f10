//! Every route and error, on both stores.

use std::sync::Arc;
use std::time::Duration;

use askloop_core::store::RunFilter;
use askloop_core::{RunStatus, RunStore};
use askloop_server::{ApiKey, Limits, Server};
use axum::http::StatusCode;
use futures::StreamExt;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::on_both_stores;
use crate::support::*;

on_both_stores!(
    agents_are_listed_and_described,
    an_ask_cycle_streams_suspends_and_resumes,
    approvals_and_declines_stream_on,
    issue34_edited_arguments_are_checked_then_run,
    batch_responses_cancel_and_continue,
    bad_requests_are_json_errors,
    keys_isolate_tenants_and_agents,
    a_client_that_disconnects_does_not_stop_the_run,
    a_client_reattaches_to_a_live_run,
    two_servers_share_one_store,
    another_server_follows_a_run_it_does_not_drive,
    the_sweep_recovers_a_run_whose_process_died,
);

async fn agents_are_listed_and_described(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    let (server, _) = server(&store, Vec::new());
    let router = server.router();
    let (status, agents) = call(&router, "GET", "/api/agents", None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(agents["files"]["name"], "Files");
    assert!(agents["assistant"]["tools"]["ask_user"]["inputSchema"].is_string());
    assert_eq!(agents["files"]["tools"]["count"]["requireApproval"], true);
    let (status, files) = call(&router, "GET", "/api/agents/files", None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(files["id"], "files");
    let (status, error) = call(&router, "GET", "/api/agents/nobody", None, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(error["code"], "agent_not_found");
    let (status, _) = call(&router, "GET", "/healthz", None, None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, document) = call(&router, "GET", "/openapi.json", None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(document["paths"]["/api/agents/{agentId}/stream"]["post"].is_object());
    // Every route is documented, the chat transport's too.
    assert!(document["paths"]["/api/agents/{agentId}/chat"]["post"].is_object());
    assert!(document["paths"]["/api/agents/{agentId}/chat/{chatId}/messages"]["get"].is_object());
    let (status, page) = call(&router, "GET", "/docs", None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.as_str().unwrap().contains("/api/runs/{runId}/stream"));
}

async fn start_ask(router: &axum::Router, key: Option<&str>, resource: Option<&str>) -> String {
    let mut body = json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "Summarize my project"}]}]});
    if let Some(resource) = resource {
        body["memory"] = json!({"thread": "t-1", "resource": resource});
    }
    let (status, chunks, error) = stream(
        router,
        "POST",
        "/api/agents/assistant/stream",
        Some(body),
        key,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{error}");
    assert_eq!(types(&chunks).first(), Some(&"start"));
    assert_eq!(types(&chunks).last(), Some(&"tool-call-suspended"));
    let run_id = chunks[0]["runId"].as_str().unwrap().to_owned();
    assert!(chunks.iter().all(|chunk| chunk["runId"] == run_id.as_str()));
    run_id
}

async fn an_ask_cycle_streams_suspends_and_resumes(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    let (server, _) = server(&store, Vec::new());
    let router = server.router();
    let run_id = start_ask(&router, None, Some("user-7")).await;

    // The inbox and the reference framework's listing show the question.
    let (status, page) = call(
        &router,
        "GET",
        "/api/runs?status=suspended&resourceId=user-7",
        None,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(page["runs"][0]["runId"], run_id.as_str());
    assert_eq!(page["runs"][0]["firstMessage"], "Summarize my project");
    let pending = &page["runs"][0]["pendingToolCalls"][0];
    assert_eq!(pending["toolCallId"], "c1");
    assert_eq!(pending["kind"], "answer");
    assert_eq!(pending["payload"]["question"], "Which repo?");
    let (status, suspended) = call(
        &router,
        "GET",
        "/api/agents/assistant/suspended-runs?resourceId=user-7&page=0&perPage=10",
        None,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(suspended["total"], 1);
    assert_eq!(
        suspended["runs"][0]["toolCalls"][0]["requiresApproval"],
        false
    );
    let (status, run) = call(&router, "GET", &format!("/api/runs/{run_id}"), None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(run["status"], "suspended");
    assert_eq!(run["messages"][0]["role"], "user");

    // Re-attaching to a suspended run re-announces its call.
    let (status, chunks, _) = stream(
        &router,
        "GET",
        &format!("/api/runs/{run_id}/stream"),
        None,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(types(&chunks), ["tool-call", "tool-call-suspended"]);

    // An answer that is not a label: 400 with the labels.
    let resume = |data: Value| json!({"runId": run_id, "toolCallId": "c1", "resumeData": data});
    let (status, _, error) = stream(
        &router,
        "POST",
        "/api/agents/assistant/resume-stream",
        Some(resume(json!("gitlab"))),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(error["code"], "invalid_answer");
    assert_eq!(error["details"]["allowed"], json!(["main", "docs"]));
    let (status, _, error) = stream(
        &router,
        "POST",
        "/api/agents/assistant/resume-stream",
        Some(json!({"runId": run_id, "toolCallId": "c9", "resumeData": "main"})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(error["code"], "unknown_tool_call");

    let (status, chunks, _) = stream(
        &router,
        "POST",
        "/api/agents/assistant/resume-stream",
        Some(resume(json!("main"))),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let kinds = types(&chunks);
    let call_at = kinds.iter().position(|kind| *kind == "tool-call").unwrap();
    let result_at = kinds
        .iter()
        .position(|kind| *kind == "tool-result")
        .unwrap();
    assert!(call_at < result_at);
    assert_eq!(kinds.last(), Some(&"finish"));
    let text: String = chunks
        .iter()
        .filter(|c| c["type"] == "text-delta")
        .map(|c| c["payload"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, "Summary of main.");

    // Again with another answer: already answered (the same answer again: repeats.rs); a
    // finished run re-attaches as its finish.
    let (status, _, error) = stream(
        &router,
        "POST",
        "/api/agents/assistant/resume-stream",
        Some(resume(json!("docs"))),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{error}");
    let (status, _, error) = stream(
        &router,
        "POST",
        "/api/agents/assistant/resume-stream",
        Some(json!({"runId": run_id, "resumeData": "main"})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(error["code"], "not_suspended");
    let (status, chunks, _) = stream(
        &router,
        "GET",
        &format!("/api/runs/{run_id}/stream"),
        None,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(types(&chunks), ["finish"]);
    assert_eq!(chunks[0]["payload"]["output"]["text"], "Summary of main.");

    let (status, _, error) = stream(
        &router,
        "POST",
        "/api/agents/assistant/resume-stream",
        Some(json!({"runId": "no-such-run", "resumeData": "main"})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(error["code"], "run_not_found");
    let (status, error) = call(&router, "GET", "/api/runs/no-such-run", None, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(error["code"], "run_not_found");

    // A caller-chosen run id is honoured once.
    let body = json!({"messages": "hello", "runId": "chosen-1"});
    let (status, chunks, _) = stream(
        &router,
        "POST",
        "/api/agents/assistant/stream",
        Some(body.clone()),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(chunks[0]["runId"], "chosen-1");
    let (status, _, error) = stream(
        &router,
        "POST",
        "/api/agents/assistant/stream",
        Some(body),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(error["code"], "conflict");
}

async fn approvals_and_declines_stream_on(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    let (server, _) = server(&store, Vec::new());
    let router = server.router();
    let start = || async {
        let (status, chunks, _) = stream(
            &router,
            "POST",
            "/api/agents/files/stream",
            Some(json!({"messages": "write it"})),
            None,
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(types(&chunks).last(), Some(&"tool-call-approval"));
        chunks[0]["runId"].as_str().unwrap().to_owned()
    };
    let declined = start().await;
    let (status, chunks, _) = stream(
        &router,
        "POST",
        "/api/agents/files/decline-tool-call",
        Some(json!({"runId": declined, "toolCallId": "w1", "reason": "not that folder"})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let result = chunks.iter().find(|c| c["type"] == "tool-result").unwrap();
    assert!(result.to_string().contains("not that folder"));
    assert_eq!(types(&chunks).last(), Some(&"finish"));

    let approved = start().await;
    let (status, chunks, _) = stream(
        &router,
        "POST",
        "/api/agents/files/approve-tool-call",
        Some(json!({"runId": approved, "toolCallId": "w1"})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let result = chunks.iter().find(|c| c["type"] == "tool-result").unwrap();
    assert_eq!(result["payload"]["isError"], false);
    let (status, _, error) = stream(
        &router,
        "POST",
        "/api/agents/files/approve-tool-call",
        Some(json!({"runId": approved, "toolCallId": "w1"})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{error}");
    let (status, _, _) = stream(
        &router,
        "POST",
        "/api/agents/files/decline-tool-call",
        Some(json!({"runId": "no-such-run", "toolCallId": "w1"})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // Another agent's run is not found under this agent.
    let (status, _, _) = stream(
        &router,
        "POST",
        "/api/agents/assistant/approve-tool-call",
        Some(json!({"runId": approved, "toolCallId": "w1"})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// The stored run `run_id` as text (its version and its codec text): what "nothing changed"
/// compares.
async fn stored_text(store: &Arc<dyn RunStore>, run_id: &str) -> (u64, String) {
    let stored = load(store, run_id).await;
    let text = askloop_core::store::codec::encode_state(&stored.state).unwrap();
    (stored.version, text)
}

/// Edit, then approve (issue 34), on every route: edited arguments that do not fit the tool
/// are 400 `invalid_args` with the problems (on `/chat`, its rejection) and change nothing;
/// fitting ones run the tool, the model's next request tells it, and the audit keeps both.
async fn issue34_edited_arguments_are_checked_then_run(backend: Backend) {
    use askloop_core::testing::conformance::support::{Counter, RecordingModel, script};

    let place = Place::new(backend).await;
    let store = place.open().await;
    let model = RecordingModel::new(&script(vec![
        json!({"toolCalls": [{"id": "w1", "name": "count", "args": {"label": "write"}}]}),
        json!({"text": "Noted."}),
    ]));
    let counter = Counter::default();
    let files = askloop_core::Agent::builder("files")
        .shared_model(model.clone())
        .tool(counter.clone())
        .require_approval_for("count")
        .shared_store(store.clone())
        .build()
        .unwrap();
    let agents = askloop_core::registry::AgentSet::new().with(files);
    let server = Server::builder(Arc::new(agents), store.clone()).build();
    let router = server.router();
    let (status, chunks, _) = stream(
        &router,
        "POST",
        "/api/agents/files/stream",
        Some(json!({"messages": "write it"})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(types(&chunks).last(), Some(&"tool-call-approval"));
    let run_id = chunks[0]["runId"].as_str().unwrap().to_owned();
    let before = stored_text(&store, &run_id).await;

    let bad = json!({"label": 7, "extra": true});
    for (path, body) in [
        (
            "/api/agents/files/approve-tool-call".to_owned(),
            json!({"runId": run_id, "toolCallId": "w1", "args": bad}),
        ),
        (
            format!("/api/runs/{run_id}/responses"),
            json!({"responses": [{"toolCallId": "w1", "approved": true, "args": bad}]}),
        ),
        (
            "/api/agents/files/resume-stream".to_owned(),
            json!({"runId": run_id, "toolCallId": "w1", "resumeData": {"approved": true, "args": bad}}),
        ),
    ] {
        let (status, _, error) = stream(&router, "POST", &path, Some(body), None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {error}");
        assert_eq!(error["code"], "invalid_args", "{path}: {error}");
        assert_eq!(error["details"]["toolCallId"], "w1", "{path}: {error}");
        assert_eq!(error["details"]["toolName"], "count", "{path}: {error}");
        let problems = error["details"]["problems"].as_array().unwrap();
        assert!(
            problems
                .iter()
                .any(|problem| problem.as_str().unwrap().contains("label")),
            "{path}: {error}"
        );
        assert_eq!(stored_text(&store, &run_id).await, before, "{path}");
    }
    // Arguments beside a decline are no decision at all.
    for (path, body) in [
        (
            "/api/agents/files/decline-tool-call".to_owned(),
            json!({"runId": run_id, "toolCallId": "w1", "args": {"label": "x"}}),
        ),
        (
            format!("/api/runs/{run_id}/responses"),
            json!({"responses": [{"toolCallId": "w1", "approved": false, "args": {"label": "x"}}]}),
        ),
    ] {
        let (status, _, error) = stream(&router, "POST", &path, Some(body), None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {error}");
        assert_eq!(stored_text(&store, &run_id).await, before, "{path}");
    }
    assert_eq!(
        counter.executions.load(std::sync::atomic::Ordering::SeqCst),
        0
    );

    // Valid: the tool runs with the edited arguments; the model's call stays as it wrote it.
    let (status, chunks, error) = stream(
        &router,
        "POST",
        "/api/agents/files/approve-tool-call",
        Some(json!({"runId": run_id, "toolCallId": "w1", "args": {"label": "archive"}})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{error}");
    assert_eq!(types(&chunks).last(), Some(&"finish"));
    let tool_call = chunks.iter().find(|c| c["type"] == "tool-call").unwrap();
    assert_eq!(tool_call["payload"]["args"], json!({"label": "write"}));
    let result = chunks.iter().find(|c| c["type"] == "tool-result").unwrap();
    assert_eq!(result["payload"]["result"]["label"], "archive", "{result}");
    assert_eq!(
        counter.executions.load(std::sync::atomic::Ordering::SeqCst),
        1
    );
    let told: Vec<String> = model
        .last_request()
        .messages
        .iter()
        .flat_map(|message| match message {
            askloop_core::model::Message::Tool { results } => {
                results.iter().map(|result| result.content_text()).collect()
            }
            _ => Vec::new(),
        })
        .collect();
    assert_eq!(told.len(), 1);
    assert!(
        told[0].starts_with(
            "Note: the person who approved this call changed its arguments from \
             {\"label\":\"write\"} to {\"label\":\"archive\"}; the tool ran with the changed \
             arguments. Result: "
        ),
        "{told:?}"
    );
    let stored = load(&store, &run_id).await.state;
    let results: Vec<_> = stored
        .messages()
        .iter()
        .flat_map(|message| match message {
            askloop_core::model::Message::Tool { results } => results.clone(),
            _ => Vec::new(),
        })
        .collect();
    assert_eq!(
        results[0].args_edit(),
        Some(&askloop_core::ArgsEdit::new(
            json!({"label": "write"}),
            json!({"label": "archive"})
        ))
    );

    // `/chat`: askloop's `args` on the approval; a misfit is the chat's rejection.
    let body = json!({"id": "chat-edit", "trigger": "submit-message",
        "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "go"}]}]});
    let (status, _, error) =
        stream(&router, "POST", "/api/agents/files/chat", Some(body), None).await;
    assert_eq!(status, StatusCode::OK, "{error}");
    let (_, listed) = call(&router, "GET", "/api/runs?threadId=chat-edit", None, None).await;
    let chat_run = listed["runs"][0]["runId"].as_str().unwrap().to_owned();
    let before = stored_text(&store, &chat_run).await;
    let answer = |args: Value| {
        json!({"id": "chat-edit", "trigger": "submit-message", "messages": [
            {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "go"}]},
            {"id": "a1", "role": "assistant", "parts": [{"type": "tool-count", "toolCallId": "w1",
                "state": "approval-responded", "input": {"label": "write"},
                "approval": {"id": "w1", "approved": true, "args": args}}]}]})
    };
    let (status, chunks, error) = stream(
        &router,
        "POST",
        "/api/agents/files/chat",
        Some(answer(bad.clone())),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{error}");
    let rejection = chunks
        .iter()
        .find(|chunk| chunk["type"] == "data-askloop-rejection")
        .unwrap_or_else(|| panic!("{chunks:?}"));
    let problem = rejection["data"]["problems"]["w1"].as_str().unwrap();
    assert!(problem.contains("label"), "{rejection}");
    assert_eq!(stored_text(&store, &chat_run).await, before);
    let (status, chunks, error) = stream(
        &router,
        "POST",
        "/api/agents/files/chat",
        Some(answer(json!({"label": "from chat"}))),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{error}");
    let output = chunks
        .iter()
        .find(|chunk| chunk["type"] == "tool-output-available")
        .unwrap_or_else(|| panic!("{chunks:?}"));
    assert_eq!(output["output"]["label"], "from chat", "{output}");

    // The OpenAPI document says so.
    let (status, document) = call(&router, "GET", "/openapi.json", None, None).await;
    assert_eq!(status, StatusCode::OK);
    let schemas = &document["components"]["schemas"];
    for schema in ["ApprovalRequest", "CallResponseBody"] {
        assert!(
            schemas[schema]["properties"]["args"].is_object(),
            "{schema}: {}",
            schemas[schema]
        );
    }
    let approve = &document["paths"]["/api/agents/{agentId}/approve-tool-call"]["post"];
    assert!(
        approve["responses"]["400"]["description"]
            .as_str()
            .unwrap()
            .contains("invalid_args"),
        "{approve}"
    );
}

async fn batch_responses_cancel_and_continue(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    let (server, _) = server(&store, Vec::new());
    let router = server.router();
    let run_id = start_ask(&router, None, None).await;
    let (status, _, error) = stream(
        &router,
        "POST",
        &format!("/api/runs/{run_id}/responses"),
        Some(json!({"responses": [{"toolCallId": "c1", "answer": "nope"}]})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(error["code"], "invalid_answer");
    let (status, _, error) = stream(
        &router,
        "POST",
        &format!("/api/runs/{run_id}/responses"),
        Some(json!({"responses": []})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{error}");
    let (status, chunks, _) = stream(
        &router,
        "POST",
        &format!("/api/runs/{run_id}/responses"),
        Some(json!({"responses": [{"toolCallId": "c1", "answer": "main"}]})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(types(&chunks).last(), Some(&"finish"));

    let cancelled = start_ask(&router, None, None).await;
    let (status, body) = call(
        &router,
        "POST",
        &format!("/api/runs/{cancelled}/cancel"),
        None,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["status"], "cancelled");
    assert_eq!(status_of(&store, &cancelled).await, RunStatus::Cancelled);
    let (status, error) = call(
        &router,
        "POST",
        &format!("/api/runs/{cancelled}/cancel"),
        None,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(error["code"], "not_cancellable");
    let (status, chunks, _) = stream(
        &router,
        "GET",
        &format!("/api/runs/{cancelled}/stream"),
        None,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(chunks[0]["payload"]["error"]["code"], "cancelled");
    let (status, _, error) = stream(
        &router,
        "POST",
        &format!("/api/runs/{run_id}/continue"),
        None,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(error["code"], "not_continuable");

    // Pages: newest first, with a cursor.
    let (status, first) = call(&router, "GET", "/api/runs?limit=1", None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(first["runs"][0]["runId"], cancelled.as_str());
    let cursor = first["nextCursor"].as_str().unwrap();
    let (_, second) = call(
        &router,
        "GET",
        &format!("/api/runs?limit=1&cursor={cursor}"),
        None,
        None,
    )
    .await;
    assert_eq!(second["runs"][0]["runId"], run_id.as_str());
    for bad in [
        "/api/runs?limit=0",
        "/api/runs?limit=-1",
        "/api/runs?limit=x",
        "/api/runs?cursor=junk",
        "/api/runs?status=sleeping",
    ] {
        let (status, error) = call(&router, "GET", bad, None, None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
        assert_eq!(error["code"], "bad_request", "{bad}");
    }
}

async fn bad_requests_are_json_errors(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    let hold = Hold::default();
    let server = Server::builder(Arc::new(agents(&store, &hold)), store.clone())
        .limits(
            Limits::default()
                .body_bytes(4096)
                .message_bytes(100)
                .answer_bytes(50),
        )
        .build();
    let router = server.router();
    let raw = |body: &'static str, content_type: &'static str| {
        axum::http::Request::builder()
            .method("POST")
            .uri("/api/agents/assistant/stream")
            .header("content-type", content_type)
            .body(axum::body::Body::from(body))
            .unwrap()
    };
    for (body, content_type) in [
        ("{", "application/json"),
        ("{}", "application/json"),
        ("{\"messages\": 5}", "application/json"),
        ("{\"messages\":\"hi\"}", "text/plain"),
        // A blank message starts nothing.
        ("{\"messages\":\"\"}", "application/json"),
        ("{\"messages\":\" \\n\"}", "application/json"),
        (
            "{\"messages\":[{\"role\":\"user\",\"content\":\"\"}]}",
            "application/json",
        ),
    ] {
        let (status, error) = send(&router, raw(body, content_type)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(error["code"], "bad_request", "{body}");
    }
    let (status, error) = call(
        &router,
        "POST",
        "/api/agents/assistant/stream",
        Some(json!({"messages": "x".repeat(5000)})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(error["code"], "too_large");
    let (status, error) = call(
        &router,
        "POST",
        "/api/agents/assistant/stream",
        Some(json!({"messages": "x".repeat(200)})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(error["code"], "too_large");
    let (status, error) = call(
        &router,
        "POST",
        "/api/agents/assistant/stream",
        Some(json!({"messages": "a\u{0}b"})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{error}");
    // The chat transport's input is checked as the other routes' is.
    let chat = |id: &str, text: &str| {
        json!({"id": id, "trigger": "submit-message",
               "messages": [{"role": "user", "parts": [{"type": "text", "text": text}]}]})
    };
    for (body, expected) in [
        (chat("a\u{0}b", "hi"), StatusCode::BAD_REQUEST),
        (chat(" ", "hi"), StatusCode::BAD_REQUEST),
        (chat(&"c".repeat(300), "hi"), StatusCode::BAD_REQUEST),
        (chat("chat-1", " \u{200b} "), StatusCode::BAD_REQUEST),
        (chat("chat-1", "a\u{0}b"), StatusCode::BAD_REQUEST),
        (
            chat("chat-1", &"x".repeat(200)),
            StatusCode::PAYLOAD_TOO_LARGE,
        ),
    ] {
        let (status, error) = call(
            &router,
            "POST",
            "/api/agents/assistant/chat",
            Some(body.clone()),
            None,
        )
        .await;
        assert_eq!(status, expected, "{body} {error}");
        assert!(error["code"].is_string(), "{error}");
    }
    assert!(
        store
            .list_runs(&RunFilter::new())
            .await
            .unwrap()
            .runs
            .is_empty()
    );
    let run_id = start_ask(&router, None, None).await;
    let (status, error) = call(
        &router,
        "POST",
        "/api/agents/assistant/resume-stream",
        Some(json!({"runId": run_id, "resumeData": "m".repeat(100)})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(error["code"], "too_large");
    let (status, error) = call(&router, "GET", "/no/such/route", None, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(error["code"].is_string());
    let (status, error) = call(&router, "DELETE", "/api/agents", None, None).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert!(error["code"].is_string());
}

async fn keys_isolate_tenants_and_agents(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    let (alice, bob, carol) = (
        ApiKey::new_secret(),
        ApiKey::new_secret(),
        ApiKey::new_secret(),
    );
    let keys = vec![
        ApiKey::from_secret(&alice, "alice".into()),
        ApiKey::from_hash(&ApiKey::hash_hex(&bob), "bob".into()).unwrap(),
        ApiKey::from_secret(&carol, "carol".into()).agents(vec!["assistant".into()]),
    ];
    let (server, _) = server(&store, keys);
    let router = server.router();
    for key in [None, Some("ak_wrong")] {
        let (status, error) = call(&router, "GET", "/api/agents", None, key).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        assert_eq!(error["code"], "unauthorized");
    }
    for open in ["/healthz", "/openapi.json", "/docs"] {
        assert_eq!(
            call(&router, "GET", open, None, None).await.0,
            StatusCode::OK,
            "{open}"
        );
    }
    // X-Api-Key works too.
    let request = axum::http::Request::builder()
        .uri("/api/agents")
        .header("x-api-key", &alice)
        .body(axum::body::Body::empty())
        .unwrap();
    assert_eq!(send(&router, request).await.0, StatusCode::OK);
    // The same key twice is one key; two different keys in one request are neither.
    let request = axum::http::Request::builder()
        .uri("/api/agents")
        .header("authorization", format!("Bearer {alice}"))
        .header("x-api-key", &alice)
        .body(axum::body::Body::empty())
        .unwrap();
    assert_eq!(send(&router, request).await.0, StatusCode::OK);
    for (first, second) in [
        ("authorization", "x-api-key"),
        ("authorization", "authorization"),
    ] {
        let request = axum::http::Request::builder()
            .uri("/api/agents")
            .header(first, format!("Bearer {alice}"))
            .header(
                second,
                if second == "authorization" {
                    format!("Bearer {bob}")
                } else {
                    bob.clone()
                },
            )
            .body(axum::body::Body::empty())
            .unwrap();
        assert_eq!(
            send(&router, request).await.0,
            StatusCode::UNAUTHORIZED,
            "{first} + {second}"
        );
    }

    let run_id = start_ask(&router, Some(&alice), None).await;
    assert_eq!(
        load(&store, &run_id)
            .await
            .state
            .resource_id()
            .unwrap()
            .as_str(),
        "alice"
    );
    let (status, _, error) = stream(
        &router,
        "POST",
        "/api/agents/assistant/stream",
        Some(json!({"messages": "hi", "resourceId": "bob"})),
        Some(&alice),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(error["code"], "forbidden");

    // Bob posting to Alice's thread id posts to a thread of his own: it supersedes nothing of
    // hers and reads none of her history; her run still waits.
    let thread = load(&store, &run_id)
        .await
        .state
        .thread_id()
        .as_str()
        .to_owned();
    let (status, chunks, error) = stream(
        &router,
        "POST",
        "/api/agents/assistant/stream",
        Some(json!({"messages": "hi", "threadId": thread})),
        Some(&bob),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{error}");
    assert_eq!(types(&chunks).last(), Some(&"tool-call-suspended"));
    let bobs = load(&store, chunks[0]["runId"].as_str().unwrap()).await;
    assert_eq!(bobs.state.resource_id().map(|id| id.as_str()), Some("bob"));
    assert_eq!(bobs.state.thread_id().as_str(), thread);
    assert_eq!(
        bobs.state.history_through(),
        None,
        "none of Alice's history"
    );
    let waiting = load(&store, &run_id).await;
    assert_eq!(waiting.state.status(), askloop_core::RunStatus::Suspended);

    // Bob sees nothing of Alice's run: 404 everywhere, never 403.
    let (status, _) = call(
        &router,
        "GET",
        &format!("/api/runs/{run_id}"),
        None,
        Some(&bob),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _, _) = stream(
        &router,
        "POST",
        "/api/agents/assistant/resume-stream",
        Some(json!({"runId": run_id, "resumeData": "main"})),
        Some(&bob),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = call(
        &router,
        "POST",
        &format!("/api/runs/{run_id}/cancel"),
        None,
        Some(&bob),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _, _) = stream(
        &router,
        "GET",
        &format!("/api/runs/{run_id}/stream"),
        None,
        Some(&bob),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // Bob's lists hold his own run only.
    let (_, page) = call(&router, "GET", "/api/runs", None, Some(&bob)).await;
    let listed: Vec<&Value> = page["runs"].as_array().unwrap().iter().collect();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["resourceId"], "bob");
    assert_ne!(listed[0]["runId"], run_id.as_str());
    let (_, page) = call(
        &router,
        "GET",
        "/api/runs?resourceId=alice",
        None,
        Some(&bob),
    )
    .await;
    assert_eq!(page["runs"], json!([]));
    let (_, suspended) = call(
        &router,
        "GET",
        "/api/agents/assistant/suspended-runs",
        None,
        Some(&bob),
    )
    .await;
    assert_eq!(suspended["total"], 1);
    assert_ne!(suspended["runs"][0]["runId"], run_id.as_str());
    let (_, page) = call(&router, "GET", "/api/runs", None, Some(&alice)).await;
    assert_eq!(page["runs"][0]["runId"], run_id.as_str());

    // Carol may use only the assistant.
    let (_, agents) = call(&router, "GET", "/api/agents", None, Some(&carol)).await;
    assert_eq!(
        agents.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["assistant"]
    );
    let (status, error) = call(&router, "GET", "/api/agents/files", None, Some(&carol)).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(error["code"], "forbidden");
    let (status, _, _) = stream(
        &router,
        "POST",
        "/api/agents/files/stream",
        Some(json!({"messages": "hi"})),
        Some(&carol),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // Alice answers her own run.
    let (status, chunks, _) = stream(
        &router,
        "POST",
        "/api/agents/assistant/resume-stream",
        Some(json!({"runId": run_id, "resumeData": "main"})),
        Some(&alice),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(types(&chunks).last(), Some(&"finish"));
}

async fn a_client_that_disconnects_does_not_stop_the_run(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    let (server, hold) = server(&store, Vec::new());
    let router = server.router();
    let response = router
        .clone()
        .oneshot(request(
            "POST",
            "/api/agents/waiter/stream",
            Some(json!({"messages": "go"})),
            None,
        ))
        .await
        .unwrap();
    let mut body = response.into_body();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    let first = frames_prefix(&first);
    let run_id = first["runId"].as_str().unwrap().to_owned();
    drop(body);
    hold.release.notify_one();
    eventually("the run completes without its client", || async {
        status_of(&store, &run_id).await == RunStatus::Completed
    })
    .await;
    eventually("its buffer is released", || async {
        server.live_runs() == 0
    })
    .await;
}

/// The first `data:` chunk of a body prefix.
fn frames_prefix(bytes: &[u8]) -> Value {
    let text = std::str::from_utf8(bytes).unwrap();
    let frame = text
        .split("\n\n")
        .find(|frame| frame.starts_with("data: "))
        .unwrap();
    serde_json::from_str(frame.strip_prefix("data: ").unwrap()).unwrap()
}

async fn a_client_reattaches_to_a_live_run(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    let (server, hold) = server(&store, Vec::new());
    let router = server.router();
    let response = router
        .clone()
        .oneshot(request(
            "POST",
            "/api/agents/waiter/stream",
            Some(json!({"messages": "go"})),
            None,
        ))
        .await
        .unwrap();
    let first_client = tokio::spawn(async move {
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        frames(std::str::from_utf8(&bytes).unwrap())
    });
    // Find the run while it waits in its tool.
    let run_id = the_running_run(&store).await;
    // The handler answers once it has subscribed to the live buffer: from then on, it sees
    // every chunk of the current stream.
    let reattached = router
        .clone()
        .oneshot(request(
            "GET",
            &format!("/api/runs/{run_id}/stream"),
            None,
            None,
        ))
        .await
        .unwrap();
    assert_eq!(reattached.status(), StatusCode::OK);
    hold.release.notify_one();
    let bytes = reattached.into_body().collect().await.unwrap().to_bytes();
    let second = frames(std::str::from_utf8(&bytes).unwrap());
    let first = first_client.await.unwrap();
    assert_eq!(types(&first).last(), Some(&"finish"));
    assert_eq!(
        first, second,
        "the re-attached client sees the whole current stream"
    );
}

async fn two_servers_share_one_store(backend: Backend) {
    let place = Place::new(backend).await;
    let (store_a, store_b) = (place.open().await, place.open().await);
    let (server_a, _) = server(&store_a, Vec::new());
    let (server_b, _) = server(&store_b, Vec::new());
    let (router_a, router_b) = (server_a.router(), server_b.router());

    // B's inbox listens while A raises a question.
    let response = router_b
        .clone()
        .oneshot(request("GET", "/api/inbox/events", None, None))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut events = response.into_body().into_data_stream();
    let run_id = start_ask(&router_a, None, Some("u")).await;
    let raised = next_event(&mut events).await;
    assert_eq!(raised["type"], "question-raised");
    assert_eq!(raised["runId"], run_id.as_str());
    assert_eq!(raised["toolCallId"], "c1");
    assert_eq!(raised["agentId"], "assistant");

    // Resumed through B.
    let (status, chunks, _) = stream(
        &router_b,
        "POST",
        "/api/agents/assistant/resume-stream",
        Some(json!({"runId": run_id, "toolCallId": "c1", "resumeData": "docs"})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(types(&chunks).last(), Some(&"finish"));
    let resolved = next_event(&mut events).await;
    assert_eq!(resolved["type"], "question-resolved");
    assert_eq!(resolved["runId"], run_id.as_str());
    let (_, run) = call(&router_a, "GET", &format!("/api/runs/{run_id}"), None, None).await;
    assert_eq!(run["status"], "completed");
}

/// The running run of `store` (waits for it to exist, at most 10 s).
async fn the_running_run(store: &Arc<dyn RunStore>) -> String {
    let found = Arc::new(std::sync::Mutex::new(String::new()));
    eventually("the run is running", || {
        let (store, found) = (store.clone(), found.clone());
        async move {
            let page = store
                .list_runs(&askloop_core::store::RunFilter::new().status(RunStatus::Running))
                .await
                .unwrap();
            page.runs
                .first()
                .map(|run| *found.lock().unwrap() = run.run_id().to_string())
                .is_some()
        }
    })
    .await;
    found.lock().unwrap().clone()
}

/// A re-attach through B to a run A drives answers at once (keep-alives while it waits), follows
/// the store, and ends with the run's finish once A finishes it.
async fn another_server_follows_a_run_it_does_not_drive(backend: Backend) {
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
            Some(json!({"messages": "go"})),
            None,
        ))
        .await
        .unwrap();
    let first_client = tokio::spawn(async move {
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        frames(std::str::from_utf8(&bytes).unwrap())
    });
    let run_id = the_running_run(&store_a).await;
    // B answers while A still drives the run (the tool is held).
    let reattached = tokio::time::timeout(
        Duration::from_secs(5),
        router_b.clone().oneshot(request(
            "GET",
            &format!("/api/runs/{run_id}/stream"),
            None,
            None,
        )),
    )
    .await
    .expect("the re-attach answers before the run ends")
    .unwrap();
    assert_eq!(reattached.status(), StatusCode::OK);
    assert_eq!(status_of(&store_b, &run_id).await, RunStatus::Running);
    hold.release.notify_one();
    let bytes = tokio::time::timeout(Duration::from_secs(10), reattached.into_body().collect())
        .await
        .expect("the re-attach ends with the run")
        .unwrap()
        .to_bytes();
    let second = frames(std::str::from_utf8(&bytes).unwrap());
    assert_eq!(types(&second), ["finish"], "{second:?}");
    let first = first_client.await.unwrap();
    assert_eq!(
        first.last(),
        second.last(),
        "the same finish as the driver's client saw"
    );
}

/// PostgreSQL: questions raised through A show on B's inbox events through LISTEN/NOTIFY, well
/// under the 250 ms poll interval (five in a row, each under 100 ms: a poll would show each at
/// a uniformly random delay of up to 250 ms, so all five under 100 ms by polling has a chance of
/// about 1 %; through notifications each takes the 20 ms batching and a listing, ~22 ms here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_inbox_hears_another_server_at_once() {
    let place = Place::new(Backend::Postgres).await;
    let (store_a, store_b) = (place.open().await, place.open().await);
    let (server_a, _) = server(&store_a, Vec::new());
    let (server_b, _) = server(&store_b, Vec::new());
    let (router_a, router_b) = (server_a.router(), server_b.router());
    let response = router_b
        .clone()
        .oneshot(request("GET", "/api/inbox/events", None, None))
        .await
        .unwrap();
    let mut events = response.into_body().into_data_stream();
    let mut delays = Vec::new();
    for _ in 0..5 {
        // start_ask returns once A's stream showed the suspension, which was committed before.
        // (No memory: each run is a thread of its own, so each asks its question.)
        let run_id = start_ask(&router_a, None, None).await;
        let committed = tokio::time::Instant::now();
        let raised = next_event(&mut events).await;
        delays.push(committed.elapsed());
        assert_eq!(raised["type"], "question-raised");
        assert_eq!(raised["runId"], run_id.as_str());
    }
    assert!(
        delays
            .iter()
            .all(|delay| *delay < Duration::from_millis(100)),
        "inbox delays {delays:?}"
    );
}

/// The next inbox event (skipping keep-alive comments), within 10 s.
async fn next_event(events: &mut axum::body::BodyDataStream) -> Value {
    let deadline = Duration::from_secs(10);
    let mut text = String::new();
    tokio::time::timeout(deadline, async {
        loop {
            let bytes = events.next().await.unwrap().unwrap();
            text.push_str(std::str::from_utf8(&bytes).unwrap());
            if let Some(end) = text.find("\n\n") {
                let frame: String = text.drain(..end + 2).collect();
                if let Some(data) = frame.trim_end().strip_prefix("data: ") {
                    return serde_json::from_str(data).unwrap();
                }
            }
        }
    })
    .await
    .expect("an inbox event")
}

async fn the_sweep_recovers_a_run_whose_process_died(backend: Backend) {
    use askloop_core::testing::conformance::support::{HangingModel, SHORT_LEASE};
    let place = Place::new(backend).await;
    let store = place.open().await;
    let model = Arc::new(HangingModel {
        calls: Default::default(),
    });
    let dead = askloop_core::Agent::builder("assistant")
        .shared_model(model.clone())
        .shared_store(store.clone())
        .lease(SHORT_LEASE)
        .build()
        .unwrap();
    // The "dead" instance: its stream stops after its first text (the process died).
    let mut run = dead.stream("Think");
    let run_id = run.run_id().to_string();
    while let Some(chunk) = run.next().await {
        if matches!(chunk.unwrap(), askloop_core::Chunk::TextDelta { .. }) {
            break;
        }
    }
    drop(run);
    assert_eq!(status_of(&store, &run_id).await, RunStatus::Running);

    let living = askloop_core::Agent::builder("assistant")
        .shared_model(model)
        .shared_store(store.clone())
        .build()
        .unwrap();
    let agents: Arc<dyn askloop_core::registry::AgentRegistry> =
        Arc::new(askloop_core::registry::AgentSet::new().with(living));
    let server = Server::builder(agents, store.clone() as Arc<dyn RunStore>).build();
    eventually("the sweep recovers the run", || async {
        server.sweep_once().await;
        status_of(&store, &run_id).await == RunStatus::Completed
    })
    .await;
}
