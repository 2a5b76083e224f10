//! People in the loop beyond one question, through the binary: `runs cancel`, `runs sweep`,
//! a new message to a thread whose run waits, and the audit `runs show` prints.

use serde_json::{Value, json};

use crate::support::{TestDir, tool_results};

/// One question, then a final text.
fn one_question(dir: &TestDir) -> String {
    dir.script(
        "ask.json",
        &json!({"steps": [
            {"toolCalls": [{"id": "c1", "name": "ask_user", "args": {"question": "Which repo?"}}]},
            {"text": "All done."}
        ]})
        .to_string(),
    )
}

#[test]
fn runs_cancel_resolves_the_question_and_refuses_answers() {
    let dir = TestDir::new();
    let spec = one_question(&dir);
    let run_id = dir.start_suspended(&spec);
    let out = dir.run(&["runs", "cancel", &run_id]).success();
    assert!(out.stderr.contains("cancelled"), "{}", out.stderr);
    let state = dir.show(&run_id);
    assert_eq!(state["status"], "cancelled");
    let result = &tool_results(&state)[0];
    assert_eq!(result["isError"], Value::Bool(true));
    assert_eq!(result["audit"][0]["action"], "cancel");
    assert_eq!(result["audit"][0]["by"], "cli:tester");
    let out = dir
        .run(&[
            "resume",
            &run_id,
            "--tool-call-id",
            "c1",
            "--answer",
            "main",
        ])
        .code(2);
    assert!(out.stderr.contains("cancelled"), "{}", out.stderr);
    let out = dir.run(&["runs", "cancel", &run_id]).code(2);
    assert!(out.stderr.contains("is cancelled"), "{}", out.stderr);
    let listed = dir
        .run(&["runs", "list", "--status", "cancelled", "--json"])
        .success()
        .json();
    assert_eq!(listed.as_array().unwrap().len(), 1);
    // The human view shows who did it.
    let out = dir.run(&["runs", "show", &run_id]).success();
    assert!(out.stdout.contains("cancel by cli"), "{}", out.stdout);
}

#[test]
fn runs_sweep_expires_overdue_questions_once() {
    let dir = TestDir::new();
    dir.write(
        "askloop.toml",
        "[agents.assistant]\nquestion_timeout_seconds = 1\n",
    );
    let spec = one_question(&dir);
    let run_id = dir.start_suspended(&spec);
    let state = dir.show(&run_id);
    assert!(
        state["pending"][0]["payload"]["expiresAt"].is_string()
            && state["pending"][0]["expiresAt"] == state["pending"][0]["payload"]["expiresAt"],
        "{state:#}"
    );
    let out = dir.run(&["runs", "sweep"]).success();
    assert!(
        out.stderr.contains("no question or approval has expired"),
        "{}",
        out.stderr
    );
    // Sweep until the question is due (one second after it was asked), for at most 10 s.
    let started = std::time::Instant::now();
    let out = loop {
        let out = dir.run(&["runs", "sweep"]).success();
        if !out.stderr.contains("no question or approval has expired") {
            break out;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "the question never expired"
        );
    };
    assert!(
        out.stdout.contains("All done."),
        "{}\n{}",
        out.stdout,
        out.stderr
    );
    let state = dir.show(&run_id);
    assert_eq!(state["status"], "completed");
    let result = &tool_results(&state)[0];
    assert!(
        result.to_string().contains("no answer came in time"),
        "{result}"
    );
    assert_eq!(result["audit"][0]["action"], "expire");
    let out = dir.run(&["runs", "sweep"]).success();
    assert!(
        out.stderr.contains("no question or approval has expired"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_new_message_to_a_waiting_thread_answers_its_question_and_goes_on() {
    let dir = TestDir::new();
    let spec = dir.script(
        "two.json",
        &json!({"steps": [
            {"toolCalls": [{"id": "c1", "name": "ask_user", "args": {"question": "Which repo?"}}]},
            {"text": "Using the docs repo."}
        ]})
        .to_string(),
    );
    let out = dir
        .run(&[
            "run",
            "--json",
            "--model",
            &spec,
            "--thread",
            "t1",
            "Summarize",
        ])
        .success();
    let first = out.json_lines().last().unwrap()["runId"]
        .as_str()
        .unwrap()
        .to_owned();
    let out = dir
        .run(&[
            "run",
            "--model",
            &spec,
            "--thread",
            "t1",
            "the docs repo, please",
        ])
        .success();
    assert!(
        out.stdout.contains("Using the docs repo."),
        "{}",
        out.stdout
    );
    let state = dir.show(&first);
    assert_eq!(state["status"], "completed");
    assert_eq!(state["finishReason"], "superseded", "{state:#}");
    let result = &tool_results(&state)[0];
    assert!(
        result.to_string().contains("the docs repo, please"),
        "{result}"
    );
    assert_eq!(result["audit"][0]["action"], "message");
}

#[test]
fn require_approval_naming_an_unknown_tool_or_ask_user_is_refused() {
    let dir = TestDir::new();
    let spec = one_question(&dir);
    for names in ["[\"write_fle\"]", "[\"ask_user\"]"] {
        dir.write(
            "askloop.toml",
            &format!("[agents.assistant]\nrequire_approval = {names}\n"),
        );
        let out = dir.run(&["run", "--model", &spec, "go"]).code(2);
        assert!(out.stderr.contains("require_approval"), "{}", out.stderr);
    }
}

/// `askloop ARGS` on this test's store with the test tools (`test_pay`).
#[cfg(feature = "test-hooks")]
fn with_test_tools(dir: &TestDir, args: &[&str]) -> crate::support::Outcome {
    let store = dir.store_url();
    let mut full = vec!["--store", store.as_str()];
    full.extend_from_slice(args);
    let mut command = dir.command(&full);
    command.env("ASKLOOP_TEST_TOOLS", "1");
    crate::support::outcome(command)
}

#[cfg(feature = "test-hooks")]
#[test]
fn issue31_a_late_approval_says_it_expired_and_exits_2() {
    let dir = TestDir::new();
    // Every tool but ask_user needs approval, and an approval expires as soon as it is asked.
    dir.write(
        "askloop.toml",
        "[agents.assistant]\nrequire_approval = true\napproval_timeout = \"0s\"\n",
    );
    let spec = dir.script(
        "pay.json",
        &json!({"steps": [
            {"toolCalls": [{"id": "p1", "name": "test_pay", "args": {"amount_cents": 500, "to": "ACME"}}]},
            {"text": "Not paid: nobody approved in time."}
        ]})
        .to_string(),
    );
    let out = with_test_tools(&dir, &["run", "--json", "--model", &spec, "Pay ACME"]).success();
    let lines = out.json_lines();
    let approval = lines.last().unwrap();
    assert_eq!(approval["type"], "tool-call-approval", "{lines:#?}");
    let expires_at = approval["payload"]["expiresAt"]
        .as_str()
        .unwrap()
        .to_owned();
    let run_id = approval["runId"].as_str().unwrap().to_owned();
    let state = dir.show(&run_id);
    assert_eq!(state["pending"][0]["kind"], "approval", "{state:#}");
    assert_eq!(state["pending"][0]["expiresAt"], expires_at, "{state:#}");
    assert_eq!(state["pending"][0]["payload"]["expiresAt"], expires_at);

    // Past its deadline, before any sweep, and again after the sweep resolved it: refused as
    // expired (exit status 2), saying when; the tool never runs.
    for phase in ["before the sweep", "after the sweep"] {
        let out = with_test_tools(&dir, &["approve", &run_id, "--tool-call-id", "p1"]).code(2);
        assert!(
            out.stderr.contains(&format!(
                "tool call p1 of run {run_id} expired at {expires_at}"
            )),
            "{phase}: {}",
            out.stderr
        );
        assert!(!out.stderr.contains("already answered"), "{}", out.stderr);
        if phase == "before the sweep" {
            let out = with_test_tools(&dir, &["runs", "sweep"]).success();
            assert!(
                out.stdout.contains("Not paid: nobody approved in time."),
                "{}\n{}",
                out.stdout,
                out.stderr
            );
        }
    }
    let state = dir.show(&run_id);
    assert_eq!(state["status"], "completed");
    let result = &tool_results(&state)[0];
    let text = result["result"]["content"].as_str().unwrap();
    assert!(text.contains("no decision came in time"), "{result}");
    assert!(text.contains("the tool did not run"), "{result}");
    assert_eq!(result["audit"][0]["action"], "expire");
    assert_eq!(result["audit"][0]["by"], "sweep");
    let out = with_test_tools(&dir, &["decline", &run_id, "--tool-call-id", "p1"]).code(2);
    assert!(out.stderr.contains("expired at"), "{}", out.stderr);
}

#[cfg(feature = "test-hooks")]
#[test]
fn issue34_approve_with_edited_args_checks_them_then_runs_the_tool_with_them() {
    let dir = TestDir::new();
    dir.write(
        "askloop.toml",
        "[agents.assistant]\nrequire_approval = true\n",
    );
    let spec = dir.script(
        "pay.json",
        &json!({"steps": [
            {"toolCalls": [{"id": "p1", "name": "test_pay", "args": {"amount_cents": 500, "to": "ACME"}}]},
            {"text": "Paid."}
        ]})
        .to_string(),
    );
    let out = with_test_tools(&dir, &["run", "--json", "--model", &spec, "Pay ACME"]).success();
    let lines = out.json_lines();
    assert_eq!(
        lines.last().unwrap()["type"],
        "tool-call-approval",
        "{lines:#?}"
    );
    let run_id = lines[0]["runId"].as_str().unwrap().to_owned();
    let before = dir.show(&run_id);

    // Not JSON, then JSON that does not fit the tool: exit status 2, every problem, nothing
    // changes.
    let out = with_test_tools(&dir, &["approve", &run_id, "--args", "{amount"]).code(2);
    assert!(out.stderr.contains("--args is not JSON"), "{}", out.stderr);
    let out = with_test_tools(
        &dir,
        &["approve", &run_id, "--args", r#"{"amount_cents": "lots"}"#],
    )
    .code(2);
    assert!(
        out.stderr
            .contains("invalid arguments for test_pay call p1"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("amount_cents"), "{}", out.stderr);
    assert!(out.stderr.contains("to"), "{}", out.stderr);
    assert_eq!(dir.show(&run_id), before, "a refusal changes nothing");

    // Fitting arguments: the tool runs with them (and asks its question about them).
    let out = with_test_tools(
        &dir,
        &[
            "approve",
            &run_id,
            "--args",
            r#"{"amount_cents": 300, "to": "Globex"}"#,
            "--json",
        ],
    )
    .success();
    let lines = out.json_lines();
    let asked = lines.last().unwrap();
    assert_eq!(asked["type"], "tool-call-suspended", "{lines:#?}");
    assert_eq!(
        asked["payload"]["suspendPayload"]["question"],
        "Pay 300 cents to Globex?"
    );
    assert_eq!(
        asked["payload"]["args"],
        json!({"amount_cents": 500, "to": "ACME"}),
        "the model's call stays as it wrote it"
    );
    with_test_tools(
        &dir,
        &[
            "resume",
            &run_id,
            "--tool-call-id",
            "p1",
            "--answer",
            r#"{"amount_cents": 300, "confirmed": true, "speed": "standard"}"#,
        ],
    )
    .success();
    let state = dir.show(&run_id);
    assert_eq!(state["status"], "completed", "{state:#}");
    let result = &tool_results(&state)[0];
    assert_eq!(result["result"]["to"], "Globex", "{result}");
    assert_eq!(result["audit"][0]["action"], "approve", "{result}");
    assert_eq!(result["audit"][0]["by"], "cli:tester");
    assert_eq!(
        result["audit"][0]["argsEdit"],
        json!({"original": {"amount_cents": 500, "to": "ACME"},
               "edited": {"amount_cents": 300, "to": "Globex"}})
    );
    assert_eq!(result["audit"][1]["action"], "answer", "{result}");
    let out = dir.run(&["runs", "show", &run_id]).success();
    assert!(
        out.stdout.contains("arguments edited from"),
        "{}",
        out.stdout
    );
}

#[test]
fn issue31_a_late_answer_to_a_run_that_failed_after_the_expiry_still_says_it_expired() {
    let dir = TestDir::new();
    dir.write(
        "askloop.toml",
        "[agents.assistant]\nquestion_timeout_seconds = 0\n",
    );
    // The question expires at once; the model call after the sweep fails.
    let spec = dir.script(
        "ask.json",
        &json!({"steps": [
            {"toolCalls": [{"id": "c1", "name": "ask_user", "args": {"question": "Which repo?"}}]},
            {"error": "HTTP 500"}
        ]})
        .to_string(),
    );
    let run_id = dir.start_suspended(&spec);
    dir.run(&["runs", "sweep"]);
    assert_eq!(dir.show(&run_id)["status"], "failed");
    for command in [
        vec![
            "resume",
            &run_id,
            "--tool-call-id",
            "c1",
            "--answer",
            "main",
        ],
        vec!["approve", &run_id, "--tool-call-id", "c1"],
    ] {
        let out = dir.run(&command).code(2);
        assert!(
            out.stderr
                .contains(&format!("tool call c1 of run {run_id} expired at")),
            "{command:?}: {}",
            out.stderr
        );
    }
}
