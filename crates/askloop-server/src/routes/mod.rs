//! The router: every route and its layers.
use std::sync::Arc;

use axum::Router;
use axum::routing::get;

use crate::server::AppState;

pub(crate) fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .merge(crate::chat::routes())
        .merge(crate::page::routes())
        .with_state(state)
}
