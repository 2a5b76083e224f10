//! Anthropic Messages: the conformance scenarios, and thinking blocks with their signatures.

use askloop_core::model::{ModelEvent, ModelSettings};

use crate::support::{ANTHROPIC, calls_of, collect, request};

crate::conformance::conformance!(ANTHROPIC);

/// Thinking streams as reasoning deltas, then the whole block with its signature, before the
/// tool call.
#[tokio::test]
async fn thinking_block_keeps_its_signature() {
    let wire = &ANTHROPIC;
    let server = wire
        .server(vec![
            wire.ok(include_str!("fixtures/anthropic/thinking_tool_call.sse")),
        ])
        .await;
    let model = wire.model(&server).await;
    let (events, error) = collect(model.as_ref(), request(ModelSettings::default())).await;
    assert!(error.is_none(), "{error:?}");
    let thinking = "The user wants a trip planned. I should ask which city first.";
    assert_eq!(
        events[..3],
        [
            ModelEvent::ReasoningDelta("The user wants a trip planned. ".into()),
            ModelEvent::ReasoningDelta("I should ask which city first.".into()),
            ModelEvent::Reasoning {
                text: thinking.into(),
                signature: Some("EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds".into()),
            },
        ]
    );
    assert_eq!(calls_of(&events)[0].id.as_str(), "toolu_think");
}

/// Requests carry the key and API version headers Anthropic requires.
#[tokio::test]
async fn requests_carry_key_and_version_headers() {
    let wire = &ANTHROPIC;
    let server = wire.server(vec![wire.ok(wire.fixtures.text)]).await;
    let model = wire.model(&server).await;
    let (_, error) = collect(model.as_ref(), request(ModelSettings::default())).await;
    assert!(error.is_none(), "{error:?}");
    let requests = server.received_requests().await.unwrap();
    let headers = &requests[0].headers;
    assert_eq!(headers.get("x-api-key").unwrap(), "test-key");
    assert_eq!(headers.get("anthropic-version").unwrap(), "2023-06-01");
}

/// The model name is sent exactly as given, even where genai would read a reasoning effort from
/// its ending, and no thinking configuration is added.
#[tokio::test]
async fn model_name_is_sent_as_given() {
    use askloop_providers::{ModelSpec, build_model};

    use crate::support::bodies;

    let wire = &ANTHROPIC;
    let server = wire.server(vec![wire.ok(wire.fixtures.text)]).await;
    let spec = ModelSpec::Anthropic {
        model: "claude-sonnet-4-5-high".into(),
    };
    let model = build_model(&spec, &wire.options(&server)).await.unwrap();
    let (_, error) = collect(model.as_ref(), request(ModelSettings::default())).await;
    assert!(error.is_none(), "{error:?}");
    let body = &bodies(&server).await[0];
    assert_eq!(body["model"], "claude-sonnet-4-5-high");
    assert_eq!(body.get("thinking"), None, "{body}");
    assert_eq!(body.get("output_config"), None, "{body}");
}
