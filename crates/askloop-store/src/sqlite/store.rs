//! The [`RunStore`] implementation of [`SqliteStore`]: writes go to the writer thread
//! (`writer.rs`), reads to the read pool (`read.rs`).

use async_trait::async_trait;

use askloop_core::store::codec;
use askloop_core::store::{Lease, RunFilter, RunPage, RunState, StoredRun, ThreadHistory};
use askloop_core::{RunKey, RunStore, StoreError, ThreadKey};

use crate::sqlite::SqliteStore;
use crate::sqlite::columns::{Head, millis};
use crate::sqlite::read;
use crate::sqlite::writer::Write;

#[async_trait]
impl RunStore for SqliteStore {
    async fn insert_run(&self, state: &RunState, lease: Option<&Lease>) -> Result<u64, StoreError> {
        let writer = self.writer()?;
        let write = Write::Insert {
            key: state.key(),
            thread_id: state.thread_id().as_str().to_owned(),
            agent_id: state.agent_id().as_str().to_owned(),
            created_at_ms: millis(state.created_at_ms()),
            head: Head::of(state, lease)?,
            messages: codec::encode_new_messages(state, 0)?,
        };
        let version = writer.write(write).await?;
        self.inner.known.stored(state, 0, version);
        Ok(version)
    }

    async fn update_run(
        &self,
        state: &RunState,
        expected_version: u64,
        lease: Option<&Lease>,
    ) -> Result<u64, StoreError> {
        let writer = self.writer()?;
        let key = state.key();
        let run_id = state.run_id();
        let expected = i64::try_from(expected_version).unwrap_or(i64::MAX);
        // The stored message count, to encode only the new messages: known from this store's
        // last commit or load of the run at that version, else read before the write. The
        // write checks it in the same transaction as the version (the count changes only with
        // the version, so a count known at the expected version is right when that check
        // passes).
        let stored_count = match self.inner.known.count_at(&key, expected_version) {
            Some(count) => i64::try_from(count).unwrap_or(i64::MAX),
            None => {
                match self.point_read(|connection| read::version_and_count(connection, &key))? {
                    None => {
                        return Err(StoreError::NotFound {
                            run_id: run_id.clone(),
                        });
                    }
                    Some((version, _)) if version != expected => {
                        return Err(StoreError::Conflict {
                            run_id: run_id.clone(),
                            expected_version,
                        });
                    }
                    Some((_, count)) => count,
                }
            }
        };
        let write = Write::Update {
            key: key.clone(),
            expected_version: expected,
            stored_count,
            head: Head::of(state, lease)?,
            new_messages: codec::encode_new_messages(
                state,
                usize::try_from(stored_count).unwrap_or(usize::MAX),
            )?,
        };
        let version = match writer.write(write).await {
            Ok(version) => version,
            Err(error) => {
                if matches!(error, StoreError::Conflict { .. }) {
                    self.inner.known.forget(&key);
                }
                return Err(error);
            }
        };
        self.inner.known.stored(
            state,
            usize::try_from(stored_count).unwrap_or(usize::MAX),
            version,
        );
        Ok(version)
    }

    async fn renew_lease(
        &self,
        run: &RunKey,
        expected_version: u64,
        lease: &Lease,
    ) -> Result<(), StoreError> {
        let write = Write::Renew {
            key: run.clone(),
            expected_version: i64::try_from(expected_version).unwrap_or(i64::MAX),
            holder: lease.holder.as_str().to_owned(),
            expires_at_ms: millis(lease.expires_at_ms),
        };
        self.writer()?.write(write).await.map(|_| ())
    }

    async fn load_run(&self, run: &RunKey) -> Result<StoredRun, StoreError> {
        // The messages this store already holds decoded (only a writing store remembers):
        // only those past them are read and decoded.
        let known = match self.inner.writer {
            Some(_) => self.inner.known.messages(run),
            None => Vec::new(),
        };
        let mut from = known.len();
        let mut row = self.point_read(|connection| read::load_run(connection, run, from))?;
        let known = if row.message_count < from {
            // Fewer messages than remembered: not the run remembered (never expected).
            self.inner.known.forget(run);
            from = 0;
            row = self.point_read(|connection| read::load_run(connection, run, 0))?;
            Vec::new()
        } else {
            known
        };
        let state = codec::decode_run_after(&run.run_id, &row.head, known, &row.messages)?;
        if self.inner.writer.is_some() {
            if state.messages().len() == row.message_count && state.is(run) {
                self.inner.known.stored(&state, from, row.version);
            } else {
                self.inner.known.forget(run);
            }
        }
        Ok(StoredRun::new(state, row.version, row.lease))
    }

    async fn list_runs(&self, filter: &RunFilter) -> Result<RunPage, StoreError> {
        self.inner
            .readers
            .with(|connection| read::list_runs(connection, filter))
    }

    async fn run_counts(&self) -> Result<askloop_core::store::RunCounts, StoreError> {
        self.inner.readers.with(read::run_counts)
    }

    async fn thread_history(
        &self,
        thread: &ThreadKey,
        through: Option<u64>,
    ) -> Result<ThreadHistory, StoreError> {
        self.point_read(|connection| read::thread_history(connection, thread, through))
    }

    async fn close(&self) {
        SqliteStore::close(self).await;
    }
}
