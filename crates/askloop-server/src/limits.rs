//! [`Limits`]: how large requests, answers and messages may be, and how long a non-streaming
//! request may take.

use std::time::Duration;

/// Size and time limits of the server. Larger requests are refused with 413 `too_large`.
///
/// ```
/// use askloop_server::Limits;
///
/// let limits = Limits::default().body_bytes(2 << 20);
/// assert_eq!(limits.answer_bytes, 64 * 1024);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// Largest request body, bytes (default 1 MiB).
    pub body_bytes: usize,
    /// Largest answer (`resumeData`, a response's answer) as JSON text, bytes (default 64 KiB).
    pub answer_bytes: usize,
    /// Largest input message of a new run, bytes of UTF-8 (default 64 KiB).
    pub message_bytes: usize,
    /// Longest a non-streaming request may take before it is answered 408 (default 30 s).
    /// Streams have no timeout; runs are never cut by it.
    pub request_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            body_bytes: 1024 * 1024,
            answer_bytes: 64 * 1024,
            message_bytes: 64 * 1024,
            request_timeout: Duration::from_secs(30),
        }
    }
}

impl Limits {
    /// Sets [`Limits::body_bytes`].
    #[must_use]
    pub fn body_bytes(mut self, bytes: usize) -> Self {
        self.body_bytes = bytes;
        self
    }

    /// Sets [`Limits::answer_bytes`].
    #[must_use]
    pub fn answer_bytes(mut self, bytes: usize) -> Self {
        self.answer_bytes = bytes;
        self
    }

    /// Sets [`Limits::message_bytes`].
    #[must_use]
    pub fn message_bytes(mut self, bytes: usize) -> Self {
        self.message_bytes = bytes;
        self
    }

    /// Sets [`Limits::request_timeout`].
    #[must_use]
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }
}
