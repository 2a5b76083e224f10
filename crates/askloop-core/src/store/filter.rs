//! Listing runs: which ones ([`RunFilter`]), in pages ([`RunPage`], [`RunCursor`]), each a
//! summary or an unreadable row ([`ListedRun`]); and the runs changed since a position of the
//! store's change order ([`RunFilter::changed_after`], [`RunPage::change_cursor`]).
//!
//! # The change order
//! Every store keeps one **change sequence** for all its runs: each commit that
//! [`notifies`](crate::store::notifies) (a status change, or a commit that leaves a run
//! suspended: whatever can change the pending questions) stamps its run with the next value
//! ([`RunSummary::change_seq`]), in the same transaction, and no commit stamped at or below a
//! page's [`RunPage::change_cursor`] is missing from what that page's listing sees (SQLite and
//! the memory store stamp in commit order; PostgreSQL, whose stamps are taken mid-transaction,
//! waits for the stamping commits in flight before it gives a cursor and lists no stamp above
//! it: see its migration `0007_parallel_change_order.sql`). So a watcher that keeps a cursor — [`RunPage::change_cursor`] of its last listing — and lists
//! [`RunFilter::changed_after`] it sees every later change exactly once (as the run's state
//! now), and nothing when nothing changed.

use std::fmt;
use std::str::FromStr;

use crate::ids::{AgentId, ResourceId, RunId, RunKey, ThreadId, ThreadKey};
use crate::run::{RunStatus, RunSummary};
use crate::store::StoreError;

/// Which resource a listing covers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ResourceFilter {
    /// Runs of every resource and runs without one.
    #[default]
    Any,
    /// Only runs without a resource.
    Without,
    /// Only runs of this resource.
    Is(ResourceId),
}

impl ResourceFilter {
    /// The filter of exactly this namespace: [`ResourceFilter::Is`] for `Some`,
    /// [`ResourceFilter::Without`] for `None`.
    pub fn exactly(resource_id: Option<ResourceId>) -> Self {
        match resource_id {
            Some(resource_id) => Self::Is(resource_id),
            None => Self::Without,
        }
    }

    /// Whether a run of `resource_id` passes.
    pub fn matches(&self, resource_id: Option<&ResourceId>) -> bool {
        match self {
            Self::Any => true,
            Self::Without => resource_id.is_none(),
            Self::Is(wanted) => resource_id == Some(wanted),
        }
    }

    /// The key column value it asks for (`Some("")` for [`ResourceFilter::Without`], see
    /// [`RunKey::scope`]); `None` for [`ResourceFilter::Any`].
    pub fn scope(&self) -> Option<&str> {
        match self {
            Self::Any => None,
            Self::Without => Some(""),
            Self::Is(resource_id) => Some(resource_id.as_str()),
        }
    }
}

/// Which runs to list and how many. Empty fields match everything.
///
/// # Example
/// ```
/// use askloop_core::store::{ResourceFilter, RunFilter};
/// use askloop_core::{RunStatus, ThreadId, ThreadKey};
///
/// let filter = RunFilter::new().status(RunStatus::Suspended).limit(20);
/// assert_eq!(filter.limit, Some(20));
/// let thread = ThreadKey::new(Some("tenant-a".into()), ThreadId::new("t-1"));
/// let filter = RunFilter::in_thread(&thread);
/// assert_eq!(filter.resource, ResourceFilter::Is("tenant-a".into()));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunFilter {
    /// Only runs in this status.
    pub status: Option<RunStatus>,
    /// Only runs of this agent.
    pub agent_id: Option<AgentId>,
    /// Only runs of a thread with this id (of the resources [`RunFilter::resource`] lets
    /// through: a thread is named by its resource too, see [`RunFilter::in_thread`]).
    pub thread_id: Option<ThreadId>,
    /// Only runs of this resource, or without one; every run by default.
    pub resource: ResourceFilter,
    /// Only runs with this id (one per resource that uses it): how a bare run id is resolved.
    pub run_id: Option<RunId>,
    /// Only forks of the run with this id ([`RunSummary::forked_from`]; a fork is in its
    /// original's resource).
    pub forked_from: Option<RunId>,
    /// Only the child runs that the run with this id started through its sub-agents
    /// ([`RunSummary::parent`]; a child is in its parent's resource).
    pub parent_run_id: Option<RunId>,
    /// Only runs that are no sub-agent's child run (what a person started: the roots of the
    /// trees, whose waiting calls include their children's).
    pub top_level: bool,
    /// Only runs after this position of the newest-first order (from [`RunPage::next_cursor`]).
    pub cursor: Option<RunCursor>,
    /// At most this many runs; `None` for all.
    pub limit: Option<usize>,
    /// Only runs whose change sequence is above this one, listed in change-sequence order
    /// (oldest change first) instead of newest first; `cursor` does not apply (the next page
    /// is `changed_after` the page's [`RunPage::change_cursor`]). See the module docs.
    pub changed_after: Option<u64>,
    /// Whether a newest-first page may leave its [`RunPage::change_cursor`] out (`None`): set
    /// by listings that never follow the change order (a thread's waiting runs, a run's
    /// children, the calls due), so they never wait for it. PostgreSQL waits for the commits
    /// in flight that stamp before it gives a cursor; the other stores give it anyway. A
    /// `changed_after` listing always gives its cursor.
    pub without_change_cursor: bool,
}

impl RunFilter {
    /// Every run.
    pub fn new() -> Self {
        Self::default()
    }

    /// The runs of one thread: its id and exactly its resource.
    pub fn in_thread(thread: &ThreadKey) -> Self {
        Self::new()
            .thread(thread.thread_id.clone())
            .resource_filter(ResourceFilter::exactly(thread.resource_id.clone()))
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

    /// Only runs of threads with this id (in any resource unless the resource is filtered too;
    /// [`RunFilter::in_thread`] names one thread).
    pub fn thread(mut self, thread_id: impl Into<ThreadId>) -> Self {
        self.thread_id = Some(thread_id.into());
        self
    }

    /// Only runs of this resource.
    pub fn resource(mut self, resource_id: impl Into<ResourceId>) -> Self {
        self.resource = ResourceFilter::Is(resource_id.into());
        self
    }

    /// Only runs of the resources `resource` lets through.
    pub fn resource_filter(mut self, resource: ResourceFilter) -> Self {
        self.resource = resource;
        self
    }

    /// Only runs with this id, in whichever resources use it.
    pub fn run(mut self, run_id: impl Into<RunId>) -> Self {
        self.run_id = Some(run_id.into());
        self
    }

    /// Only the forks of run `run_id` ([`crate::Agent::fork`]): the runs whose `forkedFrom`
    /// names it (with [`RunFilter::resource`], those of the original's resource).
    pub fn forked_from(mut self, run_id: impl Into<RunId>) -> Self {
        self.forked_from = Some(run_id.into());
        self
    }

    /// Only the child runs that run `run_id` started through its sub-agents
    /// ([`crate::AgentBuilder::subagent`]): the runs whose `parent` names it (with
    /// [`RunFilter::resource`], those of the parent's resource).
    pub fn children_of(mut self, run_id: impl Into<RunId>) -> Self {
        self.parent_run_id = Some(run_id.into());
        self
    }

    /// Only runs that are no sub-agent's child run: an inbox lists these, each root showing
    /// its children's waiting calls as its own.
    pub fn top_level(mut self) -> Self {
        self.top_level = true;
        self
    }

    /// Continues a listing after this cursor.
    pub fn after(mut self, cursor: RunCursor) -> Self {
        self.cursor = Some(cursor);
        self
    }

    /// Only the runs changed after change sequence `seq` (a [`RunPage::change_cursor`]), in
    /// change order, oldest change first: what a watcher lists to see what changed since its
    /// last listing. The other filters still apply.
    ///
    /// ```
    /// use askloop_core::store::RunFilter;
    ///
    /// let filter = RunFilter::new().changed_after(41).limit(500);
    /// assert_eq!(filter.changed_after, Some(41));
    /// ```
    pub fn changed_after(mut self, seq: u64) -> Self {
        self.changed_after = Some(seq);
        self
    }

    /// Leaves the page's change cursor out where giving it costs a wait (see
    /// [`RunFilter::without_change_cursor`]): for a listing that never follows the change order.
    pub fn without_change_cursor(mut self) -> Self {
        self.without_change_cursor = true;
        self
    }

    /// At most `limit` runs.
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = Some(limit);
        self
    }

    /// Whether a run passes the filter's field conditions (`cursor`, `changed_after` and
    /// `limit` aside).
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
            && self.resource.matches(summary.resource_id.as_ref())
            && self
                .run_id
                .as_ref()
                .is_none_or(|run_id| &summary.run_id == run_id)
            && self.forked_from.as_ref().is_none_or(|original| {
                summary
                    .forked_from
                    .as_ref()
                    .is_some_and(|from| &from.run_id == original)
            })
            && self.parent_run_id.as_ref().is_none_or(|parent| {
                summary
                    .parent
                    .as_ref()
                    .is_some_and(|link| &link.run_id == parent)
            })
            && (!self.top_level || summary.parent.is_none())
    }

    /// Whether a run at this position comes after the cursor (always, without one).
    pub fn is_after_cursor(&self, created_at_ms: u64, run: &RunKey) -> bool {
        self.cursor
            .as_ref()
            .is_none_or(|cursor| cursor.is_before(created_at_ms, run))
    }
}

/// A position in the newest-first order of runs (creation time, then run id, then resource,
/// all descending): just after the run created at `created_at_ms` with key (`resource_id`,
/// `run_id`). Its text form, what APIs pass around, is
/// `<created_at_ms>.<resource length in bytes>.<resource><run_id>` (length 0 and no resource
/// for a run without one).
///
/// ```
/// use askloop_core::store::RunCursor;
/// use askloop_core::{RunId, RunKey};
///
/// let cursor = RunCursor::after_run(17, RunKey::new(Some("t-a".into()), RunId::new("r.1")));
/// assert_eq!(cursor.to_string(), "17.3.t-ar.1");
/// assert_eq!("17.3.t-ar.1".parse::<RunCursor>(), Ok(cursor));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RunCursor {
    /// Creation time of the last run of the previous page, milliseconds since the Unix epoch.
    pub created_at_ms: u64,
    /// Id of the last run of the previous page.
    pub run_id: RunId,
    /// Its resource.
    pub resource_id: Option<ResourceId>,
}

impl RunCursor {
    /// The position just after this run.
    pub fn after_run(created_at_ms: u64, run: RunKey) -> Self {
        Self {
            created_at_ms,
            run_id: run.run_id,
            resource_id: run.resource_id,
        }
    }

    /// The key column value of the cursor's resource (see [`RunKey::scope`]).
    pub fn scope(&self) -> &str {
        self.resource_id.as_ref().map_or("", ResourceId::as_str)
    }

    /// Whether a run at (`created_at_ms`, `run`) comes after this position in the
    /// newest-first order.
    pub fn is_before(&self, created_at_ms: u64, run: &RunKey) -> bool {
        (created_at_ms, run.run_id.as_str(), run.scope())
            < (self.created_at_ms, self.run_id.as_str(), self.scope())
    }
}

impl fmt::Display for RunCursor {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scope = self.scope();
        write!(
            formatter,
            "{}.{}.{scope}{}",
            self.created_at_ms,
            scope.len(),
            self.run_id
        )
    }
}

/// A cursor text that is not `<created_at_ms>.<resource length>.<resource><run_id>`.
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
        let (created, rest) = text.split_once('.').ok_or_else(invalid)?;
        let (length_text, rest) = rest.split_once('.').ok_or_else(invalid)?;
        let created_at_ms = created.parse().map_err(|_| invalid())?;
        let length: usize = length_text.parse().map_err(|_| invalid())?;
        // Written canonically (no sign, no leading zero), as Display writes it.
        if length.to_string() != length_text {
            return Err(invalid());
        }
        let scope = rest.get(..length).ok_or_else(invalid)?;
        let run_id = rest.get(length..).ok_or_else(invalid)?;
        if run_id.is_empty() {
            return Err(invalid());
        }
        Ok(Self {
            created_at_ms,
            run_id: RunId::new(run_id),
            resource_id: crate::resource_of_scope(scope),
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
        /// Its resource (with `run_id`, its key).
        resource_id: Option<ResourceId>,
        /// Creation time, milliseconds since the Unix epoch.
        created_at_ms: u64,
        /// Its change sequence ([`RunSummary::change_seq`]).
        change_seq: Option<u64>,
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

    /// The run's key.
    pub fn key(&self) -> RunKey {
        match self {
            Self::Run(summary) => summary.key(),
            Self::Unreadable {
                run_id,
                resource_id,
                ..
            } => RunKey::new(resource_id.clone(), run_id.clone()),
        }
    }

    /// The run's creation time.
    pub fn created_at_ms(&self) -> u64 {
        match self {
            Self::Run(summary) => summary.created_at_ms,
            Self::Unreadable { created_at_ms, .. } => *created_at_ms,
        }
    }

    /// The run's change sequence ([`RunSummary::change_seq`]).
    pub fn change_seq(&self) -> Option<u64> {
        match self {
            Self::Run(summary) => summary.change_seq,
            Self::Unreadable { change_seq, .. } => *change_seq,
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
    /// Where the next page starts (pass it to [`RunFilter::after`]); `None` on the last page
    /// (and for a [`RunFilter::changed_after`] listing, which pages by `change_cursor`).
    pub next_cursor: Option<RunCursor>,
    /// Where the store's change order stands for this page (pass it to
    /// [`RunFilter::changed_after`] to list what this page does not show): every change up to
    /// it is reflected in this listing. For a newest-first listing, the highest change
    /// sequence committed when the listing began (so a listing in several pages takes its first
    /// page's); for a `changed_after` listing, the last run's sequence when the page was cut at
    /// its limit, else the highest committed (nothing changed after the page's runs matches).
    /// `None` from a store that keeps no change order, and may be `None` for a listing
    /// [`RunFilter::without_change_cursor`].
    pub change_cursor: Option<u64>,
    /// Whether a `changed_after` listing was cut at its limit: list again from
    /// `change_cursor` for the rest.
    pub more_changes: bool,
}

impl RunPage {
    /// A page from rows already filtered, sorted newest first and cut at `limit + 1` rows: the
    /// extra row, if any, only says that there is a next page. `horizon` is the store's highest
    /// change sequence read before (or in the same snapshot as) the rows.
    pub fn from_rows(mut runs: Vec<ListedRun>, limit: Option<usize>, horizon: Option<u64>) -> Self {
        let next_cursor = match limit {
            Some(limit) if runs.len() > limit => {
                runs.truncate(limit);
                runs.last()
                    .map(|last| RunCursor::after_run(last.created_at_ms(), last.key()))
            }
            _ => None,
        };
        Self {
            runs,
            next_cursor,
            change_cursor: horizon,
            more_changes: false,
        }
    }

    /// A page of a [`RunFilter::changed_after`] listing from rows already filtered, sorted by
    /// change sequence (ascending) and cut at `limit + 1` rows; `horizon` is the store's highest
    /// change sequence read before (or in the same snapshot as) the rows (`0` when none was
    /// given yet). The cursor is the last run's sequence on a cut page, else the higher of the
    /// horizon and the last run's sequence (a commit seen by the rows but not by an earlier
    /// horizon read: in a store that stamps in commit order, everything below it is committed
    /// too; a store that does not lists no row above its horizon).
    pub fn from_changed_rows(mut runs: Vec<ListedRun>, limit: Option<usize>, horizon: u64) -> Self {
        let more_changes = limit.is_some_and(|limit| runs.len() > limit);
        if let Some(limit) = limit {
            runs.truncate(limit);
        }
        let last = runs.iter().filter_map(ListedRun::change_seq).max();
        let change_cursor = if more_changes {
            last.unwrap_or(horizon)
        } else {
            last.map_or(horizon, |last| last.max(horizon))
        };
        Self {
            runs,
            next_cursor: None,
            change_cursor: Some(change_cursor),
            more_changes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(resource: Option<&str>, run: &str) -> RunKey {
        RunKey::new(resource.map(ResourceId::new), RunId::new(run))
    }

    #[test]
    fn cursors_round_trip_through_text_and_reject_garbage() {
        for cursor in [
            RunCursor::after_run(17, key(None, "0193-ab.c")),
            RunCursor::after_run(17, key(Some("t.1é"), "12.x")),
        ] {
            assert_eq!(cursor.to_string().parse::<RunCursor>(), Ok(cursor));
        }
        assert_eq!(RunCursor::after_run(5, key(None, "r")).to_string(), "5.0.r");
        for bad in [
            "", "17", "x.0.r", "17.0.", "-1.0.r", "17.r", "17.3.ab", "17.01.ar", "17.+1.ar",
            "17.9.r",
        ] {
            assert!(bad.parse::<RunCursor>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn newest_first_order_puts_older_runs_after_the_cursor() {
        let cursor = RunCursor::after_run(10, key(Some("m"), "m"));
        assert!(cursor.is_before(9, &key(None, "z")));
        assert!(cursor.is_before(10, &key(None, "a")));
        assert!(cursor.is_before(10, &key(None, "m")));
        assert!(cursor.is_before(10, &key(Some("a"), "m")));
        assert!(!cursor.is_before(10, &key(Some("m"), "m")));
        assert!(!cursor.is_before(10, &key(Some("n"), "m")));
        assert!(!cursor.is_before(11, &key(None, "a")));
    }
}
