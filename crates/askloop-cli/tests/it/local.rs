//! The embedded local model as the default (issue 4): a real model asks a schema-valid question
//! through `ask_user`, and a second process answers it. Needs the model file: `.ci/run` runs
//! `askloop model pull` first; without it these tests fail naming that command.

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::support::TestDir;

const MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// The pulled default model: `$ASKLOOP_DATA_DIR/models/…` or `~/.local/share/askloop/models/…`.
fn pulled_model() -> PathBuf {
    let data = std::env::var_os("ASKLOOP_DATA_DIR")
        .filter(|dir| !dir.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap()).join(".local/share/askloop")
        });
    let path = data.join("models").join(MODEL_FILE);
    assert!(
        path.is_file(),
        "the local model is missing at {}: run `askloop model pull` first",
        path.display()
    );
    path
}

/// A test folder whose data folder holds (a link to) the pulled model.
fn dir_with_model() -> TestDir {
    let dir = TestDir::new();
    let models = dir.path().join("data/models");
    std::fs::create_dir_all(&models).unwrap();
    std::os::unix::fs::symlink(pulled_model(), models.join(MODEL_FILE)).unwrap();
    dir
}

/// An answer that fits the question, from its resume schema.
fn answer_for(payload: &Value) -> Value {
    let labels: Vec<Value> = payload["options"]
        .as_array()
        .map(|options| options.iter().map(|o| o["label"].clone()).collect())
        .unwrap_or_default();
    match payload["selectionMode"].as_str() {
        Some("multi_select") => json!([labels[0]]),
        Some(_) => labels[0].clone(),
        None => json!("Lisbon, for three days in spring"),
    }
}

#[test]
fn issue_4_default_local_model_asks_then_a_second_process_resumes() {
    let dir = dir_with_model();
    let out = dir.run(&["run", "--json", "Help me plan a trip"]).success();
    let lines = out.json_lines();
    let last = lines.last().unwrap();
    assert_eq!(last["type"], "tool-call-suspended", "{lines:#?}");
    let payload = &last["payload"];
    assert_eq!(payload["toolName"], "ask_user");
    let question = &payload["suspendPayload"];
    assert!(
        !question["question"].as_str().unwrap().trim().is_empty(),
        "{question}"
    );
    let run_id = last["runId"].as_str().unwrap().to_owned();
    let shown = dir.show(&run_id);
    assert_eq!(
        shown["model"], "local",
        "the default model is recorded with the run"
    );

    let answer = answer_for(question).to_string();
    let out = dir
        .run(&["resume", &run_id, "--answer-json", &answer, "--json"])
        .success();
    let lines = out.json_lines();
    let result = lines
        .iter()
        .find(|line| line["type"] == "tool-result")
        .unwrap();
    assert!(
        result["payload"]["result"]["content"]
            .as_str()
            .unwrap()
            .starts_with("User answered: "),
        "{result}"
    );
    let last = lines.last().unwrap();
    match last["type"].as_str().unwrap() {
        // The model's reply streamed as text.
        "finish" => assert!(
            lines.iter().any(|line| line["type"] == "text-delta"),
            "{lines:#?}"
        ),
        // Or it chose to ask again: still a valid, schema-checked question.
        "tool-call-suspended" => assert_eq!(last["payload"]["toolName"], "ask_user"),
        other => panic!("unexpected last chunk {other}: {lines:#?}"),
    }
}

#[test]
fn a_corrupt_model_file_is_a_clear_error() {
    let dir = TestDir::new();
    dir.write(&format!("data/models/{MODEL_FILE}"), "not a model");
    let out = dir.run(&["run", "--json", "Hi"]);
    assert_ne!(out.code, 0);
    assert!(
        out.stderr.contains("model pull") || out.stderr.contains("size"),
        "{}",
        out.stderr
    );
    assert_eq!(out.stderr_lines().len(), 1, "{}", out.stderr);
}

#[test]
fn model_path_names_the_data_folder() {
    let dir = TestDir::new();
    let out = dir.run(&["model", "path"]).success();
    assert_eq!(
        out.stdout.trim(),
        dir.path()
            .join("data/models")
            .join(MODEL_FILE)
            .display()
            .to_string()
    );
}
