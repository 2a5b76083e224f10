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

#[tokio::test]
async fn issue31_an_elicitation_over_streamable_http_is_asked_and_answered() {
    use std::sync::Arc;

    use askloop_core::testing::{ScriptStep, ScriptToolCall, ScriptedModel};
    use askloop_core::{Agent, RunOutcome, ToolCallId};

    let http = HttpServer::start().await;
    let tools = askloop_mcp::McpToolset::connect(&std::collections::BTreeMap::from([(
        "remote".to_owned(),
        McpServerConfig::url(&http.url).with_require_approval(askloop_mcp::RequireApproval::None),
    )]))
    .await
    .unwrap();
    let model = ScriptedModel::from_steps(vec![
        ScriptStep {
            tool_calls: vec![ScriptToolCall {
                id: "e1".into(),
                name: "trigger-elicitation-request".into(),
                args: json!({}),
            }],
            ..ScriptStep::default()
        },
        ScriptStep {
            text: Some("Done.".into()),
            ..ScriptStep::default()
        },
    ]);
    let mut builder = Agent::builder("remote")
        .model(model)
        .shared_store(Arc::new(askloop_core::store::MemoryStore::new()));
    for tool in tools.dyn_tools() {
        builder = builder.shared_tool(tool);
    }
    let agent = builder.build().unwrap();
    let output = agent.generate("Ask me").await.unwrap();
    assert!(
        matches!(&output.status, RunOutcome::Suspended { pending } if pending[0].suspend_payload["kind"] == "mcp-elicitation"),
        "{:?}",
        output.status
    );
    let done = agent
        .resume_stream(
            json!({"action": "accept", "content": {"name": "Grace Hopper"}}),
            &output.run_id,
            Some(&ToolCallId::new("e1")),
        )
        .await
        .unwrap()
        .collect_output()
        .await
        .unwrap();
    assert_eq!(done.text, "Done.");
    let stored = agent
        .store()
        .load_run(&output.run_key())
        .await
        .unwrap()
        .state;
    let text = serde_json::to_string(stored.messages()).unwrap();
    assert!(text.contains("Name: Grace Hopper"), "{text}");
    tools.close().await;
    http.stop().await;
}
