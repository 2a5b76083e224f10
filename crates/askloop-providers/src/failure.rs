//! Classifies a failed attempt: retry it or not, and which [`ModelError`] it becomes.

use std::fmt;
use std::time::Duration;

use askloop_core::ModelError;
use genai::webc::StreamTimeout;
use serde_json::Value;

use crate::error::WireError;

/// How much of an error body a message quotes.
const BODY_EXCERPT: usize = 500;

/// One failed attempt of a model call.
#[derive(Debug)]
pub(crate) struct Failure {
    kind: FailureKind,
    /// Whether trying again may help (if nothing was passed on yet).
    pub(crate) retryable: bool,
    /// The server's `Retry-After`, if it sent one.
    pub(crate) retry_after: Option<Duration>,
}

#[derive(Debug)]
enum FailureKind {
    /// HTTP 401/403.
    Authentication { status: u16, message: String },
    /// The response is not the protocol's documented format.
    Invalid(String),
    /// Anything else: becomes [`ModelError::Request`].
    Wire(WireError),
}

/// What a failed call is reported with.
pub(crate) struct CallContext<'a> {
    /// The provider (`"openai"`, …).
    pub(crate) provider: &'a str,
    /// The model as a SPEC (`openai:gpt-4o`), naming it in messages.
    pub(crate) model: &'a str,
    /// The variable holding the API key, named in authentication errors.
    pub(crate) key_variable: Option<&'a str>,
}

impl Failure {
    fn new(kind: FailureKind, retryable: bool) -> Self {
        Self {
            kind,
            retryable,
            retry_after: None,
        }
    }

    /// The response ended before its end event, after `events` events.
    pub(crate) fn cut(events: usize) -> Self {
        Self::new(FailureKind::Wire(WireError::StreamCut { events }), true)
    }

    /// Classifies an error genai returned or yielded.
    pub(crate) fn from_genai(error: genai::Error) -> Self {
        match error {
            genai::Error::WebStream { error, .. } => Self::from_boxed(error),
            genai::Error::HttpError {
                status,
                body,
                headers,
                ..
            } => Self::from_status(status.as_u16(), &body, Some(&headers)),
            genai::Error::WebModelCall { webc_error, .. }
            | genai::Error::WebAdapterCall { webc_error, .. } => Self::from_webc(webc_error),
            genai::Error::ChatResponse { body, .. } => Self::from_error_event(&body),
            genai::Error::StreamParse { serde_error, .. } => Self::new(
                FailureKind::Invalid(format!("malformed stream data: {serde_error}")),
                false,
            ),
            genai::Error::JsonValueExt(error) => Self::new(
                FailureKind::Invalid(format!("unexpected stream data: {error}")),
                false,
            ),
            other => Self::new(
                FailureKind::Wire(WireError::Request {
                    source: Box::new(other),
                }),
                false,
            ),
        }
    }

    fn from_boxed(error: genai::BoxError) -> Self {
        let error = match error.downcast::<genai::Error>() {
            Ok(genai_error) => return Self::from_genai(*genai_error),
            Err(error) => error,
        };
        let error = match error.downcast::<reqwest::Error>() {
            Ok(reqwest_error) => return Self::from_reqwest(*reqwest_error),
            Err(error) => error,
        };
        if let Some(timeout) = error.downcast_ref::<StreamTimeout>() {
            let message = timeout.to_string();
            return Self::new(
                FailureKind::Wire(WireError::Transport {
                    message,
                    source: error,
                }),
                true,
            );
        }
        if error.is::<std::str::Utf8Error>() {
            return Self::new(
                FailureKind::Invalid(format!("the stream is not valid UTF-8: {error}")),
                false,
            );
        }
        Self::new(
            FailureKind::Wire(WireError::Transport {
                message: format!("the response stream failed: {error}"),
                source: error,
            }),
            true,
        )
    }

    fn from_reqwest(error: reqwest::Error) -> Self {
        if let Some(status) = error.status() {
            return Self::from_status(status.as_u16(), "", None);
        }
        let retryable = !error.is_builder() && !error.is_redirect();
        let message = if error.is_timeout() {
            "the request timed out".to_owned()
        } else if error.is_connect() {
            "cannot connect to the server".to_owned()
        } else {
            "the connection failed".to_owned()
        };
        Self::new(
            FailureKind::Wire(WireError::Transport {
                message: format!("{message}: {error}"),
                source: Box::new(error),
            }),
            retryable,
        )
    }

    fn from_webc(error: genai::webc::Error) -> Self {
        match error {
            genai::webc::Error::ResponseFailedStatus {
                status,
                body,
                headers,
            } => Self::from_status(status.as_u16(), &body, Some(&headers)),
            genai::webc::Error::Reqwest(error) => Self::from_reqwest(error),
            other => Self::new(
                FailureKind::Wire(WireError::Request {
                    source: Box::new(other),
                }),
                false,
            ),
        }
    }

    fn from_status(status: u16, body: &str, headers: Option<&reqwest::header::HeaderMap>) -> Self {
        let message = error_message(body);
        if matches!(status, 401 | 403) {
            return Self::new(FailureKind::Authentication { status, message }, false);
        }
        let retryable = matches!(status, 408 | 409 | 429 | 500..=599);
        Self {
            kind: FailureKind::Wire(WireError::Status { status, message }),
            retryable,
            retry_after: headers.and_then(retry_after),
        }
    }

    /// An error event inside the stream: Anthropic's `event: error`, or an OpenAI chunk with an
    /// `error` object.
    fn from_error_event(body: &Value) -> Self {
        let error = body
            .get("error")
            .filter(|error| error.is_object())
            .unwrap_or(body);
        let kind = error
            .get("type")
            .or_else(|| error.get("code"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let message = error
            .get("message")
            .and_then(Value::as_str)
            .map_or_else(|| body.to_string(), str::to_owned);
        let retryable = matches!(
            kind.as_deref(),
            Some("overloaded_error" | "api_error" | "rate_limit_error" | "server_error")
        );
        if kind.as_deref() == Some("authentication_error") {
            return Self::new(
                FailureKind::Authentication {
                    status: 401,
                    message,
                },
                false,
            );
        }
        Self::new(
            FailureKind::Wire(WireError::ErrorEvent { kind, message }),
            retryable,
        )
    }

    /// The error to report after `attempts` attempts, `emitted` events of the last of which
    /// reached the caller.
    pub(crate) fn into_model_error(
        self,
        context: &CallContext<'_>,
        attempts: u32,
        emitted: usize,
    ) -> ModelError {
        match self.kind {
            FailureKind::Authentication { status, message } => ModelError::Authentication {
                provider: context.provider.to_owned(),
                message: match context.key_variable {
                    Some(variable) => format!("HTTP {status}: {message} (check {variable})"),
                    None => format!("HTTP {status}: {message}"),
                },
            },
            FailureKind::Invalid(message) => ModelError::InvalidResponse {
                model: context.model.to_owned(),
                message,
            },
            FailureKind::Wire(error) => {
                let message = if emitted > 0 {
                    format!("{error} (after part of the response was received; not retried)")
                } else if attempts > 1 {
                    format!("gave up after {attempts} attempts: {error}")
                } else {
                    error.to_string()
                };
                ModelError::Request {
                    model: context.model.to_owned(),
                    message,
                    source: Some(Box::new(error)),
                }
            }
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            FailureKind::Authentication { status, message } => {
                write!(
                    formatter,
                    "authentication failed (HTTP {status}): {message}"
                )
            }
            FailureKind::Invalid(message) => formatter.write_str(message),
            FailureKind::Wire(error) => write!(formatter, "{error}"),
        }
    }
}

/// The provider's error message from a JSON error body (`{"error": {"message": …}}` for OpenAI,
/// `{"type": "error", "error": {"message": …}}` for Anthropic, `{"error": "…"}` for Ollama), or
/// the start of the body.
fn error_message(body: &str) -> String {
    if let Ok(json) = serde_json::from_str::<Value>(body) {
        let message = json
            .pointer("/error/message")
            .or_else(|| json.get("error"))
            .or_else(|| json.get("message"))
            .and_then(Value::as_str);
        if let Some(message) = message {
            return message.to_owned();
        }
    }
    let body = body.trim();
    if body.is_empty() {
        return "(empty body)".to_owned();
    }
    match body.char_indices().nth(BODY_EXCERPT) {
        Some((end, _)) => format!("{}…", &body[..end]),
        None => body.to_owned(),
    }
}

/// `retry-after-ms` (OpenAI) or `retry-after` in seconds.
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.trim().parse::<f64>().ok())
            .filter(|value| value.is_finite() && *value >= 0.0)
    };
    header("retry-after-ms")
        .map(|millis| Duration::from_secs_f64(millis / 1000.0))
        .or_else(|| header("retry-after").map(Duration::from_secs_f64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_messages_come_from_each_body_shape() {
        assert_eq!(
            error_message(
                r#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error"}}"#
            ),
            "Incorrect API key provided"
        );
        assert_eq!(
            error_message(
                r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#
            ),
            "invalid x-api-key"
        );
        assert_eq!(
            error_message(r#"{"error":"model 'x' not found"}"#),
            "model 'x' not found"
        );
        assert_eq!(error_message("  "), "(empty body)");
    }

    #[test]
    fn statuses_are_classified() {
        assert!(Failure::from_status(429, "", None).retryable);
        assert!(Failure::from_status(529, "", None).retryable);
        assert!(!Failure::from_status(400, "", None).retryable);
        assert!(matches!(
            Failure::from_status(403, "", None).kind,
            FailureKind::Authentication { status: 403, .. }
        ));
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(
            "retry-after",
            reqwest::header::HeaderValue::from_static("2"),
        );
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(2)));
    }
}
