//! Issue 31, hostile clients at the edge: the Host and Origin rules, CORS, metric labels from
//! closed sets, what `/api/agents` shows, one secret for two tenants, tool call ids and
//! approvals on every route.

use std::sync::Arc;

use askloop_core::registry::AgentSet;
use askloop_core::testing::ScriptedModel;
use askloop_core::testing::conformance::support::Counter;
use askloop_core::{Agent, AskUser, RunStore};
use askloop_server::{ApiKey, Server};
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::on_both_stores;
use crate::support::*;

/// `request` with more headers.
fn with_headers(mut request: Request<Body>, headers: &[(&str, &str)]) -> Request<Body> {
    for (name, value) in headers {
        request.headers_mut().insert(
            header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            value.parse().unwrap(),
        );
    }
    request
}

/// Sends `method path` with these headers (and a JSON body); the status, the response's
/// headers and its body as JSON.
async fn send_with(
    router: &axum::Router,
    method: &str,
    path: &str,
    body: Option<Value>,
    headers: &[(&str, &str)],
) -> (StatusCode, header::HeaderMap, Value) {
    let request = with_headers(request(method, path, body, None), headers);
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let response_headers = response.headers().clone();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, response_headers, value)
}

/// Starts a run of `assistant` that suspends on its question; its id.
async fn suspended_run(router: &axum::Router, key: Option<&str>) -> String {
    let (status, chunks, error) = stream(
        router,
        "POST",
        "/api/agents/assistant/stream",
        Some(json!({"messages": "Summarize my project"})),
        key,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{error}");
    assert_eq!(types(&chunks).last(), Some(&"tool-call-suspended"));
    chunks[0]["runId"].as_str().unwrap().to_owned()
}

/// The number of runs the store holds.
async fn run_count(store: &Arc<dyn RunStore>) -> usize {
    store
        .list_runs(&askloop_core::store::RunFilter::new())
        .await
        .unwrap()
        .runs
        .len()
}

/// A run's status and pending calls, read over HTTP.
async fn run_view(router: &axum::Router, run_id: &str) -> Value {
    let (status, run) = call(router, "GET", &format!("/api/runs/{run_id}"), None, None).await;
    assert_eq!(status, StatusCode::OK, "{run}");
    run
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue31_a_host_other_than_loopback_is_refused() {
    let place = Place::new(Backend::Sqlite).await;
    let store = place.open().await;
    let (server, _) = server(&store, Vec::new());
    let router = server.router();
    // A page of evil.example whose name now resolves to 127.0.0.1 (DNS rebinding) sends its own
    // name as Host: refused before anything is read or done.
    for host in [
        "evil.example",
        "evil.example:4111",
        "localhost.evil.example:4111",
        "127.0.0.1.nip.io:4111",
        "192.168.1.5:4111",
    ] {
        for (method, path, body) in [
            ("GET", "/api/agents", None),
            ("GET", "/api/runs", None),
            (
                "POST",
                "/api/agents/assistant/stream",
                Some(json!({"messages": "hi"})),
            ),
            ("GET", "/", None),
        ] {
            let (status, _, error) =
                send_with(&router, method, path, body, &[("host", host)]).await;
            assert_eq!(status, StatusCode::MISDIRECTED_REQUEST, "{host} {path}");
            assert_eq!(error["code"], "host_not_allowed", "{host} {path}: {error}");
            assert!(error["message"].is_string(), "{error}");
        }
    }
    assert_eq!(
        run_count(&store).await,
        0,
        "a refused request started a run"
    );
    // Loopback names, with or without a port, in any case.
    for host in [
        "localhost",
        "localhost:4111",
        "LocalHost:4111",
        "127.0.0.1",
        "127.0.0.1:4111",
        "[::1]",
        "[::1]:4111",
    ] {
        let (status, _, body) =
            send_with(&router, "GET", "/api/agents", None, &[("host", host)]).await;
        assert_eq!(status, StatusCode::OK, "{host}: {body}");
    }

    // With keys the rule is the same: a valid key does not make another Host acceptable.
    let secret = ApiKey::new_secret();
    let (keyed, _) =
        crate::support::server(&store, vec![ApiKey::from_secret(&secret, "alice".into())]);
    let keyed = keyed.router();
    let bearer = format!("Bearer {secret}");
    let (status, _, error) = send_with(
        &keyed,
        "GET",
        "/api/agents",
        None,
        &[("host", "evil.example"), ("authorization", &bearer)],
    )
    .await;
    assert_eq!(status, StatusCode::MISDIRECTED_REQUEST, "{error}");
    let (status, _, _) = send_with(
        &keyed,
        "GET",
        "/api/agents",
        None,
        &[("host", "localhost:4111"), ("authorization", &bearer)],
    )
    .await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue31_a_cross_site_request_that_changes_state_is_refused() {
    let place = Place::new(Backend::Sqlite).await;
    let store = place.open().await;
    let (server, _) = server(&store, Vec::new());
    let router = server.router();
    let run_id = suspended_run(&router, None).await;
    let cancel = format!("/api/runs/{run_id}/cancel");
    // A form on evil.example posting to the loopback server: cancel and continue need no body.
    for origin in [
        "https://evil.example",
        "http://evil.example:4111",
        "http://localhost:3000",
        "https://localhost:4112",
        "null",
    ] {
        for (path, body) in [
            (cancel.clone(), None),
            (format!("/api/runs/{run_id}/continue"), None),
            (
                "/api/agents/assistant/stream".to_owned(),
                Some(json!({"messages": "hi"})),
            ),
            (
                format!("/api/runs/{run_id}/responses"),
                Some(json!({"responses": [{"toolCallId": "c1", "answer": "main"}]})),
            ),
        ] {
            let (status, response_headers, error) = send_with(
                &router,
                "POST",
                &path,
                body,
                &[("host", "localhost:4111"), ("origin", origin)],
            )
            .await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{origin} {path}: {error}");
            assert_eq!(error["code"], "cross_origin", "{origin} {path}: {error}");
            assert!(
                !response_headers.contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN),
                "{response_headers:?}"
            );
        }
    }
    let run = run_view(&router, &run_id).await;
    assert_eq!(run["status"], "suspended", "{run}");
    assert_eq!(run_count(&store).await, 1);
    // Reads are answered (the browser keeps them from another origin's page: no CORS header).
    let (status, response_headers, _) = send_with(
        &router,
        "GET",
        "/api/runs",
        None,
        &[
            ("host", "localhost:4111"),
            ("origin", "https://evil.example"),
        ],
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(!response_headers.contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN));
    // The server's own page posts with its own origin: accepted.
    for (host, origin) in [
        ("localhost:4111", "http://localhost:4111"),
        ("127.0.0.1:4111", "http://127.0.0.1:4111"),
    ] {
        let run_id = suspended_run(&router, None).await;
        let (status, _, body) = send_with(
            &router,
            "POST",
            &format!("/api/runs/{run_id}/cancel"),
            None,
            &[("host", host), ("origin", origin)],
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{origin}: {body}");
        assert_eq!(body["status"], "cancelled");
    }
    // Without Origin (curl, the CLI, a server-side client) nothing changes.
    let (status, _, body) = send_with(
        &router,
        "POST",
        &cancel,
        None,
        &[("host", "localhost:4111")],
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue31_configured_hosts_are_answered() {
    let place = Place::new(Backend::Sqlite).await;
    let store = place.open().await;
    let hold = Hold::default();
    let server = Server::builder(Arc::new(agents(&store, &hold)), store.clone())
        .allowed_hosts([
            "askloop.example.com".parse().unwrap(),
            "10.0.0.5:4111".parse().unwrap(),
        ])
        .build();
    let router = server.router();
    for (host, expected) in [
        ("askloop.example.com", StatusCode::OK),
        ("ASKLOOP.example.com:8443", StatusCode::OK),
        ("10.0.0.5:4111", StatusCode::OK),
        ("10.0.0.5:4112", StatusCode::MISDIRECTED_REQUEST),
        ("other.example.com", StatusCode::MISDIRECTED_REQUEST),
        ("localhost:4111", StatusCode::OK),
    ] {
        let (status, _, body) =
            send_with(&router, "GET", "/api/agents", None, &[("host", host)]).await;
        assert_eq!(status, expected, "{host}: {body}");
    }
    // `*`: every host (for a server with keys behind a proxy that rewrites names).
    let any = Server::builder(Arc::new(agents(&store, &hold)), store.clone())
        .allowed_hosts(["*".parse().unwrap()])
        .build()
        .router();
    let (status, _, _) = send_with(
        &any,
        "GET",
        "/api/agents",
        None,
        &[("host", "whatever.example")],
    )
    .await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue31_configured_origins_get_cors_and_may_post() {
    let place = Place::new(Backend::Sqlite).await;
    let store = place.open().await;
    let hold = Hold::default();
    let secret = ApiKey::new_secret();
    let server = Server::builder(Arc::new(agents(&store, &hold)), store.clone())
        .keys(vec![ApiKey::from_secret(&secret, "alice".into())])
        .cors_origins(["http://localhost:3000".parse().unwrap()])
        .build();
    let router = server.router();
    let app = "http://localhost:3000";
    // The preflight of the `useChat` example in docs/http-api.md (another origin, a key in a header).
    let (status, response_headers, _) = send_with(
        &router,
        "OPTIONS",
        "/api/agents/assistant/chat",
        None,
        &[
            ("host", "127.0.0.1:4111"),
            ("origin", app),
            ("access-control-request-method", "POST"),
            (
                "access-control-request-headers",
                "authorization,content-type,user-agent",
            ),
        ],
    )
    .await;
    assert!(status.is_success(), "{status}");
    assert_eq!(response_headers[header::ACCESS_CONTROL_ALLOW_ORIGIN], app);
    let allowed_headers = response_headers[header::ACCESS_CONTROL_ALLOW_HEADERS]
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    for name in ["authorization", "x-api-key", "content-type", "user-agent"] {
        assert!(allowed_headers.contains(name), "{allowed_headers}");
    }
    let allowed_methods = response_headers[header::ACCESS_CONTROL_ALLOW_METHODS]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(allowed_methods.contains("POST"), "{allowed_methods}");
    assert!(!response_headers.contains_key(header::ACCESS_CONTROL_ALLOW_CREDENTIALS));

    // The request itself: answered, with CORS headers the page may read.
    let bearer = format!("Bearer {secret}");
    let chat = json!({"id": "cors-chat", "trigger": "submit-message",
        "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "Summarize my project"}]}]});
    let (status, response_headers, body) = send_with(
        &router,
        "POST",
        "/api/agents/assistant/chat",
        Some(chat.clone()),
        &[
            ("host", "127.0.0.1:4111"),
            ("origin", app),
            ("authorization", &bearer),
        ],
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(response_headers[header::ACCESS_CONTROL_ALLOW_ORIGIN], app);
    let exposed = response_headers[header::ACCESS_CONTROL_EXPOSE_HEADERS]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        exposed.contains("x-vercel-ai-ui-message-stream"),
        "{exposed}"
    );
    // Errors carry them too, so the page can read why.
    let (status, response_headers, body) = send_with(
        &router,
        "GET",
        "/api/runs",
        None,
        &[("host", "127.0.0.1:4111"), ("origin", app)],
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert_eq!(response_headers[header::ACCESS_CONTROL_ALLOW_ORIGIN], app);

    // Another origin: no CORS headers, and no state change.
    let other = "http://localhost:3001";
    let (_, response_headers, _) = send_with(
        &router,
        "OPTIONS",
        "/api/agents/assistant/chat",
        None,
        &[
            ("host", "127.0.0.1:4111"),
            ("origin", other),
            ("access-control-request-method", "POST"),
        ],
    )
    .await;
    assert!(!response_headers.contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN));
    let (status, response_headers, body) = send_with(
        &router,
        "POST",
        "/api/agents/assistant/chat",
        Some(chat),
        &[
            ("host", "127.0.0.1:4111"),
            ("origin", other),
            ("authorization", &bearer),
        ],
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["code"], "cross_origin");
    assert!(!response_headers.contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN));
    assert_eq!(run_count(&store).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue31_metric_labels_come_from_closed_sets() {
    let place = Place::new(Backend::Sqlite).await;
    let store = place.open().await;
    let (server, _) = server(&store, Vec::new());
    let router = server.router();
    // 300 requests with long made-up methods, without a key, on known and unknown paths.
    for index in 0..300 {
        let method = format!("{}{index}", "PROPFINDX".repeat(100));
        for path in ["/api/agents", &format!("/junk/{index}")] {
            let request = Request::builder()
                .method(method.as_str())
                .uri(path)
                .body(Body::empty())
                .unwrap();
            let response = router.clone().oneshot(request).await.unwrap();
            assert!(response.status().is_client_error(), "{}", response.status());
        }
    }
    let (status, text) = call(&router, "GET", "/metrics", None, None).await;
    assert_eq!(status, StatusCode::OK);
    let text = text.as_str().unwrap();
    assert!(!text.contains("PROPFINDX"), "a raw method became a label");
    assert!(!text.contains("/junk/"), "a raw path became a label");
    assert!(
        text.contains(r#"method="other",route="/api/agents""#),
        "{text}"
    );
    assert!(
        text.contains(r#"method="other",route="unmatched""#),
        "{text}"
    );
    assert!(text.len() < 64 * 1024, "the scrape is {} bytes", text.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue31_agents_show_what_a_client_needs_and_no_model_setting() {
    let place = Place::new(Backend::Sqlite).await;
    let store = place.open().await;
    let local = Agent::builder("local")
        .name("Local")
        .instructions("Answer briefly.")
        .model(ScriptedModel::from_json(ASK_SCRIPT).unwrap())
        .model_spec("local:/home/someone/private-models/secret.gguf")
        .tool(AskUser::new())
        .tool(Counter::default())
        .require_approval_for("count")
        .shared_store(store.clone())
        .build()
        .unwrap();
    let server = Server::builder(Arc::new(AgentSet::new().with(local)), store.clone()).build();
    let router = server.router();
    let (status, agents) = call(&router, "GET", "/api/agents", None, None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, one) = call(&router, "GET", "/api/agents/local", None, None).await;
    assert_eq!(status, StatusCode::OK);
    for shown in [&agents["local"], &one] {
        let text = shown.to_string();
        assert!(!text.contains("secret.gguf"), "{text}");
        assert!(!text.contains("private-models"), "{text}");
        assert!(shown.get("modelId").is_none(), "{text}");
        assert_eq!(shown["id"], "local");
        assert_eq!(shown["name"], "Local");
        assert_eq!(shown["instructions"], "Answer briefly.");
        assert!(
            shown["tools"]["ask_user"]["inputSchema"].is_string(),
            "{text}"
        );
        assert_eq!(shown["tools"]["count"]["requireApproval"], true);
        assert_eq!(shown["tools"]["ask_user"]["requireApproval"], false);
    }
    // The document says the same.
    let (_, document) = call(&router, "GET", "/openapi.json", None, None).await;
    let details = &document["components"]["schemas"]["AgentDetails"]["properties"];
    assert!(details.is_object(), "{document}");
    assert!(details.get("modelId").is_none(), "{details}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue31_one_secret_for_two_tenants_answers_for_neither() {
    let place = Place::new(Backend::Sqlite).await;
    let store = place.open().await;
    let (shared, other) = (ApiKey::new_secret(), ApiKey::new_secret());
    let keys = vec![
        ApiKey::from_secret(&shared, "alice".into()),
        ApiKey::from_secret(&other, "carol".into()),
        ApiKey::from_secret(&shared, "bob".into()),
    ];
    let (server, _) = server(&store, keys);
    let router = server.router();
    // Not "the last one wins": the secret is nobody's.
    let (status, error) = call(&router, "GET", "/api/runs", None, Some(&shared)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{error}");
    let (status, _) = call(&router, "GET", "/api/runs", None, Some(&other)).await;
    assert_eq!(status, StatusCode::OK);
}

/// A tool call id as long as some providers make them (several hundred bytes).
fn long_id(bytes: usize) -> String {
    let mut id = "toolu_".to_owned();
    while id.len() < bytes {
        id.push_str("01AbCdEfGhIjKlMnOpQrStUvWxYz");
    }
    id.truncate(bytes);
    id
}

/// A server whose agent `files` calls `count` (approval needed) under the call id `id`, and
/// whose agent `assistant` asks a question under it.
fn server_calling(store: &Arc<dyn RunStore>, id: &str) -> Server {
    let approval = json!({"steps": [
        {"toolCalls": [{"id": id, "name": "count", "args": {"label": "write"}}]},
        {"text": "Noted."}]});
    let question = json!({"steps": [
        {"toolCalls": [{"id": id, "name": "ask_user", "args": {"question": "Which repo?", "options": [{"label": "main"}, {"label": "docs"}]}}]},
        {"text": "Summary of main."}]});
    let files = Agent::builder("files")
        .model(ScriptedModel::from_json(&approval.to_string()).unwrap())
        .tool(Counter::default())
        .require_approval_for("count")
        .shared_store(store.clone())
        .build()
        .unwrap();
    let assistant = Agent::builder("assistant")
        .model(ScriptedModel::from_json(&question.to_string()).unwrap())
        .tool(AskUser::new())
        .shared_store(store.clone())
        .build()
        .unwrap();
    Server::builder(
        Arc::new(AgentSet::new().with(files).with(assistant)),
        store.clone(),
    )
    .build()
}

/// Starts a run of `agent` that waits on its call; the run id.
async fn waiting_run(router: &axum::Router, agent: &str) -> String {
    let (status, chunks, error) = stream(
        router,
        "POST",
        &format!("/api/agents/{agent}/stream"),
        Some(json!({"messages": "go"})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{error}");
    let last = *types(&chunks).last().unwrap();
    assert!(
        last == "tool-call-approval" || last == "tool-call-suspended",
        "{chunks:?}"
    );
    chunks[0]["runId"].as_str().unwrap().to_owned()
}

/// Starts a chat on `agent` (thread `chat`) that waits on its call.
async fn waiting_chat(router: &axum::Router, agent: &str, chat: &str) {
    let body = json!({"id": chat, "trigger": "submit-message",
        "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "go"}]}]});
    let (status, _, error) = stream(
        router,
        "POST",
        &format!("/api/agents/{agent}/chat"),
        Some(body),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{error}");
}

/// The chat request answering with these tool parts.
fn chat_answer(chat: &str, parts: Value) -> Value {
    json!({"id": chat, "trigger": "submit-message", "messages": [
        {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "go"}]},
        {"id": "a1", "role": "assistant", "parts": parts}]})
}

on_both_stores!(
    issue31_tool_call_ids_have_one_generous_limit_on_every_route,
    issue31_an_approval_without_a_boolean_is_refused_on_every_route,
);

async fn issue31_tool_call_ids_have_one_generous_limit_on_every_route(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    // A provider's id of several hundred bytes is accepted by every route, as by `/chat`.
    let id = long_id(600);
    let router = server_calling(&store, &id).router();
    let run = waiting_run(&router, "files").await;
    let (status, chunks, error) = stream(
        &router,
        "POST",
        "/api/agents/files/approve-tool-call",
        Some(json!({"runId": run, "toolCallId": id})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{error}");
    assert_eq!(types(&chunks).last(), Some(&"finish"));
    let run = waiting_run(&router, "files").await;
    let (status, chunks, error) = stream(
        &router,
        "POST",
        "/api/agents/files/decline-tool-call",
        Some(json!({"runId": run, "toolCallId": id, "reason": "no"})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{error}");
    assert_eq!(types(&chunks).last(), Some(&"finish"));
    let run = waiting_run(&router, "assistant").await;
    let (status, chunks, error) = stream(
        &router,
        "POST",
        "/api/agents/assistant/resume-stream",
        Some(json!({"runId": run, "toolCallId": id, "resumeData": "main"})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{error}");
    assert_eq!(types(&chunks).last(), Some(&"finish"));
    let run = waiting_run(&router, "files").await;
    let (status, chunks, error) = stream(
        &router,
        "POST",
        &format!("/api/runs/{run}/responses"),
        Some(json!({"responses": [{"toolCallId": id, "approved": true}]})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{error}");
    assert_eq!(types(&chunks).last(), Some(&"finish"));
    waiting_chat(&router, "files", "chat-long").await;
    let parts = json!([{"type": "tool-count", "toolCallId": id, "state": "approval-responded",
        "input": {"label": "write"}, "approval": {"id": id, "approved": true}}]);
    let (status, chunks, error) = stream(
        &router,
        "POST",
        "/api/agents/files/chat",
        Some(chat_answer("chat-long", parts)),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{error}");
    assert!(
        chunks
            .iter()
            .any(|chunk| chunk["type"] == "tool-output-available"),
        "{chunks:?}"
    );

    // Past 4096 bytes: one error, the same on every route, and nothing changes.
    let too_long = long_id(4097);
    let run = waiting_run(&router, "files").await;
    let question = waiting_run(&router, "assistant").await;
    waiting_chat(&router, "files", "chat-too-long").await;
    let parts = json!([{"type": "tool-count", "toolCallId": too_long, "state": "approval-responded",
        "input": {"label": "write"}, "approval": {"id": too_long, "approved": true}}]);
    let mut errors = Vec::new();
    for (path, body) in [
        (
            "/api/agents/files/approve-tool-call".to_owned(),
            json!({"runId": run, "toolCallId": too_long}),
        ),
        (
            "/api/agents/files/decline-tool-call".to_owned(),
            json!({"runId": run, "toolCallId": too_long}),
        ),
        (
            "/api/agents/assistant/resume-stream".to_owned(),
            json!({"runId": question, "toolCallId": too_long, "resumeData": "main"}),
        ),
        (
            format!("/api/runs/{run}/responses"),
            json!({"responses": [{"toolCallId": too_long, "approved": true}]}),
        ),
        (
            "/api/agents/files/chat".to_owned(),
            chat_answer("chat-too-long", parts),
        ),
    ] {
        let (status, _, error) = stream(&router, "POST", &path, Some(body), None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {error}");
        errors.push((path, error));
    }
    for (path, error) in &errors {
        assert_eq!(error, &errors[0].1, "{path}");
    }
    assert_eq!(errors[0].1["code"], "bad_request");
    assert!(
        errors[0].1["message"].as_str().unwrap().contains("4096"),
        "{}",
        errors[0].1
    );
    assert_eq!(run_view(&router, &run).await["status"], "suspended");
    assert_eq!(run_view(&router, &question).await["status"], "suspended");
}

async fn issue31_an_approval_without_a_boolean_is_refused_on_every_route(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    let (server, _) = server(&store, Vec::new());
    let router = server.router();
    let not_decisions = [
        json!({}),
        json!({"approved": "true"}),
        json!({"approved": null}),
        json!({"approved": 1}),
        json!({"reason": "looks fine"}),
    ];

    // `/chat`: an `approval-responded` part whose approval does not say true or false.
    waiting_chat(&router, "files", "chat-approval").await;
    let (status, listed) = call(
        &router,
        "GET",
        "/api/runs?threadId=chat-approval",
        None,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let chat_run = listed["runs"][0]["runId"].as_str().unwrap().to_owned();
    let mut approvals: Vec<Value> = not_decisions.to_vec();
    approvals.push(Value::Null);
    for approval in approvals {
        let mut part = json!({"type": "tool-count", "toolCallId": "w1",
            "state": "approval-responded", "input": {"label": "write"}});
        if !approval.is_null() {
            part["approval"] = approval.clone();
        }
        let (status, chunks, error) = stream(
            &router,
            "POST",
            "/api/agents/files/chat",
            Some(chat_answer("chat-approval", json!([part]))),
            None,
        )
        .await;
        assert_eq!(
            status,
            StatusCode::BAD_REQUEST,
            "{approval}: {chunks:?} {error}"
        );
        assert_eq!(error["code"], "invalid_answer", "{approval}: {error}");
        let run = run_view(&router, &chat_run).await;
        assert_eq!(run["status"], "suspended", "{approval}: {run}");
        assert_eq!(run["pendingToolCalls"][0]["toolCallId"], "w1");
        assert_eq!(run["pendingToolCalls"][0]["kind"], "approval");
    }

    // resume-stream's resumeData and the batch route, for an approval call.
    let run_id = waiting_run(&router, "files").await;
    for answer in &not_decisions {
        let (status, _, error) = stream(
            &router,
            "POST",
            "/api/agents/files/resume-stream",
            Some(json!({"runId": run_id, "toolCallId": "w1", "resumeData": answer})),
            None,
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}: {error}");
        assert_eq!(error["code"], "invalid_answer", "{answer}: {error}");
        let (status, _, error) = stream(
            &router,
            "POST",
            &format!("/api/runs/{run_id}/responses"),
            Some(json!({"responses": [{"toolCallId": "w1", "answer": answer}]})),
            None,
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}: {error}");
        assert_eq!(error["code"], "invalid_answer", "{answer}: {error}");
    }
    for response in [
        json!({"toolCallId": "w1", "approved": "true"}),
        json!({"toolCallId": "w1", "approved": null}),
        json!({"toolCallId": "w1"}),
        json!({"toolCallId": "w1", "reason": "fine"}),
    ] {
        let (status, _, error) = stream(
            &router,
            "POST",
            &format!("/api/runs/{run_id}/responses"),
            Some(json!({"responses": [response]})),
            None,
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{response}: {error}");
    }
    let run = run_view(&router, &run_id).await;
    assert_eq!(run["status"], "suspended", "{run}");
    assert_eq!(run["pendingToolCalls"][0]["kind"], "approval");

    // A decision is still a decision, on every route.
    let (status, chunks, error) = stream(
        &router,
        "POST",
        "/api/agents/files/resume-stream",
        Some(json!({"runId": run_id, "toolCallId": "w1", "resumeData": {"approved": false}})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{error}");
    assert_eq!(types(&chunks).last(), Some(&"finish"));
    let parts = json!([{"type": "tool-count", "toolCallId": "w1", "state": "approval-responded",
        "input": {"label": "write"}, "approval": {"id": "w1", "approved": false, "reason": "not now"}}]);
    let (status, chunks, error) = stream(
        &router,
        "POST",
        "/api/agents/files/chat",
        Some(chat_answer("chat-approval", parts)),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{error}");
    let output = chunks
        .iter()
        .find(|chunk| chunk["type"] == "tool-output-error")
        .unwrap_or_else(|| panic!("{chunks:?}"));
    assert!(output.to_string().contains("not now"), "{output}");
}
