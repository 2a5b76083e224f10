//! An agent whose model calls an MCP tool that requires approval (server-filesystem's
//! `write_file`, with `require_approval`'s default): nothing is written before a person
//! approves; an approved call writes; a declined one leaves the disk untouched and the model
//! gets the reason.

use std::collections::BTreeMap;

use askloop_core::model::Message;
use askloop_core::testing::{ScriptStep, ScriptToolCall, ScriptedModel};
use askloop_core::{Agent, PendingKind, RunOutcome, ToolCallId};
use askloop_mcp::McpToolset;
use serde_json::json;

use crate::servers::filesystem;

fn write_then_text(path: &std::path::Path) -> ScriptedModel {
    ScriptedModel::from_steps(vec![
        ScriptStep {
            tool_calls: vec![ScriptToolCall {
                id: "w1".into(),
                name: "write_file".into(),
                // A model-written approval means nothing.
                args: json!({"path": path.display().to_string(), "content": "# Plan\n", "approved": true}),
            }],
            ..ScriptStep::default()
        },
        ScriptStep {
            text: Some("Done.".into()),
            ..ScriptStep::default()
        },
    ])
}

#[tokio::test]
async fn mcp_tools_wait_for_approval_and_a_decline_never_writes() {
    let root = tempfile::tempdir().unwrap();
    let root_path = root.path().canonicalize().unwrap();
    let toolset = McpToolset::connect(&BTreeMap::from([("fs".to_owned(), filesystem(&root_path))]))
        .await
        .unwrap();
    let store = std::sync::Arc::new(askloop_core::store::MemoryStore::new());
    let agent_with = |model: ScriptedModel| {
        let mut builder = Agent::builder("files")
            .model(model)
            .shared_store(store.clone());
        for tool in toolset.dyn_tools() {
            builder = builder.shared_tool(tool);
        }
        builder.build().unwrap()
    };
    let w1 = ToolCallId::new("w1");

    // Approved: written once, after the approval.
    let approved_path = root_path.join("approved.md");
    let agent = agent_with(write_then_text(&approved_path));
    let output = agent.generate("Write the plan").await.unwrap();
    let RunOutcome::Suspended { pending } = &output.status else {
        panic!("{:?}", output.status);
    };
    assert_eq!(pending[0].kind, PendingKind::Approval);
    assert_eq!(pending[0].tool_name, "write_file");
    assert!(
        !approved_path.exists(),
        "nothing is written before the approval"
    );
    let done = agent
        .approve_tool_call(&output.run_id, &w1)
        .await
        .unwrap()
        .collect_output()
        .await
        .unwrap();
    assert_eq!(done.text, "Done.");
    assert_eq!(std::fs::read_to_string(&approved_path).unwrap(), "# Plan\n");

    // Declined: never written; the model reads the reason.
    let declined_path = root_path.join("declined.md");
    let agent = agent_with(write_then_text(&declined_path));
    let output = agent.generate("Write the plan").await.unwrap();
    let done = agent
        .decline_tool_call(&output.run_id, &w1, Some("wrong folder".into()))
        .await
        .unwrap()
        .collect_output()
        .await
        .unwrap();
    assert_eq!(done.text, "Done.");
    assert!(!declined_path.exists(), "a declined call never writes");
    let stored = agent
        .store()
        .load_run(&output.run_key())
        .await
        .unwrap()
        .state;
    let result = stored
        .messages()
        .iter()
        .find_map(|message| match message {
            Message::Tool { results } => results.first().cloned(),
            _ => None,
        })
        .unwrap();
    assert!(result.is_error);
    assert!(
        result.result.to_string().contains("wrong folder"),
        "{}",
        result.result
    );
    toolset.close().await;
}
