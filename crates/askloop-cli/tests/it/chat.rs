//! `askloop chat` fed by a pipe: one thread, questions answered by the next line.

use std::io::Write;
use std::process::Stdio;

use crate::support::{TestDir, answered, tool_results};

/// Turn 1 asks a question, then answers; turn 2 (the same thread: its request holds turn 1's
/// two assistant messages) answers from the third step.
const CONVERSATION: &str = r#"{"steps":[
  {"toolCalls":[{"id":"c1","name":"ask_user","args":{"question":"Which city?","options":[{"label":"Lisbon"},{"label":"Kyoto"}]}}]},
  {"text":"Lisbon it is."},
  {"text":"Still Lisbon, as we said."}
]}"#;

fn chat(dir: &TestDir, spec: &str, input: &str) -> crate::support::Outcome {
    let store = dir.store_url();
    let mut command = dir.command(&["--store", &store, "chat", "--model", spec]);
    command.stdin(Stdio::piped());
    let mut child = command.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    crate::support::Outcome {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8(output.stdout).unwrap(),
        stderr: String::from_utf8(output.stderr).unwrap(),
    }
}

#[test]
fn chat_keeps_one_thread_and_takes_answers_inline() {
    let dir = TestDir::new();
    // The built-in agent would take "Paris" as the person's own words.
    dir.labels_only();
    let spec = dir.script("chat.json", CONVERSATION);
    // "Paris" is refused and asked again; "1" picks the first label.
    let out = chat(&dir, &spec, "Plan a trip\nParis\n1\nAnd again?\n").success();
    assert!(
        out.stdout
            .contains("Which city? (choose one)\n  1. Lisbon\n  2. Kyoto\n"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("Lisbon it is.\n"), "{}", out.stdout);
    assert!(
        out.stdout.ends_with("Still Lisbon, as we said.\n"),
        "{}",
        out.stdout
    );
    assert!(
        out.stderr.contains(r#""Paris" is not one of the labels"#),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("chat --model scripted:") && out.stderr.contains(" --thread "),
        "{}",
        out.stderr
    );

    let runs = dir.run(&["runs", "list", "--json"]).success().json();
    let runs = runs.as_array().unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0]["threadId"], runs[1]["threadId"]);
    let first = dir.show(runs[1]["runId"].as_str().unwrap());
    assert_eq!(tool_results(&first)[0]["result"], answered("Lisbon"));
}

#[test]
fn chat_leaves_the_run_suspended_when_input_ends_at_a_question() {
    let dir = TestDir::new();
    let spec = dir.script("chat.json", CONVERSATION);
    let out = chat(&dir, &spec, "Plan a trip\n").success();
    assert!(
        out.stdout.contains("is waiting for an answer"),
        "{}",
        out.stdout
    );
    let suspended = dir
        .run(&["runs", "list", "--status", "suspended", "--json"])
        .success()
        .json();
    assert_eq!(suspended.as_array().unwrap().len(), 1);
}

#[cfg(unix)]
#[test]
fn ctrl_c_while_chat_waits_for_a_message_exits_130() {
    use std::io::{BufRead, BufReader};

    let dir = TestDir::new();
    let spec = dir.script("chat.json", CONVERSATION);
    let store = dir.store_url();
    let mut command = dir.command(&["--store", &store, "chat", "--model", &spec]);
    command.stdin(Stdio::piped());
    let mut child = command.spawn().unwrap();
    let stdin = child.stdin.take().unwrap();
    // The handler is in place before the greeting is printed.
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut greeting = String::new();
    stderr.read_line(&mut greeting).unwrap();
    assert!(greeting.starts_with("chatting with"), "{greeting}");
    let kill = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    assert_eq!(child.wait().unwrap().code(), Some(130));
    drop(stdin);
}
