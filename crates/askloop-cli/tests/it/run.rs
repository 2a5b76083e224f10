//! `askloop run`: JSON and human output, suspension without a terminal, model errors.

use crate::support::{ASK_THEN_ANSWER, BIN, JUST_TEXT, TestDir, chunk_types};

#[test]
fn run_json_prints_only_wire_chunks_ending_with_the_suspension() {
    let dir = TestDir::new();
    let spec = dir.script("ask.json", ASK_THEN_ANSWER);
    let out = dir
        .run(&["run", "--json", "--model", &spec, "Summarize my project"])
        .success();
    let lines = out.json_lines();
    assert_eq!(
        chunk_types(&lines),
        [
            "start",
            "step-start",
            "text-delta",
            "tool-call",
            "tool-call-suspended"
        ]
    );
    let run_id = lines[0]["runId"].as_str().unwrap();
    for line in &lines {
        assert_eq!(line["runId"], run_id);
        assert_eq!(line["from"], "AGENT");
    }
    let suspended = &lines[4]["payload"];
    assert_eq!(suspended["toolCallId"], "c1");
    assert_eq!(
        suspended["suspendPayload"]["selectionMode"],
        "single_select"
    );
    // The command that answers goes to stderr: stdout holds only JSON lines.
    assert_eq!(out.stderr_lines().len(), 1, "{}", out.stderr);
    assert!(out.stderr.starts_with("answer with: "), "{}", out.stderr);
    assert_eq!(dir.show(run_id)["status"], "suspended");
}

#[test]
fn run_without_a_terminal_prints_the_question_and_the_resume_command() {
    let dir = TestDir::new();
    let spec = dir.script("ask.json", ASK_THEN_ANSWER);
    let out = dir
        .run(&["run", "--model", &spec, "Summarize", "my", "project"])
        .success();
    assert!(out.stdout.starts_with("Let me check.\n"), "{}", out.stdout);
    assert!(
        out.stdout.contains("Which repo? (choose one)"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("1. main - the main repo"),
        "{}",
        out.stdout
    );
    let command = out
        .stdout
        .lines()
        .find_map(|line| line.strip_prefix("answer with: "))
        .unwrap();
    assert!(
        command.starts_with(&format!("{BIN} --store sqlite://")),
        "{command}"
    );
    assert!(
        command.contains("--tool-call-id c1 --model scripted:")
            && command.ends_with(" --answer '<one label or your own words>'"),
        "{command}"
    );

    // The printed command works as printed (split on spaces: no quoting needed here).
    let command = command.replace("'<one label or your own words>'", "main");
    let words: Vec<&str> = command.split(' ').skip(1).collect();
    let resumed = crate::support::outcome(dir.command(&words)).success();
    assert_eq!(resumed.stdout, "Summary of the repo.\n");
    assert!(
        resumed.stderr.contains("« ask_user: User answered: main"),
        "{}",
        resumed.stderr
    );
}

#[test]
fn run_to_the_end_streams_the_text() {
    let dir = TestDir::new();
    let spec = dir.script("text.json", JUST_TEXT);
    let out = dir.run(&["run", "--model", &spec, "Hi"]).success();
    assert_eq!(out.stdout, "Hello there.\n");
    let json = dir
        .run(&["run", "--json", "--model", &spec, "Hi"])
        .success();
    let lines = json.json_lines();
    assert_eq!(
        chunk_types(&lines),
        ["start", "step-start", "text-delta", "step-finish", "finish"]
    );
    assert_eq!(lines[4]["payload"]["output"]["text"], "Hello there.");
}

#[test]
fn an_unknown_model_provider_lists_the_known_specs() {
    let dir = TestDir::new();
    let out = dir.run(&["run", "--model", "gpt:4", "Hi"]).code(2);
    assert!(out.stderr.contains("unknown provider"), "{}", out.stderr);
    assert!(out.stderr.contains("scripted:PATH"), "{}", out.stderr);
    let missing = dir
        .run(&["run", "--model", "scripted:missing.json", "Hi"])
        .code(2);
    assert!(
        missing.stderr.contains("cannot read script"),
        "{}",
        missing.stderr
    );
}

#[test]
fn the_model_comes_from_askloop_model_when_no_flag_is_given() {
    let dir = TestDir::new();
    dir.write("text.json", JUST_TEXT);
    let store = dir.store_url();
    let mut command = dir.command(&["--store", &store, "run", "Hi"]);
    // A relative path resolves against the current directory.
    command.env("ASKLOOP_MODEL", "scripted:text.json");
    let out = crate::support::outcome(command).success();
    assert_eq!(out.stdout, "Hello there.\n");
    let runs = dir.run(&["runs", "list", "--json"]).success().json();
    let run_id = runs[0]["runId"].as_str().unwrap().to_owned();
    let shown = dir
        .run(&["runs", "show", "--json", &run_id])
        .success()
        .json();
    let expected = format!("scripted:{}", dir.path().join("text.json").display());
    assert_eq!(shown["model"], expected.as_str());
}

#[test]
fn a_failed_model_step_prints_an_error_chunk_and_exits_1() {
    let dir = TestDir::new();
    let spec = dir.script("fail.json", r#"{"steps":[{"error":"overloaded"}]}"#);
    let out = dir.run(&["run", "--json", "--model", &spec, "Hi"]).code(1);
    let lines = out.json_lines();
    let last = lines.last().unwrap();
    assert_eq!(last["type"], "error");
    assert_eq!(last["payload"]["error"]["code"], "model_error");
    assert!(
        last["payload"]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("overloaded")
    );
    assert_eq!(out.stderr_lines().len(), 1, "{}", out.stderr);
    assert!(out.stderr.contains("runs continue"), "{}", out.stderr);
    let run_id = last["runId"].as_str().unwrap();
    assert_eq!(dir.show(run_id)["status"], "failed");
}

#[test]
fn help_documents_the_exit_statuses() {
    let dir = TestDir::new();
    for args in [&["--help"][..], &["run", "--help"], &["resume", "--help"]] {
        let out = crate::support::outcome(dir.command(args)).success();
        for status in ["0 ", "1 ", "2 ", "130 "] {
            assert!(
                out.stdout.contains(&format!("\n  {status}")),
                "{args:?}: {}",
                out.stdout
            );
        }
    }
}

/// The person's own words for a pick-one and a pick-several question, by the printed
/// commands (placeholders replaced, pasted into a shell), and a closed question's refusal.
#[test]
fn issue33_the_printed_commands_take_my_own_words() {
    let dir = TestDir::new();
    let spec = format!(
        "scripted:{}/../../examples/demo.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let out = dir
        .run(&["run", "--model", &spec, "Help me plan a trip"])
        .success();
    assert!(
        out.stdout.contains("  (or answer in your own words)"),
        "{}",
        out.stdout
    );
    let command = |stdout: &str| {
        stdout
            .lines()
            .find_map(|line| line.strip_prefix("answer with: "))
            .unwrap()
            .to_owned()
    };
    let line = command(&out.stdout).replace("<one label or your own words>", "Porto, by train");
    let resumed = crate::support::outcome(dir.shell(&line)).success();
    assert!(
        resumed.stderr.contains(
            "User answered: Porto, by train (in their own words, not one of the options)"
        ),
        "{}",
        resumed.stderr
    );
    let line = command(&resumed.stdout)
        .replace("<label>", "food")
        .replace("<another label or your own words>", "onsen baths");
    let finished = crate::support::outcome(dir.shell(&line)).success();
    assert!(
        finished
            .stderr
            .contains("User answered: food, onsen baths (in their own words"),
        "{}",
        finished.stderr
    );
    // The same own words again: the harmless repeat.
    let again = crate::support::outcome(dir.shell(&line)).success();
    assert!(
        again.stderr.contains("already answered with this answer"),
        "{}",
        again.stderr
    );

    // An agent that takes only its labels refuses them, listing the labels.
    let config = dir.write(
        "askloop.toml",
        &format!("[agents.closed]\nmodel = \"{spec}\"\nallow_other = false\n"),
    );
    let config = config.display().to_string();
    let out = dir
        .run(&[
            "--config",
            &config,
            "run",
            "--agent",
            "closed",
            "Help me plan a trip",
        ])
        .success();
    assert!(!out.stdout.contains("your own words"), "{}", out.stdout);
    let line = command(&out.stdout).replace("<one label>", "Porto");
    let refused = crate::support::outcome(dir.shell(&line)).code(2);
    assert!(
        refused
            .stderr
            .contains(r#""Porto" is not one of the labels "Lisbon", "Kyoto", "Reykjavik""#),
        "{}",
        refused.stderr
    );
}
