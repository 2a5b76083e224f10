//! Helpers of the tests: the npm servers come from [`askloop_mcp::testing`].

use std::path::Path;
use std::time::{Duration, Instant};

pub(crate) use askloop_mcp::testing::{eliciting, everything, filesystem};

/// The entry point of an installed server package, as a string.
pub(crate) fn entry(package: &str) -> String {
    askloop_mcp::testing::server_entry(package)
        .display()
        .to_string()
}

/// Whether process `pid` is gone: no `/proc` entry at all (a zombie still has one).
pub(crate) fn process_gone(pid: u32) -> bool {
    !Path::new(&format!("/proc/{pid}")).exists()
}

/// Waits until `condition` holds, failing after `limit`.
pub(crate) async fn wait_until(what: &str, limit: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
