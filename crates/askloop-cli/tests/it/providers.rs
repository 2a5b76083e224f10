//! Hosted models end to end: `askloop run --model openai:… --json` (and `anthropic:…`) against a
//! mock server whose model asks with `ask_user`, then `askloop resume` in a second process; the
//! follow-up request carries the answer as the tool result.

use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

use crate::support::{Outcome, TestDir, outcome};

/// Answers with recorded streams in turn (the last one repeats).
struct Sequence {
    bodies: Vec<&'static str>,
    next: AtomicUsize,
}

impl Respond for Sequence {
    fn respond(&self, _request: &Request) -> ResponseTemplate {
        let index = self.next.fetch_add(1, Ordering::SeqCst);
        let body = self.bodies[index.min(self.bodies.len() - 1)];
        ResponseTemplate::new(200).set_body_raw(body.as_bytes().to_vec(), "text/event-stream")
    }
}

async fn server(endpoint: &str, bodies: Vec<&'static str>) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(endpoint))
        .respond_with(Sequence {
            bodies,
            next: AtomicUsize::new(0),
        })
        .mount(&server)
        .await;
    server
}

async fn bodies(server: &MockServer) -> Vec<Value> {
    server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .map(|request| serde_json::from_slice(&request.body).unwrap())
        .collect()
}

/// `askloop --store … ARGS` with the provider's variables set, as a separate process.
fn askloop(dir: &TestDir, vars: &[(&str, String)], args: &[&str]) -> Outcome {
    let store = dir.store_url();
    let mut full = vec!["--store", store.as_str()];
    full.extend_from_slice(args);
    let mut command = dir.command(&full);
    for (name, value) in vars {
        command.env(name, value);
    }
    outcome(command)
}

/// Runs, suspends on `ask_user`, resumes in a second process; returns the two request bodies.
async fn run_then_resume(
    spec: &str,
    endpoint: &str,
    vars: impl Fn(&MockServer) -> Vec<(&'static str, String)>,
    ask: &'static str,
    answer: &'static str,
) -> Vec<Value> {
    let server = server(endpoint, vec![ask, answer]).await;
    let vars = vars(&server);
    let dir = TestDir::new();

    let started = askloop(
        &dir,
        &vars,
        &["run", "--model", spec, "--json", "Plan my trip"],
    )
    .success();
    let lines = started.json_lines();
    let last = lines.last().unwrap();
    assert_eq!(last["type"], "tool-call-suspended", "{lines:#?}");
    let run_id = last["runId"].as_str().unwrap().to_owned();
    assert_eq!(bodies(&server).await.len(), 1);

    let resumed = askloop(
        &dir,
        &vars,
        &["resume", &run_id, "--answer", "Paris", "--json"],
    )
    .success();
    let lines = resumed.json_lines();
    let text: String = lines
        .iter()
        .filter(|line| line["type"] == "text-delta")
        .filter_map(|line| line["payload"]["text"].as_str())
        .collect();
    assert_eq!(text, "Booked a window seat to Paris in May.", "{lines:#?}");
    bodies(&server).await
}

fn answer_text() -> String {
    json!({"content": "User answered: Paris", "isError": false}).to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn openai_run_then_resume_in_another_process() {
    let bodies = run_then_resume(
        "openai:gpt-4o-mini",
        "/v1/chat/completions",
        |server| {
            vec![
                ("OPENAI_API_KEY", "test-key".to_owned()),
                ("OPENAI_BASE_URL", format!("{}/v1", server.uri())),
            ]
        },
        include_str!("../../../askloop-providers/tests/it/fixtures/openai/tool_call.sse"),
        include_str!("../../../askloop-providers/tests/it/fixtures/openai/final_text.sse"),
    )
    .await;
    assert_eq!(bodies.len(), 2);
    assert_eq!(bodies[0]["tools"][0]["function"]["name"], "ask_user");
    let messages = bodies[1]["messages"].as_array().unwrap();
    assert_eq!(
        messages[messages.len() - 2]["tool_calls"][0]["id"],
        "call_DdmO9pD3xa9XTPNJ32zg2hcA"
    );
    assert_eq!(
        messages.last().unwrap(),
        &json!({"role": "tool", "tool_call_id": "call_DdmO9pD3xa9XTPNJ32zg2hcA",
            "content": answer_text()})
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn anthropic_run_then_resume_in_another_process() {
    let bodies = run_then_resume(
        "anthropic:claude-sonnet-4-5",
        "/v1/messages",
        |server| {
            vec![
                ("ANTHROPIC_API_KEY", "test-key".to_owned()),
                ("ANTHROPIC_BASE_URL", server.uri()),
            ]
        },
        include_str!(
            "../../../askloop-providers/tests/it/fixtures/anthropic/thinking_tool_call.sse"
        ),
        include_str!("../../../askloop-providers/tests/it/fixtures/anthropic/final_text.sse"),
    )
    .await;
    assert_eq!(bodies.len(), 2);
    assert_eq!(bodies[0]["tools"][0]["name"], "ask_user");
    let messages = bodies[1]["messages"].as_array().unwrap();
    assert_eq!(
        messages[messages.len() - 2]["content"][0]["signature"],
        "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds",
        "the thinking block survives the store and the second process"
    );
    assert_eq!(
        messages.last().unwrap(),
        &json!({"role": "user", "content": [{"type": "tool_result",
            "tool_use_id": "toolu_think", "content": answer_text()}]})
    );
}

#[test]
fn missing_key_names_the_variable() {
    let dir = TestDir::new();
    let store = dir.store_url();
    let mut command = dir.command(&[
        "--store",
        &store,
        "run",
        "--model",
        "anthropic:claude-sonnet-4-5",
        "--json",
        "Hi",
    ]);
    command.env_remove("ANTHROPIC_API_KEY");
    let out = outcome(command).code(2);
    assert!(
        out.stderr.contains("ANTHROPIC_API_KEY is not set"),
        "{}",
        out.stderr
    );
}
