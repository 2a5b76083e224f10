//! askloop.toml: agents, their models and settings, and its errors.

use crate::support::{ASK_THEN_ANSWER, TestDir, outcome};

#[test]
fn an_agent_from_askloop_toml_runs_and_resumes_by_its_id() {
    let dir = TestDir::new();
    dir.write("scripts/ask.json", ASK_THEN_ANSWER);
    dir.write(
        "askloop.toml",
        r#"
store = "sqlite://project.db"

[agents.planner]
name = "Planner"
instructions = "Plan things. Ask when unsure."
model = "scripted:scripts/ask.json"
tools = ["ask_user"]
max_steps = 4
temperature = 0.2
tool_choice = "auto"
first_step_tool_choice = { tool = "ask_user" }
"#,
    );
    let started = outcome(dir.command(&["run", "--agent", "planner", "--json", "Plan"])).success();
    let lines = started.json_lines();
    assert_eq!(lines[0]["payload"]["id"], "planner");
    let run_id = lines[0]["runId"].as_str().unwrap().to_owned();
    // The file's store, relative to the file.
    assert!(dir.path().join("project.db").is_file());

    let state = outcome(dir.command(&["runs", "show", &run_id, "--json"]))
        .success()
        .json();
    assert_eq!(state["agentId"], "planner");
    assert_eq!(
        state["model"],
        format!("scripted:{}", dir.path().join("scripts/ask.json").display()).as_str()
    );

    let out = outcome(dir.command(&["resume", &run_id, "--answer", "docs"])).success();
    assert_eq!(out.stdout, "Summary of the repo.\n");

    // The built-in agent is still there, with the file's store.
    let unknown = outcome(dir.command(&["run", "--agent", "writer", "Hi"])).code(2);
    assert!(
        unknown.stderr.contains("known agents: planner, assistant"),
        "{}",
        unknown.stderr
    );
}

#[test]
fn config_paths_are_relative_to_the_file_given_with_config() {
    let dir = TestDir::new();
    dir.write("project/ask.json", ASK_THEN_ANSWER);
    dir.write(
        "project/agents.toml",
        "model = \"scripted:ask.json\"\nstore = \"sqlite://runs.db\"\n",
    );
    let started =
        outcome(dir.command(&["--config", "project/agents.toml", "run", "--json", "Hi"])).success();
    let run_id = started.json_lines()[0]["runId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(dir.path().join("project/runs.db").is_file());
    let human = outcome(dir.command(&["--config", "project/agents.toml", "runs", "show", &run_id]))
        .success();
    let config = dir.path().join("project/agents.toml");
    assert!(
        human
            .stdout
            .contains(&format!("--config {}", config.display())),
        "{}",
        human.stdout
    );
    let mut resume = dir.command(&["resume", &run_id, "--answer", "main"]);
    resume.env("ASKLOOP_CONFIG", &config);
    outcome(resume).success();
}

#[test]
fn unknown_keys_and_tools_are_clear_errors() {
    let dir = TestDir::new();
    dir.write(
        "askloop.toml",
        "[agents.planner]\ninstructions = \"x\"\ntemprature = 0.3\n",
    );
    let out = outcome(dir.command(&["run", "--agent", "planner", "Hi"])).code(2);
    assert_eq!(out.stderr_lines().len(), 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("askloop.toml: line 3"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("unknown field `temprature`"),
        "{}",
        out.stderr
    );

    dir.write(
        "askloop.toml",
        "[agents.a]\ntools = [\"web_search\"]\n[agents.b]\ntool_choice = \"sometimes\"\n",
    );
    let out = outcome(dir.command(&["runs", "list"])).code(2);
    assert!(out.stderr.contains("sometimes"), "{}", out.stderr);

    dir.write("askloop.toml", "[agents.a]\ntools = [\"web_search\"]\n");
    let out = outcome(dir.command(&["runs", "list"])).code(2);
    assert!(
        out.stderr
            .contains(r#"agents.a.tools: unknown tool "web_search"; known tools: ask_user"#),
        "{}",
        out.stderr
    );

    let out = outcome(dir.command(&["--config", "missing.toml", "runs", "list"])).code(2);
    assert!(out.stderr.contains("cannot read"), "{}", out.stderr);
}
