//! `askloop runs list|show|continue`.

use crate::support::{ASK_THEN_ANSWER, JUST_TEXT, TestDir, answered, chunk_types, tool_results};

/// Asks, then fails on the step after the answer.
const ASK_THEN_FAIL: &str = r#"{"steps":[
  {"toolCalls":[{"id":"c1","name":"ask_user","args":{"question":"Which repo?","options":[{"label":"main"},{"label":"docs"}]}}]},
  {"error":"rate limited"}
]}"#;

/// The same conversation once the model works again.
const ASK_THEN_ANSWER_AGAIN: &str = r#"{"steps":[
  {"toolCalls":[{"id":"c1","name":"ask_user","args":{"question":"Which repo?","options":[{"label":"main"},{"label":"docs"}]}}]},
  {"text":"Recovered."}
]}"#;

#[test]
fn runs_list_filters_by_status() {
    let dir = TestDir::new();
    let suspended = dir.start_suspended(&dir.script("ask.json", ASK_THEN_ANSWER));
    let text = dir.script("text.json", JUST_TEXT);
    dir.run(&["run", "--model", &text, "Hi"]).success();

    let all = dir.run(&["runs", "list", "--json"]).success().json();
    assert_eq!(all.as_array().unwrap().len(), 2);
    let only = dir
        .run(&["runs", "list", "--status", "suspended", "--json"])
        .success()
        .json();
    let only = only.as_array().unwrap();
    assert_eq!(only.len(), 1);
    assert_eq!(only[0]["runId"], suspended.as_str());
    assert_eq!(only[0]["agentId"], "assistant");
    assert_eq!(only[0]["pending"][0]["payload"]["question"], "Which repo?");
    let completed = dir
        .run(&["runs", "list", "--status", "completed", "--json"])
        .success()
        .json();
    assert_eq!(completed[0]["status"], "completed");
    let failed = dir
        .run(&["runs", "list", "--status", "failed", "--json"])
        .success()
        .json();
    assert_eq!(failed.as_array().unwrap().len(), 0);

    let table = dir.run(&["runs", "list"]).success();
    let lines: Vec<&str> = table.stdout.lines().collect();
    assert!(lines[0].starts_with("RUN"), "{}", table.stdout);
    assert_eq!(lines.len(), 3, "{}", table.stdout);
    let row = lines.iter().find(|line| line.contains(&suspended)).unwrap();
    assert!(
        row.contains("suspended") && row.ends_with("Which repo?"),
        "{row}"
    );

    let bad = dir.run(&["runs", "list", "--status", "paused"]).code(2);
    assert!(bad.stderr.contains("suspended"), "{}", bad.stderr);
}

#[test]
fn runs_show_prints_status_pending_questions_and_history() {
    let dir = TestDir::new();
    let run_id = dir.start_suspended(&dir.script("ask.json", ASK_THEN_ANSWER));

    let state = dir.show(&run_id);
    assert_eq!(state["formatVersion"], 2);
    assert_eq!(state["lease"], serde_json::Value::Null);
    assert_eq!(state["unfinished"], serde_json::json!([]));
    assert_eq!(state["agentId"], "assistant");
    assert_eq!(state["status"], "suspended");
    let pending = &state["pending"][0];
    assert_eq!(pending["toolCallId"], "c1");
    // The one wire shape of a pending call (issue 32), as the HTTP API shows it.
    assert_eq!(pending["runId"], run_id.as_str());
    assert_eq!(pending["kind"], "answer");
    assert_eq!(pending["payload"]["options"][1]["label"], "docs");
    assert_eq!(pending["resumeSchema"]["anyOf"][0]["enum"][0], "main");
    assert_eq!(pending["form"]["kind"], "select");

    let human = dir.run(&["runs", "show", &run_id]).success().stdout;
    for expected in [
        "status    suspended",
        "agent     assistant",
        "Which repo? (choose one)",
        "--answer '<one label or your own words>'",
        "tool call c1 (ask_user)",
        "resume schema",
        "user: Summarize my project",
        "assistant: Let me check.",
        "assistant asks (tool call c1): Which repo? [main | docs]",
    ] {
        assert!(
            human.contains(expected),
            "{expected:?} missing from:\n{human}"
        );
    }

    let missing = dir.run(&["runs", "show", "nope"]).code(2);
    assert_eq!(
        missing.stderr,
        format!("error: run nope not found in {}\n", dir.store_url())
    );
}

#[test]
fn runs_continue_retries_a_failed_step_without_asking_again() {
    let dir = TestDir::new();
    let script = dir.write("flaky.json", ASK_THEN_FAIL);
    let spec = format!("scripted:{}", script.display());
    let run_id = dir.start_suspended(&spec);

    // Continuing a suspended run is refused: it needs an answer.
    let out = dir.run(&["runs", "continue", &run_id]).code(2);
    assert!(out.stderr.contains("is suspended"), "{}", out.stderr);
    assert!(out.stderr.contains("resume"), "{}", out.stderr);

    // The answer is accepted; the next model step fails.
    let out = dir
        .run(&["resume", &run_id, "--answer", "main", "--json"])
        .code(1);
    let lines = out.json_lines();
    assert_eq!(lines.last().unwrap()["type"], "error");
    let state = dir.show(&run_id);
    assert_eq!(state["status"], "failed");
    assert_eq!(state["error"]["code"], "model_error");
    assert_eq!(tool_results(&state)[0]["result"], answered("main"));

    // A retry with the same failing model fails the same way, without asking again.
    let out = dir.run(&["runs", "continue", &run_id, "--json"]).code(1);
    let types = chunk_types(&out.json_lines()).join(",");
    assert_eq!(types, "step-start,error");
    assert!(out.stderr.contains("rate limited"), "{}", out.stderr);
    let state = dir.show(&run_id);
    assert_eq!(state["status"], "failed");
    assert_eq!(tool_results(&state).len(), 1);

    // Once the model works again, continue finishes the run with the recorded answer.
    std::fs::write(&script, ASK_THEN_ANSWER_AGAIN).unwrap();
    let out = dir.run(&["runs", "continue", &run_id]).success();
    assert_eq!(out.stdout, "Recovered.\n");
    let state = dir.show(&run_id);
    assert_eq!(state["status"], "completed");
    assert_eq!(state["error"], serde_json::Value::Null);
    assert_eq!(tool_results(&state), [tool_results(&state)[0].clone()]);

    // Nothing is left to continue.
    let out = dir.run(&["runs", "continue", &run_id]).code(2);
    assert!(out.stderr.contains("is completed"), "{}", out.stderr);
}

#[test]
fn issue33_runs_list_shows_each_runs_first_message_on_one_line() {
    let dir = TestDir::new();
    let spec = dir.script("ask.json", crate::support::ASK_THEN_ANSWER);
    dir.run(&["run", "--model", &spec, "Plan my\ntrip   to Lisbon"])
        .success();
    let long = format!("Write {} please", "a very long request ".repeat(10));
    dir.run(&["run", "--model", &spec, &long]).success();
    let table = dir.run(&["runs", "list"]).success().stdout;
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].contains("MESSAGE") && lines[0].ends_with("QUESTION"),
        "{table}"
    );
    // Newest first; the long one cut to 40 characters.
    let cut: String = long.chars().take(39).collect();
    assert!(lines[1].contains(&format!("{cut}…")), "{table}");
    assert!(lines[2].contains("Plan my trip to Lisbon"), "{table}");
    assert!(lines[2].trim_end().ends_with("Which repo?"), "{table}");
    // The listing carries each first message: as written, cut to its first 200 characters.
    let listed = dir.run(&["runs", "list", "--json"]).success().stdout;
    let listed: serde_json::Value = serde_json::from_str(&listed).unwrap();
    let first: String = long.chars().take(200).collect();
    assert_eq!(listed[0]["firstMessage"], first.as_str(), "{listed}");
    assert_eq!(
        listed[1]["firstMessage"], "Plan my\ntrip   to Lisbon",
        "{listed}"
    );
}

#[test]
fn issue33_runs_list_cuts_the_message_after_escaping_so_columns_align() {
    let dir = TestDir::new();
    let spec = dir.script("ask.json", crate::support::ASK_THEN_ANSWER);
    let escapes = format!("{}clear me{}", "\u{1b}[2J".repeat(6), "\u{7}".repeat(5));
    dir.run(&["run", "--model", &spec, &escapes]).success();
    dir.run(&[
        "run",
        "--model",
        &spec,
        "旅行の計画を立てて、リスボンへの三日間の旅を手伝ってください",
    ])
    .success();
    dir.run(&["run", "--model", &spec, "Plan a trip"]).success();
    let table = dir.run(&["runs", "list"]).success().stdout;
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 4, "{table}");
    // The QUESTION column starts at the same terminal column on every line.
    let question_column = |line: &str| {
        let at = line
            .find("Which repo?")
            .or_else(|| line.find("QUESTION"))
            .unwrap();
        unicode_width::UnicodeWidthStr::width(&line[..at])
    };
    let header = question_column(lines[0]);
    for line in &lines[1..] {
        assert_eq!(question_column(line), header, "{table}");
    }
    // The escaped message is cut to 40 columns, the cut after the escapes.
    assert!(lines[3].contains(r"\u{1b}[2J"), "{table}");
    assert!(!lines[3].contains('\u{1b}'), "{table}");
}
