//! Choosing the store: `--store`, `ASKLOOP_STORE`, askloop.toml's `store`, the default file.

use crate::support::{ASK_THEN_ANSWER, BIN, JUST_TEXT, TestDir, outcome};

#[test]
fn the_default_store_is_a_sqlite_file_in_the_data_folder() {
    let dir = TestDir::new();
    let spec = dir.script("ask.json", ASK_THEN_ANSWER);
    let started = outcome(dir.command(&["run", "--json", "--model", &spec, "Hi"])).success();
    let run_id = started.json_lines()[0]["runId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(dir.path().join("data/askloop.db").is_file());
    // The printed resume command needs no --store for the default store.
    let human = outcome(dir.command(&["runs", "show", &run_id])).success();
    assert!(
        human.stdout.contains(&format!(
            "answer with: {BIN} resume {run_id} --tool-call-id c1 --answer '<one label or your own words>'"
        )),
        "{}",
        human.stdout
    );
    outcome(dir.command(&["resume", &run_id, "--answer", "docs"])).success();
}

#[test]
fn the_memory_store_keeps_nothing_after_the_process() {
    let dir = TestDir::new();
    let text = dir.script("text.json", JUST_TEXT);
    let out = outcome(dir.command(&["--store", "memory", "run", "--model", &text, "Hi"])).success();
    assert_eq!(out.stdout, "Hello there.\n");

    let ask = dir.script("ask.json", ASK_THEN_ANSWER);
    let out = outcome(dir.command(&["--store", "memory", "run", "--model", &ask, "Hi"])).success();
    assert!(out.stdout.contains("Which repo?"), "{}", out.stdout);
    assert!(!out.stdout.contains("answer with"), "{}", out.stdout);
    assert!(out.stderr.contains("cannot be resumed"), "{}", out.stderr);

    let listed = outcome(dir.command(&["--store", "memory", "runs", "list", "--json"])).success();
    assert_eq!(listed.json(), serde_json::json!([]));
    assert!(!dir.path().join("data/askloop.db").exists());
}

#[test]
fn askloop_store_selects_the_store() {
    let dir = TestDir::new();
    let spec = dir.script("ask.json", ASK_THEN_ANSWER);
    let with_env = |args: &[&str]| {
        let mut command = dir.command(args);
        command.env("ASKLOOP_STORE", "sqlite://env.db");
        outcome(command)
    };
    let started = with_env(&["run", "--json", "--model", &spec, "Hi"]).success();
    let run_id = started.json_lines()[0]["runId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(dir.path().join("env.db").is_file());
    assert!(!dir.path().join("data/askloop.db").exists());

    // The same store through --store sees the run; the default store does not.
    let listed = outcome(dir.command(&["--store", "sqlite://env.db", "runs", "list", "--json"]))
        .success()
        .json();
    assert_eq!(listed[0]["runId"], run_id.as_str());
    let missing = outcome(dir.command(&["runs", "show", &run_id])).code(2);
    assert!(missing.stderr.contains("not found"), "{}", missing.stderr);

    // --store wins over ASKLOOP_STORE.
    let flag = with_env(&["--store", "memory", "runs", "list", "--json"]).success();
    assert_eq!(flag.json(), serde_json::json!([]));

    with_env(&["resume", &run_id, "--answer", "main"]).success();

    let bad = outcome(dir.command(&["--store", "mysql://x", "runs", "list"])).code(2);
    assert!(bad.stderr.contains("sqlite://PATH"), "{}", bad.stderr);
}
