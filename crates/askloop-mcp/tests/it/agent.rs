//! An agent whose model calls an MCP tool: the scripted model writes a file through
//! server-filesystem's `write_file`.

use std::collections::BTreeMap;

use askloop_core::testing::{ScriptStep, ScriptToolCall, ScriptedModel};
use askloop_core::{Agent, RunOutcome};
use askloop_mcp::McpToolset;
use serde_json::json;

use crate::servers::filesystem;

#[tokio::test]
async fn the_model_writes_a_file_through_the_mcp_tool() {
    let root = tempfile::tempdir().unwrap();
    let root_path = root.path().canonicalize().unwrap();
    let path = root_path.join("plan.md");
    let toolset = McpToolset::connect(&BTreeMap::from([("fs".to_owned(), filesystem(&root_path))]))
        .await
        .unwrap();
    let model = ScriptedModel::from_steps(vec![
        ScriptStep {
            tool_calls: vec![ScriptToolCall {
                id: "w1".into(),
                name: "write_file".into(),
                args: json!({"path": path.display().to_string(), "content": "# Plan\n"}),
            }],
            ..ScriptStep::default()
        },
        ScriptStep {
            text: Some("Written.".into()),
            ..ScriptStep::default()
        },
    ]);
    let mut builder = Agent::builder("files").model(model);
    for tool in toolset.dyn_tools() {
        builder = builder.shared_tool(tool);
    }
    let agent = builder.build().unwrap();
    let output = agent.generate("Write the plan").await.unwrap();
    assert!(
        matches!(output.status, RunOutcome::Finished { .. }),
        "{:?}",
        output.status
    );
    assert_eq!(output.text, "Written.");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "# Plan\n");
    toolset.close().await;
}
