//! `GET /metrics` after an ask cycle, on both stores.

use askloop_server::ApiKey;
use axum::http::{StatusCode, header};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::on_both_stores;
use crate::support::*;

on_both_stores!(
    metrics_follow_an_ask_cycle,
    metrics_need_a_key_when_keys_exist
);

/// The scraped text, asserting a 200 in the OpenMetrics format.
async fn scrape(router: &axum::Router, key: Option<&str>) -> String {
    let response = router
        .clone()
        .oneshot(request("GET", "/metrics", None, key))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let content_type = response.headers()[header::CONTENT_TYPE].to_str().unwrap();
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

/// The value of the sample `name` (labels included, as written), if present.
fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .map(|value| value.trim().parse().unwrap())
}

/// Scrapes until the sample `name` is `value` (the run task records a stream's end just after
/// the stream's last chunk), at most 10 s ([`eventually`]); then a scrape to read.
async fn scrape_until(router: &axum::Router, name: &str, value: f64) -> String {
    eventually(&format!("{name} reaching {value}"), || async {
        sample(&scrape(router, None).await, name) == Some(value)
    })
    .await;
    scrape(router, None).await
}

async fn metrics_follow_an_ask_cycle(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    let (server, _) = server(&store, Vec::new());
    let router = server.router();

    let before = scrape(&router, None).await;
    assert_eq!(
        sample(&before, r#"askloop_runs{status="suspended"}"#),
        Some(0.0)
    );
    assert_eq!(sample(&before, "askloop_pending_questions"), Some(0.0));
    assert!(before.trim_end().ends_with("# EOF"), "{before}");

    let body = json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "Summarize my project"}]}]});
    let (status, chunks, error) = stream(
        &router,
        "POST",
        "/api/agents/assistant/stream",
        Some(body),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{error}");
    let run_id = chunks[0]["runId"].as_str().unwrap().to_owned();

    let suspended = scrape_until(
        &router,
        r#"askloop_cycle_duration_seconds_count{outcome="suspended"}"#,
        1.0,
    )
    .await;
    assert_eq!(
        sample(&suspended, r#"askloop_runs{status="suspended"}"#),
        Some(1.0)
    );
    assert_eq!(sample(&suspended, "askloop_pending_questions"), Some(1.0));
    assert!(
        sample(
            &suspended,
            r#"askloop_cycle_duration_seconds_sum{outcome="suspended"}"#
        )
        .unwrap()
            > 0.0
    );
    // Route templates, never raw paths.
    assert_eq!(
        sample(
            &suspended,
            r#"askloop_http_requests_total{method="POST",route="/api/agents/{agent_id}/stream",status="200"}"#
        ),
        Some(1.0)
    );
    assert!(!suspended.contains(&run_id), "{suspended}");

    let resume = json!({"runId": run_id, "toolCallId": "c1", "resumeData": "main"});
    let (status, chunks, error) = stream(
        &router,
        "POST",
        "/api/agents/assistant/resume-stream",
        Some(resume),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{error}");
    assert_eq!(types(&chunks).last(), Some(&"finish"));
    let finished = scrape_until(
        &router,
        r#"askloop_resume_duration_seconds_count{outcome="finished"}"#,
        1.0,
    )
    .await;
    assert_eq!(
        sample(&finished, r#"askloop_runs{status="suspended"}"#),
        Some(0.0)
    );
    assert_eq!(
        sample(&finished, r#"askloop_runs{status="completed"}"#),
        Some(1.0)
    );
    assert_eq!(sample(&finished, "askloop_pending_questions"), Some(0.0));

    let (status, _) = call(&router, "GET", &format!("/api/runs/{run_id}"), None, None).await;
    assert_eq!(status, StatusCode::OK);
    let after = scrape(&router, None).await;
    assert_eq!(
        sample(
            &after,
            r#"askloop_http_requests_total{method="GET",route="/api/runs/{run_id}",status="200"}"#
        ),
        Some(1.0)
    );
    assert!(
        sample(
            &after,
            r#"askloop_http_request_duration_seconds_count{method="GET",route="/api/runs/{run_id}"}"#
        )
        .is_some()
    );
}

async fn metrics_need_a_key_when_keys_exist(backend: Backend) {
    let place = Place::new(backend).await;
    let store = place.open().await;
    let secret = ApiKey::new_secret();
    let (server, _) = server(&store, vec![ApiKey::from_secret(&secret, "alice".into())]);
    let router = server.router();
    let (status, error): (StatusCode, Value) = call(&router, "GET", "/metrics", None, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(error["code"], "unauthorized");
    let text = scrape(&router, Some(&secret)).await;
    assert!(text.contains("askloop_runs"), "{text}");
}
