//! OpenAI Chat Completions (and OpenAI-compatible servers): the conformance scenarios.

use crate::support::OPENAI;

crate::conformance::conformance!(OPENAI);

/// The model name is sent exactly as given, even where genai would read a reasoning effort from
/// its ending, and no reasoning parameter is added.
#[tokio::test]
async fn model_name_is_sent_as_given() {
    use askloop_core::model::ModelSettings;
    use askloop_providers::{ModelSpec, build_model};

    use crate::support::{bodies, collect, request};

    let wire = &OPENAI;
    let server = wire.server(vec![wire.ok(wire.fixtures.text)]).await;
    let spec = ModelSpec::OpenAi {
        model: "qwen3-max".into(),
    };
    let model = build_model(&spec, &wire.options(&server)).await.unwrap();
    let (_, error) = collect(model.as_ref(), request(ModelSettings::default())).await;
    assert!(error.is_none(), "{error:?}");
    let body = &bodies(&server).await[0];
    assert_eq!(body["model"], "qwen3-max");
    assert_eq!(body.get("reasoning_effort"), None, "{body}");
    assert_eq!(
        body["stream_options"],
        serde_json::json!({"include_usage": true})
    );
}

/// Issue 33, end to end: an OpenAI-compatible server answers a step that offers no tool (an
/// agent without tools) with a tool call. The call is never the answer: the agent loop asks
/// once more, and the second reply, text, completes the run.
#[tokio::test]
async fn issue33_an_unoffered_tool_call_is_asked_again_and_the_text_is_the_answer() {
    use std::sync::Arc;

    use askloop_core::store::MemoryStore;
    use askloop_core::{Agent, RunOutcome};

    use crate::support::bodies;

    let wire = &OPENAI;
    let server = wire
        .server(vec![
            wire.ok(wire.fixtures.tool_call),
            wire.ok(wire.fixtures.text),
        ])
        .await;
    let agent = Agent::builder("chat")
        .shared_model(wire.model(&server).await)
        .shared_store(Arc::new(MemoryStore::new()))
        .build()
        .unwrap();
    let output = agent.generate("Plan my trip").await.unwrap();
    assert!(
        matches!(output.status, RunOutcome::Finished { .. }),
        "{:?}",
        output.status
    );
    assert_eq!(output.text, "Hello! How can I help you today?");
    assert!(!output.text.contains("ask_user"));
    let bodies = bodies(&server).await;
    assert_eq!(bodies.len(), 2, "asked once more");
    for body in &bodies {
        assert_eq!(body.get("tools"), None, "{body}");
    }
}
