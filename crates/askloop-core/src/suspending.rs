//! Typed suspending tools: [`SuspendingTool`] has typed arguments, a typed question
//! ([`SuspendingTool::Suspend`]) and a typed answer ([`SuspendingTool::Resume`]); the wrapper
//! [`Suspending`] makes one a [`Tool`] (and so a [`crate::DynTool`]) for an agent.
//!
//! What the wrapper guarantees:
//! - the suspend payload is the `Suspend` value serialized, and `suspend_schema` is its
//!   schemars schema;
//! - every suspension carries the resume schema derived from `Resume` (so front ends render it
//!   as a form, see [`crate::form`]);
//! - an answer is checked against that schema, then deserialized into `Resume`, then given to
//!   [`SuspendingTool::check_resume`] — all before the claim, so a bad answer is
//!   [`crate::ResumeError::InvalidAnswer`] and changes nothing;
//! - [`SuspendingTool::resume`] receives the typed `Resume`, never JSON.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::schema::schema_of;
use crate::tool::{
    Execution, ResumeRejection, Suspension, Tool, ToolContext, validate_against_schema,
};

/// What a typed suspending tool's call gives: an output, or a question to suspend with.
#[derive(Clone, Debug, PartialEq)]
pub enum Suspendable<O, S> {
    /// The call finished with this output.
    Complete(O),
    /// The call waits for an answer: the run suspends with this payload.
    Suspend(S),
}

/// A tool that suspends to ask someone, typed end to end. Register it with
/// `.tool(Suspending(my_tool))`.
///
/// # Contract
/// - [`SuspendingTool::execute`] runs once per tool call; returning [`Suspendable::Suspend`]
///   suspends the run (inside a run only: check [`ToolContext::can_suspend`] and complete on
///   your own outside one).
/// - [`SuspendingTool::resume`] runs once per accepted answer, with the call's arguments and
///   the typed answer; it may complete or suspend again.
/// - An `Err` becomes an error tool result the model sees; the run goes on.
#[async_trait]
pub trait SuspendingTool: Send + Sync + 'static {
    /// The tool's name, as the model calls it.
    const NAME: &'static str;
    /// The arguments, deserialized from the model's JSON. Its schemars schema is the input schema.
    type Args: DeserializeOwned + JsonSchema + Send;
    /// The question: serialized as the suspend payload, read back to check answers. Its schemars
    /// schema is the suspend schema.
    type Suspend: Serialize + DeserializeOwned + JsonSchema + Send;
    /// The answer. Its schemars schema is every suspension's resume schema.
    type Resume: DeserializeOwned + JsonSchema + Send;
    /// The output, serialized to JSON for the model.
    type Output: Serialize + Send;
    /// The tool's own error.
    type Error: std::error::Error + Send + Sync + 'static;

    /// What the tool does, for the model.
    fn description(&self) -> String;

    /// See [`Tool::idempotent`]. Default `false`.
    fn idempotent(&self) -> bool {
        false
    }

    /// See [`Tool::asks_user`]. Default `false`.
    fn asks_user(&self) -> bool {
        false
    }

    /// Checks a well-formed answer against the question it answers, before anything changes
    /// (e.g. that a confirmed amount is the amount asked). Default: every answer matching the
    /// schema is accepted.
    ///
    /// # Errors
    /// The problem, in words; the resume is refused with
    /// [`crate::ResumeError::InvalidAnswer`].
    fn check_resume(&self, suspended: &Self::Suspend, answer: &Self::Resume) -> Result<(), String> {
        let _ = (suspended, answer);
        Ok(())
    }

    /// Runs a new call: completes, or asks.
    ///
    /// # Errors
    /// The tool's own error, shown to the model as an error result.
    async fn execute(
        &self,
        args: Self::Args,
        context: &ToolContext,
    ) -> Result<Suspendable<Self::Output, Self::Suspend>, Self::Error>;

    /// Goes on with an accepted answer: completes, or asks again.
    ///
    /// # Errors
    /// The tool's own error, shown to the model as an error result.
    async fn resume(
        &self,
        args: Self::Args,
        answer: Self::Resume,
        context: &ToolContext,
    ) -> Result<Suspendable<Self::Output, Self::Suspend>, Self::Error>;
}

/// A [`SuspendingTool`] as a [`Tool`]: `agent_builder.tool(Suspending(PayTool))`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Suspending<T>(pub T);

/// Why a [`Suspending`] tool's call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SuspendingError<E: std::error::Error + 'static> {
    /// The tool's own error.
    #[error(transparent)]
    Tool(E),
    /// The answer does not deserialize into `Resume` (only when it bypassed the resume check,
    /// e.g. a run stored by another version of the tool).
    #[error("the answer does not match the tool's answer type")]
    Answer(#[source] serde_json::Error),
    /// The question could not be serialized to JSON.
    #[error("the tool's question is not JSON")]
    Question(#[source] serde_json::Error),
}

#[async_trait]
impl<T: SuspendingTool> Tool for Suspending<T> {
    const NAME: &'static str = T::NAME;
    type Args = T::Args;
    type Output = T::Output;
    type Error = SuspendingError<T::Error>;

    fn description(&self) -> String {
        self.0.description()
    }

    fn suspend_schema(&self) -> Option<Value> {
        Some(schema_of::<T::Suspend>())
    }

    fn resume_schema(&self) -> Option<Value> {
        Some(schema_of::<T::Resume>())
    }

    fn idempotent(&self) -> bool {
        self.0.idempotent()
    }

    fn asks_user(&self) -> bool {
        self.0.asks_user()
    }

    /// The answer must match the suspension's resume schema (the one derived from `Resume`),
    /// deserialize into `Resume`, and pass [`SuspendingTool::check_resume`] against the stored
    /// question.
    fn validate_resume(
        &self,
        suspension: &Suspension,
        resume_data: &Value,
    ) -> Result<(), ResumeRejection> {
        let schema = suspension
            .resume_schema
            .clone()
            .unwrap_or_else(schema_of::<T::Resume>);
        // Short, unlike the whole schema: the schema is in the suspension for those who need it.
        let expected = || {
            format!(
                "an answer of {}'s type {}",
                T::NAME,
                <T::Resume as JsonSchema>::schema_name()
            )
        };
        validate_against_schema(Some(&schema), resume_data).map_err(|rejection| {
            ResumeRejection {
                expected: expected(),
                problems: rejection.problems,
            }
        })?;
        let answer = serde_json::from_value::<T::Resume>(resume_data.clone()).map_err(|error| {
            ResumeRejection {
                expected: expected(),
                problems: vec![error.to_string()],
            }
        })?;
        let suspended =
            serde_json::from_value::<T::Suspend>(suspension.payload.clone()).map_err(|error| {
                ResumeRejection {
                    expected: format!("an answer to a stored {} question", T::NAME),
                    problems: vec![format!("the stored question is unreadable: {error}")],
                }
            })?;
        self.0
            .check_resume(&suspended, &answer)
            .map_err(|problem| ResumeRejection {
                expected: expected(),
                problems: vec![problem],
            })
    }

    async fn execute(
        &self,
        args: T::Args,
        context: &ToolContext,
    ) -> Result<Execution<T::Output>, Self::Error> {
        let step = match context.resume_data() {
            Some(data) => {
                let answer = serde_json::from_value::<T::Resume>(data.clone())
                    .map_err(SuspendingError::Answer)?;
                self.0.resume(args, answer, context).await
            }
            None => self.0.execute(args, context).await,
        }
        .map_err(SuspendingError::Tool)?;
        match step {
            Suspendable::Complete(output) => Ok(Execution::Complete(output)),
            Suspendable::Suspend(question) => Ok(Execution::Suspend(Suspension {
                payload: serde_json::to_value(question).map_err(SuspendingError::Question)?,
                resume_schema: Some(schema_of::<T::Resume>()),
                expires_at_ms: None,
            })),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use futures::StreamExt;
    use serde::{Deserialize, Serialize};
    use serde_json::json;

    use super::*;
    use crate::testing::ScriptedModel;
    use crate::{Agent, Chunk, ResumeError};

    #[derive(Deserialize, JsonSchema)]
    struct PayArgs {
        amount_cents: u64,
    }

    #[derive(Serialize, Deserialize, JsonSchema)]
    struct Confirm {
        amount_cents: u64,
    }

    #[derive(Debug, Deserialize, JsonSchema)]
    struct Answer {
        confirmed: bool,
        amount_cents: u64,
    }

    /// Records every typed answer it receives.
    struct Pay {
        answers: Arc<std::sync::Mutex<Vec<(bool, u64)>>>,
        runs: Arc<AtomicUsize>,
    }

    #[async_trait]
    impl SuspendingTool for Pay {
        const NAME: &'static str = "pay";
        type Args = PayArgs;
        type Suspend = Confirm;
        type Resume = Answer;
        type Output = Value;
        type Error = std::convert::Infallible;

        fn description(&self) -> String {
            "Pays.".into()
        }

        fn check_resume(&self, suspended: &Confirm, answer: &Answer) -> Result<(), String> {
            if answer.amount_cents == suspended.amount_cents {
                Ok(())
            } else {
                Err(format!(
                    "the amount confirmed ({}) is not the amount asked ({})",
                    answer.amount_cents, suspended.amount_cents
                ))
            }
        }

        async fn execute(
            &self,
            args: PayArgs,
            _context: &ToolContext,
        ) -> Result<Suspendable<Value, Confirm>, Self::Error> {
            self.runs.fetch_add(1, Ordering::SeqCst);
            Ok(Suspendable::Suspend(Confirm {
                amount_cents: args.amount_cents,
            }))
        }

        async fn resume(
            &self,
            _args: PayArgs,
            answer: Answer,
            _context: &ToolContext,
        ) -> Result<Suspendable<Value, Confirm>, Self::Error> {
            self.runs.fetch_add(1, Ordering::SeqCst);
            if let Ok(mut answers) = self.answers.lock() {
                answers.push((answer.confirmed, answer.amount_cents));
            }
            Ok(Suspendable::Complete(json!({"paid": answer.confirmed})))
        }
    }

    #[tokio::test]
    async fn answers_are_checked_against_the_derived_schema_and_reach_the_tool_typed() {
        let answers = Arc::new(std::sync::Mutex::new(Vec::new()));
        let runs = Arc::new(AtomicUsize::new(0));
        let model = ScriptedModel::from_json(
            r#"{"steps":[{"toolCalls":[{"id":"p1","name":"pay","args":{"amount_cents":500}}]},
                {"text":"Paid."}]}"#,
        )
        .unwrap();
        let agent = Agent::builder("payments")
            .model(model)
            .tool(Suspending(Pay {
                answers: answers.clone(),
                runs: runs.clone(),
            }))
            .build()
            .unwrap();
        let mut stream = agent.stream("Pay five dollars");
        let run_id = stream.run_id().clone();
        let mut suspended = None;
        while let Some(chunk) = stream.next().await {
            if let Chunk::ToolCallSuspended { suspension, .. } = chunk.unwrap() {
                suspended = Some(suspension);
            }
        }
        let suspension = suspended.unwrap();
        assert_eq!(suspension.payload, json!({"amount_cents": 500}));
        let schema = suspension.resume_schema.unwrap();
        assert_eq!(schema["required"], json!(["confirmed", "amount_cents"]));
        assert_eq!(schema["properties"]["confirmed"]["type"], "boolean");
        assert_eq!(runs.load(Ordering::SeqCst), 1);

        // Wrong shapes and a wrong amount are refused before the tool runs.
        for (bad, says) in [
            (json!({"confirmed": "yes", "amount_cents": 500}), "boolean"),
            (json!({"confirmed": true}), "amount_cents"),
            (json!({"confirmed": true, "amount_cents": -5}), "-5"),
            (
                json!({"confirmed": true, "amount_cents": 50}),
                "not the amount asked (500)",
            ),
        ] {
            let Err(error) = agent.resume_stream(bad.clone(), &run_id, None).await else {
                panic!("{bad} was accepted")
            };
            let ResumeError::InvalidAnswer { rejection, .. } = &error else {
                panic!("{error:?}")
            };
            assert!(
                rejection.problems.iter().any(|p| p.contains(says)),
                "{bad}: {rejection}"
            );
            assert_eq!(rejection.expected, "an answer of pay's type Answer");
        }
        assert_eq!(runs.load(Ordering::SeqCst), 1, "the tool never ran");
        assert!(answers.lock().unwrap().is_empty());

        let resumed = agent
            .resume_stream(
                json!({"confirmed": true, "amount_cents": 500}),
                &run_id,
                None,
            )
            .await
            .unwrap();
        assert_eq!(resumed.collect_output().await.unwrap().text, "Paid.");
        assert_eq!(*answers.lock().unwrap(), [(true, 500)]);
    }

    #[test]
    fn the_schemas_come_from_the_types() {
        let tool = Suspending(Pay {
            answers: Arc::default(),
            runs: Arc::default(),
        });
        assert_eq!(
            Tool::suspend_schema(&tool).unwrap()["properties"]["amount_cents"]["type"],
            "integer"
        );
        assert_eq!(
            Tool::resume_schema(&tool).unwrap()["properties"]["confirmed"]["type"],
            "boolean"
        );
        assert_eq!(crate::DynTool::name(&tool), "pay");
    }
}
