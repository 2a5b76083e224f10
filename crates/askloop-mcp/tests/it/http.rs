//! Streamable HTTP: server-everything's `streamableHttp` mode on a free loopback port.

use std::process::Stdio;
use std::time::Duration;

use askloop_mcp::{McpError, McpServer, McpServerConfig, McpTool};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::servers::entry;

/// server-everything listening on 127.0.0.1 (its `PORT`), killed when dropped.
struct HttpServer {
    child: tokio::process::Child,
    url: String,
}

impl HttpServer {
    async fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut child = tokio::process::Command::new("node")
            .args([entry("server-everything").as_str(), "streamableHttp"])
            .env("PORT", port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let listening = tokio::time::timeout(Duration::from_secs(30), async {
            while let Some(line) = lines.next_line().await.unwrap() {
                if line.contains("listening on port") {
                    return;
                }
                assert!(!line.contains("Failed to start"), "{line}");
            }
            panic!("server-everything (streamableHttp) exited before listening");
        });
        listening.await.unwrap();
        // Keep draining its stderr so it never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Self {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
        }
    }

    async fn stop(mut self) {
        self.child.kill().await.unwrap();
    }
}

#[tokio::test]
async fn tools_over_streamable_http() {
    let http = HttpServer::start().await;
    let server = McpServer::connect("remote", McpServerConfig::url(&http.url))
        .await
        .unwrap();
    assert_eq!(server.process_id().await, None);
    let listed = server.list_tools().await.unwrap();
    let echo = McpTool::new(
        server.clone(),
        listed.iter().find(|tool| tool.name == "echo").unwrap(),
    );
    assert!(
        echo.requires_approval(),
        "require_approval defaults to true"
    );
    assert_eq!(
        echo.call(json!({"message": "over http"})).await.unwrap(),
        json!("Echo: over http")
    );
    server.close().await;
    // Closed: the next call opens a new session.
    assert_eq!(
        echo.call(json!({"message": "again"})).await.unwrap(),
        json!("Echo: again")
    );
    server.close().await;
    http.stop().await;
}

#[tokio::test]
async fn nothing_at_the_url_is_a_start_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let error = McpServer::connect(
        "remote",
        McpServerConfig::url(format!("http://127.0.0.1:{port}/mcp")),
    )
    .await
    .unwrap_err();
    assert!(matches!(error, McpError::Start { .. }), "{error:?}");
}
