//! Constrained decoding and sampling on the real model: every tool call is valid, tool choice is
//! obeyed, budgets end cleanly, and a seed repeats.

use askloop_core::model::{
    AssistantPart, FinishReason, LanguageModel, Message, ModelError, ModelEvent, ModelRequest,
    ModelSettings, ToolArgs, ToolCall, ToolChoice, ToolDefinition, ToolResult,
};
use askloop_core::schema::SchemaValidator;
use askloop_providers::local::{LocalModel, LocalModelError};
use serde_json::json;

use crate::local::support::{ask_user_definition, collect, model, one_at_a_time, qwen, text_of};

const PROMPTS: [&str; 20] = [
    "Help me plan a trip",
    "I want to cook dinner tonight",
    "Recommend a book for me",
    "Help me choose a laptop",
    "I need a birthday gift for my sister",
    "Plan a workout routine for me",
    "What should I name my new puppy?",
    "Help me write an email to my landlord",
    "I want to learn a new language",
    "Suggest a movie for tonight",
    "Help me organise my week",
    "I'm thinking about moving to a new city",
    "Help me pick a colour for my bedroom",
    "I want to start a vegetable garden",
    "Help me prepare for a job interview",
    "Which programming language should I learn first?",
    "Plan a weekend in Paris",
    "I want to save money this year",
    "Book a table for a dinner date",
    "Find me a flight to Tokyo",
];

/// A second tool with numbers, an enum, a nested array and optional fields.
fn book_table_definition() -> ToolDefinition {
    ToolDefinition {
        name: "book_table".into(),
        description: "Book a restaurant table.".into(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "restaurant": {"type": "string", "minLength": 1},
                "guests": {"type": "integer", "minimum": 1, "maximum": 12},
                "time": {"type": "string", "enum": ["lunch", "dinner"]},
                "requests": {"type": "array", "items": {"type": "string"}},
                "outdoor": {"type": "boolean"}
            },
            "required": ["restaurant", "guests", "time"]
        }),
    }
}

fn request(prompt: &str, tools: Vec<ToolDefinition>, settings: ModelSettings) -> ModelRequest {
    ModelRequest::new(vec![Message::user(prompt)])
        .with_tools(tools)
        .with_settings(settings)
}

fn calls(events: &[ModelEvent]) -> Vec<ToolCall> {
    events
        .iter()
        .filter_map(|event| match event {
            ModelEvent::ToolCall(call) => Some(call.clone()),
            _ => None,
        })
        .collect()
}

fn finish(events: &[ModelEvent]) -> (FinishReason, u64) {
    match events.last() {
        Some(ModelEvent::Finish { reason, usage }) => (*reason, usage.output_tokens),
        other => panic!("the last event is not a finish: {other:?}"),
    }
}

fn local_error(error: &ModelError) -> &LocalModelError {
    let ModelError::Request {
        source: Some(source),
        ..
    } = error
    else {
        panic!("expected a request error with a source, got {error:?}");
    };
    source
        .downcast_ref::<LocalModelError>()
        .unwrap_or_else(|| panic!("the source is not a LocalModelError: {source:?}"))
}

#[tokio::test]
async fn issue_4_twenty_seeded_prompts_give_schema_valid_tool_calls() {
    let _serial = one_at_a_time().await;
    let model = model();
    let tools = vec![ask_user_definition(), book_table_definition()];
    let validators: Vec<(String, SchemaValidator)> = tools
        .iter()
        .map(|tool| {
            (
                tool.name.clone(),
                SchemaValidator::new(&tool.input_schema).unwrap(),
            )
        })
        .collect();
    for (seed, prompt) in PROMPTS.iter().enumerate() {
        let settings = ModelSettings::new()
            .with_seed(seed as u64)
            .with_tool_choice(ToolChoice::Required);
        let events = collect(&model, request(prompt, tools.clone(), settings))
            .await
            .unwrap_or_else(|error| panic!("prompt {seed} {prompt:?}: {error}"));
        let calls = calls(&events);
        assert_eq!(calls.len(), 1, "prompt {seed} {prompt:?}: {events:?}");
        let call = &calls[0];
        let Some((_, validator)) = validators.iter().find(|(name, _)| *name == call.name) else {
            panic!("prompt {seed}: unknown tool {:?}", call.name);
        };
        let askloop_core::model::ToolArgs::Json(args) = &call.args else {
            panic!("prompt {seed}: arguments are not JSON: {:?}", call.args);
        };
        let problems = validator.problems(args);
        assert!(
            problems.is_empty(),
            "prompt {seed} {prompt:?}: {args} breaks the schema of {}: {problems:?}",
            call.name
        );
        assert_eq!(finish(&events).0, FinishReason::ToolCalls);
        assert!(
            text_of(&events).is_empty(),
            "prompt {seed}: text beside the call"
        );
    }
}

#[tokio::test]
async fn a_named_tool_choice_calls_that_tool() {
    let _serial = one_at_a_time().await;
    let model = model();
    let settings = ModelSettings::new()
        .with_seed(7)
        .with_tool_choice(ToolChoice::Tool("book_table".into()));
    let tools = vec![ask_user_definition(), book_table_definition()];
    let events = collect(&model, request("Help me plan a trip", tools, settings))
        .await
        .unwrap();
    let calls = calls(&events);
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].name, "book_table");
}

#[tokio::test]
async fn left_to_choose_the_model_answers_in_text() {
    let _serial = one_at_a_time().await;
    let model = model();
    let settings = ModelSettings::new().with_seed(1).with_max_tokens(48);
    let events = collect(
        &model,
        request("Help me plan a trip", vec![ask_user_definition()], settings),
    )
    .await
    .unwrap();
    assert!(calls(&events).is_empty(), "{events:?}");
    assert!(!text_of(&events).trim().is_empty());
}

#[tokio::test]
async fn a_seed_gives_the_same_streamed_text() {
    let _serial = one_at_a_time().await;
    let model = model();
    let settings = ModelSettings::new()
        .with_seed(42)
        .with_temperature(0.8)
        .with_max_tokens(40)
        .with_tool_choice(ToolChoice::None);
    let ask = || {
        request(
            "Tell me about Lisbon",
            vec![ask_user_definition()],
            settings.clone(),
        )
    };
    let first = collect(&model, ask()).await.unwrap();
    let second = collect(&model, ask()).await.unwrap();
    assert_eq!(text_of(&first), text_of(&second));
    let deltas = first
        .iter()
        .filter(|event| matches!(event, ModelEvent::TextDelta(_)))
        .count();
    assert!(deltas > 5, "the text came in {deltas} pieces");
    let other = ModelSettings::new().with_seed(43);
    let different = collect(
        &model,
        request("Tell me about Lisbon", vec![ask_user_definition()], other),
    )
    .await
    .unwrap();
    assert_ne!(text_of(&first), text_of(&different));
}

#[tokio::test]
async fn text_stops_at_max_tokens_with_length() {
    let _serial = one_at_a_time().await;
    let model = model();
    let settings = ModelSettings::new().with_seed(3).with_max_tokens(5);
    let events = collect(
        &model,
        request("Write a long poem about the sea", vec![], settings),
    )
    .await
    .unwrap();
    assert_eq!(finish(&events), (FinishReason::Length, 5));
}

#[tokio::test]
async fn a_budget_that_ends_inside_a_tool_call_is_an_error() {
    let _serial = one_at_a_time().await;
    let model = model();
    let settings = ModelSettings::new()
        .with_seed(3)
        .with_max_tokens(12)
        .with_tool_choice(ToolChoice::Tool("ask_user".into()));
    let error = collect(
        &model,
        request("Help me plan a trip", vec![ask_user_definition()], settings),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(
            local_error(&error),
            LocalModelError::ToolCallCutOff { max_tokens: 12 }
        ),
        "{error}"
    );
}

#[tokio::test]
async fn a_tool_choice_the_tools_cannot_satisfy_is_an_error() {
    let model = model();
    let named = ModelSettings::new().with_tool_choice(ToolChoice::Tool("missing".into()));
    let Err(error) = model
        .stream(request("Hi", vec![ask_user_definition()], named))
        .await
    else {
        panic!("a missing tool was accepted");
    };
    assert!(
        matches!(local_error(&error), LocalModelError::UnknownTool { tool } if tool == "missing"),
        "{error}"
    );
    let required = ModelSettings::new().with_tool_choice(ToolChoice::Required);
    let Err(error) = model.stream(request("Hi", vec![], required)).await else {
        panic!("required without tools was accepted");
    };
    assert!(
        matches!(local_error(&error), LocalModelError::NoTools),
        "{error}"
    );
}

/// A trip conversation in which the model asked twice and was answered twice: the history of a
/// built-in agent whose question budget is spent.
fn after_two_questions() -> Vec<Message> {
    let asked = |id: &str, question: &str, labels: &[&str]| {
        let options: Vec<_> = labels.iter().map(|label| json!({"label": label})).collect();
        ToolCall {
            id: id.into(),
            name: "ask_user".into(),
            args: ToolArgs::Json(
                json!({"question": question, "options": options, "selectionMode": "single_select"}),
            ),
        }
    };
    let where_to = asked(
        "c1",
        "Where do you want to go?",
        &["Beach", "Mountains", "City"],
    );
    let budget = asked("c2", "What is your budget?", &["$100", "$500", "$1000"]);
    vec![
        Message::user("Help me plan a trip"),
        Message::Assistant {
            parts: vec![AssistantPart::ToolCall(where_to.clone())],
        },
        Message::Tool {
            results: vec![ToolResult::text(&where_to, "Beach")],
        },
        Message::Assistant {
            parts: vec![AssistantPart::ToolCall(budget.clone())],
        },
        Message::Tool {
            results: vec![ToolResult::text(&budget, "$100")],
        },
    ]
}

/// Issue 33: once no tool is offered (the question budget spent), the model's reply is text,
/// never its next `ask_user` call written out as the answer (bare JSON, a `<tool_call>` tag, or
/// one in a code fence), whatever the seed.
async fn never_a_tool_call_in_disguise(model: &LocalModel) {
    for seed in 1..=3 {
        let settings = ModelSettings::new().with_seed(seed).with_max_tokens(40);
        let request = ModelRequest::new(after_two_questions()).with_settings(settings);
        let events = collect(model, request).await.unwrap();
        let text = text_of(&events);
        assert!(calls(&events).is_empty(), "seed {seed}: {events:?}");
        let opening = text
            .trim_start_matches("```")
            .trim_start_matches(|c: char| c.is_alphanumeric());
        assert!(
            !text.starts_with(['{', '<'])
                && !text.starts_with(char::is_whitespace)
                && !opening.trim_start().starts_with(['{', '<'])
                && !text.contains("\"arguments\""),
            "seed {seed}: {text:?}"
        );
    }
}

/// [`never_a_tool_call_in_disguise`] for the Qwen family (Qwen's template; calls may be bare
/// JSON): the default model.
#[tokio::test]
async fn issue33_without_tools_the_reply_is_never_a_tool_call_in_disguise() {
    let _serial = one_at_a_time().await;
    never_a_tool_call_in_disguise(&qwen()).await;
}

/// [`never_a_tool_call_in_disguise`] for the SmolLM2 family (`llama` architecture, ChatML with
/// askloop's own tool list; calls only in `<tool_call>` tags): the small test model.
#[tokio::test]
async fn issue33_smollm2_without_tools_the_reply_is_never_a_tool_call_in_disguise() {
    let _serial = one_at_a_time().await;
    never_a_tool_call_in_disguise(&model()).await;
}
