//! The web page at `/`: the files of `web/dist` (built from `web/src` with esbuild, committed,
//! checked against their sources in CI), embedded in the binary, so serving it needs no
//! network and `cargo build` needs no npm. Every response carries a strict
//! Content-Security-Policy: scripts, styles and requests only from this origin, no inline
//! script, no framing.
//!
//! The page (web/src: plain TypeScript on the `ai` package's `AbstractChat` and
//! `DefaultChatTransport`, bundled by esbuild through web/build.mjs) renders with `textContent`
//! only, keeps the API key in `sessionStorage`, resumes a running turn after a reload
//! (`resumeStream()` once the messages are loaded), stops a running turn with Stop (the AI
//! SDK's `stop()`, then `POST /api/runs/{runId}/cancel` for the run its `start` chunk named: a
//! mere disconnect never cancels, so a reload can follow the turn again), and follows the inbox
//! with `fetch` (EventSource cannot send the key), in the Inbox and in the chat (a question
//! answered elsewhere leaves the chat). It shows the API key box only after a 401. CI rebuilds web/dist and fails if it
//! differs, then runs tests/web (the protocol test with the `ai` client, Playwright in Debian's
//! chromium, and a page of another origin calling the server with and without
//! `--cors-origin`).

use std::sync::Arc;

use axum::Router;
use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, X_CONTENT_TYPE_OPTIONS,
};
use axum::http::{HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::state::AppState;

/// The page's Content-Security-Policy.
pub(crate) const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

const INDEX_HTML: &str = include_str!("../../../../web/dist/index.html");
const APP_JS: &str = include_str!("../../../../web/dist/app.js");
const APP_CSS: &str = include_str!("../../../../web/dist/app.css");
const ICON_SVG: &str = include_str!("../../../../web/dist/icon.svg");

/// The page's routes: `/`, `/assets/app.js`, `/assets/app.css`, and its icon (SVG) at
/// `/assets/icon.svg` and at `/favicon.ico`, where a browser or a tool looks by default.
pub(crate) fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route(
            "/",
            get(|| async { file(INDEX_HTML, "text/html; charset=utf-8") }),
        )
        .route(
            "/assets/app.js",
            get(|| async { file(APP_JS, "text/javascript; charset=utf-8") }),
        )
        .route(
            "/assets/app.css",
            get(|| async { file(APP_CSS, "text/css; charset=utf-8") }),
        )
        .route("/assets/icon.svg", get(|| async { icon() }))
        .route("/favicon.ico", get(|| async { icon() }))
}

fn icon() -> Response {
    file(ICON_SVG, "image/svg+xml")
}

fn file(body: &'static str, content_type: &'static str) -> Response {
    let headers: [(HeaderName, HeaderValue); 5] = [
        (CONTENT_TYPE, HeaderValue::from_static(content_type)),
        (CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP)),
        (X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff")),
        (CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        (
            HeaderName::from_static("referrer-policy"),
            HeaderValue::from_static("no-referrer"),
        ),
    ];
    (headers, body).into_response()
}
