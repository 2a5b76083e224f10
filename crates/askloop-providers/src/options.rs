//! [`ProviderOptions`] and [`RetryPolicy`]: where keys and URLs come from, timeouts and retries.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

type EnvLookup = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// Settings shared by every provider [`crate::build_model`] builds: how environment variables
/// are read, timeouts, and the [`RetryPolicy`].
///
/// [`ProviderOptions::from_env`] reads the process environment; tests use
/// [`ProviderOptions::with_vars`] so they never change it.
///
/// | variable | used by | meaning |
/// |---|---|---|
/// | `OPENAI_API_KEY` | `openai:` | API key (required) |
/// | `OPENAI_BASE_URL` | `openai:` | base URL including `/v1` (default `https://api.openai.com/v1`) |
/// | `ANTHROPIC_API_KEY` | `anthropic:` | API key (required) |
/// | `ANTHROPIC_BASE_URL` | `anthropic:` | base URL without `/v1` (default `https://api.anthropic.com`) |
/// | `OLLAMA_BASE_URL` | `ollama:` | server URL (default `http://127.0.0.1:11434`) |
///
/// Empty variables count as unset.
///
/// # Example
/// ```
/// use std::time::Duration;
/// use askloop_providers::{ProviderOptions, RetryPolicy};
///
/// let options = ProviderOptions::with_vars([("OPENAI_API_KEY", "sk-test")])
///     .with_retry(RetryPolicy::new(3, Duration::from_millis(200), Duration::from_secs(5)));
/// assert_eq!(options.var("OPENAI_API_KEY").as_deref(), Some("sk-test"));
/// assert_eq!(options.retry().max_attempts, 3);
/// ```
#[derive(Clone)]
pub struct ProviderOptions {
    env: EnvLookup,
    retry: RetryPolicy,
    connect_timeout: Duration,
    first_byte_timeout: Duration,
    idle_timeout: Duration,
}

impl fmt::Debug for ProviderOptions {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("ProviderOptions")
            .field("retry", &self.retry)
            .field("connect_timeout", &self.connect_timeout)
            .field("first_byte_timeout", &self.first_byte_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .finish_non_exhaustive()
    }
}

impl Default for ProviderOptions {
    /// The same as [`ProviderOptions::from_env`].
    fn default() -> Self {
        Self::from_env()
    }
}

impl ProviderOptions {
    /// Options that read the process environment, with the default timeouts (connect 10 s, first
    /// byte 120 s, idle 120 s) and [`RetryPolicy::default`].
    pub fn from_env() -> Self {
        Self::with_lookup(|name| std::env::var(name).ok())
    }

    /// Options that read variables from this list instead of the environment.
    pub fn with_vars<K, V>(vars: impl IntoIterator<Item = (K, V)>) -> Self
    where
        K: Into<String>,
        V: Into<String>,
    {
        let vars: HashMap<String, String> = vars
            .into_iter()
            .map(|(name, value)| (name.into(), value.into()))
            .collect();
        Self::with_lookup(move |name| vars.get(name).cloned())
    }

    /// Options that read variables through this function.
    pub fn with_lookup(lookup: impl Fn(&str) -> Option<String> + Send + Sync + 'static) -> Self {
        Self {
            env: Arc::new(lookup),
            retry: RetryPolicy::default(),
            connect_timeout: Duration::from_secs(10),
            first_byte_timeout: Duration::from_secs(120),
            idle_timeout: Duration::from_secs(120),
        }
    }

    /// Sets the retry policy.
    #[must_use]
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Sets how long connecting to the server may take.
    #[must_use]
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets how long the server may take to send the response headers. A timeout is retried.
    #[must_use]
    pub fn with_first_byte_timeout(mut self, timeout: Duration) -> Self {
        self.first_byte_timeout = timeout;
        self
    }

    /// Sets how long the server may stay silent between two pieces of a streamed response. A
    /// timeout is retried if nothing of the response was passed on yet.
    #[must_use]
    pub fn with_idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = timeout;
        self
    }

    /// A variable's value; `None` when unset or empty.
    pub fn var(&self, name: &str) -> Option<String> {
        (self.env)(name).filter(|value| !value.trim().is_empty())
    }

    /// The retry policy.
    pub fn retry(&self) -> &RetryPolicy {
        &self.retry
    }

    /// The connect timeout.
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// The timeout for the response headers.
    pub fn first_byte_timeout(&self) -> Duration {
        self.first_byte_timeout
    }

    /// The timeout between two pieces of a streamed response.
    pub fn idle_timeout(&self) -> Duration {
        self.idle_timeout
    }
}

/// Bounded retries with exponential backoff and jitter.
///
/// Retried: HTTP 408, 409, 429 and 5xx (and Anthropic's 529), provider error events that say the
/// service is overloaded, connection failures, timeouts, and a stream cut before any of its
/// events reached the caller. Never retried: authentication failures (401/403), other 4xx, and
/// anything after part of the response was passed on (that would repeat text).
///
/// The wait before attempt `n + 1` is `min(max_delay, base_delay × 2^(n-1))`, of which a random
/// half is dropped ("equal jitter"), and never less than the server's `Retry-After` (capped at
/// `max_delay`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// Attempts in all, the first included (at least 1). Default 4.
    pub max_attempts: u32,
    /// The backoff before the second attempt, before jitter. Default 500 ms.
    pub base_delay: Duration,
    /// The longest wait between two attempts. Default 20 s.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self::new(4, Duration::from_millis(500), Duration::from_secs(20))
    }
}

impl RetryPolicy {
    /// A policy; `max_attempts` below 1 counts as 1.
    pub fn new(max_attempts: u32, base_delay: Duration, max_delay: Duration) -> Self {
        Self {
            max_attempts: max_attempts.max(1),
            base_delay,
            max_delay,
        }
    }

    /// One attempt, no retries.
    pub fn none() -> Self {
        Self::new(1, Duration::ZERO, Duration::ZERO)
    }

    /// The wait after failed attempt `attempt` (1-based), given the server's `Retry-After`.
    pub fn delay(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        let exponent = attempt.saturating_sub(1).min(30);
        let backoff = self
            .base_delay
            .saturating_mul(1u32 << exponent)
            .min(self.max_delay);
        let half = backoff / 2;
        let half_nanos = u64::try_from(half.as_nanos()).unwrap_or(u64::MAX);
        let jitter = Duration::from_nanos(fastrand::u64(0..=half_nanos));
        let delay = half + jitter;
        match retry_after {
            Some(wait) => delay.max(wait.min(self.max_delay)),
            None => delay,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_is_capped_and_jittered() {
        let policy = RetryPolicy::new(5, Duration::from_millis(100), Duration::from_millis(350));
        for _ in 0..50 {
            let first = policy.delay(1, None);
            assert!(first >= Duration::from_millis(50) && first <= Duration::from_millis(100));
            let third = policy.delay(3, None);
            assert!(third >= Duration::from_millis(175) && third <= Duration::from_millis(350));
        }
        assert_eq!(
            policy.delay(1, Some(Duration::from_secs(60))),
            Duration::from_millis(350)
        );
        assert_eq!(
            RetryPolicy::new(0, Duration::ZERO, Duration::ZERO).max_attempts,
            1
        );
    }

    #[test]
    fn empty_variables_count_as_unset() {
        let options = ProviderOptions::with_vars([("A", ""), ("B", "x")]);
        assert_eq!(options.var("A"), None);
        assert_eq!(options.var("B").as_deref(), Some("x"));
        assert_eq!(options.var("C"), None);
    }
}
