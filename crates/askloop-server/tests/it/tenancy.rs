//! Issue 31 over HTTP, on both stores: tenants own their threads and run ids (the same id used
//! by two tenants is two threads, two runs), a thread has one turn at a time (409
//! `thread_busy`), and blank ids are 400 on every route.

use std::sync::Arc;
use std::time::Duration;

use askloop_core::model::Message;
use askloop_core::store::RunFilter;
use askloop_core::testing::ScriptedModel;
use askloop_core::testing::conformance::support::{TurnModel, turn_text};
use askloop_core::{Agent, AskUser, RunStatus, RunStore, ThreadId, ThreadKey};
use askloop_server::{ApiKey, Server};
use axum::Router;
use axum::http::StatusCode;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::on_both_stores;
use crate::support::*;

on_both_stores!(
    issue31_tenants_racing_first_messages_on_one_thread_id_keep_to_their_own,
    issue31_another_tenants_run_id_starts_the_callers_own_run,
    issue31_a_second_message_while_the_thread_runs_is_409_thread_busy,
    issue31_two_tenants_with_one_chat_id_have_two_chats,
    issue31_blank_ids_are_400_on_every_route,
);

/// The keys of the tests: alice's and bob's secrets.
struct Tenants {
    alice: String,
    bob: String,
}

impl Tenants {
    fn new() -> Self {
        Self {
            alice: ApiKey::new_secret(),
            bob: ApiKey::new_secret(),
        }
    }

    fn keys(&self) -> Vec<ApiKey> {
        vec![
            ApiKey::from_secret(&self.alice, "alice".into()),
            ApiKey::from_secret(&self.bob, "bob".into()),
        ]
    }

    fn key_of(&self, tenant: &str) -> &str {
        if tenant == "alice" {
            &self.alice
        } else {
            &self.bob
        }
    }
}

/// A server over `store` whose agent `turns` answers with `model`, plus the test agents of
/// `support` (`assistant`, `files`, `waiter`) and `failing` (its model fails once, then answers).
fn turn_server(
    store: &Arc<dyn RunStore>,
    model: &Arc<TurnModel>,
    keys: Vec<ApiKey>,
) -> (Server, Hold) {
    let hold = Hold::default();
    let turns = Agent::builder("turns")
        .shared_model(model.clone())
        .tool(AskUser::new())
        .shared_store(store.clone())
        .build()
        .unwrap();
    let failing = Agent::builder("failing")
        .model(
            ScriptedModel::from_json(r#"{"steps":[{"error":"model down"},{"text":"Back."}]}"#)
                .unwrap(),
        )
        .shared_store(store.clone())
        .build()
        .unwrap();
    let set = agents(store, &hold).with(turns).with(failing);
    let server = Server::builder(Arc::new(set), store.clone())
        .keys(keys)
        .build();
    (server, hold)
}

/// A new message to `thread` through `/stream` (`chat: false`) or `/chat`, as `tenant`: the
/// status and, on 200, the run id and whether the stream ended well; else the error body.
async fn post_message(
    router: &Router,
    key: &str,
    agent: &str,
    thread: &str,
    text: &str,
    chat: bool,
) -> (StatusCode, Value) {
    let (path, body) = if chat {
        (
            format!("/api/agents/{agent}/chat"),
            json!({"id": thread, "trigger": "submit-message",
                   "messages": [{"id": "m", "role": "user", "parts": [{"type": "text", "text": text}]}]}),
        )
    } else {
        (
            format!("/api/agents/{agent}/stream"),
            json!({"messages": text, "threadId": thread}),
        )
    };
    let response = router
        .clone()
        .oneshot(request("POST", &path, Some(body), Some(key)))
        .await
        .unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    if status != StatusCode::OK {
        return (status, serde_json::from_str(&text).unwrap());
    }
    let chunks = frames(&text);
    let errors: Vec<&Value> = chunks
        .iter()
        .filter(|chunk| chunk["type"] == "error")
        .collect();
    assert!(errors.is_empty(), "{errors:?}");
    (status, Value::Array(chunks))
}

/// Many first messages of two tenants racing on each new thread id (20 rounds of 10 requests,
/// through `/stream` and `/chat`): each accepted turn's model request holds its own tenant's
/// messages only, no two turns of one tenant's thread run side by side, every refusal is 409
/// `thread_busy` and stores nothing, and each tenant's thread holds its own messages only.
async fn issue31_tenants_racing_first_messages_on_one_thread_id_keep_to_their_own(
    backend: Backend,
) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    let model = TurnModel::new(store.clone(), Duration::from_millis(3));
    let tenants = Tenants::new();
    let (server, _) = turn_server(&store, &model, tenants.keys());
    let router = server.router();
    let mut refused = 0;
    for round in 0..20 {
        let thread = format!("shared-{round}");
        let requests = (0..10).map(|index| {
            let tenant = if index % 2 == 0 { "alice" } else { "bob" };
            let text = if index < 4 {
                turn_text(Some(tenant), &thread, &format!("question {index}?"))
            } else {
                turn_text(Some(tenant), &thread, &format!("message {index}"))
            };
            let (router, key, thread) = (&router, tenants.key_of(tenant), &thread);
            async move {
                let outcome =
                    post_message(router, key, "turns", thread, &text, index % 3 == 0).await;
                (tenant, outcome)
            }
        });
        let outcomes = futures::future::join_all(requests).await;
        refused += outcomes
            .iter()
            .filter(|(_, (status, _))| *status != StatusCode::OK)
            .count();
        for tenant in ["alice", "bob"] {
            let accepted = outcomes
                .iter()
                .filter(|(who, (status, _))| *who == tenant && *status == StatusCode::OK)
                .count();
            for (_, (status, body)) in outcomes.iter().filter(|(who, _)| *who == tenant) {
                if *status != StatusCode::OK {
                    assert_eq!(*status, StatusCode::CONFLICT, "round {round}: {body}");
                    assert_eq!(body["code"], "thread_busy", "round {round}: {body}");
                    assert_eq!(body["details"]["threadId"], thread.as_str());
                }
            }
            assert!(accepted >= 1, "round {round}: {tenant} got no turn");
            let key = ThreadKey::new(Some(tenant.into()), ThreadId::new(thread.as_str()));
            let runs = store.list_runs(&RunFilter::in_thread(&key)).await.unwrap();
            assert_eq!(
                runs.runs.len(),
                accepted,
                "round {round}: refusals store nothing"
            );
            let history = store.thread_history(&key, None).await.unwrap();
            for message in &history.messages {
                if let Message::User { text } = message {
                    assert!(
                        text.starts_with(&format!("{tenant}/")),
                        "round {round}: {tenant}'s thread holds {text:?}"
                    );
                }
            }
        }
    }
    assert_eq!(model.violations(), Vec::<String>::new());
    assert!(model.calls() >= 40);
    eprintln!("{refused} of 200 messages refused as busy");
    assert!(
        refused > 0,
        "the messages raced: some found their thread busy"
    );
}

/// `/stream` with a run id another tenant uses starts the caller's own run (200); the caller
/// reusing its own id is 409 `conflict`; each tenant's run routes name its own run. A server
/// without keys on the same store needs `resourceId` for that id (409 `ambiguous_run`).
async fn issue31_another_tenants_run_id_starts_the_callers_own_run(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    let model = TurnModel::new(store.clone(), Duration::ZERO);
    let tenants = Tenants::new();
    let (server, _) = turn_server(&store, &model, tenants.keys());
    let router = server.router();
    let start = |tenant: &'static str| {
        let router = router.clone();
        let key = tenants.key_of(tenant).to_owned();
        async move {
            stream(
                &router,
                "POST",
                "/api/agents/assistant/stream",
                Some(json!({"messages": "Summarize my project", "runId": "r-fixed"})),
                Some(&key),
            )
            .await
        }
    };
    let (status, chunks, error) = start("alice").await;
    assert_eq!(status, StatusCode::OK, "{error}");
    assert_eq!(chunks[0]["runId"], "r-fixed");
    let (status, chunks, error) = start("bob").await;
    assert_eq!(status, StatusCode::OK, "another tenant's run id: {error}");
    assert_eq!(types(&chunks).last(), Some(&"tool-call-suspended"));
    let (status, _, error) = start("alice").await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(error["code"], "conflict");
    for tenant in ["alice", "bob"] {
        let (status, run) = call(
            &router,
            "GET",
            "/api/runs/r-fixed",
            None,
            Some(tenants.key_of(tenant)),
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(run["resourceId"], tenant);
    }
    // Bob answers his own run; Alice's still waits.
    let (status, chunks, error) = stream(
        &router,
        "POST",
        "/api/agents/assistant/resume-stream",
        Some(json!({"runId": "r-fixed", "resumeData": "main"})),
        Some(&tenants.bob),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{error}");
    assert_eq!(types(&chunks).last(), Some(&"finish"));
    let (_, alices) = call(
        &router,
        "GET",
        "/api/runs/r-fixed",
        None,
        Some(&tenants.alice),
    )
    .await;
    assert_eq!(alices["status"], "suspended");
    // Naming another resource with a key names nothing.
    let (status, _) = call(
        &router,
        "GET",
        "/api/runs/r-fixed?resourceId=bob",
        None,
        Some(&tenants.alice),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Without keys (an admin's server on the same store), the bare id is ambiguous.
    let (open, _) = turn_server(&store, &model, Vec::new());
    let open = open.router();
    let (status, error) = call(&open, "GET", "/api/runs/r-fixed", None, None).await;
    assert_eq!(status, StatusCode::CONFLICT, "{error}");
    assert_eq!(error["code"], "ambiguous_run");
    let mut resources: Vec<&str> = error["details"]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|resource| resource.as_str().unwrap())
        .collect();
    resources.sort_unstable();
    assert_eq!(resources, ["alice", "bob"]);
    let (status, run) = call(
        &open,
        "GET",
        "/api/runs/r-fixed?resourceId=alice",
        None,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(run["status"], "suspended");
    let (status, chunks, error) = stream(
        &open,
        "POST",
        "/api/agents/assistant/resume-stream",
        Some(json!({"runId": "r-fixed", "resourceId": "alice", "resumeData": "main"})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{error}");
    assert_eq!(types(&chunks).last(), Some(&"finish"));
}

/// While a thread's run is running, a new message (`/stream`, `/chat`) is 409 `thread_busy`
/// naming it, and stores nothing; continuing another run of the thread is refused the same
/// way; once the turn ended, the next message starts.
async fn issue31_a_second_message_while_the_thread_runs_is_409_thread_busy(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    let model = TurnModel::new(store.clone(), Duration::ZERO);
    let (server, hold) = turn_server(&store, &model, Vec::new());
    let router = server.router();
    // A failed run of the thread, to be continued later.
    let (status, chunks, _) = stream(
        &router,
        "POST",
        "/api/agents/failing/stream",
        Some(json!({"messages": "try", "threadId": "busy"})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(types(&chunks).last(), Some(&"error"));
    let failed = chunks[0]["runId"].as_str().unwrap().to_owned();
    // The waiter's turn runs (its tool waits to be released).
    let response = router
        .clone()
        .oneshot(request(
            "POST",
            "/api/agents/waiter/stream",
            Some(json!({"messages": "go", "threadId": "busy"})),
            None,
        ))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let first_client = tokio::spawn(async move {
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        frames(std::str::from_utf8(&bytes).unwrap())
    });
    let running = the_running_run(&store).await;
    for (path, body) in [
        (
            "/api/agents/assistant/stream",
            json!({"messages": "second", "threadId": "busy"}),
        ),
        (
            "/api/agents/assistant/chat",
            json!({"id": "busy", "trigger": "submit-message",
                   "messages": [{"role": "user", "parts": [{"type": "text", "text": "second"}]}]}),
        ),
    ] {
        let (status, error) = call(&router, "POST", path, Some(body), None).await;
        assert_eq!(status, StatusCode::CONFLICT, "{path}: {error}");
        assert_eq!(error["code"], "thread_busy");
        assert_eq!(error["details"]["runningRunId"], running.as_str());
        assert_eq!(error["details"]["threadId"], "busy");
        assert!(error["message"].as_str().unwrap().contains(&running));
    }
    let (status, error) = call(
        &router,
        "POST",
        &format!("/api/runs/{failed}/continue"),
        None,
        None,
    )
    .await;
    // The failed run's thread has moved on (the waiter's turn came after it): refused for
    // good, not only while that turn runs.
    assert_eq!(status, StatusCode::CONFLICT, "{error}");
    assert_eq!(error["code"], "thread_moved_on");
    assert_eq!(status_of(&store, &failed).await, RunStatus::Failed);
    let listed = store
        .list_runs(&RunFilter::in_thread(&ThreadKey::new(None, "busy".into())))
        .await
        .unwrap();
    assert_eq!(listed.runs.len(), 2, "the refused messages stored nothing");
    // The turn ends; the next message starts.
    hold.release.notify_one();
    assert_eq!(types(&first_client.await.unwrap()).last(), Some(&"finish"));
    let (status, chunks, error) = stream(
        &router,
        "POST",
        "/api/agents/turns/stream",
        Some(json!({"messages": turn_text(None, "busy", "now"), "threadId": "busy"})),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{error}");
    assert_eq!(types(&chunks).last(), Some(&"finish"));
}

/// The same chat id of two tenants is two chats: their messages, questions and answers stay
/// apart.
async fn issue31_two_tenants_with_one_chat_id_have_two_chats(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    let model = TurnModel::new(store.clone(), Duration::ZERO);
    let tenants = Tenants::new();
    let (server, _) = turn_server(&store, &model, tenants.keys());
    let router = server.router();
    for tenant in ["alice", "bob"] {
        let text = turn_text(Some(tenant), "chat-1", "which one?");
        let (status, chunks) = post_message(
            &router,
            tenants.key_of(tenant),
            "turns",
            "chat-1",
            &text,
            true,
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{chunks}");
    }
    for tenant in ["alice", "bob"] {
        let (status, body) = call(
            &router,
            "GET",
            "/api/agents/turns/chat/chat-1/messages",
            None,
            Some(tenants.key_of(tenant)),
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        let messages = body["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 2, "{tenant}: one question, not superseded");
        assert_eq!(
            messages[0]["parts"][0]["text"],
            turn_text(Some(tenant), "chat-1", "which one?")
        );
    }
    // Alice answers her question in the chat; Bob's still waits.
    let answer = json!({"id": "chat-1", "trigger": "submit-message", "messages": [
        {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "x"}]},
        {"id": "m2", "role": "assistant", "parts": [
            {"type": "tool-ask_user", "toolCallId": "q", "state": "output-available", "output": "this one"}
        ]}
    ]});
    let (status, chunks, error) = stream(
        &router,
        "POST",
        "/api/agents/turns/chat",
        Some(answer),
        Some(&tenants.alice),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{error}");
    assert!(chunks.iter().any(|chunk| chunk["type"] == "finish"));
    for (tenant, status) in [("alice", "completed"), ("bob", "suspended")] {
        let (_, page) = call(
            &router,
            "GET",
            "/api/runs?threadId=chat-1",
            None,
            Some(tenants.key_of(tenant)),
        )
        .await;
        assert_eq!(page["runs"][0]["status"], status, "{tenant}");
    }
    assert_eq!(model.violations(), Vec::<String>::new());
}

/// Blank, invisible, control-character and over-long run, thread, resource and tool call ids
/// are 400 on every route that takes one, before anything changes.
async fn issue31_blank_ids_are_400_on_every_route(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    let model = TurnModel::new(store.clone(), Duration::ZERO);
    let (server, _) = turn_server(&store, &model, Vec::new());
    let router = server.router();
    let run_id = {
        let (status, chunks, _) = stream(
            &router,
            "POST",
            "/api/agents/assistant/stream",
            Some(json!({"messages": "Summarize my project", "resourceId": "u"})),
            None,
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        chunks[0]["runId"].as_str().unwrap().to_owned()
    };
    let long = "x".repeat(300);
    for bad in [" ", "\u{200b}", "\t\n", long.as_str()] {
        let encoded = urlencoding(bad);
        let mut requests: Vec<(&str, String, Option<Value>)> = vec![
            (
                "POST",
                "/api/agents/assistant/stream".into(),
                Some(json!({"messages": "hi", "runId": bad})),
            ),
            (
                "POST",
                "/api/agents/assistant/stream".into(),
                Some(json!({"messages": "hi", "threadId": bad})),
            ),
            (
                "POST",
                "/api/agents/assistant/stream".into(),
                Some(json!({"messages": "hi", "resourceId": bad})),
            ),
            (
                "POST",
                "/api/agents/assistant/stream".into(),
                Some(json!({"messages": "hi", "memory": {"thread": bad, "resource": "u"}})),
            ),
            (
                "POST",
                "/api/agents/assistant/resume-stream".into(),
                Some(json!({"runId": bad, "resumeData": "main"})),
            ),
            (
                "POST",
                "/api/agents/assistant/resume-stream".into(),
                Some(json!({"runId": run_id, "resourceId": bad, "resumeData": "main"})),
            ),
            (
                "POST",
                "/api/agents/files/approve-tool-call".into(),
                Some(json!({"runId": bad, "toolCallId": "w1"})),
            ),
            ("GET", format!("/api/runs/{encoded}"), None),
            (
                "GET",
                format!("/api/runs/{run_id}?resourceId={encoded}"),
                None,
            ),
            ("POST", format!("/api/runs/{encoded}/cancel"), None),
            ("POST", format!("/api/runs/{encoded}/continue"), None),
            ("GET", format!("/api/runs/{encoded}/stream"), None),
            (
                "POST",
                format!("/api/runs/{encoded}/responses"),
                Some(json!({"responses": [{"toolCallId": "c1", "answer": "main"}]})),
            ),
            ("GET", format!("/api/runs?threadId={encoded}"), None),
            ("GET", format!("/api/runs?resourceId={encoded}"), None),
            (
                "GET",
                format!("/api/agents/assistant/suspended-runs?threadId={encoded}"),
                None,
            ),
            (
                "GET",
                format!("/api/agents/assistant/suspended-runs?resourceId={encoded}"),
                None,
            ),
            (
                "POST",
                "/api/agents/assistant/chat".into(),
                Some(
                    json!({"id": bad, "messages": [{"role": "user", "parts": [{"type": "text", "text": "hi"}]}]}),
                ),
            ),
            (
                "GET",
                format!("/api/agents/assistant/chat/{encoded}/messages"),
                None,
            ),
            (
                "GET",
                format!("/api/agents/assistant/chat/{encoded}/stream"),
                None,
            ),
        ];
        // Tool call ids: blank ones (their length limit is another matter).
        if bad != long {
            requests.extend([
                (
                    "POST",
                    "/api/agents/assistant/resume-stream".to_owned(),
                    Some(json!({"runId": run_id, "toolCallId": bad, "resumeData": "main"})),
                ),
                (
                    "POST",
                    "/api/agents/assistant/decline-tool-call".to_owned(),
                    Some(json!({"runId": run_id, "toolCallId": bad})),
                ),
                (
                    "POST",
                    format!("/api/runs/{run_id}/responses"),
                    Some(json!({"responses": [{"toolCallId": bad, "answer": "main"}]})),
                ),
            ]);
        }
        for (method, path, body) in requests {
            let (status, error) = call(&router, method, &path, body.clone(), None).await;
            assert_eq!(
                status,
                StatusCode::BAD_REQUEST,
                "{method} {path} {body:?}: {error}"
            );
            assert_eq!(error["code"], "bad_request", "{method} {path}: {error}");
        }
    }
    // Nothing changed: the one run still waits, alone.
    assert_eq!(status_of(&store, &run_id).await, RunStatus::Suspended);
    assert_eq!(
        store.list_runs(&RunFilter::new()).await.unwrap().runs.len(),
        1
    );
}

/// `text` percent-encoded for a path segment or a query value.
fn urlencoding(text: &str) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => {
                char::from(byte).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}

/// The id of the store's running run (waits for it, at most 10 s).
async fn the_running_run(store: &Arc<dyn RunStore>) -> String {
    for _ in 0..500 {
        let page = store
            .list_runs(&RunFilter::new().status(RunStatus::Running))
            .await
            .unwrap();
        if let Some(run) = page.runs.first() {
            return run.run_id().to_string();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no run is running");
}
