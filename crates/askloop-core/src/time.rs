//! Times as people and clients read them.

use std::time::{Duration, UNIX_EPOCH};

use crate::run_loop::clock::millis;

/// `ms` (milliseconds since the Unix epoch) as an RFC 3339 UTC timestamp with milliseconds,
/// e.g. `2026-12-01T06:10:00.000Z`.
pub fn rfc3339(ms: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

/// An RFC 3339 timestamp (as [`rfc3339`] writes it) as milliseconds since the Unix epoch;
/// `None` when it does not parse or is before the epoch.
pub(crate) fn parse_rfc3339(text: &str) -> Option<u64> {
    let at = humantime::parse_rfc3339(text).ok()?;
    at.duration_since(UNIX_EPOCH).ok().map(millis)
}
