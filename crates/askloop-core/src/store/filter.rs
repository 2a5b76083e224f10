//! Listing runs: which ones ([`RunFilter`]), in pages ([`RunPage`], [`RunCursor`]), each a
//! summary or an unreadable row ([`ListedRun`]).

use std::fmt;
use std::str::FromStr;

use crate::ids::{AgentId, ResourceId, RunId, ThreadId};
use crate::run::{RunStatus, RunSummary};
use crate::store::StoreError;

/// Which runs to list and how many. Empty fields match everything.
///
/// # Example
/// ```
/// use askloop_core::RunStatus;
/// use askloop_core::store::RunFilter;
///
/// let filter = RunFilter::new().status(RunStatus::Suspended).limit(20);
/// assert_eq!(filter.limit, Some(20));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunFilter {
    /// Only runs in this status.
    pub status: Option<RunStatus>,
    /// Only runs of this agent.
    pub agent_id: Option<AgentId>,
    /// Only runs of this thread.
    pub thread_id: Option<ThreadId>,
    /// Only runs of this resource.
    pub resource_id: Option<ResourceId>,
    /// Only runs after this position of the newest-first order (from [`RunPage::next_cursor`]).
    pub cursor: Option<RunCursor>,
    /// At most this many runs; `None` for all.
    pub limit: Option<usize>,
}

impl RunFilter {
    /// Every run.
    pub fn new() -> Self {
        Self::default()
    }

    /// Only runs in `status`.
    pub fn status(mut self, status: RunStatus) -> Self {
        self.status = Some(status);
        self
    }

    /// Only runs of this agent.
    pub fn agent(mut self, agent_id: impl Into<AgentId>) -> Self {
        self.agent_id = Some(agent_id.into());
        self
    }

    /// Only runs of this thread.
    pub fn thread(mut self, thread_id: impl Into<ThreadId>) -> Self {
        self.thread_id = Some(thread_id.into());
        self
    }

    /// Only runs of this resource.
    pub fn resource(mut self, resource_id: impl Into<ResourceId>) -> Self {
        self.resource_id = Some(resource_id.into());
        self
    }

    /// Continues a listing after this cursor.
    pub fn after(mut self, cursor: RunCursor) -> Self {
        self.cursor = Some(cursor);
        self
    }

    /// At most `limit` runs.
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = Some(limit);
        self
    }

    /// Whether a run passes the filter's field conditions (`cursor` and `limit` aside).
    pub fn matches(&self, summary: &RunSummary) -> bool {
        self.status.is_none_or(|status| summary.status == status)
            && self
                .agent_id
                .as_ref()
                .is_none_or(|agent| &summary.agent_id == agent)
            && self
                .thread_id
                .as_ref()
                .is_none_or(|thread| &summary.thread_id == thread)
            && self
                .resource_id
                .as_ref()
                .is_none_or(|resource| summary.resource_id.as_ref() == Some(resource))
    }

    /// Whether a run at this position comes after the cursor (always, without one).
    pub fn is_after_cursor(&self, created_at_ms: u64, run_id: &RunId) -> bool {
        self.cursor
            .as_ref()
            .is_none_or(|cursor| cursor.is_before(created_at_ms, run_id))
    }
}

/// A position in the newest-first order of runs: after the run created at `created_at_ms` with
/// id `run_id`. Its text form (`<created_at_ms>.<run_id>`) is what APIs pass around.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RunCursor {
    /// Creation time of the last run of the previous page, milliseconds since the Unix epoch.
    pub created_at_ms: u64,
    /// Id of the last run of the previous page.
    pub run_id: RunId,
}

impl RunCursor {
    /// The position just after this run.
    pub fn after_run(created_at_ms: u64, run_id: RunId) -> Self {
        Self {
            created_at_ms,
            run_id,
        }
    }

    /// Whether a run at (`created_at_ms`, `run_id`) comes after this position in the
    /// newest-first order.
    pub fn is_before(&self, created_at_ms: u64, run_id: &RunId) -> bool {
        (created_at_ms, run_id) < (self.created_at_ms, &self.run_id)
    }
}

impl fmt::Display for RunCursor {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{}.{}", self.created_at_ms, self.run_id)
    }
}

/// A cursor text that is not `<created_at_ms>.<run_id>`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid cursor {given:?}; expected the nextCursor of a previous page")]
pub struct InvalidCursor {
    /// The text given.
    pub given: String,
}

impl FromStr for RunCursor {
    type Err = InvalidCursor;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = || InvalidCursor {
            given: text.to_owned(),
        };
        let (created, run_id) = text.split_once('.').ok_or_else(invalid)?;
        let created_at_ms = created.parse().map_err(|_| invalid())?;
        if run_id.is_empty() {
            return Err(invalid());
        }
        Ok(Self {
            created_at_ms,
            run_id: RunId::new(run_id),
        })
    }
}

/// One run of a listing.
#[derive(Debug)]
#[non_exhaustive]
pub enum ListedRun {
    /// A run that was read.
    Run(RunSummary),
    /// A run whose stored state cannot be read by this build (damaged, or written in a newer
    /// format); the other runs are listed as usual.
    Unreadable {
        /// The run.
        run_id: RunId,
        /// Creation time, milliseconds since the Unix epoch.
        created_at_ms: u64,
        /// Why it cannot be read ([`StoreError::Corrupt`] or [`StoreError::UnsupportedFormat`]).
        error: StoreError,
    },
}

impl ListedRun {
    /// The run's id.
    pub fn run_id(&self) -> &RunId {
        match self {
            Self::Run(summary) => &summary.run_id,
            Self::Unreadable { run_id, .. } => run_id,
        }
    }

    /// The run's creation time.
    pub fn created_at_ms(&self) -> u64 {
        match self {
            Self::Run(summary) => summary.created_at_ms,
            Self::Unreadable { created_at_ms, .. } => *created_at_ms,
        }
    }

    /// The summary, if the run was readable.
    pub fn summary(&self) -> Option<&RunSummary> {
        match self {
            Self::Run(summary) => Some(summary),
            Self::Unreadable { .. } => None,
        }
    }
}

/// One page of a listing, newest first.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct RunPage {
    /// The runs.
    pub runs: Vec<ListedRun>,
    /// Where the next page starts (pass it to [`RunFilter::after`]); `None` on the last page.
    pub next_cursor: Option<RunCursor>,
}

impl RunPage {
    /// A page from rows already filtered, sorted newest first and cut at `limit + 1` rows: the
    /// extra row, if any, only says that there is a next page.
    pub fn from_rows(mut runs: Vec<ListedRun>, limit: Option<usize>) -> Self {
        let next_cursor = match limit {
            Some(limit) if runs.len() > limit => {
                runs.truncate(limit);
                runs.last()
                    .map(|last| RunCursor::after_run(last.created_at_ms(), last.run_id().clone()))
            }
            _ => None,
        };
        Self { runs, next_cursor }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_through_text_and_reject_garbage() {
        let cursor = RunCursor::after_run(17, RunId::new("0193-ab.c"));
        assert_eq!(cursor.to_string().parse::<RunCursor>(), Ok(cursor));
        for bad in ["", "17", "x.r", "17.", "-1.r"] {
            assert!(bad.parse::<RunCursor>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn newest_first_order_puts_older_runs_after_the_cursor() {
        let cursor = RunCursor::after_run(10, RunId::new("m"));
        assert!(cursor.is_before(9, &RunId::new("z")));
        assert!(cursor.is_before(10, &RunId::new("a")));
        assert!(!cursor.is_before(10, &RunId::new("m")));
        assert!(!cursor.is_before(11, &RunId::new("a")));
    }
}
