//! An agent team: a supervisor delegates to a researcher, offered to it as a tool
//! (`AgentBuilder::subagent`). The researcher asks the user a question; the question waits at
//! the supervisor's run (the root), under the call id `SUPERVISOR_CALL~RESEARCHER_CALL`. The
//! program answers it through the root, from a second set of agents on the same SQLite file, as
//! another process would, and prints the supervisor's final text.
//!
//! Run with `cargo run -p askloop --example subagents`.

use std::sync::Arc;

use askloop::store::{SqliteStore, Synchronous};
use askloop::testing::ScriptedModel;
use askloop::{Agent, AskUser, RunOutcome, RunStore};

/// The supervisor delegates (call `d1`), then sums up the researcher's finding.
const SUPERVISOR: &str = r#"{"steps":[
  {"toolCalls":[{"id":"d1","name":"researcher","args":{"prompt":"Find the best season for the user's trip."}}]},
  {"text":"Plan: go in spring, as the researcher found."}]}"#;

/// The researcher asks the user (call `q1`), then reports.
const RESEARCHER: &str = r#"{"steps":[
  {"toolCalls":[{"id":"q1","name":"ask_user","args":{
    "question":"Where are you going?","options":[{"label":"Lisbon"},{"label":"Kyoto"}]}}]},
  {"text":"Kyoto is best in spring, for the cherry blossoms."}]}"#;

/// The team on `store`: the researcher first, then the supervisor that offers it as a tool. A
/// sub-agent shares its parent's store (the same `Arc`).
fn team(store: &Arc<dyn RunStore>) -> Result<Agent, Box<dyn std::error::Error>> {
    let researcher = Agent::builder("researcher")
        .description("Researches a question; may ask the user. Give it the whole task.")
        .instructions("Research what you are asked. Ask the user when you need to.")
        .model(ScriptedModel::from_json(RESEARCHER)?)
        .tool(AskUser::new())
        .shared_store(Arc::clone(store))
        .build()?;
    Ok(Agent::builder("supervisor")
        .instructions("Delegate research to the researcher, then plan.")
        .model(ScriptedModel::from_json(SUPERVISOR)?)
        .subagent(researcher)
        .shared_store(Arc::clone(store))
        .build()?)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("runs.db");
    let store: Arc<dyn RunStore> = Arc::new(SqliteStore::open(&path, Synchronous::Full).await?);
    let first = team(&store)?.generate("Plan my trip").await?;
    let RunOutcome::Suspended { pending } = &first.status else {
        return Err("the researcher did not ask".into());
    };
    // The researcher's question, waiting at the supervisor's run.
    let question = &pending[0];
    let asked_by = question
        .subagent
        .as_ref()
        .map(|origin| origin.path.iter().map(|id| id.as_str()).collect::<Vec<_>>())
        .unwrap_or_default();
    println!(
        "{} (asked by {}, call {})",
        question.suspend_payload["question"],
        asked_by.join(" › "),
        question.tool_call_id
    );
    store.close().await;

    // Later, in another process on the same file: answer the root with the composite id; the
    // researcher goes on, then the supervisor.
    let store: Arc<dyn RunStore> = Arc::new(SqliteStore::open(&path, Synchronous::Full).await?);
    let answer = askloop::serde_json::json!("Kyoto");
    let next = team(&store)?
        .resume_stream(answer, &first.run_id, Some(&question.tool_call_id))
        .await?;
    println!("{}", next.collect_output().await?.text);
    store.close().await;
    Ok(())
}
