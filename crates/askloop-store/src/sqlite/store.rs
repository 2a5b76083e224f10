//! The [`RunStore`] implementation of [`SqliteStore`]: writes go to the writer thread
//! (`writer.rs`), reads to the read pool (`read.rs`); its [`Outbox`] and [`AnswerLinks`] too
//! (their SQL in `outbox.rs` and `links.rs`).

use async_trait::async_trait;

use askloop_core::event::RunEvent;
use askloop_core::store::codec;
use askloop_core::store::{
    AnswerLink, AnswerLinks, Delivery, DeliveryAttempt, DeliveryClaim, DeliveryFilter, DeliveryId,
    DeliveryNext, FanOut, Lease, LinkHash, LinkId, NewAnswerLink, Outbox, ResourceFilter,
    RunFilter, RunPage, RunState, StoredEvent, StoredRun, ThreadHistory,
};
use askloop_core::{LeaseHolder, RunId, RunKey, RunStore, StoreError, ThreadKey, ToolCallId};

use crate::links::encode_issuer;
use crate::outbox::{encode_attempt, encode_events, filter_scope};
use crate::sqlite::SqliteStore;
use crate::sqlite::columns::{Head, millis};
use crate::sqlite::links::{LinkVanished, LinkWrite, find};
use crate::sqlite::outbox::{self, OutboxWrite};
use crate::sqlite::read;
use crate::sqlite::writer::Write;

#[async_trait]
impl RunStore for SqliteStore {
    async fn insert_run_with_events(
        &self,
        state: &RunState,
        lease: Option<&Lease>,
        events: &[RunEvent],
    ) -> Result<u64, StoreError> {
        let writer = self.writer()?;
        let write = Write::Insert {
            key: state.key(),
            thread_id: state.thread_id().as_str().to_owned(),
            agent_id: state.agent_id().as_str().to_owned(),
            created_at_ms: millis(state.created_at_ms()),
            head: Head::of(state, lease)?,
            messages: codec::encode_new_messages(state, 0)?,
            events: encode_events(&state.key(), events)?,
        };
        let version = writer.write(write).await?;
        self.inner.known.stored(state, 0, version);
        Ok(version)
    }

    async fn update_run_with_events(
        &self,
        state: &RunState,
        expected_version: u64,
        lease: Option<&Lease>,
        events: &[RunEvent],
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
            events: encode_events(&key, events)?,
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

    async fn keys_of_run(&self, run_id: &RunId) -> Result<Vec<RunKey>, StoreError> {
        self.inner
            .readers
            .with(|connection| read::keys_of_run(connection, run_id))
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

    fn answer_links(&self) -> Option<&dyn askloop_core::store::AnswerLinks> {
        Some(self)
    }

    fn outbox(&self) -> Option<&dyn Outbox> {
        Some(self)
    }
}

#[async_trait]
impl Outbox for SqliteStore {
    async fn list_events(
        &self,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let (after, limit) = (millis(after_seq), count(limit));
        self.point_read(|connection| outbox::list_events(connection, after, limit, false))
    }

    async fn unfanned_events(&self, limit: usize) -> Result<Vec<StoredEvent>, StoreError> {
        let limit = count(limit);
        self.point_read(|connection| outbox::list_events(connection, 0, limit, true))
    }

    async fn fan_out(&self, routes: &[FanOut], now_ms: u64) -> Result<(), StoreError> {
        let routes = routes
            .iter()
            .map(|route| (millis(route.event_seq), route.endpoints.clone()))
            .collect();
        let write = OutboxWrite::FanOut {
            routes,
            now_ms: millis(now_ms),
        };
        self.writer()?.write(Write::Outbox(write)).await.map(|_| ())
    }

    async fn claim_deliveries(&self, claim: &DeliveryClaim) -> Result<Vec<Delivery>, StoreError> {
        let holder = claim.holder.as_str().to_owned();
        let until_ms = millis(claim.until_ms);
        let write = OutboxWrite::Claim {
            holder: holder.clone(),
            now_ms: millis(claim.now_ms),
            until_ms,
            limit: count(claim.limit),
        };
        if self.writer()?.write(Write::Outbox(write)).await? == 0 {
            return Ok(Vec::new());
        }
        self.point_read(|connection| outbox::claimed(connection, &holder, until_ms))
    }

    async fn record_attempt(
        &self,
        id: DeliveryId,
        holder: &LeaseHolder,
        attempt: &DeliveryAttempt,
        next: DeliveryNext,
    ) -> Result<(), StoreError> {
        let write = OutboxWrite::Attempt {
            id: millis(id.0),
            holder: holder.as_str().to_owned(),
            attempt: encode_attempt(attempt)?,
            next,
        };
        self.writer()?.write(Write::Outbox(write)).await.map(|_| ())
    }

    async fn list_deliveries(&self, filter: &DeliveryFilter) -> Result<Vec<Delivery>, StoreError> {
        let scope = filter_scope(&filter.resource);
        self.inner
            .readers
            .with(|connection| outbox::list_deliveries(connection, filter, scope.as_deref()))
    }

    async fn replay_delivery(
        &self,
        id: DeliveryId,
        resource: &ResourceFilter,
        now_ms: u64,
    ) -> Result<(), StoreError> {
        let write = OutboxWrite::Replay {
            id: millis(id.0),
            scope: filter_scope(resource),
            now_ms: millis(now_ms),
        };
        self.writer()?.write(Write::Outbox(write)).await.map(|_| ())
    }

    async fn prune_outbox(&self, older_than_ms: u64, limit: usize) -> Result<u64, StoreError> {
        let write = OutboxWrite::Prune {
            older_than_ms: millis(older_than_ms),
            limit: count(limit),
        };
        self.writer()?.write(Write::Outbox(write)).await
    }
}

/// A count as SQLite binds it.
fn count(value: usize) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

impl SqliteStore {
    /// Runs a link write on the writer thread.
    async fn write_links(&self, write: LinkWrite) -> Result<u64, StoreError> {
        self.writer()?.write(Write::Links(write)).await
    }
}

#[async_trait]
impl AnswerLinks for SqliteStore {
    async fn create_link(&self, link: &NewAnswerLink) -> Result<AnswerLink, StoreError> {
        let hash = link.hash.to_hex();
        self.write_links(LinkWrite::Create {
            hash: hash.clone(),
            scope: link.run.scope().to_owned(),
            run_id: link.run.run_id.as_str().to_owned(),
            tool_call_id: link.tool_call_id.as_str().to_owned(),
            role: link.role.clone(),
            issuer: encode_issuer(link.issuer.as_ref()),
            created_at_ms: millis(link.created_at_ms),
            expires_at_ms: millis(link.expires_at_ms),
        })
        .await?;
        self.point_read(|connection| find(connection, &hash))?
            .ok_or_else(|| StoreError::backend(LinkVanished))
    }

    async fn find_link(&self, hash: &LinkHash) -> Result<Option<AnswerLink>, StoreError> {
        let hash = hash.to_hex();
        self.point_read(|connection| find(connection, &hash))
    }

    async fn use_link(
        &self,
        hash: &LinkHash,
        now_ms: u64,
    ) -> Result<Option<AnswerLink>, StoreError> {
        let hash = hash.to_hex();
        let used = self
            .write_links(LinkWrite::Use {
                hash: hash.clone(),
                now_ms: millis(now_ms),
            })
            .await?;
        if used == 0 {
            return Ok(None);
        }
        self.point_read(|connection| find(connection, &hash))
    }

    async fn release_link(&self, id: LinkId, used_at_ms: u64) -> Result<bool, StoreError> {
        let released = self
            .write_links(LinkWrite::Release {
                id: millis(id.0),
                used_at_ms: millis(used_at_ms),
            })
            .await?;
        Ok(released > 0)
    }

    async fn revoke_links(
        &self,
        run: &RunKey,
        tool_call_id: &ToolCallId,
        now_ms: u64,
    ) -> Result<u64, StoreError> {
        self.write_links(LinkWrite::Revoke {
            scope: run.scope().to_owned(),
            run_id: run.run_id.as_str().to_owned(),
            tool_call_id: tool_call_id.as_str().to_owned(),
            now_ms: millis(now_ms),
        })
        .await
    }

    async fn prune_links(&self, older_than_ms: u64, limit: usize) -> Result<u64, StoreError> {
        self.write_links(LinkWrite::Prune {
            older_than_ms: millis(older_than_ms),
            limit: i64::try_from(limit).unwrap_or(i64::MAX),
        })
        .await
    }
}
