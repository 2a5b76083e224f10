//! The router: every route and its layers. The handlers live here, one file per resource; what
//! they share (state, extractors, checks, access, the resume tail) lives on the crate's ground
//! floor and never imports a handler.
//!
//! A request: its connection's bounds (`connections.rs`) → Host and Origin (`edge.rs`: 421,
//! 403; CORS) → the caller (`extract.rs`: `Authorization: Bearer` or `X-Api-Key`; open without
//! keys) → checks (`checks.rs`, `access.rs`: ids: 400, 256 bytes, tool call ids 4,096; agent
//! allowed: 403; the run's key: a keyed caller names only runs of its resource, so another
//! tenant's run is 404 and its thread or run id is simply the caller's own; sizes: 413) → the
//! agent call that can refuse (`respond(key).stream()`, `continue_stream`, `cancel_run`, a new
//! run's start): refusals are plain HTTP errors, before any SSE → `hub.spawn(stream)` /
//! `hub.start(stream)` → the response streams the subscription as `data: <chunk>` frames, then
//! `data: [DONE]`, and ends (the reference client ends on body close, not on `[DONE]`). The
//! timeout layer covers non-streaming routes only.

mod agents;
mod chat;
mod docs;
mod inbox;
mod links;
mod metrics;
mod page;
mod runs;
mod webhooks;

use std::sync::Arc;

use axum::Router;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware;
use axum::routing::{get, post};
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;

use crate::body_deadline::DeadlineBody;
use crate::error::{ApiError, json_errors};
use crate::state::AppState;

/// Every route, with its layers.
pub(crate) fn router(state: Arc<AppState>) -> Router {
    let limits = state.limits.clone();
    let metrics = state.metrics.clone();
    let streaming = streaming_routes();
    let timed = timed_routes(limits.request_timeout);
    let body_read_timeout = limits.body_read_timeout;
    let edge = state.edge.clone();
    let cors = edge.cors_layer();
    // Outermost last: tracing, metrics (refusals counted too), the Host and Origin rules, CORS
    // (its headers on every answer, ours included), then JSON errors and the body's bounds.
    Router::new()
        .merge(streaming)
        .merge(timed)
        .fallback(|| async { ApiError::for_status(StatusCode::NOT_FOUND) })
        .layer(axum::extract::DefaultBodyLimit::max(limits.body_bytes))
        .layer(RequestBodyLimitLayer::new(limits.body_bytes))
        .layer(middleware::map_request(
            move |request: Request| async move { DeadlineBody::limit(request, body_read_timeout) },
        ))
        .layer(middleware::from_fn(json_errors))
        .layer(tower::util::option_layer(cors))
        .layer(middleware::from_fn_with_state(edge, crate::edge::guard))
        .layer(middleware::from_fn(move |request, next| {
            crate::metrics::track_http(metrics.clone(), request, next)
        }))
        .layer(
            TraceLayer::new_for_http().make_span_with(|request: &Request| {
                // As tower-http's default span, with an answer link's token left out of the
                // URI (the token is a credential; logs must not hold it).
                tracing::debug_span!(
                    "request",
                    method = %request.method(),
                    uri = %crate::links::shown_uri(request.uri()),
                    version = ?request.version(),
                )
            }),
        )
        .with_state(state)
}

/// The streaming routes: no timeout (a stream lasts as long as its run; the run task is
/// detached from the response anyway).
fn streaming_routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/agents/{agent_id}/stream", post(agents::stream))
        .route(
            "/api/agents/{agent_id}/resume-stream",
            post(agents::resume_stream),
        )
        .route(
            "/api/agents/{agent_id}/approve-tool-call",
            post(agents::approve_tool_call),
        )
        .route(
            "/api/agents/{agent_id}/decline-tool-call",
            post(agents::decline_tool_call),
        )
        .route("/api/runs/{run_id}/continue", post(runs::continue_run))
        .route("/api/runs/{run_id}/responses", post(runs::respond))
        .route("/api/runs/{run_id}/fork", post(runs::fork_run))
        .route("/api/runs/{run_id}/stream", get(runs::reattach))
        .route("/api/inbox/events", get(inbox::inbox_events))
        .merge(chat::routes())
}

/// The other routes, each answered within `request_timeout` (408 past it).
fn timed_routes(request_timeout: std::time::Duration) -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/agents", get(agents::list_agents))
        .route("/api/agents/{agent_id}", get(agents::get_agent))
        .route(
            "/api/agents/{agent_id}/suspended-runs",
            get(agents::suspended_runs),
        )
        .route("/api/runs", get(runs::list_runs))
        .route("/api/runs/{run_id}", get(runs::get_run))
        .route("/api/runs/{run_id}/cancel", post(runs::cancel_run))
        .route(
            "/api/runs/{run_id}/calls/{tool_call_id}/link",
            post(links::create_link).delete(links::revoke_links),
        )
        .route("/answer/{token}", post(links::answer))
        .route("/api/webhooks/deliveries", get(webhooks::list_deliveries))
        .route(
            "/api/webhooks/deliveries/{id}/replay",
            post(webhooks::replay_delivery),
        )
        .route("/healthz", get(docs::healthz))
        .route("/metrics", get(metrics::metrics))
        .route("/openapi.json", get(docs::openapi_json))
        .route("/docs", get(docs::docs_page))
        .merge(page::routes())
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            request_timeout,
        ))
}
