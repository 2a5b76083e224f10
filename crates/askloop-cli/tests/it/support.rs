//! Test helpers: a temporary directory per test and commands that run `askloop` inside it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

/// A script whose first step asks a single-select question (labels `main`, `docs`) and whose
/// second step answers with text.
pub const ASK_THEN_ANSWER: &str = r#"{"steps":[
  {"text":"Let me check.","toolCalls":[{"id":"c1","name":"ask_user","args":{"question":"Which repo?","options":[{"label":"main","description":"the main repo"},{"label":"docs"}],"selectionMode":"single_select"}}]},
  {"text":"Summary of the repo."}
]}"#;

/// The path of the `askloop` binary under test, as the hints print it.
pub const BIN: &str = env!("CARGO_BIN_EXE_askloop");

/// A script that just answers.
pub const JUST_TEXT: &str = r#"{"steps":[{"text":"Hello there."}]}"#;

/// A temporary directory holding the data folder, the store and scripts of one test.
pub struct TestDir {
    dir: tempfile::TempDir,
}

/// What one `askloop` process did.
#[derive(Debug)]
pub struct Outcome {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Outcome {
    /// Asserts a zero exit status, showing the output otherwise.
    pub fn success(self) -> Self {
        assert_eq!(self.code, 0, "expected success: {self:#?}");
        self
    }

    /// Asserts this exit status.
    pub fn code(self, code: i32) -> Self {
        assert_eq!(self.code, code, "expected exit status {code}: {self:#?}");
        self
    }

    /// Every stdout line parsed as JSON (panics on a line that is not JSON).
    pub fn json_lines(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .map(|line| {
                serde_json::from_str(line)
                    .unwrap_or_else(|error| panic!("not a JSON line: {line:?}: {error}"))
            })
            .collect()
    }

    /// Stdout as one JSON document.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|error| panic!("stdout is not JSON: {error}: {}", self.stdout))
    }

    /// Stderr's lines.
    pub fn stderr_lines(&self) -> Vec<&str> {
        self.stderr.lines().collect()
    }
}

impl TestDir {
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes a file (e.g. a script) and returns its path.
    /// Writes an askloop.toml here whose built-in agent takes only the labels of its select
    /// questions (`allow_other = false`), for the tests of refused labels.
    pub fn labels_only(&self) {
        self.write("askloop.toml", "[agents.assistant]\nallow_other = false\n");
    }

    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.path().join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&path, text).unwrap();
        path
    }

    /// Writes a script and returns its `scripted:` SPEC (absolute).
    pub fn script(&self, name: &str, text: &str) -> String {
        format!("scripted:{}", self.write(name, text).display())
    }

    /// The SQLite store URL of this test.
    pub fn store_url(&self) -> String {
        format!("sqlite://{}", self.path().join("runs.db").display())
    }

    /// `askloop ARGS` in this directory: a clean environment except `ASKLOOP_DATA_DIR` inside
    /// the directory and `USER=tester`, stdin closed.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_askloop"));
        command
            .args(args)
            .current_dir(self.path())
            .env_remove("ASKLOOP_STORE")
            .env_remove("ASKLOOP_MODEL")
            .env_remove("ASKLOOP_CONFIG")
            .env_remove("RUST_LOG")
            // The operator the CLI acts as: `cli:tester` (issue 34).
            .env("USER", "tester")
            .env_remove("USERNAME")
            .env("ASKLOOP_DATA_DIR", self.path().join("data"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    }

    /// `sh -c LINE` in this directory, with the environment of [`TestDir::command`]: runs a
    /// command line as a person would paste it.
    pub fn shell(&self, line: &str) -> Command {
        let command = self.command(&[]);
        let mut shell = Command::new("sh");
        shell.arg("-c").arg(line).current_dir(self.path());
        for (name, value) in command.get_envs() {
            match value {
                Some(value) => shell.env(name, value),
                None => shell.env_remove(name),
            };
        }
        shell
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        shell
    }

    /// Runs `askloop --store <this test's SQLite file> ARGS` with `input` on stdin.
    pub fn run_with_input(&self, args: &[&str], input: &str) -> Outcome {
        use std::io::Write;

        let store = self.store_url();
        let mut full = vec!["--store", store.as_str()];
        full.extend_from_slice(args);
        let mut command = self.command(&full);
        command.stdin(Stdio::piped());
        let mut child = command.spawn().unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        let output = child.wait_with_output().unwrap();
        Outcome {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8(output.stdout).unwrap(),
            stderr: String::from_utf8(output.stderr).unwrap(),
        }
    }

    /// Runs `askloop --store <this test's SQLite file> ARGS` and waits for it.
    pub fn run(&self, args: &[&str]) -> Outcome {
        let store = self.store_url();
        let mut full = vec!["--store", store.as_str()];
        full.extend_from_slice(args);
        outcome(self.command(&full))
    }

    /// Starts a run of `script` with `--json` and returns its run id (it must suspend).
    pub fn start_suspended(&self, spec: &str) -> String {
        let out = self.run(&["run", "--json", "--model", spec, "Summarize my project"]);
        let out = out.success();
        let lines = out.json_lines();
        let last = lines.last().unwrap();
        assert_eq!(last["type"], "tool-call-suspended", "{lines:#?}");
        last["runId"].as_str().unwrap().to_owned()
    }

    /// `runs show RUN_ID --json`.
    pub fn show(&self, run_id: &str) -> Value {
        self.run(&["runs", "show", run_id, "--json"])
            .success()
            .json()
    }
}

/// Runs a command to its end.
pub fn outcome(mut command: Command) -> Outcome {
    let output = command.output().unwrap();
    Outcome {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8(output.stdout).unwrap(),
        stderr: String::from_utf8(output.stderr).unwrap(),
    }
}

/// The `type` of every wire chunk.
pub fn chunk_types(lines: &[Value]) -> Vec<&str> {
    lines
        .iter()
        .map(|line| line["type"].as_str().unwrap())
        .collect()
}

/// The results of every tool message of a stored run, in order.
pub fn tool_results(state: &Value) -> Vec<Value> {
    state["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|message| message["role"] == "tool")
        .flat_map(|message| message["results"].as_array().unwrap().clone())
        .collect()
}

/// `{"content": "User answered: ANSWER", "isError": false}`.
pub fn answered(answer: &str) -> Value {
    json!({"content": format!("User answered: {answer}"), "isError": false})
}
