//! Exactly once across processes: many stores (pools) racing to resume one pending call.

use std::sync::Arc;

use askloop_core::RunStore;

use super::{TestSchema, one_suspended_run};
use askloop_core::testing::ScriptedModel;
use askloop_core::{Agent, AskUser, ResumeError, RunOutcome, RunStatus, ToolCallId};
use serde_json::json;

const SCRIPT: &str = r#"{"steps":[
  {"toolCalls":[{"id":"c1","name":"ask_user","args":{"question":"Which repo?","options":[{"label":"main"},{"label":"docs"}]}}]},
  {"text":"Summary of main."}]}"#;

pub(crate) fn agent(store: Arc<dyn RunStore>) -> Agent {
    Agent::builder("assistant")
        .model(ScriptedModel::from_json(SCRIPT).unwrap())
        .tool(AskUser::new())
        .shared_store(store)
        .build()
        .unwrap()
}

/// 20 stores (20 connection pools, as 20 processes would have) resume the same pending call
/// at once, 50 times over: exactly one wins each time, the others are refused and change
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_pools_racing_to_resume_one_call_have_exactly_one_winner_fifty_times() {
    let _alone = super::many_connections().await;
    const RACERS: usize = 20;
    const ROUNDS: usize = 50;
    let schema = TestSchema::create().await;
    let mut stores = Vec::with_capacity(RACERS);
    for _ in 0..RACERS {
        stores.push(schema.open().await);
    }
    let agents: Vec<Agent> = stores.iter().map(|store| agent(store.clone())).collect();
    let call = ToolCallId::new("c1");
    for round in 0..ROUNDS {
        let run_id = one_suspended_run(stores[round % RACERS].clone()).await;
        let barrier = Arc::new(tokio::sync::Barrier::new(RACERS));
        let tasks: Vec<_> = agents
            .iter()
            .cloned()
            .map(|agent| {
                let run_id = run_id.clone();
                let call = call.clone();
                let barrier = barrier.clone();
                tokio::spawn(async move {
                    barrier.wait().await;
                    match agent
                        .resume_stream(json!("main"), &run_id, Some(&call))
                        .await
                    {
                        Ok(stream) => Ok(stream.collect_output().await.unwrap()),
                        Err(error) => Err(error),
                    }
                })
            })
            .collect();
        let mut winners = 0;
        for task in tasks {
            match task.await.unwrap() {
                Ok(output) => {
                    winners += 1;
                    assert_eq!(output.text, "Summary of main.");
                    assert!(matches!(output.status, RunOutcome::Finished { .. }));
                }
                Err(
                    ResumeError::Conflict { .. }
                    | ResumeError::AlreadyAnswered { .. }
                    | ResumeError::InProgress { .. },
                ) => {}
                Err(other) => panic!("round {round}: unexpected refusal {other:?}"),
            }
        }
        assert_eq!(winners, 1, "round {round}");
        let stored = stores[0].load_run(&run_id).await.unwrap();
        assert_eq!(stored.state.status(), RunStatus::Completed);
    }
}

/// Two stores (pools) take turns driving one run: each load returns what the other appended.
#[tokio::test]
async fn two_pools_taking_turns_load_what_the_other_appended() {
    let schema = TestSchema::create().await;
    let first = schema.open().await;
    let second = schema.open().await;
    crate::durability::stores_taking_turns_load_what_the_other_appended(
        first.clone(),
        second.clone(),
    )
    .await;
    first.close().await;
    second.close().await;
}
