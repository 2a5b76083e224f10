//! Stdio servers: tools listed and called, results and errors mapped, start failures typed,
//! processes reaped, connections reopened.

use std::collections::BTreeMap;
use std::time::Duration;

use askloop_core::{DynTool, Execution, ToolContext, ToolError, error_chain_text};
use askloop_mcp::{McpError, McpServer, McpServerConfig, McpTool, McpToolset};
use serde_json::json;

use crate::servers::{everything, filesystem, process_gone, wait_until};

async fn tool(server: &McpServer, name: &str) -> McpTool {
    let listed = server.list_tools().await.unwrap();
    let tool = listed
        .iter()
        .find(|tool| tool.name == name)
        .unwrap_or_else(|| panic!("no tool {name} in {listed:?}"));
    McpTool::new(server.clone(), tool)
}

async fn run(tool: &McpTool, args: serde_json::Value) -> Result<serde_json::Value, ToolError> {
    match tool.execute_json(args, &ToolContext::standalone()).await? {
        Execution::Complete(output) => Ok(output),
        Execution::Suspend(suspension) => panic!("an MCP tool suspended: {suspension:?}"),
    }
}

#[tokio::test]
async fn tools_are_listed_with_their_schemas_and_hints() {
    let root = tempfile::tempdir().unwrap();
    let servers = BTreeMap::from([
        ("everything".to_owned(), everything()),
        ("fs".to_owned(), filesystem(root.path())),
    ]);
    let toolset = McpToolset::connect(&servers).await.unwrap();
    let names: Vec<&str> = toolset.tools().iter().map(|tool| tool.name()).collect();
    for expected in [
        "echo",
        "get-sum",
        "write_file",
        "read_text_file",
        "edit_file",
    ] {
        assert!(
            names.contains(&expected),
            "{expected} missing from {names:?}"
        );
    }
    let by_name = |name: &str| {
        toolset
            .tools()
            .iter()
            .find(|tool| tool.name() == name)
            .unwrap()
    };
    let echo = by_name("echo").definition();
    assert_eq!(echo.description, "Echoes back the input string");
    assert_eq!(echo.input_schema["properties"]["message"]["type"], "string");
    // Side-effecting unless the server says otherwise.
    assert!(by_name("echo").read_only() && by_name("echo").idempotent());
    assert!(!by_name("write_file").read_only() && by_name("write_file").idempotent());
    assert!(!by_name("edit_file").idempotent());
    // require_approval is kept per tool.
    assert_eq!(toolset.requires_approval("write_file"), Some(true));
    assert_eq!(toolset.requires_approval("read_text_file"), Some(false));
    assert_eq!(toolset.requires_approval("echo"), Some(false));
    assert_eq!(toolset.requires_approval("nope"), None);
    // Every tool's schema compiles into an agent.
    let mut builder = askloop_core::Agent::builder("files")
        .model(askloop_core::testing::ScriptedModel::from_steps(vec![]));
    for tool in toolset.dyn_tools() {
        builder = builder.shared_tool(tool);
    }
    builder.build().unwrap();
    toolset.close().await;
}

#[tokio::test]
async fn echo_and_sum_of_server_everything() {
    let server = McpServer::connect("everything", everything())
        .await
        .unwrap();
    let echo = tool(&server, "echo").await;
    assert_eq!(
        run(&echo, json!({"message": "hello"})).await.unwrap(),
        json!("Echo: hello")
    );
    let sum = tool(&server, "get-sum").await;
    assert_eq!(
        run(&sum, json!({"a": 2, "b": 3.5})).await.unwrap(),
        json!("The sum of 2 and 3.5 is 5.5.")
    );
    // Structured content is the output as it came.
    let structured = tool(&server, "get-structured-content").await;
    let weather = run(&structured, json!({"location": "Chicago"}))
        .await
        .unwrap();
    assert!(weather["temperature"].is_number(), "{weather}");
    server.close().await;
}

#[tokio::test]
async fn write_file_then_read_file_in_a_temp_dir() {
    let root = tempfile::tempdir().unwrap();
    let root_path = root.path().canonicalize().unwrap();
    let server = McpServer::connect("fs", filesystem(&root_path))
        .await
        .unwrap();
    let path = root_path.join("notes.txt");
    let write = tool(&server, "write_file").await;
    let written = run(
        &write,
        json!({"path": path.display().to_string(), "content": "remember the milk\n"}),
    )
    .await
    .unwrap();
    assert!(
        written.to_string().contains("Successfully wrote"),
        "{written}"
    );
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "remember the milk\n"
    );
    let read = tool(&server, "read_text_file").await;
    assert_eq!(
        run(&read, json!({"path": path.display().to_string()}))
            .await
            .unwrap(),
        json!({"content": "remember the milk\n"})
    );
    server.close().await;
}

#[tokio::test]
async fn an_is_error_result_becomes_a_tool_error() {
    let root = tempfile::tempdir().unwrap();
    let server = McpServer::connect("fs", filesystem(root.path()))
        .await
        .unwrap();
    let read = tool(&server, "read_text_file").await;
    let error = run(&read, json!({"path": "/etc/hostname"}))
        .await
        .unwrap_err();
    let ToolError::Failed { tool, source } = &error else {
        panic!("expected a failed tool, got {error:?}")
    };
    assert_eq!(tool, "read_text_file");
    let mcp = source.downcast_ref::<McpError>().unwrap();
    assert!(matches!(mcp, McpError::ToolFailed { .. }), "{mcp:?}");
    assert_eq!(mcp.code(), "mcp_tool_failed");
    let text = error_chain_text(&error);
    assert!(
        text.starts_with(
            "tool read_text_file failed: MCP tool read_text_file of server fs reported an error: "
        ) && text.contains("Access denied"),
        "{text}"
    );
    server.close().await;
}

#[tokio::test]
async fn a_tool_the_server_does_not_have_is_typed() {
    let server = McpServer::connect("everything", everything())
        .await
        .unwrap();
    let error = server.call_tool_raw("no-such-tool", json!({})).await;
    match error {
        Err(McpError::ToolNotFound { server, tool }) => {
            assert_eq!(
                (server.as_str(), tool.as_str()),
                ("everything", "no-such-tool")
            );
        }
        // Newer SDKs answer with an error result rather than a protocol error.
        Ok(result) => assert_eq!(result.is_error, Some(true), "{result:?}"),
        Err(other) => panic!("expected ToolNotFound, got {other:?}"),
    }
    let error = server.call_tool_raw("echo", json!([1])).await.unwrap_err();
    assert!(
        matches!(
            error,
            McpError::ArgumentsNotObject {
                got: "an array",
                ..
            }
        ),
        "{error}"
    );
    server.close().await;
}

#[tokio::test]
async fn a_server_that_exits_at_once_gives_the_start_error_with_its_stderr() {
    let config = McpServerConfig::command(
        "node",
        [
            "-e".to_owned(),
            "console.error('fatal: no such folder /srv/notes'); process.exit(3)".to_owned(),
        ],
    );
    let error = McpServer::connect("broken", config).await.unwrap_err();
    let McpError::Start { server, detail } = &error else {
        panic!("expected Start, got {error:?}")
    };
    assert_eq!(server, "broken");
    assert!(
        detail.contains("fatal: no such folder /srv/notes"),
        "{detail}"
    );
    assert_eq!(error.code(), "mcp_start_failed");

    let missing = McpServerConfig::command("askloop-no-such-mcp-server", []);
    let error = McpServer::connect("missing", missing).await.unwrap_err();
    assert!(
        matches!(&error, McpError::Start { detail, .. } if detail.contains("askloop-no-such-mcp-server")),
        "{error:?}"
    );
}

#[tokio::test]
async fn a_server_that_never_answers_times_out_in_the_handshake() {
    let silent = McpServerConfig::command(
        "node",
        ["-e".to_owned(), "setInterval(() => {}, 1000)".to_owned()],
    );
    let error = McpServer::connect_with_timeout("silent", silent, Duration::from_millis(500))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, McpError::Handshake { detail, .. } if detail.contains("no answer")),
        "{error:?}"
    );
}

#[tokio::test]
async fn unknown_names_in_require_approval_are_refused() {
    let root = tempfile::tempdir().unwrap();
    let config =
        filesystem(root.path()).with_require_approval(askloop_mcp::RequireApproval::Only(vec![
            "wirte_file".to_owned(),
        ]));
    let error = McpToolset::connect(&BTreeMap::from([("fs".to_owned(), config)]))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, McpError::UnknownApprovalTools { unknown, .. } if unknown == &["wirte_file"]),
        "{error:?}"
    );
    assert!(error.to_string().contains("write_file"), "{error}");
}

#[tokio::test]
async fn the_same_tool_name_from_two_servers_is_refused() {
    let servers = BTreeMap::from([
        ("a".to_owned(), everything()),
        ("b".to_owned(), everything()),
    ]);
    let error = McpToolset::connect(&servers).await.unwrap_err();
    assert!(
        matches!(&error, McpError::DuplicateTool { first, second, .. } if first == "a" && second == "b"),
        "{error:?}"
    );
}

#[tokio::test]
async fn close_reaps_the_child() {
    let server = McpServer::connect("everything", everything())
        .await
        .unwrap();
    let pid = server.process_id().await.unwrap();
    assert!(!process_gone(pid));
    server.close().await;
    // Reaped before close returns: not even a zombie is left.
    assert!(process_gone(pid), "process {pid} still has a /proc entry");
    assert!(!server.is_connected().await);
}

#[tokio::test]
async fn dropping_the_last_handle_reaps_the_child() {
    let server = McpServer::connect("everything", everything())
        .await
        .unwrap();
    let pid = server.process_id().await.unwrap();
    let clone = server.clone();
    drop(server);
    assert!(!process_gone(pid), "a clone still holds the connection");
    drop(clone);
    wait_until(
        "the dropped server is reaped",
        Duration::from_secs(15),
        || process_gone(pid),
    )
    .await;
}

#[tokio::test]
async fn a_closed_transport_reconnects_on_the_next_call() {
    let server = McpServer::connect("everything", everything())
        .await
        .unwrap();
    let echo = tool(&server, "echo").await;
    let first = server.process_id().await.unwrap();
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &first.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let mut connected = true;
    for _ in 0..500 {
        connected = server.is_connected().await;
        if !connected {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!connected, "the killed server still looks connected");
    assert_eq!(
        run(&echo, json!({"message": "again"})).await.unwrap(),
        json!("Echo: again")
    );
    let second = server.process_id().await.unwrap();
    assert_ne!(first, second);
    server.close().await;
    assert!(process_gone(first) && process_gone(second));
}

#[tokio::test]
async fn close_then_call_reconnects() {
    let server = McpServer::connect("everything", everything())
        .await
        .unwrap();
    let echo = tool(&server, "echo").await;
    server.close().await;
    assert_eq!(
        run(&echo, json!({"message": "back"})).await.unwrap(),
        json!("Echo: back")
    );
    server.close().await;
}
