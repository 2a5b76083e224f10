//! `GET /metrics`: the server's metrics ([`crate::metrics`]) in the OpenMetrics text format.

use axum::http::header;
use axum::response::{IntoResponse, Response};

use crate::error::{ApiError, ErrorBody};
use crate::keys::Caller;
use crate::state::State;

/// The content type of the OpenMetrics text format (Prometheus scrapes it).
pub(crate) const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// `GET /metrics`: the metrics in the OpenMetrics text format. With keys configured it needs
/// one (any key: the figures are the whole store's, no tenant's runs in particular).
#[utoipa::path(get, path = "/metrics", tag = "runs",
    responses(
        (status = 200, description = "Prometheus / OpenMetrics text format", content_type = "application/openmetrics-text", body = String),
        (status = 401, description = "Keys are configured and none was given", body = ErrorBody),
        (status = 500, description = "The store failed", body = ErrorBody)))]
pub(crate) async fn metrics(state: State, _caller: Caller) -> Result<Response, ApiError> {
    let text = state.metrics.scrape(state.store.as_ref()).await?;
    Ok(([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response())
}
