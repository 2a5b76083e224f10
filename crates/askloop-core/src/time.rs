//! Time in one place: the wall clock, the clock leases and deadlines are read
//! against ([`lease_now_ms`]), and timestamps as people and clients read them ([`rfc3339`]).

use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch by the wall clock (0 if the clock is before it): when a
/// run was created or changed, when an audit record was made.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(millis)
        .unwrap_or(0)
}

/// Milliseconds since the Unix epoch, as the lease clock says: the wall clock when first read,
/// plus the time tokio's clock has moved since (equal to the wall clock's, unless paused).
///
/// Leases and the deadlines of waiting calls are read against this clock, so that tests with a
/// paused clock (`tokio::time::pause`, `advance`) move them too; pass it to
/// [`crate::expired_runs`] and [`crate::Agent::expire_due`].
pub fn lease_now_ms() -> u64 {
    static BASE: OnceLock<(u64, tokio::time::Instant)> = OnceLock::new();
    let (wall, instant) = *BASE.get_or_init(|| (now_ms(), tokio::time::Instant::now()));
    let elapsed = tokio::time::Instant::now().saturating_duration_since(instant);
    wall.saturating_add(millis(elapsed))
}

/// A duration in whole milliseconds (saturating).
pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// `ms` (milliseconds since the Unix epoch) as an RFC 3339 UTC timestamp with milliseconds,
/// e.g. `2026-12-01T06:10:00.000Z`; a time past the year 9999 is written as
/// `9999-12-31T23:59:59.999Z`.
pub fn rfc3339(ms: u64) -> String {
    // RFC 3339 has four-digit years: a later time is written as the last one it can hold.
    let ms = ms.min(LAST_RFC3339_MS);
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

/// 9999-12-31T23:59:59.999Z in milliseconds since the Unix epoch: the last time [`rfc3339`]
/// can write.
const LAST_RFC3339_MS: u64 = 253_402_300_799_999;

/// An RFC 3339 timestamp (as [`rfc3339`] writes it) as milliseconds since the Unix epoch;
/// `None` when it does not parse or is before the epoch.
pub(crate) fn parse_rfc3339(text: &str) -> Option<u64> {
    let at = humantime::parse_rfc3339(text).ok()?;
    at.duration_since(UNIX_EPOCH).ok().map(millis)
}

#[cfg(test)]
mod tests {
    #[test]
    fn times_past_the_year_9999_are_written_as_its_last_moment() {
        assert_eq!(super::rfc3339(u64::MAX), "9999-12-31T23:59:59.999Z");
        assert_eq!(super::rfc3339(0), "1970-01-01T00:00:00.000Z");
    }
}
