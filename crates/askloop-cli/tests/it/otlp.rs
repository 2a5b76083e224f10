//! Opt-in OTLP export: `askloop run` with `OTEL_EXPORTER_OTLP_ENDPOINT` pointing at a loopback
//! receiver of `POST /v1/traces` exports its spans (run, step, model call, tool call) as
//! OTLP/HTTP protobuf, flushed before the process exits.

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;

use crate::support::{ASK_THEN_ANSWER, TestDir};

/// The string value of a span's attribute.
fn attribute(span: &Span, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|attribute| attribute.key == key)
        .and_then(|attribute| attribute.value.as_ref()?.value.as_ref())
        .map(|value| match value {
            AnyValue::StringValue(text) => text.clone(),
            AnyValue::IntValue(number) => number.to_string(),
            AnyValue::BoolValue(flag) => flag.to_string(),
            other => format!("{other:?}"),
        })
}

/// The export requests received: each one's content type and body.
type Received = Arc<Mutex<Vec<(Option<String>, Bytes)>>>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_exports_its_spans_over_otlp() {
    let received: Received = Arc::default();
    let sink = received.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        post(move |headers: axum::http::HeaderMap, body: Bytes| {
            let sink = sink.clone();
            async move {
                let content_type = headers
                    .get(axum::http::header::CONTENT_TYPE)
                    .and_then(|value| value.to_str().ok())
                    .map(str::to_owned);
                sink.lock().unwrap().push((content_type, body));
                ""
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });

    let out = tokio::task::spawn_blocking(move || {
        let dir = TestDir::new();
        let spec = dir.script("ask.json", ASK_THEN_ANSWER);
        let store = dir.store_url();
        let mut command = dir.command(&[
            "--store",
            &store,
            "run",
            "--json",
            "--model",
            &spec,
            "Summarize my project",
        ]);
        command.env("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{address}"));
        crate::support::outcome(command)
    })
    .await
    .unwrap()
    .success();
    let lines = out.json_lines();
    let run_id = lines.last().unwrap()["runId"].as_str().unwrap().to_owned();

    let batches = received.lock().unwrap().clone();
    assert!(
        !batches.is_empty(),
        "no export reached the receiver; stderr: {}",
        out.stderr
    );
    let mut spans = Vec::new();
    for (content_type, body) in &batches {
        assert_eq!(content_type.as_deref(), Some("application/x-protobuf"));
        let request = ExportTraceServiceRequest::decode(body.as_ref()).unwrap();
        for resource in request.resource_spans {
            let service = resource
                .resource
                .as_ref()
                .and_then(|resource| {
                    resource
                        .attributes
                        .iter()
                        .find(|attribute| attribute.key == "service.name")
                })
                .and_then(|attribute| attribute.value.as_ref()?.value.clone());
            assert_eq!(service, Some(AnyValue::StringValue("askloop".into())));
            for scope in resource.scope_spans {
                spans.extend(scope.spans);
            }
        }
    }
    let named = |name: &str| spans.iter().find(|span| span.name == name);
    let run = named("run").unwrap_or_else(|| panic!("no run span: {spans:#?}"));
    assert_eq!(attribute(run, "run_id").as_deref(), Some(run_id.as_str()));
    assert_eq!(attribute(run, "kind").as_deref(), Some("start"));
    let step = named("step").expect("a step span");
    assert_eq!(step.parent_span_id, run.span_id);
    assert_eq!(step.trace_id, run.trace_id);
    let model = named("model call").expect("a model call span");
    assert_eq!(model.parent_span_id, step.span_id);
    assert_eq!(
        attribute(model, "gen_ai.request.model")
            .as_deref()
            .map(|model| model.is_empty()),
        Some(false)
    );
    assert!(
        attribute(model, "gen_ai.usage.input_tokens").is_some(),
        "{model:#?}"
    );
    let tool = named("tool call").expect("a tool call span");
    assert_eq!(tool.parent_span_id, step.span_id);
    assert_eq!(
        attribute(tool, "gen_ai.tool.name").as_deref(),
        Some("ask_user")
    );
    assert_eq!(
        attribute(tool, "gen_ai.tool.call.id").as_deref(),
        Some("c1")
    );
    assert_eq!(attribute(tool, "outcome").as_deref(), Some("suspended"));
}
