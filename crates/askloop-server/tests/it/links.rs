//! Answer links (issue 34): a link shows its one question and answers it once, through the
//! same claim as every route, then no longer works; every dead link (used, expired, revoked,
//! unknown, answered elsewhere) answers alike; an invalid answer does not burn the link; two
//! racing submits answer once; links are tenant-scoped; the page has the app's CSP; webhook
//! payloads carry a link (the same at every attempt) when a public URL is set.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use askloop_core::model::Message;
use askloop_core::store::{NewAnswerLink, StoredRun};
use askloop_core::time::lease_now_ms;
use askloop_core::{RunStatus, RunStore, ToolCallId};
use askloop_server::links::{LinkSettings, LinkToken};
use askloop_server::webhooks::{RetryPolicy, Webhook};
use askloop_server::{ApiKey, Server};
use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::on_both_stores;
use crate::support::{Backend, Hold, Place, agents, call, eventually, load, status_of, stream};

on_both_stores!(
    issue34_a_link_shows_its_question_and_answers_it_once,
    issue34_dead_links_all_answer_alike,
    issue34_an_invalid_answer_does_not_burn_the_link,
    issue34_two_racing_submits_answer_once,
    issue34_links_are_made_only_for_waiting_calls_of_the_callers_runs,
    issue34_an_approval_is_decided_through_a_link,
    issue34_webhook_payloads_carry_the_same_answer_link_at_every_attempt,
    issue34_a_store_without_links_answers_unsupported,
);

const SECRET_A: &str = "secret-a";
const SECRET_B: &str = "secret-b";
/// A Standard Webhooks secret (base64 of 24 bytes).
const HOOK_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn keys() -> Vec<ApiKey> {
    vec![
        // Tenant A's key holds `ops`: it may issue links acting with that role.
        ApiKey::from_secret(SECRET_A, "tenant-a".into()).roles(["ops"]),
        ApiKey::from_secret(SECRET_B, "tenant-b".into()),
    ]
}

fn server(store: &Arc<dyn RunStore>) -> Server {
    Server::builder(Arc::new(agents(store, &Hold::default())), store.clone())
        .keys(keys())
        .build()
}

/// A raw answer: status, headers and body text.
struct Raw {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    text: String,
}

async fn raw(router: &Router, method: &str, path: &str, body: Option<Value>) -> Raw {
    let mut builder = Request::builder().method(method).uri(path);
    let body = match body {
        Some(body) => {
            builder = builder.header(header::CONTENT_TYPE, "application/json");
            Body::from(body.to_string())
        }
        None => Body::empty(),
    };
    let response = router
        .clone()
        .oneshot(builder.body(body).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    Raw {
        status,
        headers,
        text: String::from_utf8(bytes.to_vec()).unwrap(),
    }
}

/// Starts a run of `agent` for tenant A; its id.
async fn start(router: &Router, agent: &str) -> String {
    let (status, chunks, body) = stream(
        router,
        "POST",
        &format!("/api/agents/{agent}/stream"),
        Some(json!({"messages": "Summarize my project"})),
        Some(SECRET_A),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    chunks[0]["runId"].as_str().unwrap().to_owned()
}

/// Makes a link to call `call` of run `run_id` with `key`: the status and body.
async fn make_link(
    router: &Router,
    run_id: &str,
    call_id: &str,
    key: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    call(
        router,
        "POST",
        &format!("/api/runs/{run_id}/calls/{call_id}/link"),
        body,
        Some(key),
    )
    .await
}

/// A link's path, made by tenant A.
async fn link_path(router: &Router, run_id: &str, call_id: &str) -> String {
    let (status, body) = make_link(router, run_id, call_id, SECRET_A, None).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let path = body["path"].as_str().unwrap().to_owned();
    assert!(path.starts_with("/answer/al_"), "{path}");
    assert_eq!(body["url"], format!("http://localhost{path}"));
    path
}

/// The page every dead link gets.
async fn gone_page(router: &Router) -> Raw {
    let page = raw(
        router,
        "GET",
        &format!("/answer/al_{}", "0".repeat(64)),
        None,
    )
    .await;
    assert_eq!(page.status, StatusCode::GONE);
    assert!(
        page.text.contains("This link no longer works"),
        "{}",
        page.text
    );
    page
}

/// Who the audit records for the answer of call `id` of `stored`, and the route.
fn answered_by(stored: &StoredRun, id: &str) -> Option<(String, Option<String>)> {
    stored
        .state
        .messages()
        .iter()
        .find_map(|message| match message {
            Message::Tool { results } => results
                .iter()
                .find(|result| result.tool_call_id.as_str() == id)
                .and_then(|result| result.audit.last())
                .and_then(|record| Some((record.by.clone()?, record.route.clone()))),
            _ => None,
        })
}

async fn issue34_a_link_shows_its_question_and_answers_it_once(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    let router = server(&store).router();
    let run_id = start(&router, "assistant").await;
    let path = link_path(&router, &run_id, "c1").await;

    let page = raw(&router, "GET", &path, None).await;
    assert_eq!(page.status, StatusCode::OK);
    assert_eq!(
        page.headers[header::CONTENT_SECURITY_POLICY],
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
         img-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    );
    assert_eq!(page.headers[header::CACHE_CONTROL], "no-store");
    assert_eq!(page.headers["referrer-policy"], "no-referrer");
    assert!(page.text.contains("/assets/answer.js"));
    let start_tag = r#"<script type="application/json" id="askloop-call">"#;
    let data = page.text.split(start_tag).nth(1).unwrap();
    let data = data.split("</script>").next().unwrap();
    let shown: Value = serde_json::from_str(data).unwrap();
    assert_eq!(shown["toolCallId"], "c1");
    assert_eq!(shown["kind"], "answer");
    assert_eq!(shown["payload"]["question"], "Which repo?");
    let script = raw(&router, "GET", "/assets/answer.js", None).await;
    assert_eq!(script.status, StatusCode::OK);

    let answered = raw(&router, "POST", &path, Some(json!({"resumeData": "main"}))).await;
    assert_eq!(answered.status, StatusCode::OK, "{}", answered.text);
    assert_eq!(
        serde_json::from_str::<Value>(&answered.text).unwrap(),
        json!({"outcome": "answered"})
    );
    eventually("the run completes", || async {
        status_of(&store, &run_id).await == RunStatus::Completed
    })
    .await;
    let stored = load(&store, &run_id).await;
    // A link acts as its issuer: tenant A's key, unlabelled, is known by its resource; the
    // route shows the link.
    let (by, route) = answered_by(&stored, "c1").unwrap();
    assert_eq!(by, "tenant-a");
    let route = route.unwrap();
    assert!(route.starts_with("POST /answer/{token} (link "), "{route}");

    // Used: the page and the answer of every dead link; nothing changes.
    let gone = gone_page(&router).await;
    let again = raw(&router, "GET", &path, None).await;
    assert_eq!((again.status, &again.text), (StatusCode::GONE, &gone.text));
    assert_eq!(
        again.headers[header::CONTENT_SECURITY_POLICY],
        gone.headers[header::CONTENT_SECURITY_POLICY]
    );
    let twice = raw(&router, "POST", &path, Some(json!({"resumeData": "docs"}))).await;
    assert_eq!(twice.status, StatusCode::GONE);
    assert_eq!(
        serde_json::from_str::<Value>(&twice.text).unwrap()["code"],
        "link_gone"
    );
    assert_eq!(load(&store, &run_id).await.version, stored.version);
}

async fn issue34_dead_links_all_answer_alike(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    let router = server(&store).router();
    let gone = gone_page(&router).await;
    let unknown_post = raw(
        &router,
        "POST",
        &format!("/answer/al_{}", "1".repeat(64)),
        Some(json!({"resumeData": "main"})),
    )
    .await;
    assert_eq!(unknown_post.status, StatusCode::GONE);

    // Revoked.
    let revoked_run = start(&router, "assistant").await;
    let revoked = link_path(&router, &revoked_run, "c1").await;
    let (status, body) = call(
        &router,
        "DELETE",
        &format!("/api/runs/{revoked_run}/calls/c1/link"),
        None,
        Some(SECRET_A),
    )
    .await;
    assert_eq!((status, body), (StatusCode::OK, json!({"revoked": 1})));
    // Expired: a link stored with an expiry just past.
    let expired_run = start(&router, "assistant").await;
    let token = LinkToken::generate();
    let links = store.answer_links().unwrap();
    let key = load(&store, &expired_run).await.state.key();
    let now = lease_now_ms();
    links
        .create_link(&NewAnswerLink::new(
            token.hash(),
            key,
            ToolCallId::new("c1"),
            now - 2_000,
            now - 1,
        ))
        .await
        .unwrap();
    // Short-lived through the API: one second.
    let short_run = start(&router, "assistant").await;
    let (status, body) = make_link(
        &router,
        &short_run,
        "c1",
        SECRET_A,
        Some(json!({"expiresInSeconds": 1})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let short = body["path"].as_str().unwrap().to_owned();
    // Answered through another route.
    let elsewhere_run = start(&router, "assistant").await;
    let elsewhere = link_path(&router, &elsewhere_run, "c1").await;
    let (status, _, _) = stream(
        &router,
        "POST",
        &format!("/api/runs/{elsewhere_run}/responses"),
        Some(json!({"responses": [{"toolCallId": "c1", "answer": "docs"}]})),
        Some(SECRET_A),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    // The one-second link works until its second is over, then is gone like the others.
    eventually("the one-second link expires", || async {
        raw(&router, "GET", &short, None).await.status == StatusCode::GONE
    })
    .await;

    for path in [
        revoked,
        token.path(),
        short,
        elsewhere,
        "/answer/not-a-token".to_owned(),
        format!("/answer/al_{}", "A".repeat(64)),
    ] {
        let page = raw(&router, "GET", &path, None).await;
        assert_eq!(
            (page.status, &page.text),
            (StatusCode::GONE, &gone.text),
            "{path}"
        );
        let post = raw(&router, "POST", &path, Some(json!({"resumeData": "main"}))).await;
        assert_eq!(
            (post.status, &post.text),
            (unknown_post.status, &unknown_post.text),
            "{path}"
        );
    }
    for run_id in [revoked_run, expired_run, short_run] {
        assert_eq!(status_of(&store, &run_id).await, RunStatus::Suspended);
    }
}

async fn issue34_an_invalid_answer_does_not_burn_the_link(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    let router = server(&store).router();
    let run_id = start(&router, "assistant").await;
    let path = link_path(&router, &run_id, "c1").await;
    let version = load(&store, &run_id).await.version;
    let refused = raw(
        &router,
        "POST",
        &path,
        Some(json!({"resumeData": "neither"})),
    )
    .await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{}", refused.text);
    let body: Value = serde_json::from_str(&refused.text).unwrap();
    assert_eq!(body["code"], "invalid_answer");
    assert_eq!(body["details"]["allowed"], json!(["main", "docs"]));
    let malformed = raw(&router, "POST", &path, Some(json!({"answer": "main"}))).await;
    assert_eq!(malformed.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        load(&store, &run_id).await.version,
        version,
        "nothing changed"
    );
    assert_eq!(
        raw(&router, "GET", &path, None).await.status,
        StatusCode::OK
    );
    let answered = raw(&router, "POST", &path, Some(json!({"resumeData": "docs"}))).await;
    assert_eq!(answered.status, StatusCode::OK, "{}", answered.text);
    eventually("the run completes", || async {
        status_of(&store, &run_id).await == RunStatus::Completed
    })
    .await;
}

async fn issue34_two_racing_submits_answer_once(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    let router = server(&store).router();
    let run_id = start(&router, "assistant").await;
    let path = link_path(&router, &run_id, "c1").await;
    let (first, second) = tokio::join!(
        raw(&router, "POST", &path, Some(json!({"resumeData": "main"}))),
        raw(&router, "POST", &path, Some(json!({"resumeData": "docs"}))),
    );
    let mut statuses = [first.status, second.status];
    statuses.sort();
    assert_eq!(statuses, [StatusCode::OK, StatusCode::GONE]);
    eventually("the run completes", || async {
        status_of(&store, &run_id).await == RunStatus::Completed
    })
    .await;
    let stored = load(&store, &run_id).await;
    let results: usize = stored
        .state
        .messages()
        .iter()
        .map(|message| match message {
            Message::Tool { results } => results
                .iter()
                .filter(|result| result.tool_call_id.as_str() == "c1")
                .count(),
            _ => 0,
        })
        .sum();
    assert_eq!(results, 1, "one answer");
}

async fn issue34_links_are_made_only_for_waiting_calls_of_the_callers_runs(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    let router = server(&store).router();
    let run_id = start(&router, "assistant").await;
    let (status, body) = make_link(&router, &run_id, "c1", SECRET_B, None).await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::NOT_FOUND, &json!("run_not_found"))
    );
    let (status, body) = call(
        &router,
        "DELETE",
        &format!("/api/runs/{run_id}/calls/c1/link"),
        None,
        Some(SECRET_B),
    )
    .await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::NOT_FOUND, &json!("run_not_found"))
    );
    let (status, _) = call(
        &router,
        "POST",
        &format!("/api/runs/{run_id}/calls/c1/link"),
        None,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, body) = make_link(&router, &run_id, "nope", SECRET_A, None).await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::NOT_FOUND, &json!("unknown_tool_call"))
    );
    let (status, body) = make_link(
        &router,
        &run_id,
        "c1",
        SECRET_A,
        Some(json!({"role": "bad role!"})),
    )
    .await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::BAD_REQUEST, &json!("bad_request"))
    );
    let (status, body) = make_link(
        &router,
        &run_id,
        "c1",
        SECRET_A,
        Some(json!({"expiresInSeconds": 999_999_999u64, "role": "ops"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let latest = askloop_core::time::rfc3339(lease_now_ms() + 24 * 3600 * 1000);
    assert!(
        body["expiresAt"].as_str().unwrap() <= latest.as_str(),
        "capped at 24 h: {body}"
    );
    let hash = LinkToken::parse(
        body["path"]
            .as_str()
            .unwrap()
            .trim_start_matches("/answer/"),
    )
    .unwrap()
    .hash();
    let stored = store
        .answer_links()
        .unwrap()
        .find_link(&hash)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.role.as_deref(), Some("ops"));
    assert_eq!(
        stored.run.resource_id.as_ref().unwrap().as_str(),
        "tenant-a"
    );

    let (status, _, _) = stream(
        &router,
        "POST",
        &format!("/api/runs/{run_id}/responses"),
        Some(json!({"responses": [{"toolCallId": "c1", "answer": "main"}]})),
        Some(SECRET_A),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    eventually("the run completes", || async {
        status_of(&store, &run_id).await == RunStatus::Completed
    })
    .await;
    let (status, body) = make_link(&router, &run_id, "c1", SECRET_A, None).await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::CONFLICT, &json!("already_answered"))
    );
}

async fn issue34_an_approval_is_decided_through_a_link(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    let router = server(&store).router();
    let run_id = start(&router, "files").await;
    let path = link_path(&router, &run_id, "w1").await;
    let page = raw(&router, "GET", &path, None).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.text.contains(r#""kind":"approval""#), "{}", page.text);
    let bad = raw(
        &router,
        "POST",
        &path,
        Some(json!({"approved": true, "args": {"label": 5}})),
    )
    .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST, "{}", bad.text);
    assert_eq!(
        serde_json::from_str::<Value>(&bad.text).unwrap()["code"],
        "invalid_args"
    );
    let approved = raw(&router, "POST", &path, Some(json!({"approved": true}))).await;
    assert_eq!(approved.status, StatusCode::OK, "{}", approved.text);
    assert_eq!(
        serde_json::from_str::<Value>(&approved.text).unwrap(),
        json!({"outcome": "approved"})
    );
    eventually("the run completes", || async {
        status_of(&store, &run_id).await == RunStatus::Completed
    })
    .await;
}

async fn issue34_webhook_payloads_carry_the_same_answer_link_at_every_attempt(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    // A receiver that fails its first request, then takes every one.
    let bodies: Arc<Mutex<Vec<Value>>> = Arc::default();
    let app = {
        let bodies = bodies.clone();
        axum::Router::new().route(
            "/hook",
            axum::routing::post(move |raw: axum::body::Bytes| {
                let bodies = bodies.clone();
                async move {
                    let mut bodies = bodies.lock().unwrap();
                    bodies.push(serde_json::from_slice(&raw).unwrap());
                    if bodies.len() == 1 {
                        StatusCode::SERVICE_UNAVAILABLE
                    } else {
                        StatusCode::NO_CONTENT
                    }
                }
            }),
        )
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let server = Server::builder(Arc::new(agents(&store, &Hold::default())), store.clone())
        .keys(keys())
        .webhooks(
            [Webhook::new(&format!("http://{address}/hook"), HOOK_SECRET)
                .unwrap()
                .events(["question.raised"])
                .unwrap()],
        )
        .webhook_policy(
            RetryPolicy::default()
                .first_backoff(Duration::from_millis(20))
                .max_backoff(Duration::from_millis(40)),
        )
        .answer_links(
            LinkSettings::new().public_url("https://askloop.example.com/".parse().unwrap()),
        )
        .try_build()
        .unwrap();
    let router = server.router();
    let run_id = start(&router, "assistant").await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while bodies.lock().unwrap().len() < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not delivered twice"
        );
        server.deliver_webhooks_once().await.unwrap().unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let bodies = bodies.lock().unwrap().clone();
    assert_eq!(bodies[0], bodies[1], "a retry sends the same body");
    let url = bodies[0]["data"]["answerUrl"].as_str().unwrap().to_owned();
    let path = url
        .strip_prefix("https://askloop.example.com")
        .unwrap()
        .to_owned();
    assert!(path.starts_with("/answer/al_"), "{url}");
    let page = raw(&router, "GET", &path, None).await;
    assert_eq!(page.status, StatusCode::OK, "the delivery's link works");
    let answered = raw(&router, "POST", &path, Some(json!({"resumeData": "main"}))).await;
    assert_eq!(answered.status, StatusCode::OK, "{}", answered.text);
    eventually("the run completes", || async {
        status_of(&store, &run_id).await == RunStatus::Completed
    })
    .await;
    // A webhook's link is issued by `webhooks`: the answer is audited as by it.
    let (by, _) = answered_by(&load(&store, &run_id).await, "c1").unwrap();
    assert_eq!(by, "webhooks");
}

/// A store that passes runs on and keeps no answer links (`answer_links` left at `None`).
struct NoLinks(Arc<dyn RunStore>);

#[async_trait::async_trait]
impl RunStore for NoLinks {
    async fn insert_run_with_events(
        &self,
        state: &askloop_core::store::RunState,
        lease: Option<&askloop_core::store::Lease>,
        events: &[askloop_core::event::RunEvent],
    ) -> Result<u64, askloop_core::StoreError> {
        self.0.insert_run_with_events(state, lease, events).await
    }
    async fn update_run_with_events(
        &self,
        state: &askloop_core::store::RunState,
        expected_version: u64,
        lease: Option<&askloop_core::store::Lease>,
        events: &[askloop_core::event::RunEvent],
    ) -> Result<u64, askloop_core::StoreError> {
        self.0
            .update_run_with_events(state, expected_version, lease, events)
            .await
    }
    async fn renew_lease(
        &self,
        run: &askloop_core::RunKey,
        expected_version: u64,
        lease: &askloop_core::store::Lease,
    ) -> Result<(), askloop_core::StoreError> {
        self.0.renew_lease(run, expected_version, lease).await
    }
    async fn load_run(
        &self,
        run: &askloop_core::RunKey,
    ) -> Result<StoredRun, askloop_core::StoreError> {
        self.0.load_run(run).await
    }
    async fn keys_of_run(
        &self,
        run_id: &askloop_core::RunId,
    ) -> Result<Vec<askloop_core::RunKey>, askloop_core::StoreError> {
        self.0.keys_of_run(run_id).await
    }
    async fn list_runs(
        &self,
        filter: &askloop_core::store::RunFilter,
    ) -> Result<askloop_core::store::RunPage, askloop_core::StoreError> {
        self.0.list_runs(filter).await
    }
    async fn thread_history(
        &self,
        thread: &askloop_core::ThreadKey,
        through: Option<u64>,
    ) -> Result<askloop_core::store::ThreadHistory, askloop_core::StoreError> {
        self.0.thread_history(thread, through).await
    }
}

async fn issue34_a_store_without_links_answers_unsupported(backend: Backend) {
    let place = Place::new(backend).await;
    let store: Arc<dyn RunStore> = Arc::new(NoLinks(place.open().await));
    let router = server(&store).router();
    let run_id = start(&router, "assistant").await;
    let (status, body) = make_link(&router, &run_id, "c1", SECRET_A, None).await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::NOT_IMPLEMENTED, &json!("unsupported"))
    );
    let (status, body) = call(
        &router,
        "DELETE",
        &format!("/api/runs/{run_id}/calls/c1/link"),
        None,
        Some(SECRET_A),
    )
    .await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::NOT_IMPLEMENTED, &json!("unsupported"))
    );
    let page = raw(
        &router,
        "GET",
        &format!("/answer/al_{}", "2".repeat(64)),
        None,
    )
    .await;
    assert_eq!(page.status, StatusCode::GONE, "no link works");
}
