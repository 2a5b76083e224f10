//! [`MemoryStore`]: a [`RunStore`] in process memory, for tests and short-lived programs.
//!
//! It keeps the same texts as the durable stores (a run's head and its appended messages, its
//! completion sequence, its lease) keyed by `RunKey`, so the conformance suite exercises the shared
//! codec through it; it checks the one-turn-per-thread rule under its lock, stamps the change order
//! under the same lock, and notifies its commits in process ([`RunStore::watch_changes`]).

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;

use crate::event::RunEvent;
use crate::ids::LeaseHolder;
use crate::ids::{RunId, RunKey, ThreadKey};
use crate::run::{RunState, RunStatus, RunSummary};
use crate::store::codec::{decode_run, encode_head, encode_new_messages};
use crate::store::links::MemoryLinks;
use crate::store::{
    ChangeFeed, Delivery, DeliveryAttempt, DeliveryClaim, DeliveryFilter, DeliveryId, DeliveryNext,
    DeliveryStatus, FanOut, Lease, ListedRun, Outbox, ResourceFilter, RunChange, RunChanges,
    RunFilter, RunPage, RunStore, StoreError, StoredEvent, StoredRun, ThreadHistory, notifies,
};

/// A [`RunStore`] in memory: the same semantics as the durable stores (keys per resource,
/// versions, compare-and-swap, one running run per thread, delta commits, completion
/// sequences, leases, listing), nothing survives the process.
///
/// Like the durable stores it keeps each run as the texts of [`crate::store::codec`] (a head
/// and one text per message, appended), so a state that would not survive a database does
/// not survive this store either.
///
/// It notifies its commits ([`RunStore::watch_changes`]) to watchers in this process.
#[derive(Debug, Default)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
    changes: ChangeFeed,
    /// The answer links ([`RunStore::answer_links`]).
    links: MemoryLinks,
}

#[derive(Debug, Default)]
struct Inner {
    runs: HashMap<RunKey, Entry>,
    /// The last completion sequence given.
    last_completion: u64,
    /// The last change sequence given (see [`RunFilter::changed_after`]).
    last_change: u64,
    /// The outbox: every event committed and not pruned, in order, and when it was fanned out
    /// (`None`: not yet).
    events: Vec<(StoredEvent, Option<u64>)>,
    /// The last outbox sequence given (pruning never reuses one).
    last_event_seq: u64,
    /// The last delivery id given.
    last_delivery_id: u64,
    /// The deliveries by id, with their claims (holder, until).
    deliveries: std::collections::BTreeMap<DeliveryId, (Delivery, Option<(LeaseHolder, u64)>)>,
}

#[derive(Debug)]
struct Entry {
    summary: RunSummary,
    head: String,
    messages: Vec<String>,
    version: u64,
    lease: Option<Lease>,
    completion_seq: Option<u64>,
    /// The change sequence of the run's last commit that [`notifies`].
    change_seq: Option<u64>,
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

impl MemoryStore {
    /// Tells the watchers of a commit from `before` (`None`: an insert) to `state`, if it is
    /// one that [`notifies`].
    fn notify(&self, before: Option<RunStatus>, state: &RunState) {
        if notifies(before, state.status) {
            self.changes.send(RunChange::Run {
                resource_id: state.resource_id.clone(),
                run_id: state.run_id.clone(),
                status: state.status,
            });
        }
    }
}

impl Inner {
    /// Appends `events` to the outbox (under the lock of their commit).
    fn write_events(&mut self, events: &[RunEvent]) {
        for event in events {
            self.last_event_seq += 1;
            let seq = self.last_event_seq;
            self.events
                .push((StoredEvent::new(seq, event.clone()), None));
        }
    }

    fn next_completion(&mut self) -> u64 {
        self.last_completion += 1;
        self.last_completion
    }

    /// The next change sequence, for a commit that [`notifies`] (under the lock, so the
    /// sequences increase in commit order).
    fn next_change(&mut self) -> u64 {
        self.last_change += 1;
        self.last_change
    }

    /// Refuses to make `state` running while another run of its thread is running (the
    /// one-turn rule, checked under the lock).
    fn check_turn(&self, state: &RunState) -> Result<(), StoreError> {
        if state.status != RunStatus::Running {
            return Ok(());
        }
        let running = self.runs.iter().find(|(key, entry)| {
            entry.summary.status == RunStatus::Running
                && !state.is(key)
                && key.resource_id == state.resource_id
                && entry.summary.thread_id == state.thread_id
        });
        match running {
            Some((key, _)) => Err(StoreError::ThreadBusy {
                thread_id: state.thread_id.clone(),
                running_run_id: Some(key.run_id.clone()),
            }),
            None => Ok(()),
        }
    }
}

/// A run's place in the listing order: creation time, run id, resource (`""` for none).
fn listing_order(summary: &RunSummary) -> (u64, &str, &str) {
    (
        summary.created_at_ms,
        summary.run_id.as_str(),
        summary.resource_id.as_ref().map_or("", |id| id.as_str()),
    )
}

/// Whether a run in `status` has ended and joins its thread's history (gets a completion
/// sequence).
fn ends(status: RunStatus) -> bool {
    matches!(status, RunStatus::Completed | RunStatus::Cancelled)
}

#[async_trait]
impl RunStore for MemoryStore {
    async fn insert_run_with_events(
        &self,
        state: &RunState,
        lease: Option<&Lease>,
        events: &[RunEvent],
    ) -> Result<u64, StoreError> {
        let head = encode_head(state)?;
        let messages = encode_new_messages(state, 0)?;
        let key = state.key();
        let mut inner = self.lock();
        if inner.runs.contains_key(&key) {
            return Err(StoreError::AlreadyExists {
                run_id: state.run_id.clone(),
            });
        }
        inner.check_turn(state)?;
        let completion_seq = ends(state.status).then(|| inner.next_completion());
        let change_seq = notifies(None, state.status).then(|| inner.next_change());
        inner.runs.insert(
            key,
            Entry {
                summary: state.summary(),
                head,
                messages,
                version: 1,
                lease: lease.cloned(),
                completion_seq,
                change_seq,
            },
        );
        inner.write_events(events);
        drop(inner);
        self.notify(None, state);
        Ok(1)
    }

    async fn update_run_with_events(
        &self,
        state: &RunState,
        expected_version: u64,
        lease: Option<&Lease>,
        events: &[RunEvent],
    ) -> Result<u64, StoreError> {
        let head = encode_head(state)?;
        let key = state.key();
        let mut guard = self.lock();
        let inner = &mut *guard;
        let Some(entry) = inner.runs.get(&key) else {
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
        let new_messages = encode_new_messages(state, entry.messages.len())?;
        if entry.summary.status != RunStatus::Running {
            inner.check_turn(state)?;
        }
        let Some(entry) = inner.runs.get_mut(&key) else {
            return Err(StoreError::NotFound {
                run_id: state.run_id.clone(),
            });
        };
        if ends(state.status) && entry.completion_seq.is_none() {
            inner.last_completion += 1;
            entry.completion_seq = Some(inner.last_completion);
        }
        let before = entry.summary.status;
        if notifies(Some(before), state.status) {
            inner.last_change += 1;
            entry.change_seq = Some(inner.last_change);
        }
        entry.summary = state.summary();
        entry.head = head;
        entry.messages.extend(new_messages);
        entry.lease = lease.cloned();
        entry.version += 1;
        let version = entry.version;
        inner.write_events(events);
        drop(guard);
        self.notify(Some(before), state);
        Ok(version)
    }

    async fn renew_lease(
        &self,
        run: &RunKey,
        expected_version: u64,
        lease: &Lease,
    ) -> Result<(), StoreError> {
        let mut inner = self.lock();
        let Some(entry) = inner.runs.get_mut(run) else {
            return Err(StoreError::NotFound {
                run_id: run.run_id.clone(),
            });
        };
        if entry.version != expected_version {
            return Err(StoreError::Conflict {
                run_id: run.run_id.clone(),
                expected_version,
            });
        }
        entry.lease = Some(lease.clone());
        Ok(())
    }

    async fn load_run(&self, run: &RunKey) -> Result<StoredRun, StoreError> {
        let run_id = &run.run_id;
        let (head, messages, version, lease) = {
            let inner = self.lock();
            let entry = inner.runs.get(run).ok_or_else(|| StoreError::NotFound {
                run_id: run_id.clone(),
            })?;
            (
                entry.head.clone(),
                entry.messages.clone(),
                entry.version,
                entry.lease.clone(),
            )
        };
        Ok(StoredRun::new(
            decode_run(run_id, &head, &messages)?,
            version,
            lease,
        ))
    }

    async fn list_runs(&self, filter: &RunFilter) -> Result<RunPage, StoreError> {
        let (mut rows, horizon): (Vec<(RunSummary, String, Option<u64>)>, u64) = {
            let inner = self.lock();
            let rows = inner
                .runs
                .values()
                .filter(|entry| filter.matches(&entry.summary))
                .filter(|entry| match filter.changed_after {
                    Some(after) => entry.change_seq.is_some_and(|seq| seq > after),
                    None => {
                        filter.is_after_cursor(entry.summary.created_at_ms, &entry.summary.key())
                    }
                })
                .map(|entry| (entry.summary.clone(), entry.head.clone(), entry.change_seq))
                .collect();
            (rows, inner.last_change)
        };
        if filter.changed_after.is_some() {
            rows.sort_by_key(|(_, _, change_seq)| *change_seq);
        } else {
            // Newest first: creation time, then run id, then resource ("" for none), descending.
            rows.sort_by(|(a, ..), (b, ..)| listing_order(b).cmp(&listing_order(a)));
        }
        if let Some(limit) = filter.limit {
            rows.truncate(limit.saturating_add(1));
        }
        // The summary is read from the head alone, as a durable store reads it from columns.
        let runs = rows
            .into_iter()
            .map(
                |(summary, head, change_seq)| match decode_run(&summary.run_id, &head, [""; 0]) {
                    Ok(state) => ListedRun::Run(RunSummary {
                        change_seq,
                        // The first message, as a durable store reads it beside the head.
                        first_message: summary.first_message,
                        ..state.summary()
                    }),
                    Err(error) => ListedRun::Unreadable {
                        run_id: summary.run_id,
                        resource_id: summary.resource_id,
                        created_at_ms: summary.created_at_ms,
                        change_seq,
                        error,
                    },
                },
            )
            .collect();
        Ok(match filter.changed_after {
            Some(_) => RunPage::from_changed_rows(runs, filter.limit, horizon),
            None => RunPage::from_rows(runs, filter.limit, Some(horizon)),
        })
    }

    async fn watch_changes(&self) -> Option<RunChanges> {
        Some(self.changes.watch())
    }

    async fn thread_history(
        &self,
        thread: &ThreadKey,
        through: Option<u64>,
    ) -> Result<ThreadHistory, StoreError> {
        let mut shares: Vec<(u64, RunId, String, Vec<String>)> = {
            let inner = self.lock();
            inner
                .runs
                .values()
                .filter(|entry| {
                    entry.summary.thread_id == thread.thread_id
                        && entry.summary.resource_id == thread.resource_id
                })
                .filter_map(|entry| {
                    let seq = entry.completion_seq?;
                    through.is_none_or(|through| seq <= through).then(|| {
                        (
                            seq,
                            entry.summary.run_id.clone(),
                            entry.head.clone(),
                            entry.messages.clone(),
                        )
                    })
                })
                .collect()
        };
        shares.sort_by_key(|(seq, ..)| *seq);
        let mut history = ThreadHistory::default();
        for (seq, run_id, head, messages) in shares {
            history
                .messages
                .extend(decode_run(&run_id, &head, &messages)?.messages);
            history.through = Some(seq);
        }
        Ok(history)
    }

    fn answer_links(&self) -> Option<&dyn crate::store::AnswerLinks> {
        Some(&self.links)
    }

    fn outbox(&self) -> Option<&dyn Outbox> {
        Some(self)
    }
}

#[async_trait]
impl Outbox for MemoryStore {
    async fn list_events(
        &self,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let inner = self.lock();
        Ok(inner
            .events
            .iter()
            .filter(|(stored, _)| stored.seq > after_seq)
            .take(limit)
            .map(|(stored, _)| stored.clone())
            .collect())
    }

    async fn unfanned_events(&self, limit: usize) -> Result<Vec<StoredEvent>, StoreError> {
        let inner = self.lock();
        Ok(inner
            .events
            .iter()
            .filter(|(_, fanned)| fanned.is_none())
            .take(limit)
            .map(|(stored, _)| stored.clone())
            .collect())
    }

    async fn fan_out(&self, routes: &[FanOut], now_ms: u64) -> Result<(), StoreError> {
        let mut guard = self.lock();
        let inner = &mut *guard;
        for route in routes {
            let Some((stored, fanned)) = inner
                .events
                .iter_mut()
                .find(|(stored, _)| stored.seq == route.event_seq)
            else {
                continue;
            };
            fanned.get_or_insert(now_ms);
            for endpoint in &route.endpoints {
                let exists = inner.deliveries.values().any(|(delivery, _)| {
                    delivery.event_seq == route.event_seq && &delivery.endpoint == endpoint
                });
                if exists {
                    continue;
                }
                inner.last_delivery_id += 1;
                let id = DeliveryId(inner.last_delivery_id);
                let delivery = Delivery {
                    id,
                    endpoint: endpoint.clone(),
                    event_seq: stored.seq,
                    event: stored.event.clone(),
                    status: DeliveryStatus::Pending,
                    next_attempt_ms: now_ms,
                    created_at_ms: now_ms,
                    attempts: Vec::new(),
                };
                inner.deliveries.insert(id, (delivery, None));
            }
        }
        Ok(())
    }

    async fn claim_deliveries(&self, claim: &DeliveryClaim) -> Result<Vec<Delivery>, StoreError> {
        let mut inner = self.lock();
        let mut due: Vec<&mut (Delivery, Option<(LeaseHolder, u64)>)> = inner
            .deliveries
            .values_mut()
            .filter(|(delivery, held)| {
                delivery.status == DeliveryStatus::Pending
                    && delivery.next_attempt_ms <= claim.now_ms
                    && held
                        .as_ref()
                        .is_none_or(|(_, until)| *until <= claim.now_ms)
            })
            .collect();
        due.sort_by_key(|(delivery, _)| (delivery.next_attempt_ms, delivery.id));
        Ok(due
            .into_iter()
            .take(claim.limit)
            .map(|(delivery, held)| {
                *held = Some((claim.holder.clone(), claim.until_ms));
                delivery.clone()
            })
            .collect())
    }

    async fn record_attempt(
        &self,
        id: DeliveryId,
        holder: &LeaseHolder,
        attempt: &DeliveryAttempt,
        next: DeliveryNext,
    ) -> Result<(), StoreError> {
        let mut inner = self.lock();
        let Some((delivery, held)) = inner.deliveries.get_mut(&id) else {
            return Err(StoreError::DeliveryNotFound { id });
        };
        if held.as_ref().is_none_or(|(claimer, _)| claimer != holder) {
            return Err(StoreError::DeliveryNotHeld { id });
        }
        *held = None;
        delivery.attempts.push(attempt.clone());
        match next {
            DeliveryNext::Delivered => delivery.status = DeliveryStatus::Delivered,
            DeliveryNext::Failed => delivery.status = DeliveryStatus::Failed,
            DeliveryNext::RetryAt(at_ms) => delivery.next_attempt_ms = at_ms,
        }
        Ok(())
    }

    async fn list_deliveries(&self, filter: &DeliveryFilter) -> Result<Vec<Delivery>, StoreError> {
        let inner = self.lock();
        Ok(inner
            .deliveries
            .values()
            .rev()
            .map(|(delivery, _)| delivery)
            .filter(|delivery| {
                filter.resource.matches(delivery.event.resource_id())
                    && filter.status.is_none_or(|status| delivery.status == status)
                    && filter.before.is_none_or(|before| delivery.id < before)
            })
            .take(filter.page_size())
            .cloned()
            .collect())
    }

    async fn replay_delivery(
        &self,
        id: DeliveryId,
        resource: &ResourceFilter,
        now_ms: u64,
    ) -> Result<(), StoreError> {
        let mut inner = self.lock();
        match inner.deliveries.get_mut(&id) {
            Some((delivery, held)) if resource.matches(delivery.event.resource_id()) => {
                delivery.status = DeliveryStatus::Pending;
                delivery.next_attempt_ms = now_ms;
                *held = None;
                Ok(())
            }
            _ => Err(StoreError::DeliveryNotFound { id }),
        }
    }

    async fn prune_outbox(&self, older_than_ms: u64, limit: usize) -> Result<u64, StoreError> {
        let mut guard = self.lock();
        let inner = &mut *guard;
        let busy: std::collections::HashSet<u64> = inner
            .deliveries
            .values()
            .filter(|(delivery, _)| delivery.status == DeliveryStatus::Pending)
            .map(|(delivery, _)| delivery.event_seq)
            .collect();
        let mut old: Vec<(u64, u64)> = inner
            .events
            .iter()
            .filter_map(|(stored, fanned)| fanned.map(|at| (at, stored.seq)))
            .filter(|(at, seq)| *at < older_than_ms && !busy.contains(seq))
            .collect();
        old.sort_unstable();
        let doomed: std::collections::HashSet<u64> =
            old.into_iter().take(limit).map(|(_, seq)| seq).collect();
        inner
            .events
            .retain(|(stored, _)| !doomed.contains(&stored.seq));
        inner
            .deliveries
            .retain(|_, (delivery, _)| !doomed.contains(&delivery.event_seq));
        Ok(doomed.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn commits_are_notified_to_watchers() {
        let store = std::sync::Arc::new(crate::store::MemoryStore::new());
        crate::testing::conformance::run_change_scenario(store.clone(), store).await;
    }

    crate::store_conformance_tests!(async {
        std::sync::Arc::new(crate::store::MemoryStore::new())
            as std::sync::Arc<dyn crate::store::RunStore>
    });
}
