//! Who may answer, through the binary (issue 34): the CLI acts as `cli:USER` (or `--as NAME`)
//! with the roles of `[cli] roles`; an agent's `roles`, `self_approval` and `quorum` in
//! askloop.toml refuse the run's own starter, an operator without the role and a second vote of
//! one operator (exit status 2, saying why, nothing changed), record a first approval of two
//! and run the tool at the second; `runs show` says who decided, from where.

use serde_json::json;

use crate::support::{TestDir, outcome, tool_results};

const POLICY: &str = "[agents.assistant]\nrequire_approval = true\nroles = [\"ops\"]\n\
                      self_approval = false\nquorum = 2\n";

/// `askloop --store STORE ARGS` with the test tools.
fn cli(dir: &TestDir, store: &str, args: &[&str]) -> crate::support::Outcome {
    let mut full = vec!["--store", store];
    full.extend_from_slice(args);
    let mut command = dir.command(&full);
    command.env("ASKLOOP_TEST_TOOLS", "1");
    outcome(command)
}

#[test]
fn issue34_the_cli_operator_is_held_to_the_agents_approver_policy_on_sqlite() {
    let dir = TestDir::new();
    let store = dir.store_url();
    the_cli_operator_is_held_to_the_agents_approver_policy(&dir, &store);
}

#[cfg(unix)]
#[test]
fn issue34_the_cli_operator_is_held_to_the_agents_approver_policy_on_postgres() {
    let dir = TestDir::new();
    let store = crate::postgres::schema_url(&dir);
    the_cli_operator_is_held_to_the_agents_approver_policy(&dir, &store);
}

fn the_cli_operator_is_held_to_the_agents_approver_policy(dir: &TestDir, store: &str) {
    let show = |run_id: &str| {
        cli(dir, store, &["runs", "show", run_id, "--json"])
            .success()
            .json()
    };
    dir.write(
        "askloop.toml",
        &format!("{POLICY}[cli]\nroles = [\"ops\"]\n"),
    );
    let spec = dir.script(
        "pay.json",
        &json!({"steps": [
            {"toolCalls": [{"id": "p1", "name": "test_pay", "args": {"amount_cents": 500, "to": "ACME"}}]},
            {"text": "Paid."}
        ]})
        .to_string(),
    );
    let out = cli(dir, store, &["run", "--json", "--model", &spec, "Pay ACME"]).success();
    let lines = out.json_lines();
    let approval = lines.last().unwrap();
    assert_eq!(approval["type"], "tool-call-approval", "{lines:#?}");
    assert_eq!(approval["payload"]["quorum"], 2);
    let run_id = approval["runId"].as_str().unwrap().to_owned();
    let before = show(&run_id);
    assert_eq!(before["startedBy"]["id"], "cli:tester", "{before:#}");
    assert_eq!(before["startedBy"]["route"], "cli run");

    // The operator who started the run may not approve it.
    let out = cli(dir, store, &["approve", &run_id]).code(2);
    assert!(
        out.stderr
            .contains("cli:tester started this run and may not approve its calls"),
        "{}",
        out.stderr
    );
    assert_eq!(show(&run_id), before, "a refusal changes nothing");

    // Without `[cli] roles`, the CLI holds no role.
    dir.write("askloop.toml", POLICY);
    let out = cli(dir, store, &["approve", &run_id, "--as", "dan"]).code(2);
    assert!(
        out.stderr.contains("this needs one of the roles ops"),
        "{}",
        out.stderr
    );
    dir.write(
        "askloop.toml",
        &format!("{POLICY}[cli]\nroles = [\"ops\"]\n"),
    );

    // The first of two approvals is recorded; the run still waits, and says so.
    let out = cli(dir, store, &["approve", &run_id, "--as", "bob"]).success();
    assert!(
        out.stdout.contains("approval 1 of 2 recorded: cli:bob"),
        "{}\n{}",
        out.stdout,
        out.stderr
    );
    let state = show(&run_id);
    assert_eq!(state["status"], "suspended");
    assert_eq!(state["pending"][0]["approvals"][0]["by"], "cli:bob");
    let out = cli(dir, store, &["approve", &run_id, "--as", "bob"]).code(2);
    assert!(
        out.stderr.contains("cli:bob already approved this call"),
        "{}",
        out.stderr
    );

    // A second approver: the tool runs (and asks its own question).
    let out = cli(dir, store, &["approve", &run_id, "--as", "carol", "--json"]).success();
    let lines = out.json_lines();
    assert_eq!(
        lines.last().unwrap()["type"],
        "tool-call-suspended",
        "{lines:#?}"
    );
    cli(
        dir,
        store,
        &[
            "resume",
            &run_id,
            "--tool-call-id",
            "p1",
            "--answer",
            r#"{"amount_cents": 500, "confirmed": true, "speed": "standard"}"#,
        ],
    )
    .success();
    let state = show(&run_id);
    assert_eq!(state["status"], "completed", "{state:#}");
    let audit = &tool_results(&state)[0]["audit"];
    assert_eq!(audit[0]["by"], "cli:bob");
    assert_eq!(audit[0]["route"], "cli approve");
    assert_eq!(audit[0]["roles"], json!(["ops"]));
    assert_eq!(audit[1]["by"], "cli:carol");
    assert_eq!(audit[2]["action"], "answer");
    assert_eq!(audit[2]["by"], "cli:tester");
    assert_eq!(audit[2]["route"], "cli resume");

    let out = cli(dir, store, &["runs", "show", &run_id]).success();
    assert!(
        out.stdout
            .contains("approve by cli:bob (roles ops; via cli approve) at "),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("started   by cli:tester (roles ops; via cli run)"),
        "{}",
        out.stdout
    );
}
