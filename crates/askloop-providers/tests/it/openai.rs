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
