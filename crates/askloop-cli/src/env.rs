//! The environment variables askloop reads (`ASKLOOP_MODEL`, `ASKLOOP_STORE`,
//! `ASKLOOP_CONFIG`, `ASKLOOP_LEASE_MS`, …): their names and how a value is read.

use std::time::Duration;

use askloop_core::is_blank;

use crate::exit::invalid;

/// The environment variable holding the default model SPEC.
pub(crate) const MODEL_ENV: &str = "ASKLOOP_MODEL";
/// The environment variable holding the store URL when `--store` is not given.
pub(crate) const STORE_ENV: &str = "ASKLOOP_STORE";
/// The environment variable holding the agents file when `--config` is not given.
pub(crate) const CONFIG_ENV: &str = "ASKLOOP_CONFIG";
/// The environment variable holding the lease duration in milliseconds (default 30 s): how
/// long after this process dies another one may take over the run it was driving.
pub(crate) const LEASE_ENV: &str = "ASKLOOP_LEASE_MS";

/// The value of an environment variable, `None` when unset or empty.
pub(crate) fn env_value(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|value| !is_blank(value))
}

/// The lease duration of [`LEASE_ENV`], `None` when unset (the core's default then).
///
/// # Errors
/// Invalid input for a value that is not a number of milliseconds above 0.
pub(crate) fn lease_from_env() -> anyhow::Result<Option<Duration>> {
    millis_from_env(LEASE_ENV)
}

/// The environment variable holding the first webhook retry backoff in milliseconds (default
/// 5 s; doubled per attempt up to an hour).
pub(crate) const WEBHOOK_BACKOFF_ENV: &str = "ASKLOOP_WEBHOOK_BACKOFF_MS";
/// The environment variable holding how often `askloop serve` delivers due webhooks, in
/// milliseconds (default 1 s).
pub(crate) const WEBHOOK_POLL_ENV: &str = "ASKLOOP_WEBHOOK_POLL_MS";
/// The environment variable holding how long one webhook attempt may take, in milliseconds
/// (default 10 s); a deliverer's claim on a delivery lasts twice that and 5 s more.
pub(crate) const WEBHOOK_TIMEOUT_ENV: &str = "ASKLOOP_WEBHOOK_TIMEOUT_MS";

/// The environment variable holding how long finished webhook events are kept, in hours
/// (default 168: 7 days; 0 prunes them at the next round).
pub(crate) const WEBHOOK_RETENTION_ENV: &str = "ASKLOOP_WEBHOOK_RETENTION_HOURS";

/// A number of milliseconds above 0 from `name`, `None` when unset.
fn millis_from_env(name: &str) -> anyhow::Result<Option<Duration>> {
    env_value(name)
        .map(|text| {
            text.trim()
                .parse::<u64>()
                .ok()
                .filter(|ms| *ms > 0)
                .map(Duration::from_millis)
                .ok_or_else(|| {
                    invalid(format!(
                        "invalid {name}: {text:?} (a number of milliseconds, more than 0)"
                    ))
                })
        })
        .transpose()
}

/// The webhook retry policy: the server's default, with [`WEBHOOK_BACKOFF_ENV`],
/// [`WEBHOOK_POLL_ENV`], [`WEBHOOK_TIMEOUT_ENV`] and [`WEBHOOK_RETENTION_ENV`] when set.
///
/// # Errors
/// Invalid input for a value that is not a number of milliseconds above 0 (or of hours).
pub(crate) fn webhook_policy() -> anyhow::Result<askloop_server::webhooks::RetryPolicy> {
    let mut policy = askloop_server::webhooks::RetryPolicy::default();
    if let Some(backoff) = millis_from_env(WEBHOOK_BACKOFF_ENV)? {
        policy = policy.first_backoff(backoff);
    }
    if let Some(poll) = millis_from_env(WEBHOOK_POLL_ENV)? {
        policy = policy.poll_interval(poll);
    }
    if let Some(timeout) = millis_from_env(WEBHOOK_TIMEOUT_ENV)? {
        policy = policy.timeout(timeout);
    }
    if let Some(text) = env_value(WEBHOOK_RETENTION_ENV) {
        let hours = text.trim().parse::<u64>().map_err(|_| {
            invalid(format!(
                "invalid {WEBHOOK_RETENTION_ENV}: {text:?} (a number of hours)"
            ))
        })?;
        policy = policy.retention(Duration::from_secs(hours.saturating_mul(3600)));
    }
    Ok(policy)
}
