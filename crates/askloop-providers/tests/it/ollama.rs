//! Ollama's native `/api/chat` (newline-delimited JSON): the scenarios its API has.

use askloop_core::model::{ModelSettings, ToolChoice};
use serde_json::json;

use crate::support::{OLLAMA, bodies, collect, request};

crate::conformance::conformance!(OLLAMA;
    streams_text_usage_and_finish,
    assembles_one_tool_call,
    assembles_parallel_tool_calls,
    issue7_fault1_calls_with_empty_or_repeated_ids_all_survive,
    sends_tools_and_tool_choice,
    authentication_error_is_not_retried,
    bad_request_is_not_retried,
    rate_limit_then_success,
    server_errors_exhaust_retries,
    malformed_data_is_an_invalid_response,
    cut_after_text_is_not_retried,
    cut_before_content_is_retried,
    connection_dropped_mid_stream,
    timeout_is_retried,
    issue33_a_tool_call_when_no_tool_is_offered_is_an_error,
);

/// Ollama's API has no `tool_choice`: `none` is sent as no tools at all.
#[tokio::test]
async fn tool_choice_none_offers_no_tools() {
    let wire = &OLLAMA;
    let server = wire.server(vec![wire.ok(wire.fixtures.text)]).await;
    let model = wire.model(&server).await;
    let settings = ModelSettings::new().with_tool_choice(ToolChoice::None);
    let (_, error) = collect(model.as_ref(), request(settings)).await;
    assert!(error.is_none(), "{error:?}");
    let body = &bodies(&server).await[0];
    assert_eq!(body.get("tools"), None);
    assert_eq!(
        body["messages"][0],
        json!({"role": "system", "content": "You plan trips."})
    );
}
