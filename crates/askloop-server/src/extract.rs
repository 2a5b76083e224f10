//! The extractors of every handler, whose failures are `ApiError` JSON (never axum's plain-text
//! rejections): [`Body`], [`Params`], [`PathParam`], and the [`Caller`] a request's API key
//! names.

use std::sync::Arc;

use axum::extract::{FromRequest, FromRequestParts};
use axum::http::header;
use axum::http::request::Parts;

use crate::error::ApiError;
use crate::keys::Caller;
use crate::state::AppState;

/// A JSON body whose rejections are `ApiError`s (400 `bad_request`, 413 `too_large`).
#[derive(FromRequest)]
#[from_request(via(axum::Json), rejection(ApiError))]
pub(crate) struct Body<T>(pub(crate) T);

/// A query string whose rejections are 400 `bad_request`.
#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub(crate) struct Params<T>(pub(crate) T);

/// A path parameter whose rejections are 400 `bad_request`.
#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub(crate) struct PathParam<T>(pub(crate) T);

impl FromRequestParts<Arc<AppState>> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        if state.keys.is_open() {
            return Ok(Caller::Open);
        }
        // Every secret the request carries (each `Authorization: Bearer` and `X-Api-Key`
        // header): one, possibly repeated, or the request is refused — two different keys in
        // one request never resolve to either.
        let bearers = parts
            .headers
            .get_all(header::AUTHORIZATION)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .filter_map(|value| {
                value
                    .strip_prefix("Bearer ")
                    .or_else(|| value.strip_prefix("bearer "))
            });
        let api_keys = parts
            .headers
            .get_all("x-api-key")
            .iter()
            .filter_map(|value| value.to_str().ok());
        let mut secrets = bearers.chain(api_keys).map(str::trim);
        let secret = secrets.next().ok_or_else(ApiError::unauthorized)?;
        if secrets.any(|other| other != secret) {
            return Err(ApiError::unauthorized());
        }
        state.keys.lookup(secret).ok_or_else(ApiError::unauthorized)
    }
}
