//! Pins `askloop_core::wire` against captures of the reference framework's server
//! (`tests/fixtures/reference-sse-*.txt`, copied from `shared/reference/`): the same run, the
//! same chunk sequence, the same payload fields and values where the reference client reads them.

use askloop_core::schema::SchemaValidator;
use askloop_core::testing::ScriptedModel;
use askloop_core::{Agent, AskUser, Chunk, wire};
use futures::StreamExt;
use serde_json::{Value, json};

const SCRIPT: &str = r#"{"steps":[
  {"toolCalls":[{"id":"c1","name":"ask_user","args":{"question":"Which repo?","options":[{"label":"main"},{"label":"docs"}]}}]},
  {"text":"Summary of main."}]}"#;

fn reference(name: &str) -> Vec<Value> {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter(|data| *data != "[DONE]")
        .map(|data| serde_json::from_str(data).unwrap())
        .collect()
}

async fn ours() -> (Vec<Value>, Vec<Value>) {
    let agent = Agent::builder("assistant")
        .model(ScriptedModel::from_json(SCRIPT).unwrap())
        .tool(AskUser::new())
        .build()
        .unwrap();
    let stream = agent.stream("Summarize my project");
    let run_id = stream.run_id().clone();
    let first: Vec<Chunk> = stream.map(|chunk| chunk.unwrap()).collect().await;
    let resumed = agent
        .resume_stream(json!("main"), &run_id, Some(&"c1".into()))
        .await
        .unwrap();
    let second: Vec<Chunk> = resumed.map(|chunk| chunk.unwrap()).collect().await;
    let to_json = |chunks: Vec<Chunk>| {
        chunks
            .iter()
            .map(|chunk| wire::chunk_to_json(&run_id, chunk))
            .collect()
    };
    (to_json(first), to_json(second))
}

fn types(chunks: &[Value]) -> Vec<&str> {
    chunks
        .iter()
        .map(|chunk| chunk["type"].as_str().unwrap())
        // askloop sends no text-start/text-end (see docs/wire-format.md).
        .filter(|kind| !matches!(*kind, "text-start" | "text-end"))
        .collect()
}

fn find<'a>(chunks: &'a [Value], kind: &str) -> &'a Value {
    chunks.iter().find(|chunk| chunk["type"] == kind).unwrap()
}

fn keys(value: &Value) -> Vec<String> {
    let mut keys: Vec<String> = value.as_object().unwrap().keys().cloned().collect();
    keys.sort();
    keys
}

#[tokio::test]
async fn chunk_sequences_match_the_reference() {
    let (first, second) = ours().await;
    assert_eq!(types(&first), types(&reference("reference-sse-stream.txt")));
    // askloop's resumed stream first re-announces the call it answers (`tool-call`, same id),
    // so a client that starts listening at the resume sees a complete pair; otherwise the
    // sequence is the reference's.
    let reference_chunks = reference("reference-sse-resume-stream.txt");
    let mut expected = vec!["tool-call"];
    expected.extend(types(&reference_chunks));
    assert_eq!(types(&second), expected);
    for chunk in first.iter().chain(&second) {
        assert_eq!(keys(chunk), ["from", "payload", "runId", "type"], "{chunk}");
        assert_eq!(chunk["from"], "AGENT");
    }
}

#[tokio::test]
async fn tool_call_and_suspension_payloads_match_the_reference() {
    let (first, _) = ours().await;
    let expected = reference("reference-sse-stream.txt");
    assert_eq!(
        find(&first, "tool-call")["payload"],
        find(&expected, "tool-call")["payload"]
    );

    let ours = &find(&first, "tool-call-suspended")["payload"];
    let theirs = &find(&expected, "tool-call-suspended")["payload"];
    assert_eq!(keys(ours), keys(theirs));
    for field in ["toolCallId", "toolName", "args", "suspendPayload"] {
        assert_eq!(ours[field], theirs[field], "{field}");
    }
    // Both send the schema as a string. Ours is stricter: exactly the labels.
    let schema: Value = serde_json::from_str(ours["resumeSchema"].as_str().unwrap()).unwrap();
    let reference_schema: Value =
        serde_json::from_str(theirs["resumeSchema"].as_str().unwrap()).unwrap();
    assert_eq!(schema["$schema"], reference_schema["$schema"]);
    let validator = SchemaValidator::new(&schema).unwrap();
    assert!(validator.problems(&json!("main")).is_empty());
    assert!(!validator.problems(&json!("master")).is_empty());
    assert!(!validator.problems(&json!(["main"])).is_empty());
}

#[tokio::test]
async fn resume_payloads_match_the_reference() {
    let (_, second) = ours().await;
    let expected = reference("reference-sse-resume-stream.txt");
    let ours = &find(&second, "tool-result")["payload"];
    let theirs = &find(&expected, "tool-result")["payload"];
    for field in ["toolCallId", "toolName", "args", "result"] {
        assert_eq!(ours[field], theirs[field], "{field}");
    }
    assert_eq!(ours["isError"], false);
    assert_eq!(
        find(&second, "text-delta")["payload"]["text"],
        find(&expected, "text-delta")["payload"]["text"]
    );
    for kind in ["step-finish", "finish"] {
        assert_eq!(
            find(&second, kind)["payload"]["stepResult"]["reason"],
            find(&expected, kind)["payload"]["stepResult"]["reason"],
            "{kind}"
        );
    }
    let finish = &find(&second, "finish")["payload"];
    assert_eq!(finish["output"]["text"], "Summary of main.");
    assert_eq!(finish["stepResult"]["isContinued"], false);
    let usage = &finish["output"]["usage"];
    assert_eq!(keys(usage), ["inputTokens", "outputTokens", "totalTokens"]);
}

#[test]
fn error_chunk_shape() {
    let chunk = wire::error_to_json(
        &"r1".into(),
        "model_error",
        "model scripted request failed: HTTP 503",
    );
    assert_eq!(
        chunk,
        json!({"type": "error", "runId": "r1", "from": "AGENT",
               "payload": {"error": {"message": "model scripted request failed: HTTP 503", "code": "model_error"}}})
    );
}
