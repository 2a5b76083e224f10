//! Issue 31, the AI SDK's stream resumption: `GET /api/agents/{agentId}/chat/{chatId}/stream`
//! is 204 while no turn of the chat runs (also for another tenant's running turn), and
//! otherwise the running turn's UI message stream from its start, then live — through the
//! server that drives it, and through another server on the same store — ending with the parts
//! the original stream gave the client.

use std::sync::Arc;

use askloop_core::registry::AgentSet;
use askloop_core::testing::ScriptedModel;
use askloop_core::{Agent, AskUser, RunStatus, RunStore};
use askloop_server::{ApiKey, Server};
use axum::Router;
use axum::body::Body;
use axum::http::StatusCode;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::on_both_stores;
use crate::support::*;

on_both_stores!(
    issue31_chat_stream_is_204_while_no_turn_runs,
    issue31_chat_stream_is_204_for_another_tenants_running_turn,
    issue31_chat_stream_replays_a_running_turn_then_follows_it,
    issue31_chat_stream_replays_a_resumed_turn_from_the_question_on,
    issue31_chat_stream_follows_a_turn_another_server_drives,
);

/// `slow`: text and a `hold` call, then text. `asker`: text and a question, then a `hold`
/// call, then text.
const SLOW_SCRIPT: &str = r#"{"steps":[
  {"text":"Let me hold.","toolCalls":[{"id":"h1","name":"hold","args":{"what":"the line"}}]},
  {"text":"Held."}]}"#;
const ASKER_SCRIPT: &str = r#"{"steps":[
  {"text":"Let me ask.","toolCalls":[{"id":"c1","name":"ask_user","args":{"question":"Which repo?","options":[{"label":"main"},{"label":"docs"}]}}]},
  {"toolCalls":[{"id":"h2","name":"hold","args":{"what":"main"}}]},
  {"text":"Done."}]}"#;

/// A server over `store` with the agents `slow` and `asker`, whose `hold` calls wait for the
/// returned [`Hold`].
fn resume_server(store: &Arc<dyn RunStore>, keys: Vec<ApiKey>) -> (Server, Hold) {
    let hold = Hold::default();
    let slow = Agent::builder("slow")
        .model(ScriptedModel::from_json(SLOW_SCRIPT).unwrap())
        .tool(hold.clone())
        .shared_store(store.clone())
        .build()
        .unwrap();
    let asker = Agent::builder("asker")
        .model(ScriptedModel::from_json(ASKER_SCRIPT).unwrap())
        .tool(AskUser::new())
        .tool(hold.clone())
        .shared_store(store.clone())
        .build()
        .unwrap();
    let agents = AgentSet::new().with(slow).with(asker);
    let server = Server::builder(Arc::new(agents), store.clone())
        .keys(keys)
        .build();
    (server, hold)
}

fn user_message(chat: &str, text: &str) -> Value {
    json!({"id": chat, "trigger": "submit-message", "messages": [
        {"id": "u1", "role": "user", "parts": [{"type": "text", "text": text}]}
    ]})
}

/// An SSE response read frame by frame.
struct Frames {
    body: Body,
    pending: String,
    done: bool,
}

impl Frames {
    async fn open(router: &Router, method: &str, path: &str, body: Option<Value>) -> Self {
        Self::open_as(router, method, path, body, None).await
    }

    /// [`Frames::open`] with an API key.
    async fn open_as(
        router: &Router,
        method: &str,
        path: &str,
        body: Option<Value>,
        key: Option<&str>,
    ) -> Self {
        let response = router
            .clone()
            .oneshot(request(method, path, body, key))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{method} {path}");
        assert_eq!(response.headers()["x-vercel-ai-ui-message-stream"], "v1");
        Self {
            body: response.into_body(),
            pending: String::new(),
            done: false,
        }
    }

    /// The next chunk, `None` after `[DONE]`.
    async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(end) = self.pending.find("\n\n") {
                let frame: String = self.pending.drain(..end + 2).collect();
                let frame = frame.trim();
                if frame.is_empty() || frame.starts_with(':') {
                    continue;
                }
                let data = frame.strip_prefix("data: ").unwrap();
                if data == "[DONE]" {
                    self.done = true;
                    return None;
                }
                return Some(serde_json::from_str(data).unwrap());
            }
            if self.done {
                return None;
            }
            let frame = self
                .body
                .frame()
                .await
                .expect("the stream ended before [DONE]");
            let data = frame.unwrap().into_data().unwrap_or_default();
            self.pending.push_str(std::str::from_utf8(&data).unwrap());
        }
    }

    /// Chunks until the one announcing the tool call `id` (included).
    async fn until_call(&mut self, id: &str) -> Vec<Value> {
        let mut out = Vec::new();
        while let Some(chunk) = self.next().await {
            let found = chunk["type"] == "tool-input-available" && chunk["toolCallId"] == id;
            out.push(chunk);
            if found {
                return out;
            }
        }
        panic!("no tool-input-available of {id} in {out:?}");
    }

    /// The remaining chunks.
    async fn rest(&mut self) -> Vec<Value> {
        let mut out = Vec::new();
        while let Some(chunk) = self.next().await {
            out.push(chunk);
        }
        out
    }
}

/// The parts a client builds from UI message chunks, as the AI SDK's `processUIMessageStream`
/// does: steps, whole texts, tool parts with their state, data parts by id.
fn parts(chunks: &[Value]) -> Vec<Value> {
    let mut parts: Vec<Value> = Vec::new();
    let tool = |parts: &mut Vec<Value>, id: &Value| -> usize {
        parts
            .iter()
            .rposition(|part| part["toolCallId"] == *id)
            .unwrap_or_else(|| panic!("no tool part {id}"))
    };
    for chunk in chunks {
        match chunk["type"].as_str().unwrap() {
            "start-step" => parts.push(json!({"type": "step-start"})),
            "text-start" => parts.push(json!({"type": "text", "text": ""})),
            "reasoning-start" => parts.push(json!({"type": "reasoning", "text": ""})),
            "text-delta" | "reasoning-delta" => {
                let last = parts.last_mut().unwrap();
                let text = format!(
                    "{}{}",
                    last["text"].as_str().unwrap(),
                    chunk["delta"].as_str().unwrap()
                );
                last["text"] = json!(text);
            }
            "tool-input-available" => parts.push(json!({
                "type": format!("tool-{}", chunk["toolName"].as_str().unwrap()),
                "toolCallId": chunk["toolCallId"],
                "state": "input-available",
                "input": chunk["input"],
            })),
            "tool-output-available" => {
                let at = tool(&mut parts, &chunk["toolCallId"]);
                parts[at]["state"] = json!("output-available");
                parts[at]["output"] = chunk["output"].clone();
            }
            "tool-output-error" => {
                let at = tool(&mut parts, &chunk["toolCallId"]);
                parts[at]["state"] = json!("output-error");
            }
            "tool-approval-request" => {
                let at = tool(&mut parts, &chunk["toolCallId"]);
                parts[at]["state"] = json!("approval-requested");
            }
            kind if kind.starts_with("data-") && chunk["transient"] != true => {
                match parts
                    .iter()
                    .position(|part| part["type"] == kind && part["id"] == chunk["id"])
                {
                    Some(at) => parts[at]["data"] = chunk["data"].clone(),
                    None => {
                        parts.push(json!({"type": kind, "id": chunk["id"], "data": chunk["data"]}))
                    }
                }
            }
            _ => {}
        }
    }
    parts
}

/// The one run of a thread (in the namespace without resource).
async fn run_of(router: &Router, chat: &str) -> String {
    let (status, page) = call(
        router,
        "GET",
        &format!("/api/runs?threadId={chat}"),
        None,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    page["runs"][0]["runId"].as_str().unwrap().to_owned()
}

async fn issue31_chat_stream_is_204_while_no_turn_runs(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    let (server, hold) = resume_server(&store, Vec::new());
    let router = server.router();
    // A chat never used.
    let (status, body) = call(
        &router,
        "GET",
        "/api/agents/slow/chat/new/stream",
        None,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    assert_eq!(body, json!(""));
    // A suspended turn is not running: the question is in the messages.
    let (status, chunks, error) = stream(
        &router,
        "POST",
        "/api/agents/asker/chat",
        Some(user_message("asked", "Summarize a repo")),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{error}");
    assert!(
        chunks
            .iter()
            .any(|chunk| chunk["type"] == "data-askloop-question")
    );
    let (status, _) = call(
        &router,
        "GET",
        "/api/agents/asker/chat/asked/stream",
        None,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    // A completed turn.
    hold.release.notify_one();
    let (status, chunks, error) = stream(
        &router,
        "POST",
        "/api/agents/slow/chat",
        Some(user_message("done", "Hold it")),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{error}");
    assert_eq!(chunks.last().unwrap()["finishReason"], "stop");
    let (status, _) = call(
        &router,
        "GET",
        "/api/agents/slow/chat/done/stream",
        None,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    // An unknown agent is 404; a blank chat id 400, as for `/chat`.
    let (status, body) = call(
        &router,
        "GET",
        "/api/agents/nobody/chat/done/stream",
        None,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["code"], "agent_not_found");
    let (status, body) = call(
        &router,
        "GET",
        "/api/agents/slow/chat/%20/stream",
        None,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["code"], "bad_request");
}

async fn issue31_chat_stream_is_204_for_another_tenants_running_turn(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    let alice = ApiKey::new_secret();
    let bob = ApiKey::new_secret();
    let keys = vec![
        ApiKey::from_secret(&alice, "alice".into()),
        ApiKey::from_secret(&bob, "bob".into()),
    ];
    let (server, hold) = resume_server(&store, keys);
    let router = server.router();
    let original = tokio::spawn({
        let router = router.clone();
        let alice = alice.clone();
        async move {
            stream(
                &router,
                "POST",
                "/api/agents/slow/chat",
                Some(user_message("shared", "Hold it")),
                Some(&alice),
            )
            .await
        }
    });
    eventually("alice's turn runs", || {
        let store = store.clone();
        async move {
            let filter = askloop_core::store::RunFilter::new().status(RunStatus::Running);
            !store.list_runs(&filter).await.unwrap().runs.is_empty()
        }
    })
    .await;
    // Bob's chat "shared" is another thread: nothing runs there.
    let (status, _) = call(
        &router,
        "GET",
        "/api/agents/slow/chat/shared/stream",
        None,
        Some(&bob),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    // Alice's turn is resumable (and then ends): attached while it runs, released only then.
    let mut resumed = Frames::open_as(
        &router,
        "GET",
        "/api/agents/slow/chat/shared/stream",
        None,
        Some(&alice),
    )
    .await;
    let mut replayed = resumed.until_call("h1").await;
    hold.release.notify_one();
    replayed.extend(resumed.rest().await);
    let (_, original, _) = original.await.unwrap();
    assert_eq!(parts(&replayed), parts(&original));
}

async fn issue31_chat_stream_replays_a_running_turn_then_follows_it(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    let (server, hold) = resume_server(&store, Vec::new());
    let router = server.router();
    let mut original = Frames::open(
        &router,
        "POST",
        "/api/agents/slow/chat",
        Some(user_message("c1", "Hold it")),
    )
    .await;
    let before = original.until_call("h1").await;
    // The page reloads: the turn so far, from its start, then live.
    let mut resumed = Frames::open(&router, "GET", "/api/agents/slow/chat/c1/stream", None).await;
    let replayed = resumed.until_call("h1").await;
    assert_eq!(replayed, before, "the replay is the original stream so far");
    let run_id = run_of(&router, "c1").await;
    assert_eq!(replayed[0]["messageId"], format!("msg-{run_id}"));
    hold.release.notify_one();
    let mut original_all = before;
    original_all.extend(original.rest().await);
    let mut resumed_all = replayed;
    resumed_all.extend(resumed.rest().await);
    assert_eq!(resumed_all, original_all);
    assert_eq!(types(&resumed_all).last(), Some(&"finish"));
    // Ended: nothing runs any more.
    let (status, _) = call(
        &router,
        "GET",
        "/api/agents/slow/chat/c1/stream",
        None,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
}

async fn issue31_chat_stream_replays_a_resumed_turn_from_the_question_on(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    let (server, hold) = resume_server(&store, Vec::new());
    let router = server.router();
    let (status, asked, error) = stream(
        &router,
        "POST",
        "/api/agents/asker/chat",
        Some(user_message("c2", "Summarize a repo")),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{error}");
    // The person answers in the chat; the turn goes on to its `hold` call and waits there.
    let answer = json!({"id": "c2", "trigger": "submit-message", "messages": [
        {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "Summarize a repo"}]},
        {"id": "a1", "role": "assistant", "parts": [
            {"type": "tool-ask_user", "toolCallId": "c1", "state": "output-available", "output": "main"}
        ]}
    ]});
    let mut answered = Frames::open(&router, "POST", "/api/agents/asker/chat", Some(answer)).await;
    let mut original = answered.until_call("h2").await;
    let mut resumed = Frames::open(&router, "GET", "/api/agents/asker/chat/c2/stream", None).await;
    let mut replayed = resumed.until_call("h2").await;
    // The replay is the whole turn: the question, its answer, the call that runs now.
    assert!(
        replayed
            .iter()
            .any(|chunk| chunk["type"] == "data-askloop-question")
    );
    assert!(
        replayed
            .iter()
            .any(|chunk| chunk["type"] == "tool-output-available" && chunk["toolCallId"] == "c1")
    );
    hold.release.notify_one();
    original.extend(answered.rest().await);
    replayed.extend(resumed.rest().await);
    // The client's message: the first response's parts, then the answer's.
    let mut client = asked.clone();
    client.extend(original);
    assert_eq!(parts(&replayed), parts(&client));
    assert_eq!(replayed.last().unwrap()["finishReason"], "stop");
}

async fn issue31_chat_stream_follows_a_turn_another_server_drives(backend: Backend) {
    let place = Place::new(backend).await;
    let (driver, hold) = resume_server(&place.open().await, Vec::new());
    let (other, _) = resume_server(&place.open().await, Vec::new());
    let driver = driver.router();
    let other = other.router();
    let mut original = Frames::open(
        &driver,
        "POST",
        "/api/agents/slow/chat",
        Some(user_message("c3", "Hold it")),
    )
    .await;
    let mut original_all = original.until_call("h1").await;
    // The `hold` call is journalled as running before it executes: the step is in the store.
    let run_id = run_of(&driver, "c3").await;
    let store = place.open().await;
    eventually("the step is committed", || {
        let store = store.clone();
        let run_id = run_id.clone();
        async move { load(&store, &run_id).await.state.messages().len() >= 2 }
    })
    .await;
    let mut resumed = Frames::open(&other, "GET", "/api/agents/slow/chat/c3/stream", None).await;
    let mut resumed_all = resumed.until_call("h1").await;
    assert_eq!(resumed_all[0]["messageId"], format!("msg-{run_id}"));
    hold.release.notify_one();
    original_all.extend(original.rest().await);
    resumed_all.extend(resumed.rest().await);
    assert_eq!(parts(&resumed_all), parts(&original_all));
    assert_eq!(resumed_all.last().unwrap()["finishReason"], "stop");
}
