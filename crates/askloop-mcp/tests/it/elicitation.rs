//! MCP elicitation (issue 31): a server's question during a tool call suspends the run with
//! the question, the person's accept, decline or cancel goes back to the server, the run
//! resumes with a fresh toolset, and nothing is ever answered in the person's name.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use askloop_core::model::{Message, ToolResult};
use askloop_core::store::MemoryStore;
use askloop_core::testing::{ScriptStep, ScriptToolCall, ScriptedModel};
use askloop_core::{
    Agent, DynTool, PendingToolCall, ResumeError, RunId, RunKey, RunOutcome, RunOutput, ToolCallId,
};
use askloop_mcp::{McpServerConfig, McpToolset};
use serde_json::{Value, json};

use crate::servers::{eliciting, everything, wait_until};

/// A temp folder with the eliciting server's event log.
struct Log {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl Log {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        Self { _dir: dir, path }
    }

    /// Every event the server logged so far.
    fn events(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.path)
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    fn of(&self, event: &str) -> Vec<Value> {
        self.events()
            .into_iter()
            .filter(|logged| logged["event"] == event)
            .collect()
    }

    /// Waits until the server logged `count` events of kind `event`.
    async fn wait_for(&self, event: &str, count: usize) {
        let path = self.path.clone();
        let event = event.to_owned();
        wait_until(
            &format!("{count} {event} events"),
            Duration::from_secs(20),
            move || {
                std::fs::read_to_string(&path)
                    .unwrap_or_default()
                    .lines()
                    .filter(|line| line.contains(&format!("\"event\":\"{event}\"")))
                    .count()
                    >= count
            },
        )
        .await;
    }
}

async fn toolset(name: &str, config: McpServerConfig) -> McpToolset {
    McpToolset::connect(&BTreeMap::from([(name.to_owned(), config)]))
        .await
        .unwrap()
}

/// A model that calls `tool` with `args` (call id `e1`), then says "Done.".
fn calls(tool: &str, args: Value) -> ScriptedModel {
    ScriptedModel::from_steps(vec![
        ScriptStep {
            tool_calls: vec![ScriptToolCall {
                id: "e1".into(),
                name: tool.into(),
                args,
            }],
            ..ScriptStep::default()
        },
        ScriptStep {
            text: Some("Done.".into()),
            ..ScriptStep::default()
        },
    ])
}

fn agent(toolset: &McpToolset, store: &Arc<MemoryStore>, model: ScriptedModel) -> Agent {
    let mut builder = Agent::builder("eliciting")
        .model(model)
        .shared_store(store.clone());
    for tool in toolset.dyn_tools() {
        builder = builder.shared_tool(tool);
    }
    builder.build().unwrap()
}

fn pending(output: &RunOutput) -> PendingToolCall {
    let RunOutcome::Suspended { pending } = &output.status else {
        panic!("the run did not suspend: {:?}", output.status);
    };
    assert_eq!(pending.len(), 1, "{pending:?}");
    pending[0].clone()
}

async fn answer(agent: &Agent, run_id: &RunId, answer: Value) -> RunOutput {
    agent
        .resume_stream(answer, run_id, Some(&ToolCallId::new("e1")))
        .await
        .unwrap()
        .collect_output()
        .await
        .unwrap()
}

/// The result of the run's (only) tool call.
async fn tool_result(agent: &Agent, run_id: &RunId) -> ToolResult {
    let stored = agent
        .store()
        .load_run(&RunKey::new(None, run_id.clone()))
        .await
        .unwrap()
        .state;
    stored
        .messages()
        .iter()
        .find_map(|message| match message {
            Message::Tool { results } => results.first().cloned(),
            _ => None,
        })
        .unwrap()
}

fn restaurant() -> Value {
    json!({"restaurant": "Lisbon Grill"})
}

#[tokio::test]
async fn issue31_a_form_elicitation_suspends_the_run_and_nothing_is_answered_for_the_person() {
    let log = Log::new();
    let tools = toolset("dining", eliciting(&log.path)).await;
    let store = Arc::new(MemoryStore::new());
    let agent = agent(&tools, &store, calls("book_table", restaurant()));
    let output = agent.generate("Book a table").await.unwrap();
    // Before: rmcp's default handler declined within 0.1 s, and the run completed.
    let call = pending(&output);
    assert_eq!(call.tool_name, "book_table");
    assert_eq!(
        call.suspend_payload["question"],
        "MCP server dining asks: When, and for how many, at Lisbon Grill?"
    );
    assert_eq!(call.suspend_payload["elicitation"]["mode"], "form");
    let schema = call.resume_schema.as_ref().unwrap();
    assert_eq!(
        schema["properties"]["content"]["properties"]["time"]["enum"],
        json!(["19:00", "20:30"])
    );
    assert_eq!(schema["required"], json!(["action"]));
    // The server's call was cancelled and its question withdrawn with an error: no accept,
    // decline or cancel that the person did not give, now or later.
    log.wait_for("cancelled", 1).await;
    log.wait_for("error", 1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(log.of("answer").is_empty(), "{:?}", log.events());
    assert!(log.of("booked").is_empty(), "{:?}", log.events());
    assert_eq!(log.of("error")[0]["code"], -32800);
    assert_eq!(
        log.of("capabilities")[0]["elicitation"],
        json!({"form": {}, "url": {}})
    );
    tools.close().await;
}

#[tokio::test]
async fn issue31_accept_decline_and_cancel_reach_the_server() {
    let log = Log::new();
    let tools = toolset("dining", eliciting(&log.path)).await;
    let store = Arc::new(MemoryStore::new());
    let answers = [
        json!({"action": "accept", "content": {"time": "20:30", "people": 4}}),
        json!({"action": "decline"}),
        json!({"action": "cancel"}),
    ];
    for (index, given) in answers.iter().enumerate() {
        let agent = agent(&tools, &store, calls("book_table", restaurant()));
        let output = agent.generate("Book a table").await.unwrap();
        pending(&output);
        let done = answer(&agent, &output.run_id, given.clone()).await;
        assert_eq!(done.text, "Done.");
        let result = tool_result(&agent, &output.run_id).await;
        assert!(!result.is_error, "{result:?}");
        assert_eq!(result.result["action"], given["action"]);
        assert_eq!(
            result.result["content"],
            given.get("content").cloned().unwrap_or(Value::Null)
        );
        assert_eq!(result.answer.as_ref(), Some(given));
        // The server received exactly the person's answer, on the call made with it.
        let answered = log.of("answer");
        assert_eq!(answered.len(), index + 1, "{:?}", log.events());
        let mut expected = given.clone();
        if given["action"] != "accept" {
            expected = json!({"action": given["action"]});
        }
        assert_eq!(answered[index]["result"], expected);
    }
    tools.close().await;
}

#[tokio::test]
async fn issue31_a_run_resumes_with_a_fresh_toolset_and_server_process() {
    let log = Log::new();
    let store = Arc::new(MemoryStore::new());
    let first = toolset("dining", eliciting(&log.path)).await;
    let first_pid = first.servers()[0].process_id().await.unwrap();
    let output = agent(&first, &store, calls("book_table", restaurant()))
        .generate("Book a table")
        .await
        .unwrap();
    pending(&output);
    first.close().await;

    // Another agent, another connection, another server process; the same store.
    let second = toolset("dining", eliciting(&log.path)).await;
    assert_ne!(second.servers()[0].process_id().await.unwrap(), first_pid);
    let agent = agent(&second, &store, calls("book_table", restaurant()));
    let given = json!({"action": "accept", "content": {"time": "19:00", "people": 2}});
    answer(&agent, &output.run_id, given.clone()).await;
    let result = tool_result(&agent, &output.run_id).await;
    assert_eq!(result.result["content"], given["content"]);
    assert_eq!(log.of("answer")[0]["result"], given);
    assert_eq!(log.of("booked").len(), 1, "booked once: {:?}", log.events());
    second.close().await;
}

#[tokio::test]
async fn issue31_earlier_answers_of_a_call_are_given_again_and_each_question_asked_once() {
    let log = Log::new();
    let tools = toolset("quiz", eliciting(&log.path)).await;
    let store = Arc::new(MemoryStore::new());
    let agent = agent(&tools, &store, calls("two_questions", json!({})));
    let output = agent.generate("Ask me").await.unwrap();
    let first = pending(&output);
    assert_eq!(
        first.suspend_payload["elicitation"]["message"],
        "What is your name?"
    );

    // The answer to the first question: the tool is called again, the first question answered
    // from it, and the second one asked.
    let output = answer(
        &agent,
        &output.run_id,
        json!({"action": "accept", "content": {"name": "Ada"}}),
    )
    .await;
    let second = pending(&output);
    assert_eq!(
        second.suspend_payload["elicitation"]["message"],
        "Which colour?"
    );
    assert_eq!(
        second.suspend_payload["answered"][0]["answer"]["content"],
        json!({"name": "Ada"})
    );
    let done = answer(
        &agent,
        &output.run_id,
        json!({"action": "accept", "content": {"colour": "blue"}}),
    )
    .await;
    assert_eq!(done.text, "Done.");
    let result = tool_result(&agent, &output.run_id).await;
    assert_eq!(
        result.result,
        json!({"name": {"name": "Ada"}, "colour": {"colour": "blue"}, "actions": ["accept", "accept"]})
    );
    let answers: Vec<Value> = log
        .of("answer")
        .into_iter()
        .map(|event| event["result"]["content"].clone())
        .collect();
    assert_eq!(
        answers,
        [
            json!({"name": "Ada"}),
            json!({"name": "Ada"}),
            json!({"colour": "blue"})
        ]
    );
    assert_eq!(log.of("call").len(), 3);
    tools.close().await;
}

#[tokio::test]
async fn issue31_a_question_that_changed_is_asked_again_not_answered() {
    let log = Log::new();
    let tools = toolset("changing", eliciting(&log.path)).await;
    let store = Arc::new(MemoryStore::new());
    let agent = agent(&tools, &store, calls("changing_question", json!({})));
    let output = agent.generate("Go").await.unwrap();
    assert_eq!(
        pending(&output).suspend_payload["elicitation"]["message"],
        "Question number 1: go on?"
    );
    let output = answer(
        &agent,
        &output.run_id,
        json!({"action": "accept", "content": {"go": true}}),
    )
    .await;
    let again = pending(&output);
    assert_eq!(
        again.suspend_payload["elicitation"]["message"],
        "Question number 2: go on?"
    );
    // The answer to question 1 is not an answer to question 2.
    assert!(again.suspend_payload.get("answered").is_none());
    assert!(log.of("answer").is_empty(), "{:?}", log.events());
    tools.close().await;
}

#[tokio::test]
async fn issue31_an_answer_that_does_not_fit_is_refused_before_anything_changes() {
    let log = Log::new();
    let tools = toolset("dining", eliciting(&log.path)).await;
    let store = Arc::new(MemoryStore::new());
    let agent = agent(&tools, &store, calls("book_table", restaurant()));
    let output = agent.generate("Book a table").await.unwrap();
    pending(&output);
    let before = agent.store().load_run(&output.run_key()).await.unwrap();
    for wrong in [
        json!({"action": "accept"}),
        json!({"action": "accept", "content": {"time": "18:00", "people": 2}}),
        json!({"action": "decline", "content": {"time": "19:00", "people": 2}}),
        json!("decline"),
        json!({"approved": true}),
    ] {
        let error = agent
            .resume_stream(wrong.clone(), &output.run_id, Some(&ToolCallId::new("e1")))
            .await
            .err()
            .unwrap_or_else(|| panic!("{wrong} was accepted"));
        assert!(
            matches!(error, ResumeError::InvalidAnswer { .. }),
            "{wrong}: {error:?}"
        );
    }
    let after = agent.store().load_run(&output.run_key()).await.unwrap();
    assert_eq!(after.version, before.version);
    assert_eq!(log.of("call").len(), 1, "{:?}", log.events());
    tools.close().await;
}

#[tokio::test]
async fn issue31_a_link_is_shown_and_confirmed() {
    let log = Log::new();
    let tools = toolset("auth", eliciting(&log.path)).await;
    let store = Arc::new(MemoryStore::new());
    let agent = agent(&tools, &store, calls("sign_in", json!({})));
    let output = agent.generate("Sign me in").await.unwrap();
    let call = pending(&output);
    assert_eq!(
        call.suspend_payload["url"],
        "https://login.example/authorize?client=askloop"
    );
    assert_eq!(
        call.suspend_payload["question"],
        "MCP server auth asks: Sign in to the example service. Open this link, then answer: https://login.example/authorize?client=askloop"
    );
    answer(&agent, &output.run_id, json!({"action": "accept"})).await;
    let result = tool_result(&agent, &output.run_id).await;
    assert_eq!(result.result, json!({"action": "accept"}));
    assert_eq!(log.of("answer")[0]["result"], json!({"action": "accept"}));
    tools.close().await;
}

#[tokio::test]
async fn issue31_outside_a_run_a_question_is_refused_not_declined() {
    let log = Log::new();
    let tools = toolset("dining", eliciting(&log.path)).await;
    let book = tools
        .tools()
        .iter()
        .find(|tool| tool.name() == "book_table")
        .unwrap();
    // The server's tool fails with the refusal (this server lets it through as a JSON-RPC
    // error); nobody declined anything.
    let error = book.call(restaurant()).await.unwrap_err();
    let text = askloop_core::error_chain_text(&error);
    assert!(text.contains("no person can answer"), "{text}");
    assert!(log.of("answer").is_empty(), "{:?}", log.events());
    assert_eq!(log.of("error").len(), 1);
    tools.close().await;
}

#[tokio::test]
async fn issue31_server_everything_offers_its_elicitation_tools_and_gets_the_answers() {
    let tools = toolset("everything", everything()).await;
    let names: Vec<&str> = tools.tools().iter().map(|tool| tool.name()).collect();
    for expected in ["trigger-elicitation-request", "trigger-url-elicitation"] {
        assert!(names.contains(&expected), "{expected} missing: {names:?}");
    }
    // No capability advertised that askloop does not serve.
    for absent in [
        "trigger-sampling-request",
        "get-roots-list",
        "trigger-elicitation-request-async",
    ] {
        assert!(!names.contains(&absent), "{absent} listed: {names:?}");
    }
    let store = Arc::new(MemoryStore::new());

    let agent_form = agent(
        &tools,
        &store,
        calls("trigger-elicitation-request", json!({})),
    );
    let output = agent_form.generate("Ask me").await.unwrap();
    let call = pending(&output);
    let content = &call.resume_schema.as_ref().unwrap()["properties"]["content"];
    assert_eq!(content["required"], json!(["name"]));
    answer(
        &agent_form,
        &output.run_id,
        json!({"action": "accept", "content": {"name": "Ada Lovelace", "check": true, "integer": 7}}),
    )
    .await;
    let text = tool_result(&agent_form, &output.run_id)
        .await
        .result
        .to_string();
    assert!(
        text.contains("User provided the requested information"),
        "{text}"
    );
    assert!(text.contains("Name: Ada Lovelace"), "{text}");
    assert!(text.contains("Favorite Integer: 7"), "{text}");

    let agent_url = agent(
        &tools,
        &store,
        calls(
            "trigger-url-elicitation",
            json!({"url": "https://example.com/consent", "message": "Give consent"}),
        ),
    );
    let output = agent_url.generate("Send me there").await.unwrap();
    let call = pending(&output);
    assert_eq!(call.suspend_payload["url"], "https://example.com/consent");
    answer(&agent_url, &output.run_id, json!({"action": "decline"})).await;
    let text = tool_result(&agent_url, &output.run_id)
        .await
        .result
        .to_string();
    assert!(text.contains("User declined to open the URL"), "{text}");
    tools.close().await;
}

#[tokio::test]
async fn issue31_two_calls_of_one_server_in_one_step_each_get_their_own_question() {
    let log = Log::new();
    let tools = toolset("dining", eliciting(&log.path)).await;
    let store = Arc::new(MemoryStore::new());
    let model = ScriptedModel::from_steps(vec![
        ScriptStep {
            tool_calls: vec![
                ScriptToolCall {
                    id: "b1".into(),
                    name: "book_table".into(),
                    args: restaurant(),
                },
                ScriptToolCall {
                    id: "q1".into(),
                    name: "two_questions".into(),
                    args: json!({}),
                },
            ],
            ..ScriptStep::default()
        },
        ScriptStep {
            text: Some("Done.".into()),
            ..ScriptStep::default()
        },
    ]);
    let agent = agent(&tools, &store, model);
    let output = agent.generate("Both").await.unwrap();
    let RunOutcome::Suspended { pending } = &output.status else {
        panic!("{:?}", output.status);
    };
    let question = |id: &str| {
        pending
            .iter()
            .find(|call| call.tool_call_id.as_str() == id)
            .unwrap()
            .suspend_payload["elicitation"]["message"]
            .clone()
    };
    assert_eq!(question("b1"), "When, and for how many, at Lisbon Grill?");
    assert_eq!(question("q1"), "What is your name?");
    let output = agent
        .resume_stream(
            json!({"action": "decline"}),
            &output.run_id,
            Some(&ToolCallId::new("b1")),
        )
        .await
        .unwrap()
        .collect_output()
        .await
        .unwrap();
    let output = agent
        .resume_stream(
            json!({"action": "cancel"}),
            &output.run_id,
            Some(&ToolCallId::new("q1")),
        )
        .await
        .unwrap()
        .collect_output()
        .await
        .unwrap();
    let output = agent
        .resume_stream(
            json!({"action": "cancel"}),
            &output.run_id,
            Some(&ToolCallId::new("q1")),
        )
        .await
        .unwrap()
        .collect_output()
        .await
        .unwrap();
    assert_eq!(output.text, "Done.");
    let answers: Vec<(String, Value)> = log
        .of("answer")
        .into_iter()
        .map(|event| {
            (
                event["tool"].as_str().unwrap().to_owned(),
                event["result"]["action"].clone(),
            )
        })
        .collect();
    // Each call's question got its own person's answer: book_table declined; two_questions
    // cancelled twice (its first question answered again on the last call).
    assert_eq!(
        answers,
        [
            ("book_table".to_owned(), json!("decline")),
            ("two_questions".to_owned(), json!("cancel")),
            ("two_questions".to_owned(), json!("cancel")),
            ("two_questions".to_owned(), json!("cancel")),
        ]
    );
    tools.close().await;
}
