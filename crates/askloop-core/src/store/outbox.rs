//! The outbox: events stored with the commits that caused them ([`StoredEvent`]), and their
//! deliveries to webhook endpoints ([`Delivery`]), claimed with a lease so that several
//! processes on one database deliver each once.
//!
//! The life of an event: a commit writes it (same transaction); a deliverer fans it out — one
//! [`Delivery`] per endpoint that wants it, at most one per (endpoint, event) however many
//! processes fan out ([`Outbox::fan_out`]); deliverers claim due deliveries
//! ([`Outbox::claim_deliveries`]), send them, and record each attempt
//! ([`Outbox::record_attempt`]) with what comes next: delivered, retried at a time, or
//! failed.
//!
//! A store keeps its outbox behind [`Outbox`], reached through
//! [`crate::RunStore::outbox`] (or [`outbox_of`], which turns its absence into an error); only
//! the commits' writes ([`crate::RunStore::insert_run_with_events`],
//! [`crate::RunStore::update_run_with_events`]) are part of [`crate::RunStore`] itself.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::event::RunEvent;
use crate::ids::LeaseHolder;
use crate::store::{ResourceFilter, RunStore, StoreError};

/// A store's webhook outbox: the events its commits wrote, and their deliveries to endpoints.
/// Implemented by every store of this workspace (memory, SQLite, PostgreSQL) and reached
/// through [`RunStore::outbox`]; the webhooks deliverer and the delivery listings are its
/// users.
#[async_trait]
pub trait Outbox: Send + Sync {
    /// The outbox's events after `after_seq` (0: from the first), in outbox order, at most
    /// `limit`.
    ///
    /// # Errors
    /// [`StoreError::Backend`], also for an unreadable event.
    async fn list_events(
        &self,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StoreError>;

    /// Up to `limit` events not fanned out yet, oldest first.
    ///
    /// # Errors
    /// [`StoreError::Backend`].
    async fn unfanned_events(&self, limit: usize) -> Result<Vec<StoredEvent>, StoreError>;

    /// Fans events out, in one transaction: creates a pending delivery, due at `now_ms`, per
    /// endpoint named (none where one of that endpoint and event exists: fanning out twice, in
    /// any number of processes, creates each once) and marks each event fanned out.
    ///
    /// # Errors
    /// [`StoreError::ReadOnly`];
    /// [`StoreError::Backend`].
    async fn fan_out(&self, routes: &[FanOut], now_ms: u64) -> Result<(), StoreError>;

    /// Claims up to `claim.limit` pending deliveries that are due (`next_attempt_ms <=
    /// claim.now_ms`) and not claimed by a live claim, oldest due first, for `claim.holder`
    /// until `claim.until_ms`; returns them. Of several processes claiming at once each
    /// delivery goes to one.
    ///
    /// # Errors
    /// [`StoreError::ReadOnly`];
    /// [`StoreError::Backend`].
    async fn claim_deliveries(&self, claim: &DeliveryClaim) -> Result<Vec<Delivery>, StoreError>;

    /// Records an attempt of delivery `id` by `holder`, which must still claim it, and what
    /// follows (the status, the next due time); releases the claim.
    ///
    /// # Errors
    /// [`StoreError::DeliveryNotHeld`] when `holder` does not claim it (nothing recorded);
    /// [`StoreError::DeliveryNotFound`];
    /// [`StoreError::ReadOnly`]; [`StoreError::Backend`].
    async fn record_attempt(
        &self,
        id: DeliveryId,
        holder: &LeaseHolder,
        attempt: &DeliveryAttempt,
        next: DeliveryNext,
    ) -> Result<(), StoreError>;

    /// Deliveries matching `filter`, newest first, with their attempts.
    ///
    /// # Errors
    /// [`StoreError::Backend`].
    async fn list_deliveries(&self, filter: &DeliveryFilter) -> Result<Vec<Delivery>, StoreError>;

    /// Deletes up to `limit` events fanned out before `older_than_ms` (ms since the Unix epoch)
    /// none of whose deliveries is pending (all delivered or failed, or none at all), earliest
    /// fanned out first (then by sequence), with their deliveries, in one transaction; returns
    /// how many events it deleted (sequences and delivery ids are never reused).
    /// An event not fanned out yet, or with a pending delivery, is never deleted. The bounded
    /// retention of the outbox: deliverers call it each round.
    ///
    /// # Errors
    /// [`StoreError::ReadOnly`];
    /// [`StoreError::Backend`].
    async fn prune_outbox(&self, older_than_ms: u64, limit: usize) -> Result<u64, StoreError>;

    /// Makes delivery `id` — only if its event is of a run of `resource` — pending and due at
    /// `now_ms` again, whatever its status, and drops its claim; its attempts stay. The
    /// receiver gets the same event id again.
    ///
    /// # Errors
    /// [`StoreError::DeliveryNotFound`] (also for another tenant's delivery);
    /// [`StoreError::ReadOnly`];
    /// [`StoreError::Backend`].
    async fn replay_delivery(
        &self,
        id: DeliveryId,
        resource: &ResourceFilter,
        now_ms: u64,
    ) -> Result<(), StoreError>;
}

/// The outbox of `store`.
///
/// # Errors
/// [`StoreError::Unsupported`] (operation `outbox`) when the store keeps none.
pub fn outbox_of<S: RunStore + ?Sized>(store: &S) -> Result<&dyn Outbox, StoreError> {
    store.outbox().ok_or(StoreError::Unsupported {
        operation: "outbox",
    })
}

/// An event as the outbox holds it: its place in the store's event order and the event.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct StoredEvent {
    /// The event's place in the outbox, increasing in write order (gaps allowed).
    pub seq: u64,
    /// The event.
    pub event: RunEvent,
}

impl StoredEvent {
    /// Event `event` at `seq`.
    pub fn new(seq: u64, event: RunEvent) -> Self {
        Self { seq, event }
    }
}

/// Identifies one delivery (an event to one endpoint): a number the store gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DeliveryId(pub u64);

impl std::fmt::Display for DeliveryId {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "{}", self.0)
    }
}

/// Where a delivery stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum DeliveryStatus {
    /// Not delivered yet: due at its next attempt time.
    Pending,
    /// The endpoint accepted it (a 2xx answer).
    Delivered,
    /// Given up: refused for good, or retried until the retry window closed.
    Failed,
}

impl DeliveryStatus {
    /// `pending`, `delivered` or `failed`: the stored and wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Delivered => "delivered",
            Self::Failed => "failed",
        }
    }

    /// The status named `name` (as [`DeliveryStatus::as_str`] writes it).
    pub fn parse(name: &str) -> Option<Self> {
        [Self::Pending, Self::Delivered, Self::Failed]
            .into_iter()
            .find(|status| status.as_str() == name)
    }
}

/// One attempt to deliver: when, the HTTP status if an answer came, how long it took, and the
/// error otherwise (or the reason a status counts as a failure).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct DeliveryAttempt {
    /// When the request was sent, milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// The HTTP status of the answer; `None` when none came (timeout, connection refused).
    pub status: Option<u16>,
    /// From sending to the answer (or the error), milliseconds.
    pub latency_ms: u64,
    /// What went wrong, one line; `None` for a 2xx answer.
    pub error: Option<String>,
}

impl DeliveryAttempt {
    /// An attempt at `at_ms` that took `latency_ms` and got `status` (or `error`).
    pub fn new(at_ms: u64, status: Option<u16>, latency_ms: u64, error: Option<String>) -> Self {
        Self {
            at_ms,
            status,
            latency_ms,
            error,
        }
    }
}

/// What follows an attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeliveryNext {
    /// Delivered: never sent again (unless replayed).
    Delivered,
    /// Due again at this time (ms since the Unix epoch).
    RetryAt(u64),
    /// Failed for good (unless replayed).
    Failed,
}

/// One event's delivery to one endpoint, with every attempt so far.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Delivery {
    /// The delivery.
    pub id: DeliveryId,
    /// The endpoint's name (the configuration's; stores do not interpret it).
    pub endpoint: String,
    /// The event's place in the outbox ([`StoredEvent::seq`]).
    pub event_seq: u64,
    /// The event.
    pub event: RunEvent,
    /// Where it stands.
    pub status: DeliveryStatus,
    /// When it is due next (ms since the Unix epoch); meaningful while pending.
    pub next_attempt_ms: u64,
    /// When it was created (fanned out), ms since the Unix epoch.
    pub created_at_ms: u64,
    /// Every attempt, oldest first.
    pub attempts: Vec<DeliveryAttempt>,
}

impl Delivery {
    /// A delivery of event `event` (at `event_seq`) to `endpoint` in `status`, without
    /// attempts, due and created at 0 (set the fields).
    pub fn new(
        id: DeliveryId,
        endpoint: String,
        event_seq: u64,
        event: RunEvent,
        status: DeliveryStatus,
    ) -> Self {
        Self {
            id,
            endpoint,
            event_seq,
            event,
            status,
            next_attempt_ms: 0,
            created_at_ms: 0,
            attempts: Vec::new(),
        }
    }
}

/// Which deliveries [`Outbox::list_deliveries`] returns: newest first (by id), at most
/// `limit`, of the runs of `resource`, optionally only of one status, before a cursor.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct DeliveryFilter {
    /// The tenant: only deliveries of events of this resource's runs.
    pub resource: ResourceFilter,
    /// Only deliveries in this status.
    pub status: Option<DeliveryStatus>,
    /// Only deliveries with a smaller id (the last id of the previous page).
    pub before: Option<DeliveryId>,
    /// At most this many (0 means the default, 50; at most 500).
    pub limit: usize,
}

impl DeliveryFilter {
    /// Deliveries of every resource, 50 at most.
    pub fn new() -> Self {
        Self::default()
    }

    /// Only deliveries of `resource`'s runs.
    #[must_use]
    pub fn resource(mut self, resource: ResourceFilter) -> Self {
        self.resource = resource;
        self
    }

    /// Only deliveries in `status`.
    #[must_use]
    pub fn status(mut self, status: DeliveryStatus) -> Self {
        self.status = Some(status);
        self
    }

    /// Only deliveries older than `id`.
    #[must_use]
    pub fn before(mut self, id: DeliveryId) -> Self {
        self.before = Some(id);
        self
    }

    /// At most `limit` deliveries (clamped to 1..=500).
    #[must_use]
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }

    /// The page size asked for: 50 by default, at most 500.
    pub fn page_size(&self) -> usize {
        match self.limit {
            0 => 50,
            limit => limit.min(500),
        }
    }
}

/// One event fanned out: the endpoints that get it (possibly none; the event counts as fanned
/// out all the same).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct FanOut {
    /// The event ([`StoredEvent::seq`]).
    pub event_seq: u64,
    /// The endpoints that get it, by name.
    pub endpoints: Vec<String>,
}

impl FanOut {
    /// Event `event_seq` to `endpoints`.
    pub fn new(event_seq: u64, endpoints: Vec<String>) -> Self {
        Self {
            event_seq,
            endpoints,
        }
    }
}

/// A claim of deliveries: by whom and until when (ms since the Unix epoch); a claimed
/// delivery is not claimed again before then unless an attempt is recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeliveryClaim {
    /// The deliverer (one per process or worker).
    pub holder: LeaseHolder,
    /// The time the claim is made (what "due" is measured against).
    pub now_ms: u64,
    /// Until when the claim holds.
    pub until_ms: u64,
    /// At most this many deliveries.
    pub limit: usize,
}

impl DeliveryClaim {
    /// A claim by `holder` at `now_ms` of at most `limit` due deliveries, until `until_ms`.
    pub fn new(holder: LeaseHolder, now_ms: u64, until_ms: u64, limit: usize) -> Self {
        Self {
            holder,
            now_ms,
            until_ms,
            limit,
        }
    }
}
