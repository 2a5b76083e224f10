//! Suspend and resume across "processes" (fresh agents and models over one store that keeps runs
//! only as JSON): the exact message lists each provider receives after one and after more
//! resumes, and a failed model call after a resume that `continue` retries without asking again.

use std::sync::Arc;

use askloop_core::{Agent, AskUser, RunId, RunOutcome, RunOutput, ToolCallId};
use askloop_providers::build_model;
use serde_json::{Value, json};
use wiremock::MockServer;

use crate::support::{ANTHROPIC, OLLAMA, OPENAI, Wire, bodies};
use askloop_core::store::MemoryStore;

/// A fresh agent with a fresh model over `store`: what another process would build.
async fn agent(wire: &Wire, server: &MockServer, store: &Arc<MemoryStore>) -> Agent {
    let model = build_model(&wire.spec(), &wire.options(server))
        .await
        .unwrap();
    Agent::builder("planner")
        .instructions("You plan trips.")
        .shared_model(model)
        .model_spec(wire.spec().to_string())
        .tool(AskUser::new())
        .shared_store(store.clone())
        .build()
        .unwrap()
}

fn pending(output: &RunOutput) -> Vec<ToolCallId> {
    match &output.status {
        RunOutcome::Suspended { pending } => pending
            .iter()
            .map(|call| call.tool_call_id.clone())
            .collect(),
        other => panic!("expected a suspension, got {other:?}"),
    }
}

/// Start → one question → answer ("Paris") → two parallel questions → answer the first in one
/// process ("May"), the second in another ("Window") → final text. Returns the three request
/// bodies and the ids of the parallel calls.
async fn ask_answer_ask_twice(wire: &Wire, first: &'static str) -> (Vec<Value>, Vec<ToolCallId>) {
    let server = wire
        .server(vec![
            wire.ok(first),
            wire.ok(wire.fixtures.parallel_tool_calls),
            wire.ok(wire.fixtures.final_text),
        ])
        .await;
    let store = Arc::new(MemoryStore::new());

    let started = agent(wire, &server, &store)
        .await
        .generate("Plan my trip")
        .await
        .unwrap();
    let run_id: RunId = started.run_id.clone();
    assert_eq!(pending(&started).len(), 1);

    let answered = agent(wire, &server, &store)
        .await
        .resume_stream(json!("Paris"), &run_id, None)
        .await
        .unwrap()
        .collect_output()
        .await
        .unwrap();
    let parallel = pending(&answered);
    assert_eq!(parallel.len(), 2);
    assert_eq!(bodies(&server).await.len(), 2);

    let half = agent(wire, &server, &store)
        .await
        .resume_stream(json!("May"), &run_id, Some(&parallel[0]))
        .await
        .unwrap()
        .collect_output()
        .await
        .unwrap();
    assert!(matches!(half.status, RunOutcome::Suspended { .. }));
    assert_eq!(
        bodies(&server).await.len(),
        2,
        "no model call while a call is unanswered"
    );

    let done = agent(wire, &server, &store)
        .await
        .resume_stream(json!("Window"), &run_id, Some(&parallel[1]))
        .await
        .unwrap()
        .collect_output()
        .await
        .unwrap();
    assert!(matches!(done.status, RunOutcome::Finished { .. }));
    assert_eq!(done.text, "Booked a window seat to Paris in May.");
    (bodies(&server).await, parallel)
}

fn answer(text: &str) -> String {
    json!({"content": format!("User answered: {text}"), "isError": false}).to_string()
}

#[tokio::test]
async fn openai_messages_after_each_resume() {
    let (bodies, _) = ask_answer_ask_twice(&OPENAI, OPENAI.fixtures.tool_call).await;
    assert_eq!(bodies.len(), 3);
    let system = json!({"role": "system", "content": "You plan trips."});
    let user = json!({"role": "user", "content": "Plan my trip"});
    assert_eq!(bodies[0]["messages"], json!([system, user]));
    let first_call = json!({"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "id": "call_DdmO9pD3xa9XTPNJ32zg2hcA",
         "function": {"name": "ask_user", "arguments": "{\"question\":\"Which city?\"}"}}]});
    let first_result = json!({"role": "tool", "content": answer("Paris"),
        "tool_call_id": "call_DdmO9pD3xa9XTPNJ32zg2hcA"});
    assert_eq!(
        bodies[1]["messages"],
        json!([system, user, first_call, first_result])
    );
    let parallel_calls = json!({"role": "assistant", "content": "Two questions first.", "tool_calls": [
        {"type": "function", "id": "call_first",
         "function": {"name": "ask_user", "arguments": "{\"question\":\"Which month?\"}"}},
        {"type": "function", "id": "call_second",
         "function": {"name": "ask_user", "arguments":
            "{\"question\":\"Window or aisle?\",\"options\":[{\"label\":\"Window\"},{\"label\":\"Aisle\"}]}"}}]});
    assert_eq!(
        bodies[2]["messages"],
        json!([
            system,
            user,
            first_call,
            first_result,
            parallel_calls,
            {"role": "tool", "content": answer("May"), "tool_call_id": "call_first"},
            {"role": "tool", "content": answer("Window"), "tool_call_id": "call_second"},
        ])
    );
}

#[tokio::test]
async fn anthropic_messages_after_each_resume_keep_the_signed_thinking() {
    let (bodies, _) = ask_answer_ask_twice(
        &ANTHROPIC,
        include_str!("fixtures/anthropic/thinking_tool_call.sse"),
    )
    .await;
    assert_eq!(bodies.len(), 3);
    for body in &bodies {
        assert_eq!(body["system"], "You plan trips.");
    }
    let user = json!({"role": "user", "content": "Plan my trip"});
    assert_eq!(bodies[0]["messages"], json!([user]));
    let first_call = json!({"role": "assistant", "content": [
        {"type": "thinking",
         "thinking": "The user wants a trip planned. I should ask which city first.",
         "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"},
        {"type": "tool_use", "id": "toolu_think", "name": "ask_user",
         "input": {"question": "Which city?"}}]});
    let first_result = json!({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_think", "content": answer("Paris")}]});
    assert_eq!(
        bodies[1]["messages"],
        json!([user, first_call, first_result])
    );
    let parallel_calls = json!({"role": "assistant", "content": [
        {"type": "text", "text": "Two questions first."},
        {"type": "tool_use", "id": "toolu_first", "name": "ask_user",
         "input": {"question": "Which month?"}},
        {"type": "tool_use", "id": "toolu_second", "name": "ask_user",
         "input": {"question": "Window or aisle?",
                   "options": [{"label": "Window"}, {"label": "Aisle"}]}}]});
    assert_eq!(
        bodies[2]["messages"],
        json!([
            user,
            first_call,
            first_result,
            parallel_calls,
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_first", "content": answer("May")},
                {"type": "tool_result", "tool_use_id": "toolu_second", "content": answer("Window")}]},
        ])
    );
}

#[tokio::test]
async fn ollama_messages_after_each_resume() {
    let (bodies, _) = ask_answer_ask_twice(&OLLAMA, OLLAMA.fixtures.tool_call).await;
    assert_eq!(bodies.len(), 3);
    let system = json!({"role": "system", "content": "You plan trips."});
    let user = json!({"role": "user", "content": "Plan my trip"});
    let first_call = json!({"role": "assistant", "tool_calls": [
        {"function": {"name": "ask_user", "arguments": {"question": "Which city?"}}}]});
    let first_result = json!({"role": "tool", "content": answer("Paris")});
    assert_eq!(
        bodies[1]["messages"],
        json!([system, user, first_call, first_result])
    );
    let parallel_calls = json!({"role": "assistant", "content": "Two questions first.", "tool_calls": [
        {"function": {"name": "ask_user", "arguments": {"question": "Which month?"}}},
        {"function": {"name": "ask_user", "arguments":
            {"question": "Window or aisle?", "options": [{"label": "Window"}, {"label": "Aisle"}]}}}]});
    assert_eq!(
        bodies[2]["messages"],
        json!([
            system,
            user,
            first_call,
            first_result,
            parallel_calls,
            {"role": "tool", "content": answer("May")},
            {"role": "tool", "content": answer("Window")},
        ])
    );
}

/// The model call after a resume fails (every retry); the answer stays recorded, and
/// `continue_stream` retries the step, sending the answer once, without asking again.
async fn failed_call_after_resume_keeps_the_answer(wire: &Wire) {
    let (status, error_body) = wire.fixtures.error_retryable;
    let server = wire
        .server(vec![
            wire.ok(wire.fixtures.tool_call),
            wire.error(status, error_body),
            wire.error(status, error_body),
            wire.error(status, error_body),
            wire.ok(wire.fixtures.final_text),
        ])
        .await;
    let store = Arc::new(MemoryStore::new());
    let started = agent(wire, &server, &store)
        .await
        .generate("Plan my trip")
        .await
        .unwrap();
    let run_id = started.run_id.clone();

    let failed = agent(wire, &server, &store)
        .await
        .resume_stream(json!("Paris"), &run_id, None)
        .await
        .unwrap()
        .collect_output()
        .await;
    assert!(failed.is_err(), "{failed:?}");
    assert_eq!(
        bodies(&server).await.len(),
        4,
        "one call and three attempts"
    );

    let continued = agent(wire, &server, &store)
        .await
        .continue_stream(&run_id)
        .await
        .unwrap()
        .collect_output()
        .await
        .unwrap();
    assert_eq!(continued.text, "Booked a window seat to Paris in May.");
    let bodies = bodies(&server).await;
    assert_eq!(bodies.len(), 5);
    assert_eq!(bodies[4]["messages"], bodies[1]["messages"]);
    let sent = bodies[4]["messages"].to_string();
    assert_eq!(sent.matches("User answered: Paris").count(), 1, "{sent}");
}

#[tokio::test]
async fn openai_failed_call_after_resume_keeps_the_answer() {
    failed_call_after_resume_keeps_the_answer(&OPENAI).await;
}

#[tokio::test]
async fn anthropic_failed_call_after_resume_keeps_the_answer() {
    failed_call_after_resume_keeps_the_answer(&ANTHROPIC).await;
}

/// A redacted thinking block has no text; its opaque data is stored with the run and sent back
/// verbatim, before the tool call it preceded.
#[tokio::test]
async fn anthropic_redacted_thinking_survives_a_resume() {
    let wire = &ANTHROPIC;
    let server = wire
        .server(vec![
            wire.ok(include_str!(
                "fixtures/anthropic/redacted_thinking_tool_call.sse"
            )),
            wire.ok(wire.fixtures.final_text),
        ])
        .await;
    let store = Arc::new(MemoryStore::new());
    let started = agent(wire, &server, &store)
        .await
        .generate("Plan my trip")
        .await
        .unwrap();
    agent(wire, &server, &store)
        .await
        .resume_stream(json!("Paris"), &started.run_id, None)
        .await
        .unwrap()
        .collect_output()
        .await
        .unwrap();
    let bodies = bodies(&server).await;
    assert_eq!(
        bodies[1]["messages"][1],
        json!({"role": "assistant", "content": [
            {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpPkNRj2YfWXGmKDxH4mPnZ5sQ7vB9URj2pLmN3kF8/dW5hR7xJ0aP1oLs9yTcMnKVf2wRpEGjH9XZaBt4UvDcPrQ=="},
            {"type": "tool_use", "id": "toolu_redacted", "name": "ask_user",
             "input": {"question": "Which city?"}}]})
    );
}

/// Two questions wait; the person writes a new message to the thread instead. The model's next
/// request: the two calls, one result each (saying the person wrote instead), then the new
/// message — a history each protocol accepts. Returns the second request's messages.
async fn new_message_while_two_questions_wait(wire: &Wire) -> Value {
    let server = wire
        .server(vec![
            wire.ok(wire.fixtures.parallel_tool_calls),
            wire.ok(wire.fixtures.final_text),
        ])
        .await;
    let store = Arc::new(MemoryStore::new());
    let thread = askloop_core::ThreadId::new("t-new-message");
    let started = agent(wire, &server, &store)
        .await
        .stream_with(
            "Plan my trip",
            askloop_core::RunOptions::new().thread(thread.clone()),
        )
        .collect_output()
        .await
        .unwrap();
    assert_eq!(pending(&started).len(), 2);
    let next = agent(wire, &server, &store)
        .await
        .stream_with(
            "Actually, just book Rome",
            askloop_core::RunOptions::new().thread(thread),
        )
        .collect_output()
        .await
        .unwrap();
    assert!(matches!(next.status, RunOutcome::Finished { .. }));
    let bodies = bodies(&server).await;
    assert_eq!(bodies.len(), 2);
    bodies[1]["messages"].clone()
}

fn instead(text: &str) -> String {
    json!({"content": format!("the person did not answer and wrote instead: {text:?}"), "isError": false})
        .to_string()
}

#[tokio::test]
async fn new_message_while_questions_wait_openai() {
    let messages = new_message_while_two_questions_wait(&OPENAI).await;
    let messages = messages.as_array().unwrap();
    let tail = &messages[messages.len() - 4..];
    assert_eq!(tail[0]["role"], "assistant");
    assert_eq!(
        tail[1],
        json!({"role": "tool", "content": instead("Actually, just book Rome"), "tool_call_id": "call_first"})
    );
    assert_eq!(
        tail[2],
        json!({"role": "tool", "content": instead("Actually, just book Rome"), "tool_call_id": "call_second"})
    );
    assert_eq!(
        tail[3],
        json!({"role": "user", "content": "Actually, just book Rome"})
    );
}

#[tokio::test]
async fn new_message_while_questions_wait_anthropic() {
    let messages = new_message_while_two_questions_wait(&ANTHROPIC).await;
    let messages = messages.as_array().unwrap();
    // Every tool_use answered by a tool_result in the very next (user) message, then the text.
    let last_assistant = messages
        .iter()
        .rposition(|message| message["role"] == "assistant")
        .unwrap();
    let after: Vec<&Value> = messages[last_assistant + 1..].iter().collect();
    let blocks: Vec<Value> = after
        .iter()
        .flat_map(|message| match &message["content"] {
            Value::Array(blocks) => blocks.clone(),
            text => vec![json!({"type": "text", "text": text})],
        })
        .collect();
    assert!(
        after.iter().all(|message| message["role"] == "user"),
        "{after:?}"
    );
    assert_eq!(
        blocks,
        [
            json!({"type": "tool_result", "tool_use_id": "toolu_first", "content": instead("Actually, just book Rome")}),
            json!({"type": "tool_result", "tool_use_id": "toolu_second", "content": instead("Actually, just book Rome")}),
            json!({"type": "text", "text": "Actually, just book Rome"}),
        ]
    );
    assert_eq!(
        after[0]["content"][0]["type"], "tool_result",
        "results come first"
    );
}

#[tokio::test]
async fn new_message_while_questions_wait_ollama() {
    let messages = new_message_while_two_questions_wait(&OLLAMA).await;
    let messages = messages.as_array().unwrap();
    let tail = &messages[messages.len() - 3..];
    assert_eq!(
        tail,
        [
            json!({"role": "tool", "content": instead("Actually, just book Rome")}),
            json!({"role": "tool", "content": instead("Actually, just book Rome")}),
            json!({"role": "user", "content": "Actually, just book Rome"}),
        ]
    );
}
