//! The clock leases are read against: wall-clock milliseconds that follow tokio's clock, so
//! that tests with a paused clock (`tokio::time::pause`, `advance`) move lease expiry too.

use std::sync::OnceLock;
use std::time::Duration;

use crate::run::now_ms;

/// Milliseconds since the Unix epoch, as the lease clock says: the wall clock when first read,
/// plus the time tokio's clock has moved since (equal to the wall clock's, unless paused).
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
