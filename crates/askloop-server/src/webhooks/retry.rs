//! What follows a delivery attempt: delivered on a 2xx; retried after a timeout or transport
//! error, a 5xx, a 408 or a 429 (after its `Retry-After` seconds when given, else after the
//! backoff: `first_backoff` doubled per earlier attempt, capped at `max_backoff`, times a
//! jitter of 50–100 %); failed on any other answer, or once the next attempt would fall outside
//! the retry window.

use std::time::Duration;

use askloop_core::store::DeliveryNext;

use crate::webhooks::RetryPolicy;

/// How an attempt ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// The endpoint answered with this status (and this `Retry-After`, in seconds, if any).
    Status { code: u16, retry_after: Option<u64> },
    /// No answer: timeout, refused connection, broken transfer.
    NoAnswer,
}

/// What follows an attempt that ended with `answer`, at `now_ms`, the `attempt`-th (1 for the
/// first) of a delivery created at `created_at_ms`; `jitter` in `[0, 1]` picks the point in the
/// 50–100 % band.
pub(crate) fn next_step(
    policy: &RetryPolicy,
    answer: &Answer,
    attempt: u32,
    created_at_ms: u64,
    now_ms: u64,
    jitter: f64,
) -> DeliveryNext {
    let wait = match answer {
        Answer::Status { code, .. } if (200..300).contains(code) => {
            return DeliveryNext::Delivered;
        }
        Answer::Status {
            code: 429 | 408,
            retry_after: Some(seconds),
        } => Duration::from_secs(*seconds),
        Answer::Status { code, retry_after } if *code >= 500 || *code == 429 || *code == 408 => {
            match retry_after {
                Some(seconds) => Duration::from_secs(*seconds),
                None => backoff(policy, attempt, jitter),
            }
        }
        Answer::Status { .. } => return DeliveryNext::Failed,
        Answer::NoAnswer => backoff(policy, attempt, jitter),
    };
    let at = now_ms.saturating_add(millis(wait));
    if at > created_at_ms.saturating_add(millis(policy.window)) {
        DeliveryNext::Failed
    } else {
        DeliveryNext::RetryAt(at)
    }
}

/// The backoff after the `attempt`-th attempt: `first_backoff · 2^(attempt-1)`, at most
/// `max_backoff`, times `0.5 + jitter / 2`.
fn backoff(policy: &RetryPolicy, attempt: u32, jitter: f64) -> Duration {
    let doubled = policy
        .first_backoff
        .saturating_mul(1u32 << attempt.saturating_sub(1).min(30));
    let capped = doubled.min(policy.max_backoff);
    capped.mul_f64(0.5 + jitter.clamp(0.0, 1.0) / 2.0)
}

/// A duration in milliseconds (saturating).
pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// A jitter in `[0, 1)` from the operating system's randomness (a fresh UUID v4's bits).
pub(crate) fn jitter() -> f64 {
    let bits = uuid::Uuid::new_v4().as_u128() as u64 >> 11;
    bits as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RetryPolicy {
        RetryPolicy::default()
            .first_backoff(Duration::from_secs(5))
            .max_backoff(Duration::from_secs(60))
            .window(Duration::from_secs(3600))
    }

    fn status(code: u16) -> Answer {
        Answer::Status {
            code,
            retry_after: None,
        }
    }

    #[test]
    fn success_delivers_and_client_errors_fail() {
        assert_eq!(
            next_step(&policy(), &status(204), 1, 0, 0, 0.5),
            DeliveryNext::Delivered
        );
        assert_eq!(
            next_step(&policy(), &status(404), 1, 0, 0, 0.5),
            DeliveryNext::Failed
        );
        assert_eq!(
            next_step(&policy(), &status(301), 1, 0, 0, 0.5),
            DeliveryNext::Failed
        );
    }

    #[test]
    fn retries_back_off_exponentially_with_jitter_up_to_the_cap() {
        let at = |attempt, jitter| next_step(&policy(), &status(503), attempt, 0, 1_000, jitter);
        assert_eq!(at(1, 1.0), DeliveryNext::RetryAt(6_000));
        assert_eq!(at(1, 0.0), DeliveryNext::RetryAt(3_500));
        assert_eq!(at(2, 1.0), DeliveryNext::RetryAt(11_000));
        assert_eq!(at(3, 1.0), DeliveryNext::RetryAt(21_000));
        assert_eq!(at(9, 1.0), DeliveryNext::RetryAt(61_000), "capped");
        let no_answer = next_step(&policy(), &Answer::NoAnswer, 1, 0, 1_000, 1.0);
        assert_eq!(no_answer, DeliveryNext::RetryAt(6_000));
    }

    #[test]
    fn retry_after_is_honoured_and_the_window_ends_retries() {
        let limited = Answer::Status {
            code: 429,
            retry_after: Some(120),
        };
        assert_eq!(
            next_step(&policy(), &limited, 1, 0, 1_000, 0.0),
            DeliveryNext::RetryAt(121_000)
        );
        assert_eq!(
            next_step(&policy(), &status(500), 1, 0, 3_599_000, 1.0),
            DeliveryNext::Failed,
            "past the window"
        );
    }
}
