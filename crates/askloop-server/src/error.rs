//! Errors: [`ServerError`] (serving failed) and `ApiError`, the one JSON error body of every
//! route (`{code, message, details?}`) with its status; `json_errors` gives that body to the
//! error responses of the router's layers.

use askloop_core::registry::RegistryError;
use askloop_core::{AgentError, ResumeError, RunId, StoreError, ThreadId, error_chain_text};
use axum::Json;
use axum::extract::Request;
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::body_deadline::body_read_timeout;

/// Why [`crate::Server::serve`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// Accepting or serving connections failed.
    #[error("serving HTTP failed")]
    Io(#[from] std::io::Error),
    /// The configured keys cannot be served: one secret is configured twice
    /// ([`crate::KeyError::DuplicateSecret`]). Nothing was served.
    #[error("the API keys are misconfigured")]
    Keys(#[source] crate::keys::KeyError),
    /// The webhooks cannot be delivered (their HTTP client could not be built).
    #[error("the webhooks are misconfigured")]
    Webhooks(#[from] crate::webhooks::WebhookError),
}

/// The JSON body of every error response.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub(crate) struct ErrorBody {
    /// A stable code: `bad_request`, `invalid_answer`, `invalid_args`, `unauthorized`, `forbidden`,
    /// `run_not_found`, `agent_not_found`, `unknown_tool_call`, `not_suspended`, `conflict`,
    /// `already_answered`, `expired`, `in_progress`, `thread_busy`, `ambiguous_run`,
    /// `too_large`, … (see the crate docs).
    code: String,
    /// What went wrong, for people.
    message: String,
    /// More about it: for `invalid_answer`, what was expected, every problem, and the allowed
    /// labels when the question has options; for `invalid_args` (edited arguments of an
    /// approval that do not fit the tool), the `toolCallId`, `toolName` and every problem
    /// (`problems`); for `expired`, the `toolCallId` and when it expired (`expiredAt`, RFC
    /// 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    details: Option<Value>,
}

/// An error answered to the client: a status and an [`ErrorBody`]. Causes go to the log.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    /// Boxed: an error stays one pointer wide on the `Result`s of every handler.
    body: Box<ErrorBody>,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, code: &str, message: impl Into<String>) -> Self {
        Self {
            status,
            body: Box::new(ErrorBody {
                code: code.to_owned(),
                message: message.into(),
                details: None,
            }),
        }
    }

    pub(crate) fn with_details(mut self, details: Value) -> Self {
        self.body.details = Some(details);
        self
    }

    /// Adds one field to the details object (creating it).
    pub(crate) fn add_detail(mut self, key: &str, value: Value) -> Self {
        match &mut self.body.details {
            Some(Value::Object(details)) => {
                details.insert(key.to_owned(), value);
            }
            _ => self.body.details = Some(serde_json::json!({ key: value })),
        }
        self
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    pub(crate) fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "a valid API key is required (Authorization: Bearer <key> or X-Api-Key)",
        )
    }

    pub(crate) fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    pub(crate) fn run_not_found(run_id: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "run_not_found",
            format!("run {run_id} not found"),
        )
    }

    pub(crate) fn agent_not_found(agent_id: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "agent_not_found",
            format!("agent {agent_id:?} not found"),
        )
    }

    pub(crate) fn too_large(message: impl Into<String>) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, "too_large", message)
    }

    pub(crate) fn internal(code: &str, error: &(dyn std::error::Error + 'static)) -> Self {
        tracing::error!(code, error = %error_chain_text(error), "request failed");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            code,
            "the server failed; see its log",
        )
    }

    /// The generic error of a status with no body of ours (fallback of the error layer).
    pub(crate) fn for_status(status: StatusCode) -> Self {
        let (code, message) = match status {
            StatusCode::NOT_FOUND => ("not_found", "no such route"),
            StatusCode::METHOD_NOT_ALLOWED => ("method_not_allowed", "method not allowed here"),
            StatusCode::PAYLOAD_TOO_LARGE => ("too_large", "the request body is too large"),
            StatusCode::REQUEST_TIMEOUT => ("timeout", "the request took too long"),
            StatusCode::UNSUPPORTED_MEDIA_TYPE => (
                "bad_request",
                "expected a JSON body (content-type: application/json)",
            ),
            status if status.is_server_error() => ("internal", "the server failed; see its log"),
            _ => ("bad_request", "the request is malformed"),
        };
        Self::new(status, code, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(self.body)).into_response()
    }
}

/// A response extension saying its error body is meant as it is (an answer link's "no longer
/// works" page): [`json_errors`] leaves it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OwnErrorBody;

/// Gives every error response without a JSON body of ours (the body-limit layer's 413, the
/// timeout layer's 408, axum's 405) the `{code, message}` body of its status; a 408 also closes
/// its connection (the rest of a late body is not waited for). A response marked
/// [`OwnErrorBody`] keeps its body.
pub(crate) async fn json_errors(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    if response.extensions().get::<OwnErrorBody>().is_some() {
        return response;
    }
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

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        if let Some(after) = body_read_timeout(&rejection) {
            return Self::new(
                StatusCode::REQUEST_TIMEOUT,
                "timeout",
                format!(
                    "the request body did not arrive within {} s",
                    after.as_secs_f64()
                ),
            );
        }
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            return Self::too_large("the request body is too large");
        }
        if let JsonRejection::MissingJsonContentType(_) = rejection {
            return Self::bad_request("expected a JSON body (content-type: application/json)");
        }
        Self::bad_request(rejection.body_text())
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> Self {
        Self::bad_request(rejection.body_text())
    }
}

impl From<PathRejection> for ApiError {
    fn from(rejection: PathRejection) -> Self {
        Self::bad_request(rejection.body_text())
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        match &error {
            StoreError::NotFound { run_id } => Self::run_not_found(run_id.as_str()),
            StoreError::Conflict { .. } => Self::new(
                StatusCode::CONFLICT,
                "conflict",
                "the run changed concurrently; retry",
            ),
            _ => Self::internal("store_error", &error),
        }
    }
}

/// 409 `thread_busy`: the thread has a turn running, named in the message and the details
/// (`{threadId, runningRunId}`; `runningRunId` null when it ended meanwhile).
fn thread_busy(thread_id: &ThreadId, running_run_id: Option<&RunId>, message: String) -> ApiError {
    ApiError::new(StatusCode::CONFLICT, "thread_busy", message).with_details(serde_json::json!({
        "threadId": thread_id.as_str(),
        "runningRunId": running_run_id.map(RunId::as_str),
    }))
}

/// A new run refused before it started (`RunHub::start`): the thread has a turn
/// running (409 `thread_busy`), the caller's resource already has a run with this id (409
/// `conflict`), an id is invalid (400); other failures as the store's.
impl From<AgentError> for ApiError {
    fn from(error: AgentError) -> Self {
        match &error {
            AgentError::ThreadBusy {
                thread_id,
                running_run_id,
            } => thread_busy(thread_id, running_run_id.as_ref(), error.to_string()),
            AgentError::Store(StoreError::AlreadyExists { run_id }) => Self::new(
                StatusCode::CONFLICT,
                "conflict",
                format!("run {run_id} already exists"),
            ),
            AgentError::InvalidId(invalid) => Self::bad_request(invalid.to_string()),
            _ => Self::internal(error.code(), &error),
        }
    }
}

impl From<RegistryError> for ApiError {
    fn from(error: RegistryError) -> Self {
        match &error {
            RegistryError::UnknownAgent { agent_id } => Self::agent_not_found(agent_id.as_str()),
            _ => Self::internal(error.code(), &error),
        }
    }
}

impl From<ResumeError> for ApiError {
    fn from(error: ResumeError) -> Self {
        let code = error.code();
        let status = match &error {
            ResumeError::RunNotFound { .. } | ResumeError::UnknownToolCall { .. } => {
                StatusCode::NOT_FOUND
            }
            ResumeError::InvalidAnswer { .. }
            | ResumeError::InvalidArgs { .. }
            | ResumeError::Ambiguous { .. }
            | ResumeError::DuplicateToolCall { .. }
            | ResumeError::UnnamedInBatch { .. }
            | ResumeError::EmptyBatch { .. }
            | ResumeError::NotAQuestion { .. } => StatusCode::BAD_REQUEST,
            // The run is the caller's to see, but the call's approver policy does not let it
            // decide (a role it lacks, its own run, a second vote): the caller is known and
            // refused (RFC 9110: 403 Forbidden).
            ResumeError::NotPermitted { .. } => StatusCode::FORBIDDEN,
            // The call is gone for good: its deadline passed (RFC 9110: 410 Gone).
            ResumeError::Expired { .. } => StatusCode::GONE,
            ResumeError::InvalidId(invalid) => return Self::bad_request(invalid.to_string()),
            ResumeError::ThreadBusy {
                thread_id,
                running_run_id,
                ..
            } => return thread_busy(thread_id, running_run_id.as_ref(), error.to_string()),
            ResumeError::Store(store) => {
                return match store {
                    StoreError::Conflict { .. } => {
                        Self::new(StatusCode::CONFLICT, "conflict", error.to_string())
                    }
                    _ => Self::internal("store_error", &error),
                };
            }
            ResumeError::ToolUnavailable { .. } => {
                tracing::error!(error = %error_chain_text(&error), "resume refused");
                StatusCode::CONFLICT
            }
            _ => StatusCode::CONFLICT,
        };
        let api = Self::new(status, code, error.to_string());
        match resume_details(&error) {
            Some(details) => api.with_details(details),
            None => api,
        }
    }
}

/// The `details` of a refused resume's error body, for the refusals that have more to say:
/// what an answer must be and every problem (`invalid_answer`), the call, its tool and every
/// problem of edited arguments (`invalid_args`), the pending calls, the deadline, the lease,
/// the resources of an ambiguous run id, the root of a sub-agent's child run (`child_run`).
fn resume_details(error: &ResumeError) -> Option<Value> {
    Some(match error {
        ResumeError::InvalidAnswer { rejection, .. } => serde_json::json!({
            "expected": rejection.expected,
            "problems": rejection.problems,
        }),
        ResumeError::InvalidArgs {
            tool_call_id,
            tool_name,
            problems,
            ..
        } => serde_json::json!({
            "toolCallId": tool_call_id.as_str(),
            "toolName": tool_name,
            "problems": problems,
        }),
        ResumeError::NotPermitted {
            tool_call_id,
            tool_name,
            actor,
            reason,
            ..
        } => {
            let mut details = serde_json::json!({
                "toolCallId": tool_call_id.as_str(),
                "toolName": tool_name,
                "reason": reason.code(),
                "actor": actor,
            });
            if let askloop_core::PolicyRefusal::MissingRole { required } = &**reason {
                details["requiredRoles"] = serde_json::json!(required);
            }
            details
        }
        ResumeError::UnknownToolCall { pending, .. } | ResumeError::Ambiguous { pending, .. } => {
            let pending: Vec<&str> = pending.iter().map(|id| id.as_str()).collect();
            serde_json::json!({ "pending": pending })
        }
        ResumeError::Expired {
            tool_call_id,
            expired_at_ms,
            ..
        } => serde_json::json!({
            "toolCallId": tool_call_id.as_str(),
            "expiredAt": askloop_core::time::rfc3339(*expired_at_ms),
        }),
        ResumeError::InProgress {
            lease_expires_at_ms,
            ..
        } => serde_json::json!({ "leaseExpiresAt": lease_expires_at_ms }),
        ResumeError::ChildRun { root_run_id, .. } => {
            serde_json::json!({ "rootRunId": root_run_id.as_str() })
        }
        ResumeError::AmbiguousRun { resources, .. } => {
            let resources: Vec<Option<&str>> = resources
                .iter()
                .map(|resource| resource.as_ref().map(|id| id.as_str()))
                .collect();
            serde_json::json!({ "resources": resources })
        }
        _ => return None,
    })
}
