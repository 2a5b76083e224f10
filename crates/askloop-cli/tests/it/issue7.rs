//! Regression tests of issue 7's faults, found by trying the CLI as a new user would; each is
//! named after its fault.

use std::process::Stdio;

use serde_json::{Value, json};

use crate::support::{ASK_THEN_ANSWER, BIN, JUST_TEXT, TestDir, answered, outcome, tool_results};

/// Two questions in sequence: `q1` (single select), then `q2` (single select), then text.
const TWO_IN_SEQUENCE: &str = r#"{"steps":[
  {"toolCalls":[{"id":"q1","name":"ask_user","args":{"question":"Which repo?","options":[{"label":"main"},{"label":"docs"}],"selectionMode":"single_select"}}]},
  {"toolCalls":[{"id":"q2","name":"ask_user","args":{"question":"Which branch?","options":[{"label":"dev"},{"label":"prod"}],"selectionMode":"single_select"}}]},
  {"text":"Done."}
]}"#;

/// The `answer with: …` command lines of an output.
fn answer_commands(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| line.strip_prefix("answer with: "))
        .map(str::to_owned)
        .collect()
}

/// A printed answer command with its placeholder replaced by `answer` (a shell word).
fn filled(command: &str, answer: &str) -> String {
    command
        .replace("'<one label>'", answer)
        .replace("'<one label or your own words>'", answer)
        .replace("'<your answer>'", answer)
}

fn multi_select(labels: &[&str]) -> String {
    let options: Vec<Value> = labels.iter().map(|label| json!({"label": label})).collect();
    json!({"steps": [
        {"toolCalls": [{"id": "c1", "name": "ask_user", "args": {
            "question": "Which regions?", "options": options, "selectionMode": "multi_select"}}]},
        {"text": "Noted."}
    ]})
    .to_string()
}

#[test]
fn issue7_fault2_chat_matches_a_multi_select_label_with_a_comma_whole() {
    let dir = TestDir::new();
    let spec = dir.script("regions.json", &multi_select(&["a, b", "c"]));
    let out = dir
        .run_with_input(&["chat", "--model", &spec], "Plan\na, b\n")
        .success();
    assert!(out.stdout.contains("Noted."), "{out:#?}");
    let runs = dir.run(&["runs", "list", "--json"]).success().json();
    let state = dir.show(runs[0]["runId"].as_str().unwrap());
    assert_eq!(tool_results(&state)[0]["result"], answered("a, b"));
}

#[test]
fn issue7_fault3_chat_asks_again_after_a_refused_selection() {
    let dir = TestDir::new();
    dir.labels_only();
    let spec = dir.script("regions.json", &multi_select(&["eu", "us"]));
    let out = dir
        .run_with_input(
            &["chat", "--model", &spec],
            "Plan\neu, eu\n , \nmars\neu, 2\n",
        )
        .success();
    assert!(
        out.stderr
            .contains(r#""eu" is chosen twice; name each label once; try again"#),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("select at least one label; try again"));
    assert!(out.stderr.contains(r#""mars" is not one of the labels"#));
    assert!(out.stdout.contains("Noted."), "{out:#?}");
    // The question was printed once, with a line naming the call it answers.
    assert_eq!(
        out.stdout.matches("Which regions?").count(),
        1,
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("answer tool call c1 with"),
        "{}",
        out.stdout
    );
    let runs = dir.run(&["runs", "list", "--json"]).success().json();
    let state = dir.show(runs[0]["runId"].as_str().unwrap());
    assert_eq!(tool_results(&state)[0]["result"], answered("eu, us"));
}

#[test]
fn issue7_fault4_the_step_limit_is_said_with_what_to_do() {
    let dir = TestDir::new();
    let spec = dir.script("ask.json", ASK_THEN_ANSWER);
    dir.write("askloop.toml", "[agents.assistant]\nmax_steps = 1\n");
    let run_id = dir.start_suspended(&spec);
    let out = dir.run(&["resume", &run_id, "--answer", "main"]).success();
    let state = dir.show(&run_id);
    assert_eq!(state["status"], "completed");
    let note = out
        .stderr
        .lines()
        .find(|line| line.contains("step limit"))
        .unwrap_or_else(|| panic!("no step-limit note: {}", out.stderr));
    assert!(note.contains("step limit (1 model step)"), "{note}");
    assert!(
        note.contains("`max_steps` under [agents.assistant]"),
        "{note}"
    );
    let thread = state["threadId"].as_str().unwrap();
    assert!(note.contains(&format!("run --thread {thread}")), "{note}");

    // What it says works: a higher limit, and the same thread goes on.
    dir.write("askloop.toml", "[agents.assistant]\nmax_steps = 5\n");
    let next = dir
        .run(&[
            "run", "--json", "--model", &spec, "--thread", thread, "Go on",
        ])
        .success();
    assert_eq!(next.json_lines().last().unwrap()["type"], "finish");
    assert!(!next.stderr.contains("step limit"), "{}", next.stderr);
}

#[test]
fn issue7_fault5_hints_work_as_pasted_without_askloop_on_path() {
    let dir = TestDir::new();
    let spec = dir.script("ask.json", ASK_THEN_ANSWER);
    let out = dir.run(&["run", "--model", &spec, "Hi"]).success();
    let commands = answer_commands(&out.stdout);
    assert_eq!(commands.len(), 1, "{}", out.stdout);
    assert!(
        commands[0].starts_with(&format!("{BIN} --store sqlite://")),
        "{}",
        commands[0]
    );
    let resumed = outcome(dir.shell(&filled(&commands[0], "main"))).success();
    assert_eq!(resumed.stdout, "Summary of the repo.\n");

    // --json: stdout holds only JSON lines, the hint goes to stderr.
    let json = dir
        .run(&["run", "--json", "--model", &spec, "Hi"])
        .success();
    json.json_lines();
    let commands = answer_commands(&json.stderr);
    assert_eq!(commands.len(), 1, "{}", json.stderr);
    assert!(commands[0].contains("--tool-call-id c1"), "{}", commands[0]);
    outcome(dir.shell(&filled(&commands[0], "main"))).success();
}

#[cfg(unix)]
#[test]
fn issue7_fault5_hints_say_askloop_only_when_it_is_this_binary_on_path() {
    let dir = TestDir::new();
    let spec = dir.script("ask.json", ASK_THEN_ANSWER);
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(BIN, bin.join("askloop")).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let store = dir.store_url();
    let mut command = dir.command(&["--store", &store, "run", "--model", &spec, "Hi"]);
    command.env("PATH", &path);
    let out = outcome(command).success();
    let commands = answer_commands(&out.stdout);
    assert!(
        commands[0].starts_with("askloop --store "),
        "{}",
        commands[0]
    );
    let mut pasted = dir.shell(&filled(&commands[0], "main"));
    pasted.env("PATH", &path);
    outcome(pasted).success();

    // Another program called askloop comes first on PATH: the hint names this binary.
    let other = dir.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("askloop"), "#!/bin/sh\nexit 3\n").unwrap();
    std::fs::set_permissions(
        other.join("askloop"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let mut command = dir.command(&["--store", &store, "run", "--model", &spec, "Hi"]);
    command.env("PATH", format!("{}:{path}", other.display()));
    let out = outcome(command).success();
    assert!(
        answer_commands(&out.stdout)[0].starts_with(BIN),
        "{}",
        out.stdout
    );
}

#[test]
fn issue7_fault6_read_only_commands_create_nothing_and_name_the_store() {
    let dir = TestDir::new();
    let typo = dir.path().join("typo/dir/x.db");
    let url = format!("sqlite://{}", typo.display());
    let listed = outcome(dir.command(&["--store", &url, "runs", "list"])).success();
    assert_eq!(listed.stderr, format!("no runs yet in {url}\n"));
    let json = outcome(dir.command(&["--store", &url, "runs", "list", "--json"])).success();
    assert_eq!(json.json(), json!([]));
    let shown = outcome(dir.command(&["--store", &url, "runs", "show", "r1"])).code(2);
    assert_eq!(
        shown.stderr,
        format!("error: run r1 not found in {url} (there is no database there yet)\n")
    );
    // Answering or continuing a run in a database that does not exist creates nothing either.
    outcome(dir.command(&["--store", &url, "resume", "r1", "--answer", "x"])).code(2);
    outcome(dir.command(&["--store", &url, "runs", "continue", "r1"])).code(2);
    // Nor does the default store.
    outcome(dir.command(&["runs", "list"])).success();
    assert!(!dir.path().join("typo").exists());
    assert!(!dir.path().join("data").exists());

    // An existing store: "not found" names it.
    dir.start_suspended(&dir.script("ask.json", ASK_THEN_ANSWER));
    let missing = dir.run(&["runs", "show", "nope"]).code(2);
    assert_eq!(
        missing.stderr,
        format!("error: run nope not found in {}\n", dir.store_url())
    );
    let missing = dir.run(&["resume", "nope", "--answer", "x"]).code(2);
    assert!(
        missing.stderr.contains(&dir.store_url()),
        "{}",
        missing.stderr
    );
}

/// Whether this process can write where permissions say it cannot (it runs as root).
#[cfg(unix)]
fn privileged(dir: &std::path::Path) -> bool {
    let probe = dir.join(".probe");
    let writable = std::fs::write(&probe, b"").is_ok();
    let _ = std::fs::remove_file(&probe);
    writable
}

#[cfg(unix)]
#[test]
fn issue7_fault6_a_database_in_a_read_only_folder_is_readable() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;

    let dir = TestDir::new();
    let run_id = dir.start_suspended(&dir.script("ask.json", ASK_THEN_ANSWER));
    // The writer has closed the database: no -wal or -shm file is left.
    assert!(!dir.path().join("runs.db-shm").exists());
    let store = dir.path().join("store");
    std::fs::create_dir_all(&store).unwrap();
    std::fs::rename(dir.path().join("runs.db"), store.join("runs.db")).unwrap();
    let mode = |path: &std::path::Path, mode| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    mode(&store.join("runs.db"), 0o444);
    mode(&store, 0o555);
    mode(dir.path(), 0o755);
    // As root, permissions do not stop writes: run the binary as nobody instead, from a link
    // in this folder (the build folder may not be reachable by nobody).
    let as_root = privileged(&store);
    let bin = dir.path().join("askloop");
    if std::fs::hard_link(BIN, &bin).is_err() {
        std::fs::copy(BIN, &bin).unwrap();
    }
    let url = format!("sqlite://{}", store.join("runs.db").display());
    let command = |args: &[&str]| {
        let mut reader = std::process::Command::new(&bin);
        reader
            .args(args)
            .current_dir(dir.path())
            .env_remove("ASKLOOP_STORE")
            .env_remove("RUST_LOG")
            .env("ASKLOOP_DATA_DIR", dir.path().join("data"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if as_root {
            reader.uid(65534).gid(65534);
        }
        outcome(reader)
    };
    let listed = command(&["--store", &url, "runs", "list", "--json"]).success();
    assert_eq!(listed.json()[0]["runId"], run_id.as_str());
    let shown = command(&["--store", &url, "runs", "show", &run_id]).success();
    assert!(shown.stdout.contains("Which repo?"), "{}", shown.stdout);
    // Nothing was written next to it, and a write is refused with a clear error.
    let names: Vec<_> = std::fs::read_dir(&store)
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert_eq!(names, ["runs.db"]);
    let refused = command(&["--store", &url, "resume", &run_id, "--answer", "main"]);
    assert_ne!(refused.code, 0, "{refused:#?}");
    assert_eq!(refused.stderr_lines().len(), 1, "{}", refused.stderr);
    mode(&store, 0o755);
}

#[test]
fn issue7_fault7_flags_override_bad_environment_values() {
    let dir = TestDir::new();
    let spec = dir.script("text.json", JUST_TEXT);
    let mut command = dir.command(&["runs", "list", "--store", "memory", "--json"]);
    command.env("ASKLOOP_STORE", "mysql://nope");
    assert_eq!(outcome(command).success().json(), json!([]));
    let mut command = dir.command(&["runs", "list", "--json"]);
    command.env("ASKLOOP_STORE", "mysql://nope");
    let bad = outcome(command).code(2);
    assert!(
        bad.stderr.contains("invalid ASKLOOP_STORE"),
        "{}",
        bad.stderr
    );

    dir.write("good.toml", "");
    let mut command = dir.command(&["--store", "memory", "--config", "good.toml", "runs", "list"]);
    command.env("ASKLOOP_CONFIG", "missing.toml");
    outcome(command).success();

    let mut command = dir.command(&["--store", "memory", "run", "--model", &spec, "Hi"]);
    command.env("ASKLOOP_MODEL", "gpt:4");
    assert_eq!(outcome(command).success().stdout, "Hello there.\n");
}

#[cfg(unix)]
#[test]
fn issue7_fault7_sigterm_and_sighup_cancel_a_model_call_cleanly() {
    use std::net::TcpListener;

    for (signal, status) in [("TERM", 143), ("HUP", 129)] {
        let dir = TestDir::new();
        // A model server that takes the request and never answers.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let store = dir.store_url();
        let mut command = dir.command(&[
            "--store",
            &store,
            "run",
            "--json",
            "--model",
            "ollama:slow",
            "Hi",
        ]);
        command.env(
            "OLLAMA_BASE_URL",
            format!("http://{}", listener.local_addr().unwrap()),
        );
        let child = command.spawn().unwrap();
        let (connection, _) = listener.accept().unwrap();
        let kill = std::process::Command::new("kill")
            .args([&format!("-{signal}"), &child.id().to_string()])
            .status()
            .unwrap();
        assert!(kill.success());
        let output = child.wait_with_output().unwrap();
        drop(connection);
        let out = crate::support::Outcome {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8(output.stdout).unwrap(),
            stderr: String::from_utf8(output.stderr).unwrap(),
        }
        .code(status);
        let lines = out.json_lines();
        let last = lines.last().unwrap();
        assert_eq!(last["payload"]["error"]["code"], "cancelled", "{lines:#?}");
        assert!(
            out.stderr.contains(&format!("cancelled by SIG{signal}")),
            "{}",
            out.stderr
        );
        let state = dir.show(last["runId"].as_str().unwrap());
        assert_eq!(state["status"], "failed");
        assert_eq!(state["error"]["code"], "cancelled");
    }
}

#[test]
fn issue7_fault8_a_blank_prompt_is_refused() {
    let dir = TestDir::new();
    let spec = dir.script("text.json", JUST_TEXT);
    for prompt in ["", "   ", "\u{200b}"] {
        let out = dir.run(&["run", "--model", &spec, prompt]).code(2);
        assert!(out.stderr.contains("the prompt is empty"), "{}", out.stderr);
    }
    assert_eq!(
        dir.run(&["runs", "list", "--json"]).success().json(),
        json!([])
    );
}

#[test]
fn issue7_fault8_control_characters_are_escaped_in_human_output_only() {
    let dir = TestDir::new();
    let script = json!({"steps": [
        {"text": "Hi\u{1b}]0;pwned\u{7}\n\tthere\u{1b}[2J\u{9b}", "toolCalls": [{"id": "c1", "name": "ask_user", "args": {
            "question": "Pick\u{1b}[31m one",
            "options": [{"label": "a\u{1b}[1m", "description": "d\u{1b}c"}, {"label": "b"}],
            "selectionMode": "single_select"}}]},
        {"text": "Done."}
    ]});
    let spec = dir.script("evil.json", &script.to_string());
    let out = dir.run(&["run", "--model", &spec, "Hi"]).success();
    for text in [&out.stdout, &out.stderr] {
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{9b}'),
            "{text:?}"
        );
        assert!(!text.contains('\u{7}'), "{text:?}");
    }
    assert!(
        out.stdout
            .starts_with("Hi\\u{1b}]0;pwned\\u{7}\n\tthere\\u{1b}[2J\\u{9b}\n"),
        "{:?}",
        out.stdout
    );
    assert!(
        out.stdout.contains("Pick\\u{1b}[31m one (choose one)"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("1. a\\u{1b}[1m - d\\u{1b}c"),
        "{}",
        out.stdout
    );
    // The printed command has a placeholder for the label, and works once it is filled in.
    let command = &answer_commands(&out.stdout)[0];
    assert!(
        command.ends_with("--answer '<one label or your own words>'"),
        "{command}"
    );
    outcome(dir.shell(&filled(command, "b"))).success();

    // --json keeps the text exact.
    let json = dir
        .run(&["run", "--json", "--model", &spec, "Hi"])
        .success();
    let lines = json.json_lines();
    let text: String = lines
        .iter()
        .filter(|line| line["type"] == "text-delta")
        .filter_map(|line| line["payload"]["text"].as_str())
        .collect();
    assert_eq!(text, "Hi\u{1b}]0;pwned\u{7}\n\tthere\u{1b}[2J\u{9b}");

    // Ids in errors too.
    let out = dir.run(&["runs", "show", "x\u{1b}[2Jy"]).code(2);
    assert!(out.stderr.contains("x\\u{1b}[2Jy"), "{}", out.stderr);
}

#[test]
fn issue7_fault10_an_empty_description_prints_no_dash() {
    let dir = TestDir::new();
    let script = r#"{"steps":[{"toolCalls":[{"id":"c1","name":"ask_user","args":{"question":"Which?","options":[{"label":"x","description":""},{"label":"y","description":" "}],"selectionMode":"single_select"}}]}]}"#;
    let spec = dir.script("ask.json", script);
    let out = dir.run(&["run", "--model", &spec, "Hi"]).success();
    assert!(out.stdout.contains("  1. x\n  2. y\n"), "{}", out.stdout);
}

#[test]
fn issue7_fault10_chat_without_a_terminal_prints_the_question_once() {
    let dir = TestDir::new();
    let spec = dir.script("ask.json", ASK_THEN_ANSWER);
    let out = dir
        .run_with_input(&["chat", "--model", &spec], "Hi\n")
        .success();
    assert_eq!(
        out.stdout.matches("Which repo?").count(),
        1,
        "{}",
        out.stdout
    );
    let commands = answer_commands(&out.stdout);
    assert_eq!(commands.len(), 1, "{}", out.stdout);
    assert!(commands[0].contains("--tool-call-id c1"), "{}", commands[0]);
}

#[tokio::test(flavor = "multi_thread")]
async fn issue7_fault10_log_warnings_are_one_human_line_each() {
    use wiremock::matchers::method;
    use wiremock::{Mock, MockServer, ResponseTemplate};

    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(429).set_body_string("{\"error\":\n\"busy\"}"))
        .mount(&server)
        .await;
    let dir = TestDir::new();
    let store = dir.store_url();
    let mut command = dir.command(&["--store", &store, "run", "--model", "openai:m", "Hi"]);
    command
        .env("OPENAI_API_KEY", "test-key")
        .env("OPENAI_BASE_URL", format!("{}/v1", server.uri()));
    let out = tokio::task::spawn_blocking(move || outcome(command))
        .await
        .unwrap()
        .code(1);
    let lines = out.stderr_lines();
    assert!(
        lines.iter().any(|line| line
            .starts_with("warning: model openai:m: rate limited (HTTP 429); retrying in ")),
        "{}",
        out.stderr
    );
    for line in &lines {
        assert!(
            line.starts_with("warning: ") || line.starts_with("error: "),
            "{}",
            out.stderr
        );
    }
}

#[test]
fn issue7_fault12_a_repeated_answer_command_is_refused_and_the_next_question_untouched() {
    let dir = TestDir::new();
    let spec = dir.script("two.json", TWO_IN_SEQUENCE);
    let out = dir.run(&["run", "--model", &spec, "Hi"]).success();
    let command = filled(&answer_commands(&out.stdout).remove(0), "main");
    assert!(
        command.contains("--tool-call-id q1 --model ") && command.ends_with(" --answer main"),
        "{command}"
    );
    let first = outcome(dir.shell(&command)).success();
    assert!(first.stdout.contains("Which branch?"), "{}", first.stdout);
    let run_id = dir.run(&["runs", "list", "--json"]).success().json()[0]["runId"]
        .as_str()
        .unwrap()
        .to_owned();
    let before = dir.show(&run_id);

    // The same command again: a harmless repeat (exit 0), said so; nothing changes.
    let again = outcome(dir.shell(&command)).success();
    assert!(
        again.stderr.contains("tool call q1 of run")
            && again
                .stderr
                .contains("already answered with this answer; nothing changed"),
        "{}",
        again.stderr
    );
    assert_eq!(again.stderr_lines().len(), 1, "{}", again.stderr);
    assert!(again.stdout.is_empty(), "{}", again.stdout);
    // Another answer to the answered call is refused (exit 2); nothing changes.
    let other = dir
        .run(&[
            "resume",
            &run_id,
            "--tool-call-id",
            "q1",
            "--answer",
            "docs",
        ])
        .code(2);
    assert!(
        other.stderr.contains("tool call q1 of run")
            && other.stderr.contains("already answered")
            && !other.stderr.contains("with this answer"),
        "{}",
        other.stderr
    );
    let after = dir.show(&run_id);
    assert_eq!(after, before);
    assert_eq!(after["pending"][0]["toolCallId"], "q2");
}

#[test]
fn issue33_the_printed_pick_several_command_works_once_its_placeholders_are_filled() {
    let dir = TestDir::new();
    let spec = dir.script("multi.json", &multi_select(&["north", "south", "east"]));
    let out = dir.run(&["run", "--model", &spec, "Hi"]).success();
    let command = &answer_commands(&out.stdout)[0];
    assert!(
        command.ends_with("--answer '<label>' --answer '<another label or your own words>'"),
        "{command}"
    );
    let pasted = command
        .replace("'<label>'", "north")
        .replace("'<another label or your own words>'", "east");
    let done = outcome(dir.shell(&pasted)).success();
    assert!(done.stdout.contains("Noted."), "{}", done.stdout);
    let run_id = dir.run(&["runs", "list", "--json"]).success().json()[0]["runId"]
        .as_str()
        .unwrap()
        .to_owned();
    let state = dir.show(&run_id);
    assert_eq!(state["status"], "completed", "{state:#}");
}

#[test]
fn issue33_a_repeat_by_number_or_in_another_case_is_the_same_answer() {
    let dir = TestDir::new();
    let spec = dir.script("two.json", TWO_IN_SEQUENCE);
    dir.run(&["run", "--model", &spec, "Hi"]).success();
    let run_id = dir.run(&["runs", "list", "--json"]).success().json()[0]["runId"]
        .as_str()
        .unwrap()
        .to_owned();
    let answer =
        |given: &str| dir.run(&["resume", &run_id, "--tool-call-id", "q1", "--answer", given]);
    // By the option's number: "main".
    let first = answer("1").success();
    assert!(first.stdout.contains("Which branch?"), "{}", first.stdout);
    let before = dir.show(&run_id);

    // The same command again, the label, or the label in another case: the same answer, so the
    // harmless repeat (exit 0, said so); nothing changes.
    for given in ["1", "main", "MAIN"] {
        let again = answer(given).success();
        assert!(
            again
                .stderr
                .contains("already answered with this answer; nothing changed"),
            "{given}: {}",
            again.stderr
        );
    }
    // Another option, by number or by label: refused (exit 2), as before.
    for given in ["2", "docs"] {
        let other = answer(given).code(2);
        assert!(
            other.stderr.contains("already answered") && !other.stderr.contains("with this answer"),
            "{given}: {}",
            other.stderr
        );
    }
    assert_eq!(dir.show(&run_id), before);
}

#[test]
fn issue7_fault12_ten_copies_of_an_answer_command_have_exactly_one_winner() {
    let dir = TestDir::new();
    let spec = dir.script("two.json", TWO_IN_SEQUENCE);
    let out = dir.run(&["run", "--model", &spec, "Hi"]).success();
    let command = filled(&answer_commands(&out.stdout).remove(0), "main");
    let children: Vec<_> = (0..10)
        .map(|_| dir.shell(&command).spawn().unwrap())
        .collect();
    let outcomes: Vec<_> = children
        .into_iter()
        .map(|child| {
            let output = child.wait_with_output().unwrap();
            (
                output.status.code(),
                String::from_utf8(output.stderr).unwrap(),
            )
        })
        .collect();
    // One applies the answer; the others are harmless repeats (exit 0, said so) or lost the
    // race (exit 1, a conflict): none applies it again.
    let winners = outcomes
        .iter()
        .filter(|(code, stderr)| *code == Some(0) && !stderr.contains("already answered"))
        .count();
    assert_eq!(winners, 1, "{outcomes:#?}");
    for (code, stderr) in &outcomes {
        assert!(
            (*code == Some(0) && !stderr.contains("already answered"))
                || (*code == Some(0) && stderr.contains("already answered with this answer"))
                || (*code == Some(1) && stderr.contains("was applied first")),
            "{outcomes:#?}"
        );
    }
    let run_id = dir.run(&["runs", "list", "--json"]).success().json()[0]["runId"]
        .as_str()
        .unwrap()
        .to_owned();
    let state = dir.show(&run_id);
    assert_eq!(state["status"], "suspended");
    assert_eq!(state["pending"][0]["toolCallId"], "q2");
    let results = tool_results(&state);
    assert_eq!(results.len(), 1, "{results:#?}");
    assert_eq!(results[0]["result"], answered("main"));
}

#[test]
fn issue7_fault12_an_answer_by_run_id_says_which_question_it_answered() {
    let dir = TestDir::new();
    let spec = dir.script("two.json", TWO_IN_SEQUENCE);
    let run_id = dir.start_suspended(&spec);
    let out = dir.run(&["resume", &run_id, "--answer", "main"]).success();
    assert!(
        out.stderr.contains(r#"answered q1: "Which repo?""#),
        "{}",
        out.stderr
    );
    let out = dir
        .run(&["resume", &run_id, "--answer", "dev", "--json"])
        .success();
    assert!(
        out.stderr.contains(r#"answered q2: "Which branch?""#),
        "{}",
        out.stderr
    );
}

#[test]
fn issue7_fault14_a_run_that_was_never_stored_gets_no_continue_hint() {
    let dir = TestDir::new();
    let spec = dir.script("text.json", JUST_TEXT);
    dir.run(&["run", "--model", &spec, "Hi"]).success();
    // Every new run's first write now fails, as on a full or read-only disk.
    let path = dir.path().join("runs.db");
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch(
            "CREATE TRIGGER no_new_runs BEFORE INSERT ON runs \
             BEGIN SELECT RAISE(ABORT, 'disk I/O error'); END",
        )
        .unwrap();
    let out = dir.run(&["run", "--model", &spec, "Hi"]).code(1);
    assert_eq!(out.stderr_lines().len(), 1, "{}", out.stderr);
    assert!(out.stderr.contains("disk I/O error"), "{}", out.stderr);
    assert!(out.stderr.contains("was not stored"), "{}", out.stderr);
    assert!(!out.stderr.contains("runs continue"), "{}", out.stderr);
}

#[test]
fn issue7_fault14_runs_show_cuts_huge_fields_and_json_keeps_them() {
    let dir = TestDir::new();
    let long = "x".repeat(10_000);
    let script = json!({"steps": [{"text": long}]});
    let spec = dir.script("long.json", &script.to_string());
    let json = dir
        .run(&["run", "--json", "--model", &spec, &long])
        .success();
    let run_id = json.json_lines()[0]["runId"].as_str().unwrap().to_owned();
    let human = dir.run(&["runs", "show", &run_id]).success().stdout;
    assert!(
        human.contains("… [8,000 more characters; --json shows everything]"),
        "{human}"
    );
    assert!(human.lines().all(|line| line.chars().count() < 2_100));
    let state = dir.show(&run_id);
    assert_eq!(state["messages"][1]["parts"][0]["text"], long.as_str());
}

/// Asserts one `error: …` line whose causes (the parts between `: `) each appear once: no
/// part contains a later one.
fn assert_each_cause_once(stderr: &str) {
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    let parts: Vec<&str> = stderr.trim_end().split(": ").collect();
    for (index, part) in parts.iter().enumerate() {
        for later in &parts[index + 1..] {
            assert!(!part.contains(later), "{later:?} is repeated in {stderr}");
        }
    }
}

#[test]
fn issue7_errors_each_cause_is_printed_once() {
    let dir = TestDir::new();
    // A database path under a file: SQLite cannot open it (a folder is refused earlier, as
    // invalid input).
    let file = dir.write("a-file", "x");
    let unopenable = format!("sqlite://{}/x.db", file.display());
    let out = outcome(dir.command(&["--store", &unopenable, "runs", "list"])).code(1);
    assert!(
        out.stderr
            .starts_with(&format!("error: cannot open store {unopenable}: ")),
        "{}",
        out.stderr
    );
    assert_each_cause_once(&out.stderr);
    assert_eq!(
        out.stderr.matches("unable to open database file").count(),
        1,
        "{}",
        out.stderr
    );
    let under_file = format!("sqlite://{}/sub/x.db", file.display());
    let out = outcome(dir.command(&[
        "--store",
        &under_file,
        "run",
        "--model",
        "scripted:x.json",
        "Hi",
    ]))
    .code(1);
    assert_each_cause_once(&out.stderr);
    assert_eq!(out.stderr.matches("os error").count(), 1, "{}", out.stderr);
}
