//! Classifies a failed attempt: retry it or not, and which [`ModelError`] it becomes.

use std::fmt;
use std::time::{Duration, SystemTime};

use askloop_core::model::ModelError;
use genai::webc::StreamTimeout;
use serde_json::Value;

use crate::error::{TransportProblem, WireError};

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
        if error.is::<StreamTimeout>() {
            return Self::transport(TransportProblem::StreamTimeout, error, true);
        }
        if error.is::<std::str::Utf8Error>() {
            return Self::new(
                FailureKind::Invalid(format!("the stream is not valid UTF-8: {error}")),
                false,
            );
        }
        Self::transport(TransportProblem::Stream, error, true)
    }

    fn transport(
        problem: TransportProblem,
        source: Box<dyn std::error::Error + Send + Sync>,
        retryable: bool,
    ) -> Self {
        Self::new(
            FailureKind::Wire(WireError::Transport { problem, source }),
            retryable,
        )
    }

    fn from_reqwest(error: reqwest::Error) -> Self {
        if let Some(status) = error.status() {
            return Self::from_status(status.as_u16(), "", None);
        }
        let retryable = !error.is_builder() && !error.is_redirect();
        let problem = if error.is_timeout() {
            TransportProblem::Timeout
        } else if error.is_connect() {
            TransportProblem::Connect
        } else {
            TransportProblem::Connection
        };
        Self::transport(problem, Box::new(error), retryable)
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
            retry_after: headers.and_then(|headers| retry_after(headers, SystemTime::now())),
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
                // The wire error is the source, printed after this by whoever prints the
                // chain; the message says only what became of the attempts.
                let message = if emitted > 0 {
                    "not retried, as part of the response had already arrived".to_owned()
                } else if attempts > 1 {
                    format!("gave up after {attempts} attempts")
                } else if self.retryable {
                    "no retries allowed".to_owned()
                } else {
                    "not retryable".to_owned()
                };
                ModelError::Request {
                    model: context.model.to_owned(),
                    message,
                    source: Some(Box::new(error)),
                }
            }
        }
    }

    /// What went wrong, in a few words for a person: `rate limited (HTTP 429)`.
    pub(crate) fn summary(&self) -> String {
        match &self.kind {
            FailureKind::Authentication { status, .. } => {
                format!("authentication failed (HTTP {status})")
            }
            FailureKind::Invalid(_) => "invalid response".to_owned(),
            FailureKind::Wire(WireError::Status { status, .. }) => {
                let what = match status {
                    429 => "rate limited",
                    408 => "request timeout",
                    409 => "conflict",
                    503 => "service unavailable",
                    529 => "overloaded",
                    500..=599 => "server error",
                    _ => "request refused",
                };
                format!("{what} (HTTP {status})")
            }
            FailureKind::Wire(WireError::ErrorEvent { kind, .. }) => match kind.as_deref() {
                Some("overloaded_error") => "overloaded (error event)".to_owned(),
                Some("rate_limit_error") => "rate limited (error event)".to_owned(),
                Some(kind) => format!("error event {kind:?}"),
                None => "error event".to_owned(),
            },
            FailureKind::Wire(error) => error.to_string(),
        }
    }
}

/// The one line a retry is announced with:
/// `model openai:gpt-4o-mini: rate limited (HTTP 429); retrying in 2.1 s (attempt 2 of 4)`.
/// `next_attempt` is the 1-based number of the attempt about to be made.
pub(crate) fn retry_message(
    model: &str,
    failure: &Failure,
    delay: Duration,
    next_attempt: u32,
    max_attempts: u32,
) -> String {
    format!(
        "model {model}: {}; retrying in {} (attempt {next_attempt} of {max_attempts})",
        failure.summary(),
        human_delay(delay)
    )
}

/// `350 ms` below a second, `2.1 s` from there.
fn human_delay(delay: Duration) -> String {
    if delay < Duration::from_secs(1) {
        format!("{} ms", delay.as_millis())
    } else {
        format!("{:.1} s", delay.as_secs_f64())
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
            // For the debug log: the whole chain, as nothing prints it after this.
            FailureKind::Wire(error) => {
                write!(formatter, "{error}")?;
                let mut source = std::error::Error::source(error);
                while let Some(cause) = source {
                    write!(formatter, ": {cause}")?;
                    source = cause.source();
                }
                Ok(())
            }
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

/// The wait a server asked for: `retry-after-ms` (OpenAI's, milliseconds), else `retry-after`
/// (seconds, or an HTTP date, counted from `now`). Whatever the headers hold this never panics:
/// a value that is not a number or date, negative or NaN counts as absent; one too large for a
/// [`Duration`] (`1e20`, `inf`) saturates, and the [`crate::RetryPolicy`] caps it at its
/// `max_delay`; a date in the past is no wait.
pub(crate) fn retry_after(
    headers: &reqwest::header::HeaderMap,
    now: SystemTime,
) -> Option<Duration> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .map(str::trim)
    };
    if let Some(wait) = header("retry-after-ms").and_then(|text| seconds(text, 1000.0)) {
        return Some(wait);
    }
    let text = header("retry-after")?;
    seconds(text, 1.0).or_else(|| {
        let date = httpdate::parse_http_date(text).ok()?;
        Some(date.duration_since(now).unwrap_or(Duration::ZERO))
    })
}

/// A decimal number of `1 / per_second` seconds as a [`Duration`], saturating; `None` for text
/// that is not a number, for NaN and for negative numbers.
fn seconds(text: &str, per_second: f64) -> Option<Duration> {
    let value: f64 = text.parse().ok()?;
    if value.is_nan() || value < 0.0 {
        return None;
    }
    if value == 0.0 {
        return Some(Duration::ZERO);
    }
    Some(Duration::try_from_secs_f64(value / per_second).unwrap_or(Duration::MAX))
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
        assert_eq!(
            retry_after(&headers, SystemTime::now()),
            Some(Duration::from_secs(2))
        );
    }

    fn headers(name: &'static str, value: &str) -> reqwest::header::HeaderMap {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(name, reqwest::header::HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn issue7_retry_after_values_that_overflow_or_make_no_sense_never_panic() {
        let now = httpdate::parse_http_date("Wed, 21 Oct 2015 07:28:00 GMT").unwrap();
        let cases: [(&str, Option<Duration>); 14] = [
            ("1e20", Some(Duration::MAX)),
            ("inf", Some(Duration::MAX)),
            ("99999999999999999999999999", Some(Duration::MAX)),
            ("18446744073709551616", Some(Duration::MAX)),
            ("-1", None),
            ("-inf", None),
            ("NaN", None),
            ("soon", None),
            ("", None),
            ("0", Some(Duration::ZERO)),
            ("2.5", Some(Duration::from_millis(2500))),
            (
                "Wed, 21 Oct 2015 07:28:30 GMT",
                Some(Duration::from_secs(30)),
            ),
            ("Tue, 20 Oct 2015 07:28:00 GMT", Some(Duration::ZERO)),
            (
                "Fri, 31 Dec 9999 23:59:59 GMT",
                Some(Duration::from_secs(251_956_888_319)),
            ),
        ];
        for (value, expected) in cases {
            assert_eq!(
                retry_after(&headers("retry-after", value), now),
                expected,
                "retry-after: {value}"
            );
        }
        assert_eq!(
            retry_after(&headers("retry-after-ms", "1e20"), now),
            Some(Duration::from_secs(100_000_000_000_000_000))
        );
        assert_eq!(
            retry_after(&headers("retry-after-ms", "1e23"), now),
            Some(Duration::MAX)
        );
        assert_eq!(
            retry_after(&headers("retry-after-ms", "1500"), now),
            Some(Duration::from_millis(1500))
        );
        let policy = crate::RetryPolicy::default();
        let failure = Failure::from_status(429, "", Some(&headers("retry-after", "1e20")));
        assert_eq!(policy.delay(1, failure.retry_after), policy.max_delay);
    }

    #[test]
    fn issue7_retry_is_announced_in_one_human_line() {
        let failure = Failure::from_status(429, r#"{"error":{"message":"slow down"}}"#, None);
        assert_eq!(
            retry_message(
                "openai:gpt-4o-mini",
                &failure,
                Duration::from_millis(2100),
                2,
                4
            ),
            "model openai:gpt-4o-mini: rate limited (HTTP 429); retrying in 2.1 s (attempt 2 of 4)"
        );
        let failure = Failure::from_status(529, "", None);
        assert_eq!(
            retry_message(
                "anthropic:claude",
                &failure,
                Duration::from_millis(350),
                3,
                4
            ),
            "model anthropic:claude: overloaded (HTTP 529); retrying in 350 ms (attempt 3 of 4)"
        );
        assert_eq!(
            retry_message(
                "ollama:llama3.2",
                &Failure::cut(0),
                Duration::from_secs(1),
                2,
                4
            ),
            "model ollama:llama3.2: the response stream ended before it was complete, after 0 \
             event(s); retrying in 1.0 s (attempt 2 of 4)"
        );
    }

    #[test]
    fn issue7_a_request_error_prints_each_cause_once() {
        let failure = Failure::from_status(503, r#"{"error":{"message":"busy"}}"#, None);
        let context = CallContext {
            provider: "openai",
            model: "openai:gpt-4o-mini",
            key_variable: Some("OPENAI_API_KEY"),
        };
        let error = failure.into_model_error(&context, 4, 0);
        let mut chain = vec![error.to_string()];
        let mut source = std::error::Error::source(&error);
        while let Some(cause) = source {
            chain.push(cause.to_string());
            source = cause.source();
        }
        assert_eq!(
            chain.join(": "),
            "model openai:gpt-4o-mini request failed: gave up after 4 attempts: HTTP 503: busy"
        );
    }

    mod properties {
        use proptest::prelude::*;

        use super::*;

        /// Header values: printable ASCII (what a `HeaderValue` may hold as text), numbers in
        /// every notation, and dates.
        fn header_value() -> impl Strategy<Value = String> {
            prop_oneof![
                "[ -~]{0,40}",
                any::<f64>().prop_map(|value| value.to_string()),
                any::<i128>().prop_map(|value| value.to_string()),
                any::<u64>().prop_map(|value| format!("{value}e{}", value % 400)),
                any::<u64>().prop_map(|seconds| httpdate::fmt_http_date(
                    SystemTime::UNIX_EPOCH + Duration::from_secs(seconds % 253_402_300_799)
                )),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(512))]

            #[test]
            fn retry_after_never_panics_and_the_delay_stays_under_the_cap(
                name in prop_oneof![Just("retry-after"), Just("retry-after-ms")],
                value in header_value(),
                status in any::<u16>(),
                body in any::<String>(),
                attempt in any::<u32>(),
                max_delay_ms in 0u64..60_000,
            ) {
                let Ok(value) = reqwest::header::HeaderValue::from_str(&value) else {
                    return Ok(());
                };
                let mut headers = reqwest::header::HeaderMap::new();
                headers.insert(name, value);
                let failure = Failure::from_status(status, &body, Some(&headers));
                let policy = crate::RetryPolicy::new(
                    4,
                    Duration::from_millis(500),
                    Duration::from_millis(max_delay_ms),
                );
                prop_assert!(policy.delay(attempt, failure.retry_after) <= policy.max_delay);
                let _ = failure.summary();
                let _ = failure.to_string();
            }

            #[test]
            fn any_error_event_body_is_classified(body in any::<String>(), kind in "[a-z_]{0,20}") {
                for text in [
                    body.clone(),
                    format!(r#"{{"error":{{"type":"{kind}","message":{body:?}}}}}"#),
                    format!(r#"{{"type":"error","error":{{"type":"{kind}"}}}}"#),
                ] {
                    let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
                    let failure = Failure::from_error_event(&value);
                    let _ = failure.summary();
                    let _ = error_message(&body);
                }
            }
        }
    }
}
