//! [`MemoryStore`]: a [`RunStore`] in process memory, for tests and short-lived programs.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;

use crate::ids::{RunId, ThreadId};
use crate::message::Message;
use crate::run::{RunState, RunStatus};
use crate::store::{RunFilter, RunStore, StoreError, StoredRun};

/// A [`RunStore`] in memory: the same semantics as the durable stores (versions, compare-and-swap,
/// threads), nothing survives the process.
#[derive(Debug, Default)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    runs: HashMap<RunId, StoredRun>,
    threads: HashMap<ThreadId, Vec<Message>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave `Inner` half-updated (every method
        // finishes its checks before it mutates), so a poisoned lock is safe to reuse.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[async_trait]
impl RunStore for MemoryStore {
    async fn insert_run(&self, state: &RunState) -> Result<u64, StoreError> {
        let mut inner = self.lock();
        if inner.runs.contains_key(&state.run_id) {
            return Err(StoreError::AlreadyExists {
                run_id: state.run_id.clone(),
            });
        }
        if state.status == RunStatus::Completed {
            inner
                .threads
                .entry(state.thread_id.clone())
                .or_default()
                .extend_from_slice(state.run_messages());
        }
        inner.runs.insert(
            state.run_id.clone(),
            StoredRun {
                state: state.clone(),
                version: 1,
            },
        );
        Ok(1)
    }

    async fn update_run(&self, state: &RunState, expected_version: u64) -> Result<u64, StoreError> {
        let mut inner = self.lock();
        let Some(stored) = inner.runs.get_mut(&state.run_id) else {
            return Err(StoreError::NotFound {
                run_id: state.run_id.clone(),
            });
        };
        if stored.version != expected_version {
            return Err(StoreError::Conflict {
                run_id: state.run_id.clone(),
                expected_version,
            });
        }
        let was_completed = stored.state.status == RunStatus::Completed;
        stored.state = state.clone();
        stored.version += 1;
        let version = stored.version;
        if state.status == RunStatus::Completed && !was_completed {
            inner
                .threads
                .entry(state.thread_id.clone())
                .or_default()
                .extend_from_slice(state.run_messages());
        }
        Ok(version)
    }

    async fn load_run(&self, run_id: &RunId) -> Result<StoredRun, StoreError> {
        self.lock()
            .runs
            .get(run_id)
            .cloned()
            .ok_or_else(|| StoreError::NotFound {
                run_id: run_id.clone(),
            })
    }

    async fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunState>, StoreError> {
        let inner = self.lock();
        let mut runs: Vec<RunState> = inner
            .runs
            .values()
            .filter(|stored| filter.matches(&stored.state))
            .map(|stored| stored.state.clone())
            .collect();
        runs.sort_by(|a, b| {
            b.created_at_ms
                .cmp(&a.created_at_ms)
                .then_with(|| b.run_id.cmp(&a.run_id))
        });
        if let Some(limit) = filter.limit {
            runs.truncate(limit);
        }
        Ok(runs)
    }

    async fn thread_messages(&self, thread_id: &ThreadId) -> Result<Vec<Message>, StoreError> {
        Ok(self
            .lock()
            .threads
            .get(thread_id)
            .cloned()
            .unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    crate::store_conformance_tests!(async {
        std::sync::Arc::new(crate::MemoryStore::new()) as std::sync::Arc<dyn crate::RunStore>
    });
}
