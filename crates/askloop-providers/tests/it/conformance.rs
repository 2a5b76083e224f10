//! The provider conformance scenarios, written once and run over every protocol's recorded
//! streams (see `openai.rs`, `anthropic.rs`, `ollama.rs`).

use std::sync::atomic::Ordering;
use std::time::Duration;

use askloop_core::model::{
    FinishReason, ModelError, ModelEvent, ModelSettings, ToolArgs, ToolChoice,
};
use askloop_providers::WireError;
use serde_json::{Value, json};

use crate::support::{Wire, ask_user_definition, bodies, calls_of, collect, request, text_of};

fn finish_of(events: &[ModelEvent]) -> (FinishReason, askloop_core::model::Usage) {
    match events.last() {
        Some(ModelEvent::Finish { reason, usage }) => (*reason, *usage),
        other => panic!("the last event is not a finish: {other:?}"),
    }
}

fn wire_error(error: &ModelError) -> &WireError {
    let ModelError::Request { source, .. } = error else {
        panic!("expected a request error, got {error:?}");
    };
    source
        .as_deref()
        .and_then(|source| source.downcast_ref::<WireError>())
        .unwrap_or_else(|| panic!("no wire error in {error:?}"))
}

/// Text deltas pass on as they arrive; the finish carries the reason and usage.
pub(crate) async fn streams_text_usage_and_finish(wire: &Wire) {
    let server = wire.server(vec![wire.ok(wire.fixtures.text)]).await;
    let model = wire.model(&server).await;
    assert_eq!(model.provider(), wire.provider);
    assert_eq!(model.model_id(), wire.model);
    let (events, error) = collect(model.as_ref(), request(ModelSettings::default())).await;
    assert!(error.is_none(), "{error:?}");
    let deltas: Vec<&ModelEvent> = events
        .iter()
        .filter(|event| matches!(event, ModelEvent::TextDelta(_)))
        .collect();
    assert_eq!(deltas.len(), 3, "one text-delta per piece: {events:?}");
    assert_eq!(text_of(&events), "Hello! How can I help you today?");
    assert_eq!(finish_of(&events), (FinishReason::Stop, wire.text_usage));
    assert_eq!(bodies(&server).await[0]["model"], wire.model);
}

/// One tool call, with its arguments parsed, and the finish says tool calls.
pub(crate) async fn assembles_one_tool_call(wire: &Wire) {
    let server = wire.server(vec![wire.ok(wire.fixtures.tool_call)]).await;
    let model = wire.model(&server).await;
    let (events, error) = collect(model.as_ref(), request(ModelSettings::default())).await;
    assert!(error.is_none(), "{error:?}");
    let calls = calls_of(&events);
    assert_eq!(calls.len(), 1, "{events:?}");
    assert_eq!(calls[0].name, "ask_user");
    assert_eq!(
        calls[0].args,
        ToolArgs::Json(json!({"question": "Which city?"}))
    );
    match wire.tool_call_id {
        Some(id) => assert_eq!(calls[0].id.as_str(), id),
        None => assert!(!calls[0].id.as_str().is_empty()),
    }
    assert_eq!(
        finish_of(&events),
        (FinishReason::ToolCalls, wire.tool_call_usage)
    );
}

/// Several tool calls in one response come out in order, after the text before them.
pub(crate) async fn assembles_parallel_tool_calls(wire: &Wire) {
    let server = wire
        .server(vec![wire.ok(wire.fixtures.parallel_tool_calls)])
        .await;
    let model = wire.model(&server).await;
    let (events, error) = collect(model.as_ref(), request(ModelSettings::default())).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(text_of(&events), "Two questions first.");
    let calls = calls_of(&events);
    assert_eq!(calls.len(), 2, "{events:?}");
    assert_eq!(
        calls[0].args,
        ToolArgs::Json(json!({"question": "Which month?"}))
    );
    assert_eq!(
        calls[1].args,
        ToolArgs::Json(json!({"question": "Window or aisle?",
            "options": [{"label": "Window"}, {"label": "Aisle"}]}))
    );
    if let Some(ids) = wire.parallel_ids {
        assert_eq!([calls[0].id.as_str(), calls[1].id.as_str()], ids);
    }
    assert_ne!(calls[0].id, calls[1].id);
    assert_eq!(finish_of(&events).0, FinishReason::ToolCalls);
}

/// Issue 7, fault 1: two calls with the same id, empty (`""`) or not, stay two calls with their
/// own arguments, ids as sent (the agent loop makes ids unique); the streamed argument pieces add
/// up to both calls' arguments, in order.
pub(crate) async fn issue7_fault1_calls_with_empty_or_repeated_ids_all_survive(wire: &Wire) {
    let month = json!({"question": "Which month?"});
    let seat = json!({"question": "Window or aisle?",
        "options": [{"label": "Window"}, {"label": "Aisle"}]});
    for id in ["", "call_same"] {
        let body = wire.fixtures.same_ids.replace("__ID__", id);
        let server = wire.server(vec![wire.ok(&body)]).await;
        let model = wire.model(&server).await;
        let (events, error) = collect(model.as_ref(), request(ModelSettings::default())).await;
        assert!(error.is_none(), "{error:?}");
        let calls = calls_of(&events);
        assert_eq!(calls.len(), 2, "id {id:?}: {events:#?}");
        assert_eq!(calls[0].args, ToolArgs::Json(month.clone()), "id {id:?}");
        assert_eq!(calls[1].args, ToolArgs::Json(seat.clone()), "id {id:?}");
        assert!(calls.iter().all(|call| call.id.as_str() == id), "{calls:?}");
        assert!(
            calls.iter().all(|call| call.name == "ask_user"),
            "{calls:?}"
        );
        let streamed: Vec<Value> = tool_call_texts(&events)
            .iter()
            .map(|text| serde_json::from_str(text).unwrap())
            .collect();
        assert_eq!(streamed, [month.clone(), seat.clone()], "id {id:?}");
        assert_eq!(finish_of(&events).0, FinishReason::ToolCalls);
    }
}

/// The argument text of each call as the [`ModelEvent::ToolCallDelta`]s stream it: a delta with
/// a new name, or after a complete JSON value, starts the next call.
fn tool_call_texts(events: &[ModelEvent]) -> Vec<String> {
    let mut texts: Vec<String> = Vec::new();
    for event in events {
        if let ModelEvent::ToolCallDelta { args_delta, .. } = event {
            match texts.last_mut() {
                Some(text) if serde_json::from_str::<Value>(text).is_err() => {
                    text.push_str(args_delta);
                }
                _ => texts.push(args_delta.clone()),
            }
        }
    }
    texts
}

/// Arguments that arrive in dozens of pieces (splitting multi-byte characters' neighbours and
/// escapes) are assembled exactly; each piece is passed on as a tool-call delta.
pub(crate) async fn assembles_arguments_split_across_chunks(wire: &Wire) {
    let fixture = wire
        .fixtures
        .split_arguments
        .expect("a split-arguments recording");
    let expected: Value =
        serde_json::from_str(include_str!("fixtures/openai/split_arguments.args.json")).unwrap();
    let server = wire.server(vec![wire.ok(fixture)]).await;
    let model = wire.model(&server).await;
    let (events, error) = collect(model.as_ref(), request(ModelSettings::default())).await;
    assert!(error.is_none(), "{error:?}");
    let pieces: Vec<&str> = events
        .iter()
        .filter_map(|event| match event {
            ModelEvent::ToolCallDelta { args_delta, .. } => Some(args_delta.as_str()),
            _ => None,
        })
        .collect();
    assert!(pieces.len() > 20, "{} pieces", pieces.len());
    assert_eq!(
        serde_json::from_str::<Value>(&pieces.concat()).unwrap(),
        expected
    );
    let calls = calls_of(&events);
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].args, ToolArgs::Json(expected));
}

/// The request carries `ask_user` with its JSON Schema, and the tool choice asked for.
pub(crate) async fn sends_tools_and_tool_choice(wire: &Wire) {
    let server = wire.server(vec![wire.ok(wire.fixtures.tool_call)]).await;
    let model = wire.model(&server).await;
    let definition = ask_user_definition();
    assert_eq!(definition.input_schema["required"], json!(["question"]));
    let settings = |tool_choice| {
        ModelSettings::new()
            .with_temperature(0.2)
            .with_max_tokens(512)
            .with_tool_choice(tool_choice)
    };
    for choice in [
        ToolChoice::Auto,
        ToolChoice::Required,
        ToolChoice::Tool("ask_user".into()),
    ] {
        let (_, error) = collect(model.as_ref(), request(settings(choice))).await;
        assert!(error.is_none(), "{error:?}");
    }
    let bodies = bodies(&server).await;
    assert_eq!(bodies.len(), 3);
    for body in &bodies {
        assert_eq!(body["tools"], json!([(wire.tool_json)(&definition)]));
        assert_eq!(body["stream"], true);
        let temperature = body["temperature"]
            .as_f64()
            .or_else(|| body["options"]["temperature"].as_f64());
        assert_eq!(temperature, Some(0.2), "{body}");
        let max_tokens = body
            .get("max_tokens")
            .or_else(|| body["options"].get("num_predict"));
        assert_eq!(max_tokens, Some(&json!(512)), "{body}");
    }
    assert_eq!(bodies[0].get("tool_choice"), None, "auto is the default");
    assert_eq!(
        bodies[1].get("tool_choice").cloned(),
        (wire.required_choice)()
    );
    assert_eq!(
        bodies[2].get("tool_choice").cloned(),
        (wire.named_choice)("ask_user")
    );
}

/// 401 is an authentication error naming the key variable, and is not retried.
pub(crate) async fn authentication_error_is_not_retried(wire: &Wire) {
    let server = wire
        .server(vec![wire.error(401, wire.fixtures.error_auth)])
        .await;
    let model = wire.model(&server).await;
    let (events, error) = collect(model.as_ref(), request(ModelSettings::default())).await;
    assert!(events.is_empty());
    let Some(ModelError::Authentication { provider, message }) = error else {
        panic!("expected an authentication error, got {error:?}");
    };
    assert_eq!(provider, wire.provider);
    assert!(message.contains("HTTP 401"), "{message}");
    if let Some(key_var) = wire.key_var {
        assert!(message.contains(key_var), "{message}");
    }
    assert_eq!(bodies(&server).await.len(), 1);
}

/// Another 4xx quotes the provider's message, names the model, and is not retried.
pub(crate) async fn bad_request_is_not_retried(wire: &Wire) {
    let (status, body) = wire.fixtures.error_bad_request;
    let server = wire.server(vec![wire.error(status, body)]).await;
    let model = wire.model(&server).await;
    let (_, error) = collect(model.as_ref(), request(ModelSettings::default())).await;
    let error = error.expect("an error");
    let provider_message = serde_json::from_str::<Value>(body).unwrap();
    let provider_message = provider_message
        .pointer("/error/message")
        .or_else(|| provider_message.get("error"))
        .and_then(Value::as_str)
        .unwrap()
        .to_owned();
    assert!(
        matches!(wire_error(&error), WireError::Status { status: s, message } if *s == status && *message == provider_message),
        "{error:?}"
    );
    let text = error.to_string();
    assert!(
        text.contains(&format!("{}:{}", wire.provider, wire.model)),
        "{text}"
    );
    assert_eq!(bodies(&server).await.len(), 1);
}

/// A rate limit (or overload) is retried with backoff; the next attempt's answer goes through.
pub(crate) async fn rate_limit_then_success(wire: &Wire) {
    let (status, body) = wire.fixtures.error_retryable;
    let server = wire
        .server(vec![wire.error(status, body), wire.ok(wire.fixtures.text)])
        .await;
    let model = wire.model(&server).await;
    let (events, error) = collect(model.as_ref(), request(ModelSettings::default())).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(text_of(&events), "Hello! How can I help you today?");
    let bodies = bodies(&server).await;
    assert_eq!(bodies.len(), 2);
    assert_eq!(bodies[0], bodies[1], "the retry sends the same request");
}

/// Server errors are retried up to the policy's bound, then reported with the last status.
pub(crate) async fn server_errors_exhaust_retries(wire: &Wire) {
    let (status, body) = wire.fixtures.error_retryable;
    let server = wire.server(vec![wire.error(status, body)]).await;
    let model = wire.model(&server).await;
    let (events, error) = collect(model.as_ref(), request(ModelSettings::default())).await;
    assert!(events.is_empty());
    let error = error.expect("an error");
    assert!(
        matches!(wire_error(&error), WireError::Status { status: s, .. } if *s == status),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("gave up after 3 attempts"),
        "{error}"
    );
    assert_eq!(bodies(&server).await.len(), 3);
}

/// A response that is not valid JSON where JSON is due is an invalid response, not retried.
pub(crate) async fn malformed_data_is_an_invalid_response(wire: &Wire) {
    let server = wire.server(vec![wire.ok(wire.fixtures.malformed)]).await;
    let model = wire.model(&server).await;
    let (_, error) = collect(model.as_ref(), request(ModelSettings::default())).await;
    let Some(ModelError::InvalidResponse { model, message }) = error else {
        panic!("expected an invalid response, got {error:?}");
    };
    assert_eq!(model, format!("{}:{}", wire.provider, wire.model));
    assert!(message.contains("malformed"), "{message}");
    assert_eq!(bodies(&server).await.len(), 1);
}

/// Comments and lines that are not SSE fields are skipped.
pub(crate) async fn junk_lines_are_skipped(wire: &Wire) {
    let fixture = wire
        .fixtures
        .junk_lines
        .expect("a recording with junk lines");
    let server = wire.server(vec![wire.ok(fixture)]).await;
    let model = wire.model(&server).await;
    let (events, error) = collect(model.as_ref(), request(ModelSettings::default())).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(text_of(&events), "Hello!");
}

/// A stream that ends after text was passed on is an error, and is not retried (that would
/// repeat the text).
pub(crate) async fn cut_after_text_is_not_retried(wire: &Wire) {
    let server = wire
        .server(vec![
            wire.ok(wire.fixtures.cut_after_text),
            wire.ok(wire.fixtures.text),
        ])
        .await;
    let model = wire.model(&server).await;
    let (events, error) = collect(model.as_ref(), request(ModelSettings::default())).await;
    assert_eq!(events, vec![ModelEvent::TextDelta("Hello".into())]);
    let error = error.expect("an error");
    assert!(
        matches!(wire_error(&error), WireError::StreamCut { .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("not retried"), "{error}");
    assert_eq!(bodies(&server).await.len(), 1);
}

/// A stream that ends before anything was passed on is retried.
pub(crate) async fn cut_before_content_is_retried(wire: &Wire) {
    let server = wire
        .server(vec![
            wire.ok(wire.fixtures.cut_before_content),
            wire.ok(wire.fixtures.text),
        ])
        .await;
    let model = wire.model(&server).await;
    let (events, error) = collect(model.as_ref(), request(ModelSettings::default())).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(text_of(&events), "Hello! How can I help you today?");
    assert_eq!(bodies(&server).await.len(), 2);
}

/// A connection dropped in the middle of the body: retried while nothing was passed on; after
/// text, a typed transport error.
pub(crate) async fn connection_dropped_mid_stream(wire: &Wire) {
    let (base, hits) =
        crate::support::dropping_server(wire.content_type, wire.fixtures.cut_before_content).await;
    let model = wire.model_with(wire.options_for(&base)).await;
    let (events, error) = collect(model.as_ref(), request(ModelSettings::default())).await;
    assert!(events.is_empty());
    let error = error.expect("an error");
    assert!(
        matches!(
            wire_error(&error),
            WireError::Transport { .. } | WireError::StreamCut { .. }
        ),
        "{error:?}"
    );
    assert_eq!(hits.load(Ordering::SeqCst), 3, "retried up to the bound");

    let (base, hits) =
        crate::support::dropping_server(wire.content_type, wire.fixtures.cut_after_text).await;
    let model = wire.model_with(wire.options_for(&base)).await;
    let (events, error) = collect(model.as_ref(), request(ModelSettings::default())).await;
    assert_eq!(events, vec![ModelEvent::TextDelta("Hello".into())]);
    assert!(error.is_some());
    assert_eq!(hits.load(Ordering::SeqCst), 1, "not retried after text");
}

/// An error event from an overloaded server, before any content, is retried.
pub(crate) async fn error_event_is_retried(wire: &Wire) {
    let fixture = wire.fixtures.error_event.expect("an error-event recording");
    let server = wire
        .server(vec![wire.ok(fixture), wire.ok(wire.fixtures.text)])
        .await;
    let model = wire.model(&server).await;
    let (events, error) = collect(model.as_ref(), request(ModelSettings::default())).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(text_of(&events), "Hello! How can I help you today?");
    assert_eq!(bodies(&server).await.len(), 2);
}

/// A server slower than the first-byte timeout is retried.
pub(crate) async fn timeout_is_retried(wire: &Wire) {
    let server = wire
        .server(vec![
            wire.ok(wire.fixtures.text)
                .set_delay(Duration::from_millis(500)),
            wire.ok(wire.fixtures.text),
        ])
        .await;
    let options = wire
        .options(&server)
        .with_first_byte_timeout(Duration::from_millis(100));
    let model = wire.model_with(options).await;
    let (events, error) = collect(model.as_ref(), request(ModelSettings::default())).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(text_of(&events), "Hello! How can I help you today?");
    assert_eq!(bodies(&server).await.len(), 2);
}

/// Issue 33: a tool call in answer to a request that offers no tool (none given, or tool
/// choice `none`) is never passed on as a call, nor as text: the stream ends with
/// [`ModelError::ToolNotOffered`] naming the tool, after one request (the agent loop, not the
/// provider, decides whether to ask again).
pub(crate) async fn issue33_a_tool_call_when_no_tool_is_offered_is_an_error(wire: &Wire) {
    let without_tools = request(ModelSettings::default()).with_tools(Vec::new());
    let choice_none = request(ModelSettings::new().with_tool_choice(ToolChoice::None));
    for offered_nothing in [without_tools, choice_none] {
        assert!(!offered_nothing.offers_tools());
        let server = wire.server(vec![wire.ok(wire.fixtures.tool_call)]).await;
        let model = wire.model(&server).await;
        let (events, error) = collect(model.as_ref(), offered_nothing).await;
        assert!(calls_of(&events).is_empty(), "{events:?}");
        assert!(!text_of(&events).contains("ask_user"), "{events:?}");
        let Some(ModelError::ToolNotOffered { model, tool }) = &error else {
            panic!("expected ToolNotOffered, got {error:?}");
        };
        assert_eq!(tool, "ask_user");
        assert!(model.ends_with(wire.model), "{model}");
        let message = error.as_ref().map(ToString::to_string).unwrap_or_default();
        assert!(message.contains("not offered"), "{message}");
        assert_eq!(
            bodies(&server).await.len(),
            1,
            "not retried by the provider"
        );
    }
}

/// Declares one `#[tokio::test]` per scenario for a protocol: `conformance!(WIRE)` for all of
/// them, or `conformance!(WIRE; scenario, ...)` for those its recordings cover.
macro_rules! conformance {
    ($wire:expr) => {
        crate::conformance::conformance!($wire;
            streams_text_usage_and_finish,
            assembles_one_tool_call,
            assembles_parallel_tool_calls,
            issue7_fault1_calls_with_empty_or_repeated_ids_all_survive,
            assembles_arguments_split_across_chunks,
            sends_tools_and_tool_choice,
            authentication_error_is_not_retried,
            bad_request_is_not_retried,
            rate_limit_then_success,
            server_errors_exhaust_retries,
            malformed_data_is_an_invalid_response,
            junk_lines_are_skipped,
            cut_after_text_is_not_retried,
            cut_before_content_is_retried,
            connection_dropped_mid_stream,
            error_event_is_retried,
            timeout_is_retried,
            issue33_a_tool_call_when_no_tool_is_offered_is_an_error,
        );
    };
    ($wire:expr; $($scenario:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $scenario() {
                crate::conformance::$scenario(&$wire).await;
            }
        )*
    };
}
pub(crate) use conformance;
