//! `askloop serve` (issue 11): the real binary on `--addr 127.0.0.1:0` with a scripted model,
//! driven over HTTP by reqwest: a full ask cycle, API keys, the loopback rule, SIGTERM, two
//! servers on one store, and a server killed mid-run whose run another server's sweep
//! finishes (on SQLite and PostgreSQL).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{ASK_THEN_ANSWER, TestDir};

/// The lease of the kill tests: a killed server's run is recoverable this long after.
#[cfg(feature = "test-hooks")]
const LEASE_MS: &str = "1500";

/// A running `askloop serve`, killed when dropped.
pub(crate) struct Served {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub(crate) base: String,
    /// Everything it printed on stderr so far.
    stderr: Arc<Mutex<String>>,
    /// Its first stdout line.
    first_line: String,
}

impl Served {
    /// Starts `askloop --store STORE serve --addr 127.0.0.1:0 --model SPEC ARGS` in `dir`
    /// with `envs`, and reads the port from its first line.
    pub(crate) fn start(
        dir: &TestDir,
        store: &str,
        spec: &str,
        args: &[&str],
        envs: &[(&str, &str)],
    ) -> Self {
        let mut full = vec![
            "--store",
            store,
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--model",
            spec,
        ];
        full.extend_from_slice(args);
        let mut command = dir.command(&full);
        for (name, value) in envs {
            command.env(name, value);
        }
        let mut child = command.spawn().unwrap();
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = stderr.clone();
        let pipe = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                let mut text = sink.lock().unwrap();
                text.push_str(&line);
                text.push('\n');
            }
        });
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut first_line = String::new();
        stdout.read_line(&mut first_line).unwrap();
        let Some(address) = first_line
            .strip_prefix("askloop serve: listening on http://")
            .and_then(|rest| rest.split_whitespace().next())
        else {
            let status = child.wait().unwrap();
            panic!(
                "no start line: {first_line:?} ({status:?}); stderr: {}",
                stderr.lock().unwrap()
            );
        };
        let base = format!("http://{address}");
        Self {
            child,
            base,
            stderr,
            first_line,
        }
    }

    /// Sends a signal (`TERM`, `KILL`) to the server.
    fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Waits for the server to exit, at most 20 s, and returns its exit code.
    fn wait_exit(&mut self) -> Option<i32> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            assert!(
                Instant::now() < deadline,
                "the server did not exit; stderr: {}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits until stderr holds `text`, at most 20 s.
    fn wait_stderr(&self, text: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.stderr().contains(text) {
            assert!(
                Instant::now() < deadline,
                "no {text:?} on stderr: {}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `future` on a runtime of its own (these tests are synchronous).
pub(crate) fn block_on<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

/// The chunks of an SSE body (`data: JSON` frames, then `data: [DONE]`).
fn frames(text: &str) -> Vec<Value> {
    let mut chunks = Vec::new();
    let mut done = false;
    for frame in text.split("\n\n").filter(|frame| !frame.trim().is_empty()) {
        if frame.starts_with(':') {
            continue;
        }
        let data = frame
            .strip_prefix("data: ")
            .unwrap_or_else(|| panic!("bad frame {frame:?}"));
        assert!(!done, "a frame after [DONE]: {frame:?}");
        if data == "[DONE]" {
            done = true;
        } else {
            chunks.push(serde_json::from_str(data).unwrap());
        }
    }
    assert!(done, "no [DONE] in {text:?}");
    chunks
}

fn types(chunks: &[Value]) -> Vec<&str> {
    chunks
        .iter()
        .map(|chunk| chunk["type"].as_str().unwrap())
        .collect()
}

/// POSTs `body` to `base` + `path` and returns the SSE chunks.
async fn post_stream(base: &str, path: &str, body: Value) -> Vec<Value> {
    let response = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{path}");
    frames(&response.text().await.unwrap())
}

/// Starts a run of `assistant` and returns its id (it must suspend on `c1`).
pub(crate) async fn start_suspended(base: &str) -> String {
    let chunks = post_stream(
        base,
        "/api/agents/assistant/stream",
        json!({"messages": "Summarize my project"}),
    )
    .await;
    let last = chunks.last().unwrap();
    assert_eq!(last["type"], "tool-call-suspended", "{chunks:#?}");
    assert_eq!(last["payload"]["toolCallId"], "c1", "{last:#}");
    chunks[0]["runId"].as_str().unwrap().to_owned()
}

/// Answers `c1` of `run_id` with `main` and asserts the run finishes.
async fn resume_to_finish(base: &str, run_id: &str) {
    let chunks = post_stream(
        base,
        "/api/agents/assistant/resume-stream",
        json!({"runId": run_id, "toolCallId": "c1", "resumeData": "main"}),
    )
    .await;
    assert_eq!(types(&chunks).last(), Some(&"finish"), "{chunks:#?}");
    let text: String = chunks
        .iter()
        .filter(|chunk| chunk["type"] == "text-delta")
        .filter_map(|chunk| chunk["payload"]["text"].as_str())
        .collect();
    assert!(text.contains("Summary of the repo."), "{chunks:#?}");
}

/// `GET /api/runs/RUN_ID`'s `status`.
pub(crate) async fn status(base: &str, run_id: &str) -> Value {
    let run: Value = reqwest::get(format!("{base}/api/runs/{run_id}"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    run["status"].clone()
}

#[test]
fn a_full_ask_cycle_over_http() {
    let dir = TestDir::new();
    let spec = dir.script("ask.json", ASK_THEN_ANSWER);
    let store = dir.store_url();
    let mut served = Served::start(&dir, &store, &spec, &[], &[]);
    assert_eq!(
        served.first_line.trim_end(),
        format!(
            "askloop serve: listening on {} (1 agent: assistant; store {store})",
            served.base
        )
    );
    served.wait_stderr("no API keys are configured");
    block_on(async {
        let run_id = start_suspended(&served.base).await;
        assert_eq!(status(&served.base, &run_id).await, "suspended");
        resume_to_finish(&served.base, &run_id).await;
        assert_eq!(status(&served.base, &run_id).await, "completed");
    });
    served.signal("TERM");
    assert_eq!(served.wait_exit(), Some(0), "{}", served.stderr());
}

#[test]
fn serves_every_configured_agent() {
    let dir = TestDir::new();
    let spec = dir.script("ask.json", ASK_THEN_ANSWER);
    let config = dir.write("askloop.toml", "[agents.planner]\n[agents.writer]\n");
    let config = config.display().to_string();
    let store = dir.store_url();
    let served = Served::start(&dir, &store, &spec, &[], &[("ASKLOOP_CONFIG", &config)]);
    assert!(
        served
            .first_line
            .contains("(3 agents: assistant, planner, writer; store "),
        "{}",
        served.first_line
    );
    block_on(async {
        let agents: Value = reqwest::get(format!("{}/api/agents", served.base))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        for id in ["assistant", "planner", "writer"] {
            assert!(agents.get(id).is_some(), "{agents:#}");
        }
    });
}

#[test]
fn api_keys_from_the_file_and_the_environment() {
    let dir = TestDir::new();
    let spec = dir.script("ask.json", ASK_THEN_ANSWER);
    let made = dir
        .command(&[
            "keys",
            "new",
            "--resource",
            "tenant-a",
            "--agents",
            "assistant",
        ])
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let text = String::from_utf8(made.stdout).unwrap();
    let secret = text.lines().next().unwrap().to_owned();
    assert!(secret.starts_with("ak_"), "{text}");
    let toml: String = text
        .lines()
        .skip(1)
        .map(|line| format!("{line}\n"))
        .collect();
    assert!(!toml.contains(&secret), "{toml}");
    dir.write("askloop.toml", &toml);
    let store = dir.store_url();
    // Keys allow any address; this one stays on loopback for the test.
    let served = Served::start(
        &dir,
        &store,
        &spec,
        &[],
        &[("ASKLOOP_API_KEYS", "other-secret=tenant-b")],
    );
    assert!(
        !served.stderr().contains("no API keys"),
        "{}",
        served.stderr()
    );
    block_on(async {
        let client = reqwest::Client::new();
        let agents = format!("{}/api/agents", served.base);
        let none = client.get(&agents).send().await.unwrap();
        assert_eq!(none.status(), 401);
        let wrong = client
            .get(&agents)
            .bearer_auth("nope")
            .send()
            .await
            .unwrap();
        assert_eq!(wrong.status(), 401);
        let from_file = client
            .get(&agents)
            .bearer_auth(&secret)
            .send()
            .await
            .unwrap();
        assert_eq!(from_file.status(), 200);
        let from_env = client
            .get(&agents)
            .header("x-api-key", "other-secret")
            .send()
            .await
            .unwrap();
        assert_eq!(from_env.status(), 200);
    });
}

#[test]
fn a_non_loopback_address_without_keys_is_refused() {
    let dir = TestDir::new();
    let spec = dir.script("ask.json", ASK_THEN_ANSWER);
    let out = dir.run(&["serve", "--addr", "0.0.0.0:0", "--model", &spec]);
    let out = out.code(2);
    assert!(out.stdout.is_empty(), "{out:#?}");
    assert!(
        out.stderr
            .contains("refusing to serve on 0.0.0.0:0 without API keys"),
        "{out:#?}"
    );
    let mut bad = dir.command(&["serve", "--model", &spec]);
    bad.env("ASKLOOP_API_KEYS", "no-resource-here");
    let out = crate::support::outcome(bad).code(2);
    assert!(out.stderr.contains("ASKLOOP_API_KEYS"), "{out:#?}");
    assert!(!out.stderr.contains("no-resource-here"), "{out:#?}");
}

#[test]
fn issue31_one_secret_in_the_file_and_the_environment_is_refused() {
    let dir = TestDir::new();
    let spec = dir.script("ask.json", ASK_THEN_ANSWER);
    let hash = askloop_server::ApiKey::hash_hex("s3cret-shared");
    dir.write(
        "askloop.toml",
        &format!("[[server.keys]]\nhash = \"{hash}\"\nresource = \"tenant-a\"\n"),
    );
    let mut command = dir.command(&["serve", "--addr", "127.0.0.1:0", "--model", &spec]);
    command.env("ASKLOOP_API_KEYS", "other=tenant-c,s3cret-shared=tenant-b");
    let out = crate::support::outcome(command).code(2);
    assert!(out.stdout.is_empty(), "{out:#?}");
    assert!(
        out.stderr.contains("[[server.keys]] number 1 in"),
        "{out:#?}"
    );
    assert!(out.stderr.contains("(resource tenant-a)"), "{out:#?}");
    assert!(
        out.stderr
            .contains("ASKLOOP_API_KEYS entry 2 (resource tenant-b) are the same secret"),
        "{out:#?}"
    );
    assert!(!out.stderr.contains("s3cret-shared"), "{out:#?}");
}

/// Sends a raw HTTP/1.1 request (with `Connection: close`) and reads the whole answer.
fn raw_http(base: &str, head: &str) -> String {
    use std::io::{Read, Write};
    let address = base.strip_prefix("http://").unwrap();
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
        .write_all(format!("{head}Connection: close\r\n\r\n").as_bytes())
        .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
}

#[test]
fn issue31_allowed_hosts_and_cors_origins_of_the_command_line() {
    let dir = TestDir::new();
    let spec = dir.script("ask.json", ASK_THEN_ANSWER);
    dir.write(
        "askloop.toml",
        "[server]\nallowed_hosts = [\"from-file.test\"]\n",
    );
    let store = dir.store_url();
    let served = Served::start(
        &dir,
        &store,
        &spec,
        &[
            "--allowed-host",
            "askloop.test",
            "--cors-origin",
            "http://localhost:3000",
        ],
        &[],
    );
    for (host, status) in [
        ("askloop.test:4111", "200"),
        ("from-file.test", "200"),
        ("localhost", "200"),
        ("evil.test", "421"),
    ] {
        let answer = raw_http(
            &served.base,
            &format!("GET /api/agents HTTP/1.1\r\nHost: {host}\r\n"),
        );
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status}")),
            "{host}: {answer}"
        );
    }
    let preflight = raw_http(
        &served.base,
        "OPTIONS /api/agents/assistant/chat HTTP/1.1\r\nHost: localhost\r\n\
         Origin: http://localhost:3000\r\nAccess-Control-Request-Method: POST\r\n\
         Access-Control-Request-Headers: authorization, content-type\r\n",
    )
    .to_ascii_lowercase();
    assert!(
        preflight.contains("access-control-allow-origin: http://localhost:3000"),
        "{preflight}"
    );
    let cross = raw_http(
        &served.base,
        "POST /api/runs/r-1/cancel HTTP/1.1\r\nHost: localhost\r\nOrigin: https://evil.test\r\n\
         Content-Length: 0\r\n",
    );
    assert!(cross.starts_with("HTTP/1.1 403"), "{cross}");
    assert!(cross.contains("cross_origin"), "{cross}");
}

#[test]
fn sigterm_leaves_a_suspended_run_resumable_by_the_cli() {
    let dir = TestDir::new();
    let spec = dir.script("ask.json", ASK_THEN_ANSWER);
    let store = dir.store_url();
    let mut served = Served::start(&dir, &store, &spec, &[], &[]);
    let run_id = block_on(start_suspended(&served.base));
    served.signal("TERM");
    assert_eq!(served.wait_exit(), Some(0), "{}", served.stderr());
    let out = dir
        .run(&["resume", &run_id, "--answer", "main", "--json"])
        .success();
    let lines = out.json_lines();
    assert_eq!(lines.last().unwrap()["type"], "finish", "{lines:#?}");
}

/// A run suspended through one server is resumed through another, both running at once.
pub fn two_servers_share_a_store(store: &str) {
    let dir = TestDir::new();
    let spec = dir.script("ask.json", ASK_THEN_ANSWER);
    let first = Served::start(&dir, store, &spec, &[], &[]);
    let second = Served::start(&dir, store, &spec, &[], &[]);
    block_on(async {
        let run_id = start_suspended(&first.base).await;
        assert_eq!(status(&second.base, &run_id).await, "suspended");
        resume_to_finish(&second.base, &run_id).await;
        assert_eq!(status(&first.base, &run_id).await, "completed");
    });
}

/// A server killed during the model call after a resume: the other server's sweep takes the
/// run over once its lease expires and finishes it.
#[cfg(feature = "test-hooks")]
pub fn a_killed_server_s_run_is_recovered_by_the_other(store: &str) {
    let dir = TestDir::new();
    let spec = dir.script("ask.json", ASK_THEN_ANSWER);
    let lease = ("ASKLOOP_LEASE_MS", LEASE_MS);
    let doomed = Served::start(
        &dir,
        store,
        &spec,
        &[],
        &[lease, ("ASKLOOP_TEST_PAUSE_AT", "model-stream#2")],
    );
    let survivor = Served::start(&dir, store, &spec, &[], &[lease]);
    let run_id = block_on(start_suspended(&doomed.base));
    // The resume's stream stops at the paused model call; the request is left hanging.
    let base = doomed.base.clone();
    let answered = run_id.clone();
    std::thread::spawn(move || {
        block_on(async move {
            let _ = reqwest::Client::new()
                .post(format!("{base}/api/agents/assistant/resume-stream"))
                .json(&json!({"runId": answered, "toolCallId": "c1", "resumeData": "main"}))
                .send()
                .await;
        });
    });
    doomed.wait_stderr("askloop-test: paused at model-stream#2");
    doomed.signal("KILL");
    block_on(async {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let now = status(&survivor.base, &run_id).await;
            if now == "completed" {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "not recovered: {now}; survivor's stderr: {}",
                survivor.stderr()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let shown = dir.command(&["--store", store, "runs", "show", &run_id, "--json"]);
    let shown = crate::support::outcome(shown).success().json();
    let text = shown.to_string();
    assert!(text.contains("Summary of the repo."), "{shown:#}");
}

/// A server killed with SIGKILL while it sends a webhook (the receiver has the request, the
/// attempt is not recorded) leaves the delivery claimed; a new server on the store sends it
/// again once the claim expires, with the same `webhook-id` (at least once), records it
/// delivered, and sends every later event once.
#[cfg(all(unix, feature = "test-hooks"))]
pub fn a_server_killed_while_sending_a_webhook_sends_it_again(store: &str) {
    let dir = TestDir::new();
    let (received, url) = crate::webhooks::receiver_silent_for(1);
    dir.write(
        "askloop.toml",
        &format!(
            "[[webhooks]]\nurl = \"{url}\"\nsecret = \"{}\"\n",
            crate::webhooks::SECRET
        ),
    );
    let spec = dir.script("ask.json", ASK_THEN_ANSWER);
    let fast = [
        ("ASKLOOP_WEBHOOK_TIMEOUT_MS", "1000"),
        ("ASKLOOP_WEBHOOK_POLL_MS", "100"),
        ("ASKLOOP_WEBHOOK_BACKOFF_MS", "100"),
    ];
    let doomed = Served::start(&dir, store, &spec, &[], &fast);
    let run_id = block_on(start_suspended(&doomed.base));
    let deadline = Instant::now() + Duration::from_secs(20);
    while received.lock().unwrap().is_empty() {
        assert!(
            Instant::now() < deadline,
            "nothing sent: {}",
            doomed.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    doomed.signal("KILL");
    drop(doomed);
    let killed_at = Instant::now();
    let survivor = Served::start(&dir, store, &spec, &[], &fast);
    let deadline = Instant::now() + Duration::from_secs(30);
    while received.lock().unwrap().len() < 2 {
        assert!(
            Instant::now() < deadline,
            "not sent again: {}",
            survivor.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        killed_at.elapsed() >= Duration::from_secs(5),
        "sent again only once the dead server's claim expired"
    );
    block_on(resume_to_finish(&survivor.base, &run_id));
    let deadline = Instant::now() + Duration::from_secs(20);
    while received.lock().unwrap().len() < 4 {
        assert!(Instant::now() < deadline, "{:?}", received.lock().unwrap());
        std::thread::sleep(Duration::from_millis(20));
    }
    // Every delivery recorded as delivered: nothing more is on its way.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let listed = dir.command(&["--store", store, "webhooks", "list", "--json"]);
        let listed = crate::support::outcome(listed).success().json_lines();
        if listed.len() == 3
            && listed
                .iter()
                .all(|delivery| delivery["status"] == "delivered")
        {
            break;
        }
        assert!(Instant::now() < deadline, "{listed:#?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let received = received.lock().unwrap().clone();
    assert_eq!(
        crate::webhooks::types(&received),
        [
            "question.raised",
            "question.raised",
            "question.answered",
            "run.completed"
        ]
    );
    assert_eq!(received[0].0, received[1].0, "the same webhook-id again");
    assert_eq!(received[0].1, received[1].1, "the same body again");
    let mut ids: Vec<&str> = received.iter().map(|(id, _)| id.as_str()).collect();
    ids.dedup();
    assert_eq!(ids.len(), 3, "each event once but the interrupted one");
    let listed = dir.command(&["--store", store, "webhooks", "list", "--json"]);
    let listed = crate::support::outcome(listed).success().json_lines();
    assert_eq!(listed.len(), 3, "{listed:#?}");
    assert!(
        listed
            .iter()
            .all(|delivery| delivery["status"] == "delivered"),
        "{listed:#?}"
    );
}

/// The multi-instance tests on the store `$store` makes (`|dir: &TestDir| -> String`).
macro_rules! instance_tests {
    ($name:ident, $store:expr) => {
        mod $name {
            #[test]
            fn two_servers_share_a_store() {
                let dir = $crate::support::TestDir::new();
                let store: String = ($store)(&dir);
                $crate::serve::two_servers_share_a_store(&store);
            }

            #[cfg(all(unix, feature = "test-hooks"))]
            #[test]
            fn a_server_killed_while_sending_a_webhook_sends_it_again() {
                let dir = $crate::support::TestDir::new();
                let store: String = ($store)(&dir);
                $crate::serve::a_server_killed_while_sending_a_webhook_sends_it_again(&store);
            }

            #[cfg(feature = "test-hooks")]
            #[test]
            fn a_killed_server_s_run_is_recovered_by_the_other() {
                let dir = $crate::support::TestDir::new();
                let store: String = ($store)(&dir);
                $crate::serve::a_killed_server_s_run_is_recovered_by_the_other(&store);
            }
        }
    };
}

instance_tests!(sqlite, |dir: &crate::support::TestDir| dir.store_url());
instance_tests!(postgres, |dir: &crate::support::TestDir| {
    crate::postgres::schema_url(dir)
});

#[test]
fn issue33_a_missing_scripted_model_is_refused_at_start() {
    let dir = TestDir::new();
    let store = dir.store_url();
    let mut command = dir.command(&[
        "--store",
        &store,
        "serve",
        "--addr",
        "127.0.0.1:0",
        "--model",
        "scripted:nope.json",
    ]);
    let mut child = command.spawn().unwrap();
    // Before the fix the server started and failed every request: never wait forever.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            panic!("serve started with a script that does not exist");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(output.stdout.is_empty());
    assert!(
        stderr.contains("model scripted:") && stderr.contains("nope.json"),
        "{stderr}"
    );
    assert!(stderr.contains("cannot read script"), "{stderr}");
}
