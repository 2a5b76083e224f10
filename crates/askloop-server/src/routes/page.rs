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

use askloop_core::wire::PendingCall;
use axum::Router;
use axum::extract::Path;
use axum::http::StatusCode;
use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, X_CONTENT_TYPE_OPTIONS,
};
use axum::http::{HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::error::{ApiError, OwnErrorBody};
use crate::links::{LinkError, open_link};
use crate::state::{AppState, State};

/// The page's Content-Security-Policy.
pub(crate) const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

const INDEX_HTML: &str = include_str!("../../../../web/dist/index.html");
const APP_JS: &str = include_str!("../../../../web/dist/app.js");
const APP_CSS: &str = include_str!("../../../../web/dist/app.css");
const ICON_SVG: &str = include_str!("../../../../web/dist/icon.svg");
const ANSWER_HTML: &str = include_str!("../../../../web/dist/answer.html");
const ANSWER_JS: &str = include_str!("../../../../web/dist/answer.js");
const LINK_GONE_HTML: &str = include_str!("../../../../web/dist/link-gone.html");

/// Where the answer page's data goes: the call, as JSON, in a `<script type="application/json">`
/// (data, never run: the CSP's `script-src 'self'` does not apply to it).
const CALL_PLACEHOLDER: &str = "{{ASKLOOP_CALL}}";

/// The page's routes: `/`, `/assets/app.js`, `/assets/app.css`, and its icon (SVG) at
/// `/assets/icon.svg` and at `/favicon.ico`, where a browser or a tool looks by default; an
/// answer link's page `/answer/{token}` and its script `/assets/answer.js`.
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
        .route(
            "/assets/answer.js",
            get(|| async { file(ANSWER_JS, "text/javascript; charset=utf-8") }),
        )
        .route("/answer/{token}", get(answer_page))
        .route("/assets/icon.svg", get(|| async { icon() }))
        .route("/favicon.ico", get(|| async { icon() }))
}

/// `GET /answer/{token}`: the answer link's page — its one question (or approval) with the
/// page's form, which posts to `POST /answer/{token}` — or, for a link that does not work
/// (unknown, used, revoked, expired, its call no longer waiting), the one page "this link no
/// longer works" with status 410, the same for all of them. No key needed; the app's CSP;
/// never cached or indexed.
pub(crate) async fn answer_page(state: State, Path(token): Path<String>) -> Response {
    match open_link(state.store.as_ref(), &token).await {
        Ok(Some(open)) => {
            let call = PendingCall::of(open.stored.state.run_id(), &open.call);
            let json = match serde_json::to_string(&call) {
                Ok(json) => json,
                Err(error) => return ApiError::internal("encode_failed", &error).into_response(),
            };
            let page = ANSWER_HTML.replace(CALL_PLACEHOLDER, &script_safe(&json));
            link_page(StatusCode::OK, page)
        }
        Ok(None) | Err(LinkError::Unsupported) => {
            link_page(StatusCode::GONE, LINK_GONE_HTML.to_owned())
        }
        Err(LinkError::Store(error)) => ApiError::from(error).into_response(),
        Err(_) => link_page(StatusCode::GONE, LINK_GONE_HTML.to_owned()),
    }
}

/// JSON made safe inside a `<script>` element: `<`, `>` and `&` (which JSON has only inside
/// strings) and the line separators written as `\u` escapes, so no `</script>` or `<!--` can
/// close or change the element.
fn script_safe(json: &str) -> String {
    json.replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029")
}

/// An answer link's page: the app's headers, but never stored by a cache or indexed (the URL
/// is a credential).
fn link_page(status: StatusCode, body: String) -> Response {
    let mut response = (status, file_headers("text/html; charset=utf-8"), body).into_response();
    response.extensions_mut().insert(OwnErrorBody);
    let headers = response.headers_mut();
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        HeaderName::from_static("x-robots-tag"),
        HeaderValue::from_static("noindex, nofollow"),
    );
    response
}

fn icon() -> Response {
    file(ICON_SVG, "image/svg+xml")
}

fn file(body: &'static str, content_type: &'static str) -> Response {
    (file_headers(content_type), body).into_response()
}

/// The headers of every file of the page: its type, the CSP, `nosniff`, `no-cache`, no
/// referrer.
fn file_headers(content_type: &'static str) -> [(HeaderName, HeaderValue); 5] {
    [
        (CONTENT_TYPE, HeaderValue::from_static(content_type)),
        (CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP)),
        (X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff")),
        (CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        (
            HeaderName::from_static("referrer-policy"),
            HeaderValue::from_static("no-referrer"),
        ),
    ]
}
