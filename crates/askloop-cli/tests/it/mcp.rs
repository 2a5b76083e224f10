//! Agents with MCP servers (`[agents.ID.mcp.NAME]`): the model calls a server's tool, and a
//! resume in another process (from another folder) starts the same server again.

use askloop_mcp::testing::server_entry;
use serde_json::Value;

use crate::support::{TestDir, chunk_types, outcome, tool_results};

/// askloop.toml with agent `files` whose `fs` server may touch `notes/` (relative: it runs in
/// the file's folder).
fn files_agent(dir: &TestDir) {
    std::fs::create_dir_all(dir.path().join("notes")).unwrap();
    let entry = server_entry("server-filesystem");
    dir.write(
        "askloop.toml",
        &format!(
            "[agents.files]\n\
             [agents.files.mcp.fs]\n\
             command = [\"node\", {entry:?}, \"notes\"]\n\
             require_approval = [\"write_file\"]\n",
            entry = entry.display().to_string()
        ),
    );
}

/// Asks which file, then writes it through the MCP tool, then says so.
fn ask_then_write(dir: &TestDir, target: &str) -> String {
    let script = serde_json::json!({"steps": [
        {"toolCalls": [{"id": "c1", "name": "ask_user", "args": {"question": "Which file?"}}]},
        {"toolCalls": [{"id": "w1", "name": "write_file",
                        "args": {"path": target, "content": "buy milk\n"}}]},
        {"text": "Noted."}
    ]});
    dir.script("write.json", &script.to_string())
}

#[test]
fn a_resume_in_another_process_and_folder_reconnects_the_mcp_server() {
    let dir = TestDir::new();
    files_agent(&dir);
    let target = dir.path().canonicalize().unwrap().join("notes/todo.md");
    let spec = ask_then_write(&dir, &target.display().to_string());
    let out = dir
        .run(&[
            "run",
            "--agent",
            "files",
            "--json",
            "--model",
            &spec,
            "Note: buy milk",
        ])
        .success();
    let lines = out.json_lines();
    let last = lines.last().unwrap();
    assert_eq!(last["type"], "tool-call-suspended", "{lines:#?}");
    let run_id = last["runId"].as_str().unwrap().to_owned();
    assert!(!target.exists());

    // Another process, started in another folder, finds the config with --config.
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let config = dir.path().join("askloop.toml").display().to_string();
    let store = dir.store_url();
    let mut resume = dir.command(&[
        "--store",
        &store,
        "--config",
        &config,
        "resume",
        &run_id,
        "--tool-call-id",
        "c1",
        "--answer",
        "todo.md",
        "--json",
    ]);
    resume.current_dir(&elsewhere);
    let out = outcome(resume).success();
    let lines = out.json_lines();
    let types = chunk_types(&lines);
    // write_file waits for approval: nothing is written yet.
    assert_eq!(
        types.last(),
        Some(&"tool-call-approval"),
        "{lines:#?}\n{}",
        out.stderr
    );
    assert!(!target.exists());

    // Approved from yet another process: the tool runs, the run finishes.
    let mut approve = dir.command(&[
        "--store", &store, "--config", &config, "approve", &run_id, "--json",
    ]);
    approve.current_dir(&elsewhere);
    let out = outcome(approve).success();
    let lines = out.json_lines();
    let types = chunk_types(&lines);
    assert_eq!(types.last(), Some(&"finish"), "{lines:#?}\n{}", out.stderr);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "buy milk\n");

    let state = dir.show(&run_id);
    assert_eq!(state["status"], "completed");
    let results = tool_results(&state);
    let write = results
        .iter()
        .find(|result| result["toolCallId"] == "w1")
        .unwrap_or_else(|| panic!("no result of w1 in {results:#?}"));
    assert_ne!(write["isError"], Value::Bool(true), "{write}");
    assert!(write.to_string().contains("Successfully wrote"), "{write}");
}

#[test]
fn a_declined_write_never_happens_and_the_model_gets_the_reason() {
    let dir = TestDir::new();
    files_agent(&dir);
    let target = dir.path().canonicalize().unwrap().join("notes/todo.md");
    let script = serde_json::json!({"steps": [
        {"toolCalls": [{"id": "w1", "name": "write_file",
                        "args": {"path": target.display().to_string(), "content": "x\n"}}]},
        {"text": "Understood."}
    ]});
    let spec = dir.script("decline.json", &script.to_string());
    let out = dir
        .run(&[
            "run", "--agent", "files", "--json", "--model", &spec, "Write it",
        ])
        .success();
    let lines = out.json_lines();
    let last = lines.last().unwrap();
    assert_eq!(last["type"], "tool-call-approval", "{lines:#?}");
    assert_eq!(last["payload"]["toolName"], "write_file");
    let run_id = last["runId"].as_str().unwrap().to_owned();
    let out = dir
        .run(&["decline", &run_id, "--reason", "not that folder"])
        .success();
    assert!(out.stdout.contains("Understood."), "{}", out.stdout);
    assert!(!target.exists(), "a declined call never writes");
    let state = dir.show(&run_id);
    let write = tool_results(&state)
        .into_iter()
        .find(|result| result["toolCallId"] == "w1")
        .unwrap();
    assert_eq!(write["isError"], Value::Bool(true));
    assert!(write.to_string().contains("not that folder"), "{write}");
    assert_eq!(write["audit"][0]["action"], "decline");
    assert_eq!(write["audit"][0]["by"], "cli:tester");
    // A second decline (or approval) changes nothing.
    let out = dir.run(&["approve", &run_id]).code(2);
    assert!(out.stderr.contains("completed"), "{}", out.stderr);
}

#[test]
fn a_server_that_does_not_start_fails_the_command_with_its_stderr() {
    let dir = TestDir::new();
    dir.write(
        "askloop.toml",
        "[agents.files.mcp.fs]\n\
         command = [\"node\", \"-e\", \"console.error('no folder /srv/notes'); process.exit(2)\"]\n",
    );
    let spec = dir.script("text.json", r#"{"steps":[{"text":"hi"}]}"#);
    let out = dir
        .run(&["run", "--agent", "files", "--model", &spec, "hello"])
        .code(1);
    assert!(
        out.stderr.contains("MCP server fs failed to start")
            && out.stderr.contains("no folder /srv/notes"),
        "{}",
        out.stderr
    );
}

#[test]
fn mcp_config_mistakes_are_invalid_input_naming_the_key() {
    let dir = TestDir::new();
    dir.write(
        "askloop.toml",
        "[agents.files.mcp.fs]\nurl = \"ftp://example.invalid\"\n",
    );
    let spec = dir.script("text.json", r#"{"steps":[{"text":"hi"}]}"#);
    let out = dir
        .run(&["run", "--agent", "files", "--model", &spec, "hello"])
        .code(2);
    assert!(out.stderr.contains("`url`"), "{}", out.stderr);

    files_agent(&dir);
    let config = std::fs::read_to_string(dir.path().join("askloop.toml")).unwrap();
    dir.write(
        "askloop.toml",
        &config.replace("[\"write_file\"]", "[\"wirte_file\"]"),
    );
    let out = dir
        .run(&["run", "--agent", "files", "--model", &spec, "hello"])
        .code(2);
    assert!(
        out.stderr.contains("wirte_file") && out.stderr.contains("write_file"),
        "{}",
        out.stderr
    );
}

/// askloop.toml with agent `dining` whose MCP server `dining` asks the person questions
/// (askloop-mcp's eliciting test server), logging what it receives to `events.jsonl`.
fn dining_agent(dir: &TestDir) -> std::path::PathBuf {
    let log = dir.path().join("events.jsonl");
    let script = askloop_mcp::testing::eliciting_script();
    dir.write(
        "askloop.toml",
        &format!(
            "[agents.dining.mcp.dining]\n\
             command = [\"node\", {script:?}]\n\
             require_approval = false\n\
             env = {{ ELICIT_LOG = {log:?} }}\n",
            script = script.display().to_string(),
            log = log.display().to_string()
        ),
    );
    log
}

fn logged(log: &std::path::Path, event: &str) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|logged| logged["event"] == event)
        .collect()
}

#[test]
fn issue31_an_mcp_question_is_shown_and_answered_from_another_process() {
    let dir = TestDir::new();
    let log = dining_agent(&dir);
    let script = serde_json::json!({"steps": [
        {"toolCalls": [{"id": "b1", "name": "book_table", "args": {"restaurant": "Lisbon Grill"}}]},
        {"text": "Booked."}
    ]});
    let spec = dir.script("book.json", &script.to_string());
    // Nobody at the terminal: the question is shown with the command that answers it.
    let out = dir
        .run(&["run", "--agent", "dining", "--model", &spec, "Book a table"])
        .success();
    let shown = format!("{}{}", out.stdout, out.stderr);
    assert!(
        shown.contains("MCP server dining asks: When, and for how many, at Lisbon Grill?"),
        "{shown}"
    );
    assert!(shown.contains("action: one of 3 choices"), "{shown}");
    assert!(shown.contains("--answer-json"), "{shown}");
    assert!(
        logged(&log, "answer").is_empty(),
        "nothing answered for the person"
    );
    let runs = dir.run(&["runs", "list", "--json"]).success().json();
    let run_id = runs[0]["runId"].as_str().unwrap().to_owned();

    // Another process answers: the server gets exactly the person's answer.
    let out = dir
        .run(&[
            "resume",
            &run_id,
            "--tool-call-id",
            "b1",
            "--answer-json",
            r#"{"action": "accept", "content": {"time": "20:30", "people": 3}}"#,
        ])
        .success();
    assert!(out.stdout.contains("Booked."), "{}", out.stdout);
    let answers = logged(&log, "answer");
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert_eq!(
        answers[0]["result"],
        serde_json::json!({"action": "accept", "content": {"time": "20:30", "people": 3}})
    );
    let state = dir.show(&run_id);
    assert_eq!(state["status"], "completed");
}
