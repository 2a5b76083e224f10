//! [`Limits`]: how large requests, answers and messages may be, how long a non-streaming
//! request may take, and what a connection may hold (how many, how slow, how long idle).

use std::time::Duration;

/// Size and time limits of the server. Larger requests are refused with 413 `too_large`.
///
/// The connection limits (`header_read_timeout`, `idle_timeout`, `max_connections`) apply to
/// [`crate::Server::serve`]'s connections; a router served otherwise
/// ([`crate::Server::router`]) keeps the others. A response being sent — an SSE stream that
/// lasts for hours included — is never cut by any of them.
///
/// ```
/// use std::time::Duration;
///
/// use askloop_server::Limits;
///
/// let limits = Limits::default().body_bytes(2 << 20).max_connections(256);
/// assert_eq!(limits.answer_bytes, 64 * 1024);
/// assert_eq!(limits.idle_timeout, Duration::from_secs(60));
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
    /// Longest a request body may take to arrive whole, from its head (default 30 s); past it
    /// the request is answered 408 `timeout` (the connection then closes). Every route, streaming
    /// ones included: it bounds the body sent *to* the server, never the response.
    pub body_read_timeout: Duration,
    /// Longest a client may take to send a request head: from the connection's opening for its
    /// first request, from the head's first byte for later ones (default 10 s). Past it the
    /// connection is closed without an answer.
    pub header_read_timeout: Duration,
    /// Longest a connection may stay open with no request in progress after a response
    /// (keep-alive; default 60 s). Then it is closed; clients open a new one.
    pub idle_timeout: Duration,
    /// Most connections open at once (default 1,024; at least 1). While that many are open the
    /// server accepts no more: new connections wait in the operating system's listen backlog
    /// until one closes. Each open page holds one or two (its inbox, a chat's stream).
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            body_bytes: 1024 * 1024,
            answer_bytes: 64 * 1024,
            message_bytes: 64 * 1024,
            request_timeout: Duration::from_secs(30),
            body_read_timeout: Duration::from_secs(30),
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_connections: 1024,
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

    /// Sets [`Limits::body_read_timeout`].
    #[must_use]
    pub fn body_read_timeout(mut self, timeout: Duration) -> Self {
        self.body_read_timeout = timeout;
        self
    }

    /// Sets [`Limits::header_read_timeout`].
    #[must_use]
    pub fn header_read_timeout(mut self, timeout: Duration) -> Self {
        self.header_read_timeout = timeout;
        self
    }

    /// Sets [`Limits::idle_timeout`].
    #[must_use]
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = timeout;
        self
    }

    /// Sets [`Limits::max_connections`] (0 counts as 1).
    #[must_use]
    pub fn max_connections(mut self, connections: usize) -> Self {
        self.max_connections = connections;
        self
    }
}
