//! Ctrl-C while a model call is under way: the call is cancelled cleanly, the run is recorded
//! as failed (`cancelled`) and `askloop runs continue` finishes it.

use std::net::TcpListener;

use crate::support::{JUST_TEXT, TestDir};

#[test]
fn issue_3_ctrl_c_cancels_the_model_call_and_the_run_can_be_continued() {
    let dir = TestDir::new();
    // A model server that takes the request and never answers.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base_url = format!("http://{}", listener.local_addr().unwrap());
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
    command.env("OLLAMA_BASE_URL", &base_url);
    let child = command.spawn().unwrap();
    // Once the server has the connection, the model call is under way.
    let (connection, _) = listener.accept().unwrap();
    let kill = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
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
    .code(130);
    let lines = out.json_lines();
    let last = lines.last().unwrap();
    assert_eq!(last["type"], "error", "{lines:#?}");
    assert_eq!(last["payload"]["error"]["code"], "cancelled");
    assert!(out.stderr.contains("runs continue"), "{}", out.stderr);
    let run_id = last["runId"].as_str().unwrap();

    let state = dir.show(run_id);
    assert_eq!(state["status"], "failed");
    assert_eq!(state["error"]["code"], "cancelled");
    assert_eq!(state["model"], "ollama:slow");

    // Continue the run, here with another model.
    let spec = dir.script("text.json", JUST_TEXT);
    let out = dir
        .run(&["runs", "continue", run_id, "--model", &spec])
        .success();
    assert_eq!(out.stdout, "Hello there.\n");
    assert_eq!(dir.show(run_id)["status"], "completed");
}

/// SIGTERM and SIGHUP end a run as cleanly as Ctrl-C: the model call is cancelled, the run is
/// recorded as failed (`cancelled`), and it can be continued.
#[test]
fn issue_9_sigterm_and_sighup_end_a_run_as_cleanly_as_ctrl_c() {
    for (signal, status) in [("-TERM", 143), ("-HUP", 129)] {
        let dir = TestDir::new();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base_url = format!("http://{}", listener.local_addr().unwrap());
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
        command.env("OLLAMA_BASE_URL", &base_url);
        let child = command.spawn().unwrap();
        let (connection, _) = listener.accept().unwrap();
        let kill = std::process::Command::new("kill")
            .args([signal, &child.id().to_string()])
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
        assert_eq!(last["payload"]["error"]["code"], "cancelled", "{signal}");
        let run_id = last["runId"].as_str().unwrap();
        let state = dir.show(run_id);
        assert_eq!(state["status"], "failed", "{signal}");
        assert!(
            state["lease"].is_null(),
            "{signal}: a failed run holds no lease"
        );
        let spec = dir.script("text.json", JUST_TEXT);
        let out = dir
            .run(&["runs", "continue", run_id, "--model", &spec])
            .success();
        assert_eq!(out.stdout, "Hello there.\n", "{signal}");
    }
}

/// Issue 33: Ctrl-C while the model loads ("Loading the model… 6s") says the run had not
/// started, that nothing was stored, and the command to run it again; exit 130.
#[test]
fn issue33_ctrl_c_while_the_model_loads_says_nothing_was_stored_and_how_to_run_again() {
    use std::io::{BufRead, BufReader, Read};

    let dir = TestDir::new();
    let spec = dir.script("text.json", JUST_TEXT);
    let store = dir.store_url();
    let mut command = dir.command(&["--store", &store, "run", "--model", &spec, "Plan a trip"]);
    command.env("ASKLOOP_TEST_PAUSE_AT", "model-load");
    command.stderr(std::process::Stdio::piped());
    let mut child = command.spawn().unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    while !seen.contains("paused at model-load") {
        let mut line = String::new();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "{seen}");
        seen.push_str(&line);
    }
    let kill = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    stderr.read_to_string(&mut seen).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{seen}");
    assert!(
        seen.contains("stopped before the run started; nothing was stored; run it again with `"),
        "{seen}"
    );
    assert!(
        seen.contains(" run --model ") && seen.contains("'Plan a trip'`"),
        "{seen}"
    );
    let runs = dir.run(&["runs", "list", "--json"]).success().json();
    assert_eq!(runs, serde_json::json!([]), "nothing was stored");
}
