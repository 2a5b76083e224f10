//! Test support: stores on both backends, scripted agents, requests and SSE parsing.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use askloop_core::registry::AgentSet;
use askloop_core::testing::ScriptedModel;
use askloop_core::testing::conformance::support::Counter;
use askloop_core::{Agent, AskUser, Execution, RunStore, Tool, ToolContext};
use askloop_server::{ApiKey, Server};
use askloop_store::{OpenOptions, StoreUrl, open_store};
use async_trait::async_trait;
use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use sqlx::Connection;
use tower::ServiceExt;

/// Which store a scenario runs on.
#[derive(Clone, Copy, Debug)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// Runs a scenario `async fn name(backend: Backend)` once per backend.
#[macro_export]
macro_rules! on_both_stores {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    super::$name($crate::support::Backend::Sqlite).await;
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    super::$name($crate::support::Backend::Postgres).await;
                }
            }
        )*
    };
}

fn postgres_url() -> String {
    std::env::var("ASKLOOP_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// A store location for one test: a temporary SQLite file or a fresh PostgreSQL schema,
/// removed when dropped.
pub struct Place {
    url: StoreUrl,
    _dir: Option<tempfile::TempDir>,
    schema: Option<String>,
}

impl Place {
    pub async fn new(backend: Backend) -> Self {
        match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().unwrap();
                let url = StoreUrl::sqlite(dir.path().join("runs.db"));
                Self {
                    url,
                    _dir: Some(dir),
                    schema: None,
                }
            }
            Backend::Postgres => {
                static NEXT: AtomicU64 = AtomicU64::new(0);
                let nanos = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .subsec_nanos();
                let name = format!(
                    "askloop_server_test_{}_{}_{nanos}",
                    std::process::id(),
                    NEXT.fetch_add(1, Ordering::Relaxed)
                );
                let base = postgres_url();
                let mut admin = sqlx::postgres::PgConnection::connect(&base)
                    .await
                    .unwrap_or_else(|error| {
                        panic!("these tests need PostgreSQL at {base}: {error}")
                    });
                sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {name}")))
                    .execute(&mut admin)
                    .await
                    .unwrap();
                admin.close().await.unwrap();
                let separator = if base.contains('?') { '&' } else { '?' };
                let url = format!("{base}{separator}options=-c%20search_path%3D{name}")
                    .parse()
                    .unwrap();
                Self {
                    url,
                    _dir: None,
                    schema: Some(name),
                }
            }
        }
    }

    /// A new store over this place (several may share it, like several processes).
    pub async fn open(&self) -> Arc<dyn RunStore> {
        open_store(&self.url, &OpenOptions::default())
            .await
            .unwrap()
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if let Some(name) = self.schema.take() {
            let base = postgres_url();
            let _ = std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                runtime.block_on(async move {
                    if let Ok(mut admin) = sqlx::postgres::PgConnection::connect(&base).await {
                        let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                            "DROP SCHEMA IF EXISTS {name} CASCADE"
                        )))
                        .execute(&mut admin)
                        .await;
                        let _ = admin.close().await;
                    }
                });
            })
            .join();
        }
    }
}

/// A tool that waits until its `release` is notified, then completes.
#[derive(Clone, Default)]
pub struct Hold {
    pub release: Arc<tokio::sync::Notify>,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
pub struct HoldArgs {
    /// Anything.
    pub what: String,
}

#[async_trait]
impl Tool for Hold {
    const NAME: &'static str = "hold";
    type Args = HoldArgs;
    type Output = Value;
    type Error = std::convert::Infallible;
    fn description(&self) -> String {
        "Waits to be released.".into()
    }
    async fn execute(
        &self,
        args: HoldArgs,
        _: &ToolContext,
    ) -> Result<Execution<Value>, Self::Error> {
        self.release.notified().await;
        Ok(Execution::Complete(json!({"held": args.what})))
    }
}

pub const ASK_SCRIPT: &str = r#"{"steps":[
  {"toolCalls":[{"id":"c1","name":"ask_user","args":{"question":"Which repo?","options":[{"label":"main"},{"label":"docs"}]}}]},
  {"text":"Summary of main."}]}"#;
const FILES_SCRIPT: &str = r#"{"steps":[
  {"toolCalls":[{"id":"w1","name":"count","args":{"label":"write"}}]},
  {"text":"Noted."}]}"#;
const WAITER_SCRIPT: &str = r#"{"steps":[
  {"toolCalls":[{"id":"h1","name":"hold","args":{"what":"the line"}}]},
  {"text":"Held."}]}"#;

/// The agents of the tests: `assistant` (asks which repo), `files` (a `count` call that needs
/// approval), `waiter` (a `hold` call that waits for `hold.release`).
pub fn agents(store: &Arc<dyn RunStore>, hold: &Hold) -> AgentSet {
    let assistant = Agent::builder("assistant")
        .model(ScriptedModel::from_json(ASK_SCRIPT).unwrap())
        .tool(AskUser::new())
        .shared_store(store.clone())
        .build()
        .unwrap();
    let files = Agent::builder("files")
        .name("Files")
        .model(ScriptedModel::from_json(FILES_SCRIPT).unwrap())
        .tool(Counter::default())
        .require_approval_for("count")
        .shared_store(store.clone())
        .build()
        .unwrap();
    let waiter = Agent::builder("waiter")
        .model(ScriptedModel::from_json(WAITER_SCRIPT).unwrap())
        .tool(hold.clone())
        .shared_store(store.clone())
        .build()
        .unwrap();
    AgentSet::new().with(assistant).with(files).with(waiter)
}

/// A server over `store` with the test agents and these keys.
pub fn server(store: &Arc<dyn RunStore>, keys: Vec<ApiKey>) -> (Server, Hold) {
    let hold = Hold::default();
    let server = Server::builder(Arc::new(agents(store, &hold)), store.clone())
        .keys(keys)
        .build();
    (server, hold)
}

/// A request with an optional JSON body and key.
pub fn request(method: &str, path: &str, body: Option<Value>, key: Option<&str>) -> Request<Body> {
    let mut builder = Request::builder().method(method).uri(path);
    if let Some(key) = key {
        builder = builder.header(header::AUTHORIZATION, format!("Bearer {key}"));
    }
    match body {
        Some(body) => builder
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_string()))
            .unwrap(),
        None => builder.body(Body::empty()).unwrap(),
    }
}

/// Sends a request; the status and the body as JSON (a JSON string if it is not JSON).
pub async fn send(router: &Router, request: Request<Body>) -> (StatusCode, Value) {
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, value)
}

pub async fn call(
    router: &Router,
    method: &str,
    path: &str,
    body: Option<Value>,
    key: Option<&str>,
) -> (StatusCode, Value) {
    send(router, request(method, path, body, key)).await
}

/// The `data:` frames of an SSE body: chunk JSON values; asserts it ends with `[DONE]`.
pub fn frames(text: &str) -> Vec<Value> {
    let mut chunks = Vec::new();
    let mut done = false;
    for frame in text.split("\n\n").filter(|frame| !frame.trim().is_empty()) {
        if frame.starts_with(':') {
            continue;
        }
        let data = frame
            .strip_prefix("data: ")
            .unwrap_or_else(|| panic!("bad frame {frame:?}"));
        assert!(!done, "a frame after [DONE]: {frame:?}");
        if data == "[DONE]" {
            done = true;
        } else {
            chunks.push(serde_json::from_str(data).unwrap());
        }
    }
    assert!(done, "the stream did not end with [DONE]: {text}");
    chunks
}

/// Sends a streaming request; its status and chunks (the body as JSON when not 200).
pub async fn stream(
    router: &Router,
    method: &str,
    path: &str,
    body: Option<Value>,
    key: Option<&str>,
) -> (StatusCode, Vec<Value>, Value) {
    let response = router
        .clone()
        .oneshot(request(method, path, body, key))
        .await
        .unwrap();
    let status = response.status();
    let content_type = response
        .headers()
        .get(header::CONTENT_TYPE)
        .map(|value| value.to_str().unwrap().to_owned());
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    if status == StatusCode::OK {
        assert_eq!(content_type.as_deref(), Some("text/event-stream"));
        (status, frames(&text), Value::Null)
    } else {
        (
            status,
            Vec::new(),
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }
}

/// The chunk types of a stream.
pub fn types(chunks: &[Value]) -> Vec<&str> {
    chunks
        .iter()
        .map(|chunk| chunk["type"].as_str().unwrap())
        .collect()
}

/// Waits until `check` holds, at most 10 s.
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The stored run with this id (the one run of any resource that uses it).
pub async fn load(store: &Arc<dyn RunStore>, run_id: &str) -> askloop_core::store::StoredRun {
    let keys = store.keys_of_run(&run_id.into()).await.unwrap();
    assert_eq!(keys.len(), 1, "one run {run_id}: {keys:?}");
    store.load_run(&keys[0]).await.unwrap()
}

/// The status of a stored run (the one with this id).
pub async fn status_of(store: &Arc<dyn RunStore>, run_id: &str) -> askloop_core::RunStatus {
    load(store, run_id).await.state.status()
}
