//! The router: every route and its layers, the extractors that turn their failures into
//! `ApiError` JSON (never axum's plain-text rejections), and the checks routes share (which run
//! a caller names and may see, which agent it may use; are ids and sizes acceptable).

mod agents;
mod docs;
mod runs;

use std::sync::Arc;

use askloop_core::store::{StoredRun, keys_of_run};
use askloop_core::{Agent, AgentId, IdProblem, ResourceId, RunId, RunKey, StoreError};
use axum::Router;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;

use crate::connections::DeadlineBody;
use crate::error::ApiError;
use crate::keys::Caller;
use crate::server::AppState;

pub(crate) use runs::all_runs;

/// Shared state as the handlers see it.
pub(crate) type State = axum::extract::State<Arc<AppState>>;

/// A JSON body whose rejections are `ApiError`s (400 `bad_request`, 413 `too_large`).
#[derive(FromRequest)]
#[from_request(via(axum::Json), rejection(ApiError))]
pub(crate) struct Body<T>(pub(crate) T);

/// A query string whose rejections are 400 `bad_request`.
#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub(crate) struct Params<T>(pub(crate) T);

/// A path parameter whose rejections are 400 `bad_request`.
#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub(crate) struct PathParam<T>(pub(crate) T);

impl FromRequestParts<Arc<AppState>> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        if state.keys.is_open() {
            return Ok(Caller::Open);
        }
        // Every secret the request carries (each `Authorization: Bearer` and `X-Api-Key`
        // header): one, possibly repeated, or the request is refused — two different keys in
        // one request never resolve to either.
        let bearers = parts
            .headers
            .get_all(header::AUTHORIZATION)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .filter_map(|value| {
                value
                    .strip_prefix("Bearer ")
                    .or_else(|| value.strip_prefix("bearer "))
            });
        let api_keys = parts
            .headers
            .get_all("x-api-key")
            .iter()
            .filter_map(|value| value.to_str().ok());
        let mut secrets = bearers.chain(api_keys).map(str::trim);
        let secret = secrets.next().ok_or_else(ApiError::unauthorized)?;
        if secrets.any(|other| other != secret) {
            return Err(ApiError::unauthorized());
        }
        state.keys.lookup(secret).ok_or_else(ApiError::unauthorized)
    }
}

/// Every route, with its layers.
pub(crate) fn router(state: Arc<AppState>) -> Router {
    let limits = state.limits.clone();
    let metrics = state.metrics.clone();
    // Streaming routes: no timeout (a stream lasts as long as its run; the run task is
    // detached from the response anyway).
    let streaming = Router::new()
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
        .route("/api/runs/{run_id}/stream", get(runs::reattach))
        .route("/api/inbox/events", get(runs::inbox_events))
        .merge(crate::chat::routes());
    let timed = Router::new()
        .route("/api/agents", get(agents::list_agents))
        .route("/api/agents/{agent_id}", get(agents::get_agent))
        .route(
            "/api/agents/{agent_id}/suspended-runs",
            get(agents::suspended_runs),
        )
        .route("/api/runs", get(runs::list_runs))
        .route("/api/runs/{run_id}", get(runs::get_run))
        .route("/api/runs/{run_id}/cancel", post(runs::cancel_run))
        .route("/healthz", get(docs::healthz))
        .route("/metrics", get(crate::metrics::metrics))
        .route("/openapi.json", get(docs::openapi_json))
        .route("/docs", get(docs::docs_page))
        .merge(crate::page::routes())
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            limits.request_timeout,
        ));
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
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}

/// Gives every error response without a JSON body of ours (the body-limit layer's 413, the
/// timeout layer's 408, axum's 405) the `{code, message}` body of its status; a 408 also closes
/// its connection (the rest of a late body is not waited for).
async fn json_errors(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let status = response.status();
    if status == StatusCode::REQUEST_TIMEOUT {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|value| value.as_bytes().starts_with(b"application/json"));
    if (status.is_client_error() || status.is_server_error()) && !is_json {
        let mut replaced = ApiError::for_status(status).into_response();
        for name in [header::ALLOW, header::CONNECTION] {
            if let Some(value) = response.headers().get(&name) {
                replaced.headers_mut().insert(name, value.clone());
            }
        }
        return replaced;
    }
    response
}

/// The longest tool call id accepted, bytes: providers make their own ids, some of several
/// hundred bytes, and every route takes what any provider may send.
pub(crate) const MAX_TOOL_CALL_ID_BYTES: usize = 4096;

/// Checks an id from a request (run, thread, resource, agent): the core's rule for ids
/// ([`IdProblem::of`]: not blank, no control characters, at most 256 bytes), or 400 naming the
/// field. Every route checks every id it is given with this (tool call ids with
/// [`check_tool_call_id`]), before anything else.
pub(crate) fn check_id(field: &str, id: &str) -> Result<(), ApiError> {
    match IdProblem::of(id) {
        None => Ok(()),
        Some(problem) => Err(ApiError::bad_request(format!("{field} {problem}"))),
    }
}

/// Checks a tool call id from a request, the same way on every route: the core's rule for ids
/// but up to [`MAX_TOOL_CALL_ID_BYTES`]; one error (400 `bad_request`) otherwise.
pub(crate) fn check_tool_call_id(id: &str) -> Result<(), ApiError> {
    match IdProblem::of(id) {
        None => Ok(()),
        Some(IdProblem::TooLong { bytes }) if bytes <= MAX_TOOL_CALL_ID_BYTES => Ok(()),
        Some(IdProblem::TooLong { bytes }) => Err(ApiError::bad_request(format!(
            "toolCallId is {bytes} bytes; at most {MAX_TOOL_CALL_ID_BYTES} are accepted"
        ))),
        Some(problem) => Err(ApiError::bad_request(format!("toolCallId {problem}"))),
    }
}

/// Checks a text from a request: at most `max` bytes (413), no NUL (stores reject it).
pub(crate) fn check_text(field: &str, text: &str, max: usize) -> Result<(), ApiError> {
    if text.len() > max {
        return Err(ApiError::too_large(format!(
            "{field} is {} bytes; at most {max} are accepted",
            text.len()
        )));
    }
    if text.contains('\0') {
        return Err(ApiError::bad_request(format!(
            "{field} must not contain NUL characters"
        )));
    }
    Ok(())
}

/// Checks an answer: its JSON text at most `answer_bytes` (413), no NUL in it.
pub(crate) fn check_answer(state: &AppState, answer: &serde_json::Value) -> Result<(), ApiError> {
    let text = answer.to_string();
    if text.len() > state.limits.answer_bytes {
        return Err(ApiError::too_large(format!(
            "the answer is {} bytes of JSON; at most {} are accepted",
            text.len(),
            state.limits.answer_bytes
        )));
    }
    if text.contains("\\u0000") {
        return Err(ApiError::bad_request(
            "the answer must not contain NUL characters",
        ));
    }
    Ok(())
}

/// The resource whose runs and threads a request acts on: the key's for a keyed caller (a
/// `resourceId` given that differs is 403), else the one given (checked), else none.
pub(crate) fn resource_of(
    caller: &Caller,
    given: Option<&str>,
) -> Result<Option<ResourceId>, ApiError> {
    match (caller.resource(), given) {
        (Some(own), Some(given)) if own.as_str() != given => Err(ApiError::forbidden(
            "resourceId differs from the API key's resource",
        )),
        (Some(own), _) => Ok(Some(own.clone())),
        (None, Some(given)) => {
            check_id("resourceId", given)?;
            Ok(Some(ResourceId::new(given)))
        }
        (None, None) => Ok(None),
    }
}

/// The exact run a request names by `run_id` (and, on a server without keys, optionally a
/// `resourceId`): a keyed caller names a run of its own resource (another `resourceId` names
/// nothing: 404); a caller without key names the run of the resource given, or, without one,
/// the one run with this id (404 none, 409 `ambiguous_run` when several resources use it,
/// naming them).
pub(crate) async fn run_key_for(
    state: &AppState,
    caller: &Caller,
    run_id: &str,
    resource: Option<&str>,
) -> Result<RunKey, ApiError> {
    check_id("runId", run_id)?;
    let run = RunId::new(run_id);
    match (caller.resource(), resource) {
        (Some(own), Some(given)) if own.as_str() != given => Err(ApiError::run_not_found(run_id)),
        (Some(own), _) => Ok(RunKey::new(Some(own.clone()), run)),
        (None, Some(given)) => {
            check_id("resourceId", given)?;
            Ok(RunKey::new(Some(ResourceId::new(given)), run))
        }
        (None, None) => {
            let mut keys = keys_of_run(state.store.as_ref(), &run).await?;
            match keys.len() {
                0 => Err(ApiError::run_not_found(run_id)),
                1 => Ok(keys.remove(0)),
                _ => Err(askloop_core::ResumeError::AmbiguousRun {
                    run_id: run,
                    resources: keys.into_iter().map(|key| key.resource_id).collect(),
                }
                .into()),
            }
        }
    }
}

/// The agent of new runs under `agent_id`, if the caller may use it (403 otherwise; 404
/// unknown).
pub(crate) async fn agent_for_caller(
    state: &AppState,
    caller: &Caller,
    agent_id: &AgentId,
) -> Result<Agent, ApiError> {
    check_id("agentId", agent_id.as_str())
        .map_err(|_| ApiError::agent_not_found(agent_id.as_str()))?;
    if !caller.may_use(agent_id) {
        return Err(ApiError::forbidden(format!(
            "this key may not use agent {:?}",
            agent_id.as_str()
        )));
    }
    Ok(state.agents.agent(agent_id).await?)
}

/// The stored run a request names ([`run_key_for`]), if the caller may see it: another
/// tenant's run is 404, like a missing one (a keyed caller only ever names runs of its own
/// resource; a key restricted to some agents sees only their runs).
pub(crate) async fn visible_run(
    state: &AppState,
    caller: &Caller,
    run_id: &str,
    resource: Option<&str>,
) -> Result<StoredRun, ApiError> {
    let key = run_key_for(state, caller, run_id, resource).await?;
    let stored = match state.store.load_run(&key).await {
        Ok(stored) => stored,
        Err(StoreError::NotFound { .. }) => return Err(ApiError::run_not_found(run_id)),
        Err(error) => return Err(error.into()),
    };
    if !caller.may_see(stored.state.resource_id(), stored.state.agent_id()) {
        return Err(ApiError::run_not_found(run_id));
    }
    Ok(stored)
}

/// The agent that drives a stored run.
pub(crate) async fn agent_of_run(state: &AppState, stored: &StoredRun) -> Result<Agent, ApiError> {
    Ok(state.agents.agent_for_run(&stored.state).await?)
}
