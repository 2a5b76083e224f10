//! [`MemoryStore`]: a [`RunStore`] in process memory, for tests and short-lived programs.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;

use crate::ids::{RunId, ThreadId};
use crate::message::Message;
use crate::run::{RunState, RunStatus, RunSummary};
use crate::store::codec::{decode_state, decode_thread_share, encode_state, encode_thread_share};
use crate::store::{ListedRun, RunFilter, RunPage, RunStore, StoreError, StoredRun};

/// A [`RunStore`] in memory: the same semantics as the durable stores (versions,
/// compare-and-swap, threads, listing), nothing survives the process.
///
/// Like the durable stores it keeps each state as the text of
/// [`crate::store::codec::encode_state`], so a state that would not survive a database does not
/// survive this store either.
#[derive(Debug, Default)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    runs: HashMap<RunId, Entry>,
    /// Completed runs' thread shares, in completion order.
    threads: HashMap<ThreadId, Vec<(RunId, String)>>,
}

#[derive(Debug)]
struct Entry {
    summary: RunSummary,
    text: String,
    version: u64,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave `Inner` half-updated (every method
        // encodes and checks before it mutates), so a poisoned lock is safe to reuse.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[async_trait]
impl RunStore for MemoryStore {
    async fn insert_run(&self, state: &RunState) -> Result<u64, StoreError> {
        let text = encode_state(state)?;
        let share = encode_thread_share(state)?;
        let mut inner = self.lock();
        if inner.runs.contains_key(&state.run_id) {
            return Err(StoreError::AlreadyExists {
                run_id: state.run_id.clone(),
            });
        }
        if let Some(share) = share {
            inner
                .threads
                .entry(state.thread_id.clone())
                .or_default()
                .push((state.run_id.clone(), share));
        }
        inner.runs.insert(
            state.run_id.clone(),
            Entry {
                summary: state.summary(),
                text,
                version: 1,
            },
        );
        Ok(1)
    }

    async fn update_run(&self, state: &RunState, expected_version: u64) -> Result<u64, StoreError> {
        let text = encode_state(state)?;
        let share = encode_thread_share(state)?;
        let mut inner = self.lock();
        let Some(entry) = inner.runs.get_mut(&state.run_id) else {
            return Err(StoreError::NotFound {
                run_id: state.run_id.clone(),
            });
        };
        if entry.version != expected_version {
            return Err(StoreError::Conflict {
                run_id: state.run_id.clone(),
                expected_version,
            });
        }
        let was_completed = entry.summary.status == RunStatus::Completed;
        entry.summary = state.summary();
        entry.text = text;
        entry.version += 1;
        let version = entry.version;
        if let Some(share) = share.filter(|_| !was_completed) {
            inner
                .threads
                .entry(state.thread_id.clone())
                .or_default()
                .push((state.run_id.clone(), share));
        }
        Ok(version)
    }

    async fn load_run(&self, run_id: &RunId) -> Result<StoredRun, StoreError> {
        let (text, version) = {
            let inner = self.lock();
            let entry = inner.runs.get(run_id).ok_or_else(|| StoreError::NotFound {
                run_id: run_id.clone(),
            })?;
            (entry.text.clone(), entry.version)
        };
        Ok(StoredRun::new(decode_state(run_id, &text)?, version))
    }

    async fn list_runs(&self, filter: &RunFilter) -> Result<RunPage, StoreError> {
        let mut rows: Vec<(RunSummary, String)> = {
            let inner = self.lock();
            inner
                .runs
                .values()
                .filter(|entry| filter.matches(&entry.summary))
                .filter(|entry| {
                    filter.is_after_cursor(entry.summary.created_at_ms, &entry.summary.run_id)
                })
                .map(|entry| (entry.summary.clone(), entry.text.clone()))
                .collect()
        };
        rows.sort_by(|(a, _), (b, _)| {
            (b.created_at_ms, &b.run_id).cmp(&(a.created_at_ms, &a.run_id))
        });
        if let Some(limit) = filter.limit {
            rows.truncate(limit.saturating_add(1));
        }
        let runs = rows
            .into_iter()
            .map(
                |(summary, text)| match decode_state(&summary.run_id, &text) {
                    Ok(state) => ListedRun::Run(state.summary()),
                    Err(error) => ListedRun::Unreadable {
                        run_id: summary.run_id,
                        created_at_ms: summary.created_at_ms,
                        error,
                    },
                },
            )
            .collect();
        Ok(RunPage::from_rows(runs, filter.limit))
    }

    async fn thread_messages(&self, thread_id: &ThreadId) -> Result<Vec<Message>, StoreError> {
        let shares = self
            .lock()
            .threads
            .get(thread_id)
            .cloned()
            .unwrap_or_default();
        let mut messages = Vec::new();
        for (run_id, text) in shares {
            messages.extend(decode_thread_share(&run_id, &text)?);
        }
        Ok(messages)
    }
}

#[cfg(test)]
mod tests {
    crate::store_conformance_tests!(async {
        std::sync::Arc::new(crate::store::MemoryStore::new())
            as std::sync::Arc<dyn crate::store::RunStore>
    });
}
