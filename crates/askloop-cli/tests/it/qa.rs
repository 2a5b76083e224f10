//! Regression tests of the faults a fresh-user QA pass found after issue 7: commands printed
//! for pasting keep every flag that matters and paste as printed, input is checked where it
//! is read, and every signal has one exit status.

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use serde_json::json;

use crate::support::{ASK_THEN_ANSWER, BIN, JUST_TEXT, Outcome, TestDir, outcome};

/// `bash -c LINE` in the test's directory with its environment: `$'…'` quoting needs bash
/// (dash, Debian's `sh`, lacks it).
fn bash(dir: &TestDir, line: &str) -> Outcome {
    let environment = dir.command(&[]);
    let mut bash = std::process::Command::new("bash");
    bash.arg("-c").arg(line).current_dir(dir.path());
    for (name, value) in environment.get_envs() {
        match value {
            Some(value) => bash.env(name, value),
            None => bash.env_remove(name),
        };
    }
    outcome(bash)
}

/// The lines of `text` after `prefix`.
fn after<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
    text.lines()
        .filter_map(|line| line.strip_prefix(prefix))
        .collect()
}

#[test]
fn the_next_page_hint_repeats_every_filter_and_pastes() {
    let dir = TestDir::new();
    // A script step per run of the thread (a scripted model counts the thread's steps).
    let spec = dir.script(
        "text.json",
        r#"{"steps":[{"text":"a"},{"text":"b"},{"text":"c"},{"text":"d"}]}"#,
    );
    for resource in ["acme", "acme", "acme", "other"] {
        dir.run(&[
            "run",
            "--model",
            &spec,
            "--thread",
            "t1",
            "--resource",
            resource,
            "Hi",
        ])
        .success();
    }
    dir.run(&["run", "--model", &spec, "--thread", "t2", "Hi"])
        .success();
    let out = dir
        .run(&[
            "runs",
            "list",
            "--status",
            "completed",
            "--agent",
            "assistant",
            "--thread",
            "t1",
            "--resource",
            "acme",
            "--limit",
            "2",
        ])
        .success();
    assert_eq!(out.stdout.lines().count(), 3, "{}", out.stdout);
    let hints = after(&out.stderr, "more runs: ");
    assert_eq!(hints.len(), 1, "{}", out.stderr);
    let expected = format!(
        "{BIN} --store {} runs list --status completed --agent assistant --thread t1 \
         --resource acme --limit 2 --after ",
        dir.store_url()
    );
    assert!(hints[0].starts_with(&expected), "{}", hints[0]);
    // The next page holds the one run left that matches.
    let next = bash(&dir, hints[0]).success();
    assert_eq!(next.stdout.lines().count(), 2, "{}", next.stdout);
    assert!(!next.stderr.contains("more runs"), "{}", next.stderr);

    // --json pages stay JSON.
    let out = dir
        .run(&[
            "runs",
            "list",
            "--resource",
            "acme",
            "--limit",
            "1",
            "--json",
        ])
        .success();
    let hint = after(&out.stderr, "more runs: ")[0].to_owned();
    assert!(hint.ends_with(" --json"), "{hint}");
    let next = bash(&dir, &hint).success();
    assert_eq!(next.json().as_array().unwrap().len(), 1);
}

#[test]
fn printed_commands_keep_config_model_agent_and_resource() {
    let dir = TestDir::new();
    dir.script("ask.json", ASK_THEN_ANSWER);
    dir.write(
        "conf/agents.toml",
        "[agents.planner]\ninstructions = \"Plan.\"\nmax_steps = 1\n",
    );
    // A relative --model and --config: printed absolute, so they work from anywhere.
    let out = dir
        .run(&[
            "--config",
            "conf/agents.toml",
            "run",
            "--agent",
            "planner",
            "--model",
            "scripted:ask.json",
            "--resource",
            "acme",
            "Hi",
        ])
        .success();
    let command = after(&out.stdout, "answer with: ")[0];
    let config = dir.path().join("conf/agents.toml");
    let script = dir.path().join("ask.json");
    assert!(
        command.contains(&format!("--config {}", config.display())),
        "{command}"
    );
    assert!(
        command.contains(&format!("--model scripted:{}", script.display())),
        "{command}"
    );
    assert!(
        command.ends_with(&format!(
            "--tool-call-id c1 --model scripted:{} --answer '<one label>'",
            script.display()
        )),
        "{command}"
    );
    // Pasted from another folder with the placeholder filled in, it answers; the agent's
    // step limit is reached, and that hint keeps the flags too.
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let line = format!(
        "cd {} && {}",
        elsewhere.display(),
        command.replace("'<one label>'", "main")
    );
    let resumed = bash(&dir, &line).success();
    let note = resumed
        .stderr
        .lines()
        .find(|line| line.contains("step limit"))
        .unwrap_or_else(|| panic!("{}", resumed.stderr));
    for flag in [
        format!("--config {}", config.display()),
        "--agent planner".to_owned(),
        "--resource acme".to_owned(),
        "--thread ".to_owned(),
    ] {
        assert!(note.contains(&flag), "{flag}: {note}");
    }

    // chat: the hint names the agent, model, thread and resource.
    let mut command = dir.command(&[
        "--store",
        &dir.store_url(),
        "--config",
        "conf/agents.toml",
        "chat",
        "--agent",
        "planner",
        "--model",
        "scripted:ask.json",
        "--resource",
        "acme",
    ]);
    command.stdin(Stdio::null());
    let out = outcome(command).success();
    let hint = after(&out.stderr, "continue this conversation with `")[0];
    for flag in [
        format!("--config {}", config.display()),
        "chat --agent planner".to_owned(),
        format!("--model scripted:{}", script.display()),
        "--resource acme".to_owned(),
        "--thread ".to_owned(),
    ] {
        assert!(hint.contains(&flag), "{flag}: {hint}");
    }
    let pasted = bash(&dir, hint.trim_end_matches('`')).success();
    assert!(
        pasted.stderr.contains(&format!(
            "continue this conversation with `{}",
            hint.trim_end_matches('`')
        )),
        "{}",
        pasted.stderr
    );
}

#[test]
fn values_with_control_characters_are_printed_to_paste() {
    let dir = TestDir::new();
    let script = json!({"steps": [
        {"toolCalls": [{"id": "c\u{1b}[2J\n1", "name": "ask_user", "args": {"question": "Name?"}}]},
        {"text": "Thanks."}
    ]});
    let spec = dir.script("odd.json", &script.to_string());
    let out = dir.run(&["run", "--model", &spec, "Hi"]).success();
    let command = after(&out.stdout, "answer with: ")[0];
    assert!(
        command.contains(r"--tool-call-id $'c\x1b[2J\x0a1' --model "),
        "{command}"
    );
    assert!(command.ends_with(" --answer '<your answer>'"), "{command}");
    let resumed = bash(&dir, &command.replace("'<your answer>'", "Ada")).success();
    assert_eq!(resumed.stdout, "Thanks.\n");
}

#[test]
fn example_answers_are_placeholders_and_long_values_are_cut_alike() {
    let dir = TestDir::new();
    let spec = dir.script(
        "name.json",
        r#"{"steps":[{"toolCalls":[{"id":"q1","name":"ask_user","args":{"question":"Name?"}}]},{"text":"Hi."}]}"#,
    );
    let out = dir.run(&["run", "--model", &spec, "Hi"]).success();
    let command = after(&out.stdout, "answer with: ")[0];
    assert!(command.ends_with("--answer '<your answer>'"), "{command}");
    let run_id = command.split(' ').nth(4).unwrap();
    let long = "x".repeat(2_500);
    let resumed = dir
        .run(&["resume", run_id, "--tool-call-id", "q1", "--answer", &long])
        .success();
    let expected = format!(
        "« ask_user: User answered: {}… [515 more characters; --json shows everything]",
        "x".repeat(2_000 - "User answered: ".len())
    );
    assert!(resumed.stderr.contains(&expected), "{}", resumed.stderr);
}

#[test]
fn an_invalid_input_error_keeps_its_causes() {
    let dir = TestDir::new();
    let out = dir
        .run(&["--config", "missing.toml", "runs", "list"])
        .code(2);
    assert_eq!(
        out.stderr,
        format!(
            "error: cannot read {}: No such file or directory (os error 2)\n",
            dir.path().join("missing.toml").display()
        )
    );
}

#[test]
fn config_numbers_out_of_range_are_refused_naming_file_and_key() {
    let dir = TestDir::new();
    let spec = dir.script("text.json", JUST_TEXT);
    let file = dir.write("askloop.toml", "[agents.assistant]\ntemperature = 5.0\n");
    let out = dir.run(&["run", "--model", &spec, "Hi"]).code(2);
    assert_eq!(
        out.stderr,
        format!(
            "error: invalid config {}: agents.assistant.temperature: must be from 0 to 2, got 5\n",
            file.display()
        )
    );
}

#[test]
fn blank_ids_and_a_zero_limit_are_refused_by_the_flags() {
    let dir = TestDir::new();
    for args in [
        &["runs", "list", "--limit", "0"][..],
        &["resume", " ", "--answer", "x"],
        &["runs", "show", "\u{200b}"],
        &["run", "--thread", "  ", "Hi"],
        &["run", "--agent", "", "Hi"],
        &["chat", "--resource", "\t"],
    ] {
        let out = dir.run(args).code(2);
        assert!(
            out.stderr.starts_with("error: invalid value"),
            "{args:?}: {}",
            out.stderr
        );
    }
    let out = dir.run(&["resume", " ", "--answer", "x"]).code(2);
    assert!(
        out.stderr.contains("an id must not be blank"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_store_path_that_is_a_folder_is_invalid_input() {
    let dir = TestDir::new();
    for command in [&["runs", "list"][..], &["run", "Hi"]] {
        let mut args = vec!["--store", "sqlite://folder"];
        std::fs::create_dir_all(dir.path().join("folder")).unwrap();
        args.extend_from_slice(command);
        let out = outcome(dir.command(&args)).code(2);
        assert_eq!(
            out.stderr,
            format!(
                "error: {} is a folder, not a database file; expected sqlite://PATH/FILE.db\n",
                dir.path().join("folder").display()
            ),
            "{command:?}"
        );
    }
}

#[test]
fn chat_without_a_terminal_ends_on_a_signal_with_its_status_and_the_hint() {
    for (signal, status) in [("TERM", 143), ("HUP", 129), ("INT", 130)] {
        let dir = TestDir::new();
        let spec = dir.script("text.json", JUST_TEXT);
        let mut command = dir.command(&[
            "--store",
            &dir.store_url(),
            "chat",
            "--model",
            &spec,
            "--resource",
            "acme",
        ]);
        // stdin stays open: the chat waits for a line.
        command.stdin(Stdio::piped());
        let mut child = command.spawn().unwrap();
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        stderr.read_line(&mut line).unwrap();
        assert!(line.starts_with("chatting with"), "{line}");
        let kill = std::process::Command::new("kill")
            .args(["-s", signal, &child.id().to_string()])
            .status()
            .unwrap();
        assert!(kill.success());
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
        let code = child.wait().unwrap().code();
        assert_eq!(code, Some(status), "SIG{signal}: {rest}");
        assert!(
            rest.contains("continue this conversation with `") && rest.contains("--resource acme"),
            "SIG{signal}: {rest}"
        );
    }
}

/// A `--store` value that does not parse is refused with the password masked and the reason,
/// as the same URL from ASKLOOP_STORE is (clap used to echo the raw value).
#[test]
fn a_bad_store_flag_never_prints_its_password() {
    let dir = TestDir::new();
    for url in [
        "postgres://postgres:s3cretPW@127.0.0.1:5432/test?synchronous=bogus",
        "postgres://u:s3cretPW@127.0.0.1:99999/db",
    ] {
        let flag = outcome(dir.command(&["--store", url, "runs", "list"])).code(2);
        assert!(!flag.stderr.contains("s3cretPW"), "{}", flag.stderr);
        assert!(
            flag.stderr.starts_with("error: invalid --store: "),
            "{}",
            flag.stderr
        );
        assert!(flag.stderr.contains("***"), "{}", flag.stderr);
        let mut command = dir.command(&["runs", "list"]);
        command.env("ASKLOOP_STORE", url);
        let env = outcome(command).code(2);
        assert!(!env.stderr.contains("s3cretPW"), "{}", env.stderr);
        // One reason, worded the same whichever way the URL came.
        assert_eq!(
            flag.stderr
                .split_once(": ")
                .unwrap()
                .1
                .split_once(": ")
                .unwrap()
                .1,
            env.stderr
                .split_once(": ")
                .unwrap()
                .1
                .split_once(": ")
                .unwrap()
                .1
        );
    }
    let bogus = outcome(dir.command(&[
        "--store",
        "postgres://postgres:s3cretPW@127.0.0.1:5432/test?synchronous=bogus",
        "runs",
        "list",
    ]))
    .code(2);
    assert!(
        bogus.stderr.contains("unknown synchronous=\"bogus\""),
        "{}",
        bogus.stderr
    );
}

/// The same answer again after the step that followed it failed: already answered, nothing
/// changed, exit 0 with the `runs continue` hint (a retrying script sees no false failure).
#[test]
fn the_same_answer_again_after_a_failed_step_is_idempotent() {
    let dir = TestDir::new();
    let spec = dir.script(
        "fails.json",
        r#"{"steps":[{"toolCalls":[{"id":"q","name":"ask_user","args":{"question":"where?"}}]},{"error":"model down"}]}"#,
    );
    let json = dir
        .run(&["run", "--model", &spec, "--json", "go"])
        .success();
    let run_id = json.json_lines()[0]["runId"].as_str().unwrap().to_owned();
    let resume = [
        "resume",
        run_id.as_str(),
        "--tool-call-id",
        "q",
        "--answer",
        "Lisbon",
    ];
    dir.run(&resume).code(1);
    let again = dir.run(&resume).success();
    assert!(
        again.stderr.contains("already answered with this answer"),
        "{}",
        again.stderr
    );
    assert!(again.stderr.contains("runs continue"), "{}", again.stderr);
    // Another answer is still refused, and the run is as it was.
    let other = [
        "resume",
        run_id.as_str(),
        "--tool-call-id",
        "q",
        "--answer",
        "Porto",
    ];
    dir.run(&other).code(2);
    assert_eq!(dir.show(&run_id)["status"], "failed");
}
