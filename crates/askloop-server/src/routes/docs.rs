//! `GET /openapi.json` (generated from the handlers by utoipa) and `GET /docs` (a static page
//! listing the routes of that document; no CDN, no script).

use askloop_core::PendingKind;
use askloop_core::wire::{ApprovalJson, PendingCall};
use axum::Json;
use axum::response::Html;
use utoipa::OpenApi;

use crate::api;
use crate::error::ErrorBody;

/// The OpenAPI document of every route.
#[derive(OpenApi)]
#[openapi(
    info(title = "askloop", description = "Agents over HTTP with SSE: the reference framework's agent API, askloop's runs and inbox."),
    paths(
        crate::routes::agents::list_agents,
        crate::routes::agents::get_agent,
        crate::routes::agents::stream,
        crate::routes::agents::resume_stream,
        crate::routes::agents::approve_tool_call,
        crate::routes::agents::decline_tool_call,
        crate::routes::agents::suspended_runs,
        crate::routes::runs::list_runs,
        crate::routes::runs::get_run,
        crate::routes::runs::cancel_run,
        crate::routes::runs::continue_run,
        crate::routes::runs::respond,
        crate::routes::runs::fork_run,
        crate::routes::runs::reattach,
        crate::routes::links::create_link,
        crate::routes::links::revoke_links,
        crate::routes::links::answer,
        crate::routes::inbox::inbox_events,
        crate::routes::chat::post_chat,
        crate::routes::chat::get_messages,
        crate::routes::chat::get_stream,
        healthz,
        crate::routes::metrics::metrics,
        crate::routes::webhooks::list_deliveries,
        crate::routes::webhooks::replay_delivery,
    ),
    components(schemas(ErrorBody, api::StreamRequest, api::ResumeRequest, api::ApprovalRequest,
        api::ResponsesRequest, api::CallResponseBody, api::AgentDetails, api::ToolInfo,
        api::RunList, api::RunSummaryBody, PendingCall, PendingKind, ApprovalJson, api::RunDetail, api::FailureBody,
        api::ActorBody, api::DecisionBody,
        api::SuspendedRunList, api::SuspendedRun, api::SuspendedCall, api::CancelledBody, api::RepeatNote,
        crate::routes::chat::ChatRequest, crate::routes::chat::UiMessage, crate::routes::chat::ChatMessages,
        api::DeliveryList, api::DeliveryBody, api::AttemptBody, api::ReplayedBody,
        api::LinkRequestBody, api::LinkBody, api::RevokedLinksBody, api::LinkAnswerRequest,
        api::LinkAnsweredBody)),
    tags((name = "agents", description = "The reference framework's agent API"),
         (name = "runs", description = "askloop's runs and inbox"),
         (name = "chat", description = "The AI SDK's chat transport (`useChat`, `DefaultChatTransport`)"),
         (name = "webhooks", description = "Webhook deliveries of the runs' events")),
    modifiers(&EdgeResponses)
)]
pub(crate) struct ApiDoc;

/// The answers any route may give before its handler runs (`crate::edge`, the body deadline):
/// 421 `host_not_allowed` on every operation; on POST and DELETE operations 403
/// `cross_origin` and, for those with a body, 408 `timeout`.
struct EdgeResponses;

impl utoipa::Modify for EdgeResponses {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};
        let error = |description: &str| {
            RefOr::T(
                ResponseBuilder::new()
                    .description(description)
                    .content(
                        "application/json",
                        ContentBuilder::new()
                            .schema(Some(Ref::from_schema_name("ErrorBody")))
                            .build(),
                    )
                    .build(),
            )
        };
        let host = "host_not_allowed: the request names a host this server does not answer to";
        let cross = "cross_origin: a page of another origin may not change anything";
        for item in openapi.paths.paths.values_mut() {
            if let Some(operation) = item.get.as_mut() {
                operation
                    .responses
                    .responses
                    .entry("421".to_owned())
                    .or_insert_with(|| error(host));
            }
            for operation in [item.post.as_mut(), item.delete.as_mut()]
                .into_iter()
                .flatten()
            {
                let responses = &mut operation.responses.responses;
                responses
                    .entry("421".to_owned())
                    .or_insert_with(|| error(host));
                match responses.get_mut("403") {
                    Some(RefOr::T(forbidden)) => {
                        forbidden.description = format!("{}; {cross}", forbidden.description);
                    }
                    _ => {
                        responses.insert("403".to_owned(), error(cross));
                    }
                }
                if operation.request_body.is_some() {
                    responses.entry("408".to_owned()).or_insert_with(|| {
                        error(
                            "timeout: the request body did not arrive within the body read timeout",
                        )
                    });
                }
            }
        }
    }
}

/// `GET /healthz`: `ok` while the server serves.
#[utoipa::path(get, path = "/healthz", tag = "runs",
    responses((status = 200, description = "The server serves", content_type = "text/plain", body = String)))]
pub(crate) async fn healthz() -> &'static str {
    "ok"
}

/// `GET /openapi.json`.
pub(crate) async fn openapi_json() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}

/// `GET /docs`: the routes of the OpenAPI document as a plain HTML page.
pub(crate) async fn docs_page() -> Html<String> {
    let document = ApiDoc::openapi();
    let mut rows = String::new();
    for (path, item) in &document.paths.paths {
        let operations = [
            ("GET", &item.get),
            ("POST", &item.post),
            ("PUT", &item.put),
            ("DELETE", &item.delete),
        ];
        for (method, operation) in operations {
            if let Some(operation) = operation {
                let summary = operation
                    .description
                    .as_deref()
                    .or(operation.summary.as_deref())
                    .unwrap_or("");
                rows.push_str(&format!(
                    "<tr><td><code>{method}</code></td><td><code>{}</code></td><td>{}</td></tr>\n",
                    escape(path),
                    escape(summary)
                ));
            }
        }
    }
    Html(format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>askloop API</title>\
         <style>body{{font-family:sans-serif;margin:2em}}td{{padding:.3em .8em;vertical-align:top}}</style></head>\
         <body><h1>askloop API</h1><p>The machine-readable document: <a href=\"/openapi.json\">/openapi.json</a>. \
         Streams are SSE: <code>data: &lt;chunk JSON&gt;</code> per chunk, then <code>data: [DONE]</code>.</p>\
         <table><tr><th>method</th><th>path</th><th>what it does</th></tr>\n{rows}</table></body></html>\n"
    ))
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}
