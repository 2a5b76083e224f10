//! [`all_runs`]: every run a filter matches, read page by page (the suspended-runs totals, the
//! sweep's running runs).

use askloop_core::store::{ListedRun, RunFilter, RunSummary};

use crate::error::ApiError;
use crate::state::AppState;

/// Page size of the listing.
const PAGE: usize = 200;
/// Most runs a full listing reads.
const MAX_LISTED: usize = 10_000;

/// Every run matching `filter` (at most 10,000), newest first; unreadable rows are logged and
/// left out.
pub(crate) async fn all_runs(
    state: &AppState,
    mut filter: RunFilter,
) -> Result<Vec<RunSummary>, ApiError> {
    filter.limit = Some(PAGE);
    let mut runs = Vec::new();
    loop {
        let page = state.store.list_runs(&filter).await?;
        for listed in page.runs {
            match listed {
                ListedRun::Run(summary) => runs.push(summary),
                other => {
                    tracing::warn!(run_id = %other.run_id(), "unreadable run left out of a listing")
                }
            }
        }
        match page.next_cursor {
            Some(cursor) if runs.len() < MAX_LISTED => filter.cursor = Some(cursor),
            _ => return Ok(runs),
        }
    }
}
