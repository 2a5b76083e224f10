//! Issue 4's end-to-end run on the local model (SmolLM2-135M, the tests' own, by path): the first step is forced to `ask_user`,
//! the run suspends with a schema-valid question, and the answer resumes it into a streamed reply.

use std::sync::Arc;

use askloop_core::model::{ModelSettings, ToolChoice};
use askloop_core::schema::SchemaValidator;
use askloop_core::store::MemoryStore;
use askloop_core::{Agent, AskUser, AskUserArgs, AskUserQuestion, Chunk, RunStore, SelectionMode};
use askloop_providers::{ModelSpec, ProviderOptions, build_model};
use futures::StreamExt;
use serde_json::{Value, json};

use crate::local::support::{ask_user_definition, model_path, one_at_a_time};

async fn agent(store: Arc<dyn RunStore>) -> Agent {
    let spec = ModelSpec::Local(Some(model_path()));
    let model = build_model(&spec, &ProviderOptions::from_env())
        .await
        .unwrap();
    Agent::builder("planner")
        .shared_model(model)
        .model_spec(spec.to_string())
        .tool(AskUser::new())
        .settings(
            ModelSettings::new()
                .with_seed(4)
                .with_first_step_tool_choice(ToolChoice::Tool("ask_user".into())),
        )
        .shared_store(store)
        .build()
        .unwrap()
}

#[tokio::test]
async fn issue_4_local_run_asks_a_question_then_streams_the_reply() {
    let _serial = one_at_a_time().await;
    model_path();
    let store: Arc<dyn RunStore> = Arc::new(MemoryStore::new());

    let first = agent(Arc::clone(&store)).await;
    let mut stream = first.stream("Help me plan a trip");
    let run_id = stream.run_id().clone();
    let mut suspended = None;
    while let Some(chunk) = stream.next().await {
        if let Chunk::ToolCallSuspended {
            call, suspension, ..
        } = chunk.unwrap()
        {
            suspended = Some((call, suspension));
        }
    }
    let (call, suspension) = suspended.expect("the run suspends on ask_user");
    assert_eq!(call.name, "ask_user");
    let args = call.args.to_value();
    let problems = SchemaValidator::new(&ask_user_definition().input_schema)
        .unwrap()
        .problems(&args);
    assert!(problems.is_empty(), "{args}: {problems:?}");
    let question =
        AskUserQuestion::from_args(serde_json::from_value::<AskUserArgs>(args).unwrap()).unwrap();
    assert!(!question.question.trim().is_empty());
    assert_eq!(suspension.payload["question"], json!(question.question));

    // The answer comes later, to a fresh agent on the same store (as another process would).
    let answer: Value = match (question.selection_mode, &question.options) {
        (Some(SelectionMode::MultiSelect), Some(options)) => json!([options[0].label]),
        (Some(SelectionMode::SingleSelect), Some(options)) => json!(options[0].label),
        _ => json!("Lisbon, for a week in May"),
    };
    let second = agent(store).await;
    let mut resumed = second.resume_stream(answer, &run_id, None).await.unwrap();
    let mut deltas = 0;
    let mut text = String::new();
    let mut finished = false;
    while let Some(chunk) = resumed.next().await {
        match chunk.unwrap() {
            Chunk::TextDelta { text: piece } => {
                deltas += 1;
                text.push_str(&piece);
            }
            Chunk::Finish { .. } => finished = true,
            _ => {}
        }
    }
    assert!(finished);
    assert!(deltas > 3, "the reply came in {deltas} pieces: {text:?}");
    assert!(!text.trim().is_empty());
}
