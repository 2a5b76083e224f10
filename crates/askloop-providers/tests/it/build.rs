//! `build_model`: every SPEC form, and the errors it documents.

use std::io::Write;

use askloop_core::model::ModelSettings;
use askloop_providers::{ModelSpec, ProviderError, ProviderOptions, build_model};

use crate::support::{collect, request, text_of};

#[tokio::test]
async fn missing_api_keys_name_the_variable() {
    for (spec, variable) in [
        ("openai:gpt-4o-mini", "OPENAI_API_KEY"),
        ("anthropic:claude-sonnet-4-5", "ANTHROPIC_API_KEY"),
    ] {
        let spec = ModelSpec::parse(spec).unwrap();
        let Err(error) =
            build_model(&spec, &ProviderOptions::with_vars([("UNRELATED", "x")])).await
        else {
            panic!("{spec} built without a key");
        };
        assert!(
            matches!(error, ProviderError::MissingApiKey { variable: v, .. } if v == variable),
            "{error:?}"
        );
        assert!(
            error
                .to_string()
                .contains(&format!("{variable} is not set")),
            "{error}"
        );
    }
}

#[tokio::test]
async fn ollama_needs_no_key() {
    let spec = ModelSpec::parse("ollama:llama3.2").unwrap();
    let model = build_model(&spec, &ProviderOptions::with_vars([("UNRELATED", "x")]))
        .await
        .unwrap();
    assert_eq!(model.provider(), "ollama");
    assert_eq!(model.model_id(), "llama3.2");
}

#[tokio::test]
async fn invalid_base_url_names_the_variable() {
    let spec = ModelSpec::parse("openai:gpt-4o-mini").unwrap();
    let options = ProviderOptions::with_vars([
        ("OPENAI_API_KEY", "k"),
        ("OPENAI_BASE_URL", "127.0.0.1:8000/v1"),
    ]);
    let Err(error) = build_model(&spec, &options).await else {
        panic!("built with a bad URL");
    };
    assert!(
        matches!(&error, ProviderError::InvalidBaseUrl { variable: "OPENAI_BASE_URL", value } if value == "127.0.0.1:8000/v1"),
        "{error:?}"
    );
}

#[tokio::test]
async fn scripted_spec_builds_the_scripted_model() {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    write!(file, r#"{{"steps":[{{"text":"Scripted hello."}}]}}"#).unwrap();
    let spec = ModelSpec::parse(&format!("scripted:{}", file.path().display())).unwrap();
    let model = build_model(&spec, &ProviderOptions::with_vars([("UNRELATED", "x")]))
        .await
        .unwrap();
    assert_eq!(model.provider(), "scripted");
    let (events, error) = collect(model.as_ref(), request(ModelSettings::default())).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(text_of(&events), "Scripted hello.");

    let missing = ModelSpec::Scripted("/nonexistent/script.json".into());
    let Err(error) = build_model(&missing, &ProviderOptions::with_vars([("UNRELATED", "x")])).await
    else {
        panic!("built from a missing script");
    };
    assert!(matches!(error, ProviderError::Script(_)), "{error:?}");
}

#[cfg(not(feature = "local"))]
#[tokio::test]
async fn local_without_the_feature_is_a_typed_error() {
    let spec = ModelSpec::parse("local").unwrap();
    let Err(error) = build_model(&spec, &ProviderOptions::with_vars([("UNRELATED", "x")])).await
    else {
        panic!("local built without the feature");
    };
    assert!(
        matches!(
            error,
            ProviderError::FeatureDisabled {
                feature: "local",
                ..
            }
        ),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        "model SPEC local needs askloop built with the \"local\" feature"
    );
}
