//! A typed suspending tool: `pay` asks a person to confirm the amount by typing it again. The
//! question, the answer and their schemas are Rust types; an answer that does not match the
//! answer type, or confirms another amount, is refused before the tool sees it, and the tool
//! receives a typed `Confirmation`, not JSON. The run is stored in SQLite and resumed from a
//! second agent value, as another process would.
//!
//! Run with `cargo run -p askloop --example payment`.

use std::convert::Infallible;

use askloop::serde_json::json;
use askloop::store::{SqliteStore, Synchronous};
use askloop::testing::ScriptedModel;
use askloop::{
    Agent, ResumeError, RunOutcome, Suspendable, Suspending, SuspendingTool, ToolContext,
};

/// The model's arguments.
#[derive(askloop::serde::Deserialize, askloop::schemars::JsonSchema)]
#[serde(crate = "askloop::serde")]
#[schemars(crate = "askloop::schemars")]
struct PayArgs {
    /// Amount in cents.
    amount_cents: u64,
    /// Who is paid.
    to: String,
}

/// The question: the suspend payload.
#[derive(askloop::serde::Serialize, askloop::serde::Deserialize, askloop::schemars::JsonSchema)]
#[serde(crate = "askloop::serde")]
#[schemars(crate = "askloop::schemars")]
struct ConfirmPayment {
    /// What is asked, for people.
    question: String,
    /// The amount to confirm, in cents.
    amount_cents: u64,
}

/// The answer: its schema is every suspension's resume schema, so a front end asks for a
/// yes/no and a whole number (the `askloop` CLI does).
#[derive(askloop::serde::Deserialize, askloop::schemars::JsonSchema)]
#[serde(crate = "askloop::serde")]
#[schemars(crate = "askloop::schemars")]
struct Confirmation {
    /// Whether to pay.
    confirmed: bool,
    /// The amount, typed again, in cents.
    amount_cents: u64,
}

/// Pays after a person confirms the amount.
struct Pay;

#[askloop::async_trait]
impl SuspendingTool for Pay {
    const NAME: &'static str = "pay";
    type Args = PayArgs;
    type Suspend = ConfirmPayment;
    type Resume = Confirmation;
    type Output = askloop::serde_json::Value;
    type Error = Infallible;

    fn description(&self) -> String {
        "Pays someone; a person confirms the amount first.".into()
    }

    fn check_resume(&self, asked: &ConfirmPayment, answer: &Confirmation) -> Result<(), String> {
        if answer.amount_cents == asked.amount_cents {
            Ok(())
        } else {
            Err(format!(
                "the amount typed ({}) is not the amount to pay ({})",
                answer.amount_cents, asked.amount_cents
            ))
        }
    }

    async fn execute(
        &self,
        args: PayArgs,
        _context: &ToolContext,
    ) -> Result<Suspendable<Self::Output, ConfirmPayment>, Infallible> {
        Ok(Suspendable::Suspend(ConfirmPayment {
            question: format!("Pay {} cents to {}?", args.amount_cents, args.to),
            amount_cents: args.amount_cents,
        }))
    }

    async fn resume(
        &self,
        args: PayArgs,
        answer: Confirmation,
        _context: &ToolContext,
    ) -> Result<Suspendable<Self::Output, ConfirmPayment>, Infallible> {
        Ok(Suspendable::Complete(if answer.confirmed {
            json!({"paid": answer.amount_cents, "to": args.to})
        } else {
            json!({"paid": 0, "reason": "not confirmed"})
        }))
    }
}

const SCRIPT: &str = r#"{"steps":[
  {"toolCalls":[{"id":"p1","name":"pay","args":{"amount_cents":500,"to":"ACME"}}]},
  {"text":"Paid."}]}"#;

async fn agent(path: &std::path::Path) -> Result<Agent, Box<dyn std::error::Error>> {
    Ok(Agent::builder("payments")
        .model(ScriptedModel::from_json(SCRIPT)?)
        .tool(Suspending(Pay))
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
        return Err("the payment did not ask for confirmation".into());
    };
    let call = pending[0].tool_call_id.clone();
    println!("waiting: {}", pending[0].suspend_payload["question"]);
    println!(
        "answer schema: {}",
        pending[0]
            .resume_schema
            .as_ref()
            .ok_or("no resume schema")?
    );

    let later = agent(&path).await?;
    // Another amount is refused before the tool runs, and nothing changes.
    let wrong = json!({"confirmed": true, "amount_cents": 5000});
    match later.resume_stream(wrong, &first.run_id, Some(&call)).await {
        Err(ResumeError::InvalidAnswer { rejection, .. }) => println!("refused: {rejection}"),
        Err(error) => return Err(error.into()),
        Ok(_) => return Err("a wrong amount was accepted".into()),
    }
    let right = json!({"confirmed": true, "amount_cents": 500});
    let resumed = later
        .resume_stream(right, &first.run_id, Some(&call))
        .await?;
    println!("{}", resumed.collect_output().await?.text);
    Ok(())
}
