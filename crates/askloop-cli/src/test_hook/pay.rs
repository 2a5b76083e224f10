//! `test_pay`, the typed suspending test tool `ASKLOOP_TEST_TOOLS=1` adds to every agent: a
//! payment confirmed by a form (its answer is an object of a number, a yes/no, a choice and an
//! optional text), so terminal tests can answer a custom tool's prompts.

use async_trait::async_trait;

/// `test_pay`'s arguments.
#[derive(serde::Deserialize, schemars::JsonSchema)]
pub(crate) struct PayArgs {
    /// Amount in cents.
    amount_cents: u64,
    /// Who is paid.
    to: String,
}

/// `test_pay`'s question.
#[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub(crate) struct PayQuestion {
    /// What is asked.
    question: String,
    /// The amount to confirm.
    amount_cents: u64,
}

/// `test_pay`'s answer. Fields in name order, so the prompts' order is the same whether
/// serde_json keeps the schema's order or sorts it.
#[derive(serde::Deserialize, schemars::JsonSchema)]
pub(crate) struct PayAnswer {
    /// The amount, typed again.
    amount_cents: u64,
    /// Whether to pay.
    confirmed: bool,
    /// A note for the payee.
    #[schemars(length(max = 20))]
    note: Option<String>,
    /// How fast.
    speed: Speed,
}

/// How fast a payment goes.
#[derive(serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
enum Speed {
    /// Within three days, free.
    Standard,
    /// Today, for a fee.
    Express,
}

/// A payment that a person confirms by typing the amount again.
pub(crate) struct TestPay;

#[async_trait]
impl askloop_core::SuspendingTool for TestPay {
    const NAME: &'static str = "test_pay";
    type Args = PayArgs;
    type Suspend = PayQuestion;
    type Resume = PayAnswer;
    type Output = serde_json::Value;
    type Error = std::convert::Infallible;

    fn description(&self) -> String {
        "Pays someone after a person confirms (test tool).".to_owned()
    }

    fn check_resume(&self, asked: &PayQuestion, answer: &PayAnswer) -> Result<(), String> {
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
        _context: &askloop_core::ToolContext,
    ) -> Result<askloop_core::Suspendable<serde_json::Value, PayQuestion>, Self::Error> {
        Ok(askloop_core::Suspendable::Suspend(PayQuestion {
            question: format!("Pay {} cents to {}?", args.amount_cents, args.to),
            amount_cents: args.amount_cents,
        }))
    }

    async fn resume(
        &self,
        args: PayArgs,
        answer: PayAnswer,
        _context: &askloop_core::ToolContext,
    ) -> Result<askloop_core::Suspendable<serde_json::Value, PayQuestion>, Self::Error> {
        let speed = match answer.speed {
            Speed::Standard => "standard",
            Speed::Express => "express",
        };
        Ok(askloop_core::Suspendable::Complete(serde_json::json!({
            "paid": if answer.confirmed { answer.amount_cents } else { 0 },
            "to": args.to,
            "speed": speed,
            "note": answer.note,
        })))
    }
}
