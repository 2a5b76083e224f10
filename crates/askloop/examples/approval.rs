//! A custom suspending tool: `transfer` asks for approval before it moves money, and the run is
//! resumed from a second agent value on the same SQLite file, as another process would.
//!
//! Run with `cargo run -p askloop --example approval`.

use std::convert::Infallible;

use askloop::serde_json::{Value, json};
use askloop::store::{SqliteStore, Synchronous};
use askloop::testing::ScriptedModel;
use askloop::{Agent, Execution, RunOutcome, Tool, ToolContext};

/// Arguments of `transfer`. Everything a tool needs comes from `askloop` itself.
#[derive(askloop::serde::Deserialize, askloop::schemars::JsonSchema)]
#[serde(crate = "askloop::serde")]
#[schemars(crate = "askloop::schemars")]
struct TransferArgs {
    /// Amount in cents.
    amount_cents: u64,
    /// Recipient's account.
    to: String,
}

/// Moves money, after a person approves.
struct Transfer;

#[askloop::async_trait]
impl Tool for Transfer {
    const NAME: &'static str = "transfer";
    type Args = TransferArgs;
    type Output = Value;
    type Error = Infallible;

    fn description(&self) -> String {
        "Transfers money; needs approval.".into()
    }

    fn resume_schema(&self) -> Option<Value> {
        Some(
            json!({"type": "object", "properties": {"approved": {"type": "boolean"}}, "required": ["approved"]}),
        )
    }

    async fn execute(
        &self,
        args: TransferArgs,
        context: &ToolContext,
    ) -> Result<Execution<Value>, Infallible> {
        match context.resume_data() {
            None => Ok(context.suspend(
                json!({"approve": format!("send {} cents to {}?", args.amount_cents, args.to)}),
            )),
            Some(answer) if answer["approved"] == true => {
                Ok(Execution::Complete(json!({"sent": args.amount_cents})))
            }
            Some(_) => Ok(Execution::Complete(
                json!({"sent": 0, "reason": "declined"}),
            )),
        }
    }
}

const SCRIPT: &str = r#"{"steps":[
  {"toolCalls":[{"id":"t1","name":"transfer","args":{"amount_cents":500,"to":"ACME"}}]},
  {"text":"Sent."}]}"#;

async fn agent(path: &std::path::Path) -> Result<Agent, Box<dyn std::error::Error>> {
    Ok(Agent::builder("payments")
        .model(ScriptedModel::from_json(SCRIPT)?)
        .tool(Transfer)
        .store(SqliteStore::open(path, Synchronous::Full).await?)
        .build()?)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("runs.db");
    let first = agent(&path)
        .await?
        .generate("Pay ACME five dollars")
        .await?;
    let RunOutcome::Suspended { pending } = &first.status else {
        return Err("the transfer did not ask for approval".into());
    };
    println!("waiting: {}", pending[0].suspend_payload["approve"]);
    // Name the call you answer: a retried answer is then refused instead of landing elsewhere.
    let call = pending[0].tool_call_id.clone();
    let resumed = agent(&path)
        .await?
        .resume_stream(json!({"approved": true}), &first.run_id, Some(&call))
        .await?;
    println!("{}", resumed.collect_output().await?.text);
    Ok(())
}
