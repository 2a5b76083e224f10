//! Times as people and clients read them.

use std::time::{Duration, UNIX_EPOCH};

/// `ms` (milliseconds since the Unix epoch) as an RFC 3339 UTC timestamp with milliseconds,
/// e.g. `2026-12-01T06:10:00.000Z`.
pub fn rfc3339(ms: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}
