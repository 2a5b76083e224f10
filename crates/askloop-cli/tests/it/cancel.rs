//! A running turn can be stopped from another process (issue 31): `askloop runs cancel RUN_ID`
//! while another `askloop run` process is in its model call (paused there by the test-only
//! `ASKLOOP_TEST_PAUSE_AT=model-stream`) cancels the run, and that process notices within
//! moments, ends (exit status 1, "was cancelled") and leaves the run `cancelled`.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::{ASK_THEN_ANSWER, TestDir, outcome};

fn cancel_a_run_driven_by_another_process(dir: &TestDir, store: &str) {
    let spec = dir.script("script.json", ASK_THEN_ANSWER);
    let mut child = dir
        .command(&["--store", store, "run", "--model", &spec, "Summarize"])
        .env("ASKLOOP_TEST_PAUSE_AT", "model-stream#1")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while stderr.read_line(&mut line).unwrap() > 0 && !line.starts_with("askloop-test: paused at") {
        line.clear();
    }
    assert!(line.starts_with("askloop-test: paused at"), "{line}");
    let listed = outcome(dir.command(&["--store", store, "runs", "list", "--json"])).success();
    let runs = listed.json();
    let run_id = runs[0]["runId"].as_str().unwrap().to_owned();
    assert_eq!(runs[0]["status"], "running");

    let cancelled = outcome(dir.command(&["--store", store, "runs", "cancel", &run_id])).success();
    assert!(
        cancelled
            .stderr
            .contains(&format!("run {run_id} is cancelled")),
        "{cancelled:#?}"
    );
    // The driving process stops on its own, promptly.
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the driving process did not stop within 5 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    assert_eq!(status.code(), Some(1), "{rest}");
    assert!(
        rest.contains(&format!("run {run_id} was cancelled")),
        "{rest}"
    );
    let shown = outcome(dir.command(&["--store", store, "runs", "show", &run_id, "--json"]))
        .success()
        .json();
    assert_eq!(shown["status"], "cancelled", "{shown:#}");
    // Cancelled is final.
    outcome(dir.command(&["--store", store, "runs", "continue", &run_id])).code(2);
}

#[test]
fn issue31_runs_cancel_stops_a_run_of_another_process_sqlite() {
    let dir = TestDir::new();
    let store = dir.store_url();
    cancel_a_run_driven_by_another_process(&dir, &store);
}

#[test]
fn issue31_runs_cancel_stops_a_run_of_another_process_postgres() {
    let dir = TestDir::new();
    let store = crate::postgres::schema_url(&dir);
    cancel_a_run_driven_by_another_process(&dir, &store);
}
