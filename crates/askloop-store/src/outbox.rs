//! What both stores share of the outbox: an event encoded for a row, and rows decoded back.

use askloop_core::event::RunEvent;
use askloop_core::store::{
    Delivery, DeliveryAttempt, DeliveryId, DeliveryStatus, ResourceFilter, StoredEvent,
};
use askloop_core::{RunKey, StoreError};

/// An event as the outbox's row holds it: the run's scope (`''` for no resource) and id, the
/// kind's name, and the event's JSON.
#[derive(Debug)]
pub(crate) struct EncodedEvent {
    pub(crate) scope: String,
    pub(crate) run_id: String,
    pub(crate) kind: &'static str,
    pub(crate) body: String,
}

/// Encodes the events of a commit of run `key`.
///
/// # Errors
/// [`StoreError::Encode`].
pub(crate) fn encode_events(
    key: &RunKey,
    events: &[RunEvent],
) -> Result<Vec<EncodedEvent>, StoreError> {
    events
        .iter()
        .map(|event| {
            Ok(EncodedEvent {
                scope: key.scope().to_owned(),
                run_id: key.run_id.as_str().to_owned(),
                kind: event.kind.as_str(),
                body: serde_json::to_string(event).map_err(|source| StoreError::Encode {
                    run_id: key.run_id.clone(),
                    source,
                })?,
            })
        })
        .collect()
}

/// Why an outbox row does not decode.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BadRow {
    /// The event's JSON.
    #[error("outbox event {seq} is not a valid event")]
    Event {
        seq: u64,
        #[source]
        source: serde_json::Error,
    },
    /// The attempts' JSON.
    #[error("delivery {id} has unreadable attempts")]
    Attempts {
        id: u64,
        #[source]
        source: serde_json::Error,
    },
    /// The status.
    #[error("delivery {id} has an unknown status {status:?}")]
    Status { id: u64, status: String },
}

/// An outbox row back as a [`StoredEvent`].
///
/// # Errors
/// [`StoreError::Backend`] with a [`BadRow`].
pub(crate) fn decode_event(seq: u64, body: &str) -> Result<StoredEvent, StoreError> {
    let event = serde_json::from_str(body)
        .map_err(|source| StoreError::backend(BadRow::Event { seq, source }))?;
    Ok(StoredEvent::new(seq, event))
}

/// The columns of a delivery row joined with its event.
pub(crate) struct DeliveryRow {
    pub(crate) id: u64,
    pub(crate) endpoint: String,
    pub(crate) event_seq: u64,
    pub(crate) body: String,
    pub(crate) status: String,
    pub(crate) next_attempt_ms: u64,
    pub(crate) created_at_ms: u64,
    pub(crate) attempts: String,
}

/// A delivery row back as a [`Delivery`].
///
/// # Errors
/// [`StoreError::Backend`] with a [`BadRow`].
pub(crate) fn decode_delivery(row: DeliveryRow) -> Result<Delivery, StoreError> {
    let event = decode_event(row.event_seq, &row.body)?.event;
    let status = DeliveryStatus::parse(&row.status).ok_or_else(|| {
        StoreError::backend(BadRow::Status {
            id: row.id,
            status: row.status.clone(),
        })
    })?;
    let attempts: Vec<DeliveryAttempt> = serde_json::from_str(&row.attempts)
        .map_err(|source| StoreError::backend(BadRow::Attempts { id: row.id, source }))?;
    let mut delivery = Delivery::new(
        DeliveryId(row.id),
        row.endpoint,
        row.event_seq,
        event,
        status,
    );
    delivery.next_attempt_ms = row.next_attempt_ms;
    delivery.created_at_ms = row.created_at_ms;
    delivery.attempts = attempts;
    Ok(delivery)
}

/// An attempt as the JSON appended to a delivery's attempts.
///
/// # Errors
/// [`StoreError::Backend`] (never expected: the attempt is plain data).
pub(crate) fn encode_attempt(attempt: &DeliveryAttempt) -> Result<String, StoreError> {
    serde_json::to_string(attempt).map_err(StoreError::backend)
}

/// The scope a tenant filter names in SQL: `None` for every scope, `''` for runs without a
/// resource, else the resource id.
pub(crate) fn filter_scope(resource: &ResourceFilter) -> Option<String> {
    match resource {
        ResourceFilter::Is(resource_id) => Some(resource_id.as_str().to_owned()),
        ResourceFilter::Without => Some(String::new()),
        _ => None,
    }
}
