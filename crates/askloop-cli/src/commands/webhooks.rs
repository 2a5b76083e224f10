//! `askloop webhooks list|replay`: the webhook deliveries of the store's events, and sending one
//! again. Delivery itself is `askloop serve`'s background work, and `askloop runs sweep`'s.

use std::process::ExitCode;

use askloop_core::store::{
    Delivery, DeliveryFilter, DeliveryId, DeliveryStatus, ResourceFilter, outbox_of,
};
use askloop_core::time::{lease_now_ms, rfc3339};
use askloop_core::{ResourceId, StoreError};
use serde_json::json;

use crate::cli::{GlobalArgs, WebhooksListArgs, WebhooksReplayArgs};
use crate::context::{Access, Context};
use crate::exit::invalid;
use crate::format::escape_controls;
use crate::output::{Mode, Output};

/// Runs `askloop webhooks list`: deliveries newest first, one line each (or one JSON object per
/// line with `--json`: the delivery with its attempts and event).
///
/// # Errors
/// Invalid input for an unknown status; store errors.
pub(crate) async fn list(global: &GlobalArgs, args: &WebhooksListArgs) -> anyhow::Result<ExitCode> {
    let mut filter = DeliveryFilter::new().limit(args.limit as usize);
    if let Some(status) = &args.status {
        let status = DeliveryStatus::parse(status).ok_or_else(|| {
            invalid(format!(
                "unknown status {status:?}: pending, delivered or failed"
            ))
        })?;
        filter = filter.status(status);
    }
    if let Some(resource) = &args.resource {
        filter = filter.resource(ResourceFilter::Is(ResourceId::new(resource.as_str())));
    }
    let context = Context::open(global, Access::Read).await?;
    context
        .run(async |context| {
            let listed = match outbox_of(&*context.store) {
                Ok(outbox) => outbox.list_deliveries(&filter).await,
                Err(error) => Err(error),
            };
            let deliveries = match listed {
                Ok(deliveries) => deliveries,
                // A database without the outbox yet (read-only, never migrated): none.
                Err(StoreError::Unsupported { .. }) => Vec::new(),
                Err(error) => return Err(error.into()),
            };
            let mode = if args.json { Mode::Json } else { Mode::Human };
            let mut output = Output::new(mode);
            if deliveries.is_empty() && !args.json {
                output.note("no webhook deliveries")?;
            }
            for delivery in &deliveries {
                match mode {
                    Mode::Json => output.json_line(&delivery_json(delivery))?,
                    _ => output.line(&delivery_line(delivery))?,
                }
            }
            Ok(ExitCode::SUCCESS)
        })
        .await
}

/// One delivery as a line for people: id, status, event, run, endpoint, attempts and the last
/// one's outcome.
fn delivery_line(delivery: &Delivery) -> String {
    let last = delivery
        .attempts
        .last()
        .map_or_else(String::new, |attempt| {
            let outcome = match (attempt.status, &attempt.error) {
                (Some(status), _) => format!("HTTP {status}"),
                (None, Some(error)) => error.clone(),
                (None, None) => String::new(),
            };
            format!(", last {outcome} in {} ms", attempt.latency_ms)
        });
    let line = format!(
        "{}  {:<9}  {:<18}  run {}  {}  {} attempt(s){last}",
        delivery.id,
        delivery.status.as_str(),
        delivery.event.kind.as_str(),
        delivery.event.data.run_id,
        delivery.endpoint,
        delivery.attempts.len(),
    );
    escape_controls(&line).into_owned()
}

/// One delivery as JSON (the shape of `GET /api/webhooks/deliveries`' items).
fn delivery_json(delivery: &Delivery) -> serde_json::Value {
    json!({
        "id": delivery.id.0,
        "endpoint": delivery.endpoint,
        "status": delivery.status.as_str(),
        "createdAt": rfc3339(delivery.created_at_ms),
        "nextAttemptAt": (delivery.status == DeliveryStatus::Pending)
            .then(|| rfc3339(delivery.next_attempt_ms)),
        "attempts": delivery.attempts.iter().map(|attempt| json!({
            "at": rfc3339(attempt.at_ms),
            "status": attempt.status,
            "latencyMs": attempt.latency_ms,
            "error": attempt.error,
        })).collect::<Vec<_>>(),
        "event": delivery.event,
    })
}

/// Runs `askloop webhooks replay ID`: the delivery becomes pending and due now.
///
/// # Errors
/// Invalid input for an unknown delivery; store errors.
pub(crate) async fn replay(
    global: &GlobalArgs,
    args: &WebhooksReplayArgs,
) -> anyhow::Result<ExitCode> {
    let context = Context::open(global, Access::Update).await?;
    context
        .run(async |context| {
            let id = DeliveryId(args.id);
            let replayed = match outbox_of(&*context.store) {
                Ok(outbox) => {
                    outbox
                        .replay_delivery(id, &ResourceFilter::Any, lease_now_ms())
                        .await
                }
                Err(error) => Err(error),
            };
            match replayed {
                Ok(()) => {}
                Err(StoreError::DeliveryNotFound { .. }) => {
                    return Err(invalid(format!("no webhook delivery {id}")));
                }
                Err(error) => return Err(error.into()),
            }
            let mut output = Output::new(Mode::Human);
            output.note(&format!(
                "delivery {id} is due again: `askloop serve` or `askloop runs sweep` sends it"
            ))?;
            Ok(ExitCode::SUCCESS)
        })
        .await
}
