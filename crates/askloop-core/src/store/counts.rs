//! [`RunCounts`]: how many runs a store holds in each status (for metrics and dashboards).

use crate::RunStatus;

/// How many runs a store holds, by status; what [`crate::RunStore::run_counts`] returns.
///
/// ```
/// use askloop_core::RunStatus;
/// use askloop_core::store::RunCounts;
///
/// let mut counts = RunCounts::default();
/// counts.add(RunStatus::Suspended, 2);
/// assert_eq!(counts.get(RunStatus::Suspended), 2);
/// assert_eq!(counts.total(), 2);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunCounts {
    by_status: [u64; RunStatus::ALL.len()],
    /// Rows whose status the store cannot read (a newer format, a damaged row).
    pub unreadable: u64,
}

impl RunCounts {
    /// The number of runs in `status`.
    pub fn get(&self, status: RunStatus) -> u64 {
        self.by_status[Self::index(status)]
    }

    /// Adds `count` runs in `status`.
    pub fn add(&mut self, status: RunStatus, count: u64) {
        let slot = &mut self.by_status[Self::index(status)];
        *slot = slot.saturating_add(count);
    }

    /// Every status with its count (zeros included), in [`RunStatus::ALL`]'s order.
    pub fn iter(&self) -> impl Iterator<Item = (RunStatus, u64)> + '_ {
        RunStatus::ALL
            .into_iter()
            .zip(self.by_status.iter().copied())
    }

    /// All runs, unreadable ones included.
    pub fn total(&self) -> u64 {
        self.by_status
            .iter()
            .fold(self.unreadable, |total, count| total.saturating_add(*count))
    }

    /// The position of `status` in [`RunStatus::ALL`].
    fn index(status: RunStatus) -> usize {
        match status {
            RunStatus::Running => 0,
            RunStatus::Suspended => 1,
            RunStatus::Completed => 2,
            RunStatus::Failed => 3,
            RunStatus::Cancelled => 4,
        }
    }
}
