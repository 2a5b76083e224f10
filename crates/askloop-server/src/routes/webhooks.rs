//! `/api/webhooks/deliveries`: the webhook deliveries of the caller's runs, and their replay.

use askloop_core::store::{DeliveryFilter, DeliveryId, DeliveryStatus, ResourceFilter, outbox_of};
use askloop_core::time::lease_now_ms;
use axum::Json;
use axum::http::StatusCode;

use crate::api::{DeliveriesQuery, DeliveryBody, DeliveryList, ReplayedBody};
use crate::checks::check_id;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{Params, PathParam};
use crate::keys::Caller;
use crate::state::State;

/// Default and largest page of `GET /api/webhooks/deliveries`.
const DEFAULT_LIMIT: u32 = 50;
const MAX_LIMIT: u32 = 200;

/// The tenant a caller's request names: a keyed caller its own resource (naming another lists
/// nothing: `None`), an open caller the resource given, or every one.
fn tenant(caller: &Caller, given: Option<&str>) -> Result<Option<ResourceFilter>, ApiError> {
    if let Some(given) = given {
        check_id("resourceId", given)?;
    }
    Ok(match (caller.resource(), given) {
        (Some(own), Some(given)) if own.as_str() != given => None,
        (Some(own), _) => Some(ResourceFilter::Is(own.clone())),
        (None, Some(given)) => Some(ResourceFilter::Is(given.into())),
        (None, None) => Some(ResourceFilter::Any),
    })
}

/// `GET /api/webhooks/deliveries`: webhook deliveries of the caller's runs, newest first, with
/// every attempt (status, latency, error).
#[utoipa::path(get, path = "/api/webhooks/deliveries", tag = "webhooks",
    params(DeliveriesQuery),
    responses(
        (status = 200, description = "A page of deliveries", body = DeliveryList),
        (status = 400, description = "bad_request (status, limit, resourceId)", body = ErrorBody),
        (status = 401, description = "No or bad API key", body = ErrorBody),
    ))]
pub(crate) async fn list_deliveries(
    state: State,
    caller: Caller,
    Params(query): Params<DeliveriesQuery>,
) -> Result<Json<DeliveryList>, ApiError> {
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
    if limit == 0 || limit > MAX_LIMIT {
        return Err(ApiError::bad_request(format!(
            "limit must be 1 to {MAX_LIMIT}"
        )));
    }
    let mut filter = DeliveryFilter::new().limit(limit as usize);
    if let Some(status) = &query.status {
        let status = DeliveryStatus::parse(status)
            .ok_or_else(|| ApiError::bad_request("status must be pending, delivered or failed"))?;
        filter = filter.status(status);
    }
    if let Some(cursor) = query.cursor {
        filter = filter.before(DeliveryId(cursor));
    }
    let Some(resource) = tenant(&caller, query.resource_id.as_deref())? else {
        return Ok(Json(DeliveryList {
            deliveries: Vec::new(),
            next_cursor: None,
        }));
    };
    let deliveries = outbox_of(&*state.store)?
        .list_deliveries(&filter.resource(resource))
        .await?;
    let next_cursor = (deliveries.len() == limit as usize)
        .then(|| deliveries.last().map(|delivery| delivery.id.0))
        .flatten();
    // A key limited to some agents sees their runs' deliveries only (a page may then hold
    // fewer than `limit`; the cursor still pages on).
    Ok(Json(DeliveryList {
        deliveries: deliveries
            .iter()
            .filter(|delivery| caller.may_use(&delivery.event.data.agent_id))
            .map(DeliveryBody::of)
            .collect(),
        next_cursor,
    }))
}

/// `POST /api/webhooks/deliveries/{id}/replay`: sends a delivery again (pending, due now),
/// whatever its status; its attempts stay, the event keeps its id (`webhook-id`).
#[utoipa::path(post, path = "/api/webhooks/deliveries/{id}/replay", tag = "webhooks",
    params(("id" = u64, Path, description = "The delivery")),
    responses(
        (status = 200, description = "The delivery is due again", body = ReplayedBody),
        (status = 400, description = "bad_request (id)", body = ErrorBody),
        (status = 401, description = "No or bad API key", body = ErrorBody),
        (status = 404, description = "delivery_not_found (also another tenant's)", body = ErrorBody),
    ))]
pub(crate) async fn replay_delivery(
    state: State,
    caller: Caller,
    PathParam(id): PathParam<u64>,
) -> Result<Json<ReplayedBody>, ApiError> {
    let resource = tenant(&caller, None)?.unwrap_or(ResourceFilter::Any);
    let not_found = || {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "delivery_not_found",
            format!("delivery {id} not found"),
        )
    };
    let outbox = outbox_of(&*state.store)?;
    // The delivery, if the caller's tenant has it and the caller may use its run's agent.
    let found = outbox
        .list_deliveries(
            &DeliveryFilter::new()
                .resource(resource.clone())
                .before(DeliveryId(id.saturating_add(1)))
                .limit(1),
        )
        .await?;
    if !found.first().is_some_and(|delivery| {
        delivery.id.0 == id && caller.may_use(&delivery.event.data.agent_id)
    }) {
        return Err(not_found());
    }
    outbox
        .replay_delivery(DeliveryId(id), &resource, lease_now_ms())
        .await
        .map_err(|error| match error {
            askloop_core::StoreError::DeliveryNotFound { .. } => not_found(),
            other => other.into(),
        })?;
    Ok(Json(ReplayedBody {
        id,
        status: DeliveryStatus::Pending.as_str().to_owned(),
    }))
}
