//! Crash safety (issue 9): an `askloop` process is killed with SIGKILL at each phase of a run,
//! then other processes look at the run and finish it. After every kill the run is resumable,
//! continuable, finished or failed with a stated reason: never a lost answer, never a stale
//! status.
//!
//! The phase is chosen with the test-only `ASKLOOP_TEST_PAUSE_AT` (the CLI's `test_hook`): the
//! process prints a marker there and waits; the test kills it. Leases are short
//! (`ASKLOOP_LEASE_MS`), so a killed process's run can be taken over within seconds.
//!
//! The tests are written once, over a store URL: `crash_tests!(NAME, |dir: &TestDir| URL)`
//! expands to one test per phase on that store (each test gets a fresh [`TestDir`]; the
//! closure makes the store URL for it, e.g. a fresh PostgreSQL schema).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{ASK_THEN_ANSWER, Outcome, TestDir, answered, outcome, tool_results};

/// The lease of every process in these tests: long enough that a refusal of a live lease can
/// be observed, short enough that takeovers come soon.
const LEASE_MS: &str = "5000";

/// A step with two questions at once: the first has no question (an error result, at once),
/// the second suspends.
const SIBLINGS: &str = r#"{"steps":[
  {"text":"Two things.","toolCalls":[
    {"id":"bad","name":"ask_user","args":{"question":""}},
    {"id":"c2","name":"ask_user","args":{"question":"Which repo?","options":[{"label":"main"},{"label":"docs"}]}}]},
  {"text":"Done."}
]}"#;

/// One crash test: its directory and store.
pub struct Crash {
    dir: TestDir,
    store: String,
}

impl Crash {
    pub fn new(make_store: impl FnOnce(&TestDir) -> String) -> Self {
        let dir = TestDir::new();
        let store = make_store(&dir);
        Self { dir, store }
    }

    /// The test's directory.
    pub fn dir(&self) -> &TestDir {
        &self.dir
    }

    pub fn script(&self, text: &str) -> String {
        self.dir.script("script.json", text)
    }

    /// Writes askloop.toml in the test's folder (what every command there reads).
    pub fn config(&self, text: &str) {
        self.dir.write("askloop.toml", text);
    }

    /// `askloop --store STORE ARGS` with the short lease, paused at `pause` if given.
    fn command(&self, args: &[&str], pause: Option<&str>) -> Command {
        let mut full = vec!["--store", self.store.as_str()];
        full.extend_from_slice(args);
        let mut command = self.dir.command(&full);
        command.env("ASKLOOP_LEASE_MS", LEASE_MS);
        if let Some(pause) = pause {
            command.env("ASKLOOP_TEST_PAUSE_AT", pause);
        }
        command
    }

    pub fn run(&self, args: &[&str]) -> Outcome {
        outcome(self.command(args, None))
    }

    /// Runs `askloop ARGS` until it pauses at `pause`, then kills it with SIGKILL.
    pub fn kill_at(&self, args: &[&str], pause: &str) {
        let mut child = self
            .command(args, Some(pause))
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let mut seen = Vec::new();
        for line in BufReader::new(stderr).lines() {
            let line = line.unwrap();
            let paused = line.starts_with("askloop-test: paused at ");
            seen.push(line);
            if paused {
                break;
            }
        }
        assert!(
            seen.last()
                .is_some_and(|line| line == &format!("askloop-test: paused at {pause}")),
            "askloop {args:?} never paused at {pause}: {seen:#?}"
        );
        child.kill().unwrap();
        let status = child.wait().unwrap();
        assert!(!status.success(), "killed: {status:?}");
    }

    /// The one run of this store.
    pub fn only_run(&self) -> String {
        let out = self.run(&["runs", "list", "--json"]).success();
        let runs = out.json();
        let runs = runs.as_array().unwrap();
        assert_eq!(runs.len(), 1, "{runs:#?}");
        runs[0]["runId"].as_str().unwrap().to_owned()
    }

    /// `runs show RUN --json`.
    pub fn show(&self, run_id: &str) -> Value {
        self.run(&["runs", "show", run_id, "--json"])
            .success()
            .json()
    }

    /// Waits until the run's lease expired (its process is dead): the lease is not renewed.
    pub fn wait_for_expiry(&self, run_id: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let state = self.show(run_id);
            if state["lease"].is_null() || state["lease"]["live"] == false {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the lease never expired: {state:#}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A suspended run named `run_id` is started with `script` and waits for c1.
    pub fn start_suspended(&self, spec: &str) -> String {
        let out = self
            .run(&["run", "--json", "--model", spec, "Summarize my project"])
            .success();
        let lines = out.json_lines();
        assert_eq!(lines.last().unwrap()["type"], "tool-call-suspended");
        lines.last().unwrap()["runId"].as_str().unwrap().to_owned()
    }
}

/// Asserts the run is running and refuses a continue while its lease lives, saying so.
fn refused_while_leased(crash: &Crash, run_id: &str) {
    let state = crash.show(run_id);
    assert_eq!(state["status"], "running", "{state:#}");
    let out = crash.run(&["runs", "continue", run_id]);
    if out.code == 1 {
        assert!(
            out.stderr.contains("is being run by another process")
                && out.stderr.contains("runs continue"),
            "{out:#?}"
        );
    } else {
        panic!(
            "a continue of a leased run must be refused (or the lease already expired): {out:#?}"
        )
    }
}

/// Answers c1 and checks the run completes with that answer, once.
fn answer_and_finish(crash: &Crash, run_id: &str, call: &str, text: &str) {
    crash
        .run(&["resume", run_id, "--tool-call-id", call, "--answer", "main"])
        .success();
    let state = crash.show(run_id);
    assert_eq!(state["status"], "completed", "{state:#}");
    let results = tool_results(&state);
    let answers: Vec<_> = results
        .iter()
        .filter(|result| result["toolCallId"] == call)
        .collect();
    assert_eq!(answers.len(), 1, "{results:#?}");
    assert_eq!(answers[0]["result"], answered("main"));
    let last = state["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["parts"][0]["text"], text, "{state:#}");
}

pub fn while_the_model_streams(crash: &Crash) {
    let spec = crash.script(ASK_THEN_ANSWER);
    crash.kill_at(&["run", "--model", &spec, "Summarize"], "model-stream#1");
    let run_id = crash.only_run();
    refused_while_leased(crash, &run_id);
    crash.wait_for_expiry(&run_id);
    let listed = crash.run(&["runs", "recover", "--list"]).success();
    assert!(listed.stdout.contains(&run_id), "{listed:#?}");
    let human = crash.run(&["runs", "show", &run_id]).success();
    assert!(
        human.stdout.contains("the process running it stopped")
            && human.stdout.contains("runs continue"),
        "{human:#?}"
    );
    // `runs recover` continues it: the model is called again and asks.
    crash.run(&["runs", "recover"]).success();
    let state = crash.show(&run_id);
    assert_eq!(state["status"], "suspended", "{state:#}");
    assert_eq!(state["pending"][0]["toolCallId"], "c1");
    let again = crash.run(&["runs", "recover", "--list"]).success();
    assert!(!again.stdout.contains(&run_id), "{again:#?}");
    answer_and_finish(crash, &run_id, "c1", "Summary of the repo.");
}

pub fn after_a_sibling_completed_before_the_suspension_commit(crash: &Crash) {
    let spec = crash.script(SIBLINGS);
    crash.kill_at(&["run", "--model", &spec, "Go"], "before-commit#1");
    let run_id = crash.only_run();
    let state = crash.show(&run_id);
    assert_eq!(state["status"], "running", "{state:#}");
    assert!(state["pending"].as_array().unwrap().is_empty());
    crash.wait_for_expiry(&run_id);
    // Continuable: the step is redone, and the question is asked (and stored) this time.
    let out = crash.run(&["runs", "continue", &run_id]).success();
    assert!(out.stdout.contains("Which repo?"), "{out:#?}");
    let state = crash.show(&run_id);
    assert_eq!(state["status"], "suspended", "{state:#}");
    let pending: Vec<_> = state["pending"]
        .as_array()
        .unwrap()
        .iter()
        .map(|call| call["toolCallId"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(pending, ["c2"]);
    answer_and_finish(crash, &run_id, "c2", "Done.");
}

pub fn right_after_the_suspension_commit(crash: &Crash) {
    let spec = crash.script(ASK_THEN_ANSWER);
    crash.kill_at(&["run", "--model", &spec, "Summarize"], "after-commit#1");
    let run_id = crash.only_run();
    let state = crash.show(&run_id);
    assert_eq!(state["status"], "suspended", "{state:#}");
    assert!(state["lease"].is_null(), "a suspended run holds no lease");
    assert_eq!(state["pending"][0]["toolCallId"], "c1");
    // Resumable at once, from another process.
    answer_and_finish(crash, &run_id, "c1", "Summary of the repo.");
}

pub fn after_a_resume_claimed_the_call(crash: &Crash) {
    let spec = crash.script(ASK_THEN_ANSWER);
    let run_id = crash.start_suspended(&spec);
    crash.kill_at(
        &[
            "resume",
            &run_id,
            "--tool-call-id",
            "c1",
            "--answer",
            "main",
        ],
        "after-commit#1",
    );
    let state = crash.show(&run_id);
    assert_eq!(state["status"], "running", "{state:#}");
    assert_eq!(state["unfinished"][0]["toolCallId"], "c1");
    assert_eq!(
        state["unfinished"][0]["answer"], "main",
        "the answer is kept"
    );
    // The same answer again: nothing to do, exit 0, and it says so.
    let same = crash
        .run(&[
            "resume",
            &run_id,
            "--tool-call-id",
            "c1",
            "--answer",
            "main",
        ])
        .success();
    assert!(
        same.stderr.contains("already answered with this answer"),
        "{same:#?}"
    );
    // Issue 33: true whether the process lives or was killed: it holds the run until its
    // lease ends, and `runs continue` works from then.
    assert!(
        same.stderr.contains("holds the run until")
            && same.stderr.contains("runs continue")
            && same.stderr.contains("works from then")
            && !same.stderr.contains("running it now"),
        "{same:#?}"
    );
    let other = crash
        .run(&[
            "resume",
            &run_id,
            "--tool-call-id",
            "c1",
            "--answer",
            "docs",
        ])
        .code(1);
    assert!(
        other.stderr.contains("holds the run until") && other.stderr.contains("works from then"),
        "{other:#?}"
    );
    crash.wait_for_expiry(&run_id);
    // Another answer: the process that took the first one stopped; what to run.
    let other = crash
        .run(&[
            "resume",
            &run_id,
            "--tool-call-id",
            "c1",
            "--answer",
            "docs",
        ])
        .code(1);
    assert!(
        other.stderr.contains("stopped before recording its result")
            && other.stderr.contains("runs continue")
            && !other.stderr.contains("concurrently"),
        "{other:#?}"
    );
    let human = crash.run(&["runs", "show", &run_id]).success();
    assert!(
        human.stdout.contains("the answer it kept: \"main\""),
        "{human:#?}"
    );
    // Continue: ask_user is idempotent, so its resume path runs again with the kept answer.
    crash.run(&["runs", "continue", &run_id]).success();
    let state = crash.show(&run_id);
    assert_eq!(state["status"], "completed", "{state:#}");
    assert_eq!(
        without_audit(tool_results(&state)),
        [answered_result("c1", "main")]
    );
}

fn answered_result(call: &str, answer: &str) -> Value {
    serde_json::json!({
        "toolCallId": call,
        "toolName": "ask_user",
        "result": answered(answer),
        "isError": false,
        "answer": answer,
    })
}

pub fn during_the_model_call_after_a_resume(crash: &Crash) {
    let spec = crash.script(ASK_THEN_ANSWER);
    let run_id = crash.start_suspended(&spec);
    crash.kill_at(
        &[
            "resume",
            &run_id,
            "--tool-call-id",
            "c1",
            "--answer",
            "docs",
        ],
        "model-stream#1",
    );
    refused_while_leased(crash, &run_id);
    crash.wait_for_expiry(&run_id);
    crash.run(&["runs", "continue", &run_id]).success();
    let state = crash.show(&run_id);
    assert_eq!(state["status"], "completed", "{state:#}");
    assert_eq!(
        without_audit(tool_results(&state)),
        [answered_result("c1", "docs")]
    );
}

pub fn during_runs_continue(crash: &Crash) {
    let spec = crash.script(ASK_THEN_ANSWER);
    crash.kill_at(&["run", "--model", &spec, "Summarize"], "model-stream#1");
    let run_id = crash.only_run();
    crash.wait_for_expiry(&run_id);
    // The continue dies too, while its model streams.
    crash.kill_at(&["runs", "continue", &run_id], "model-stream#1");
    refused_while_leased(crash, &run_id);
    crash.wait_for_expiry(&run_id);
    crash.run(&["runs", "continue", &run_id]).success();
    let state = crash.show(&run_id);
    assert_eq!(state["status"], "suspended", "{state:#}");
    answer_and_finish(crash, &run_id, "c1", "Summary of the repo.");
}

/// One test per phase on the store `$store` makes (`|dir: &TestDir| -> String`).
#[macro_export]
macro_rules! crash_tests {
    ($name:ident, $store:expr) => {
        mod $name {

            #[test]
            fn while_the_model_streams() {
                $crate::crash::while_the_model_streams(&$crate::crash::Crash::new($store));
            }

            #[test]
            fn after_a_sibling_completed_before_the_suspension_commit() {
                $crate::crash::after_a_sibling_completed_before_the_suspension_commit(
                    &$crate::crash::Crash::new($store),
                );
            }

            #[test]
            fn right_after_the_suspension_commit() {
                $crate::crash::right_after_the_suspension_commit(&$crate::crash::Crash::new(
                    $store,
                ));
            }

            #[test]
            fn after_a_resume_claimed_the_call() {
                $crate::crash::after_a_resume_claimed_the_call(&$crate::crash::Crash::new($store));
            }

            #[test]
            fn during_the_model_call_after_a_resume() {
                $crate::crash::during_the_model_call_after_a_resume(&$crate::crash::Crash::new(
                    $store,
                ));
            }

            #[test]
            fn during_runs_continue() {
                $crate::crash::during_runs_continue(&$crate::crash::Crash::new($store));
            }

            #[test]
            fn issue34_events_committed_before_a_kill_are_delivered_once() {
                $crate::webhooks::issue34_events_committed_before_a_kill_are_delivered_once(
                    &$crate::crash::Crash::new($store),
                );
            }
        }
    };
}

crash_tests!(sqlite, |dir: &crate::support::TestDir| dir.store_url());
crash_tests!(postgres, |dir: &crate::support::TestDir| {
    crate::postgres::schema_url(dir)
});

/// Results without their audit trail (its times vary from run to run).
/// The results without their audit and without the question an answered call keeps (checked
/// here to be the question it asked: issue 34's fork reads it).
fn without_audit(mut results: Vec<serde_json::Value>) -> Vec<serde_json::Value> {
    for result in &mut results {
        if let Some(fields) = result.as_object_mut() {
            fields.remove("audit");
            if fields.contains_key("answer") {
                let question = fields.remove("suspension");
                assert!(
                    question
                        .as_ref()
                        .is_some_and(|question| question["payload"]["question"].is_string()),
                    "an answered call keeps its question: {question:?}"
                );
            }
        }
    }
    results
}
