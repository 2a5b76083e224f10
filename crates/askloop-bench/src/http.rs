//! `askloop-bench http`: full ask cycles over HTTP, measured from a separate load generator.
//!
//! Starts `askloop serve` (the binary given by `--askloop`) on a loopback port with the scripted
//! model and the store given by `--store`, or drives a server already running at `--url` (the
//! reference framework's own server, `crates/askloop-bench/mastra-http/`, speaks the same agent
//! routes). Each of `--concurrency` clients does whole cycles one after another until `--n`
//! cycles are done: `POST /api/agents/{agent}/stream` → the `tool-call-suspended` chunk (the run
//! is committed) → `POST /api/agents/{agent}/resume-stream` with the answer → `finish` →
//! `data: [DONE]`. A resume's latency is from sending its request to reading `[DONE]`.
//!
//! Then `--suspended` more runs are started and left suspended, and the server's resident memory
//! is read (`/proc/PID/status`, `VmRSS`, `VmHWM`). One JSON line:
//! `{"bench":"http","server":"askloop","store":"sqlite","sync":"normal","cycles":N,
//! "concurrency":64,"seconds":…,"cycles_per_s":…,"resume_p50_ms":…,"resume_p99_ms":…,
//! "stream_p50_ms":…,"stream_p99_ms":…,"rss_after_cycles_mb":…,"suspended_runs":…,
//! "rss_suspended_mb":…,"peak_rss_mb":…}`.
//!
//! With `--webhooks` the started server also has one `[[webhooks]]` endpoint, a receiver in
//! this process on loopback answering 204 to every delivery (issue 34): the line then adds
//! `"webhooks":true`, `"webhook_deliveries"` (received while the cycles ran),
//! `"webhook_deliveries_per_s"` (those over the cycles' seconds), `"webhook_events"` (what the
//! cycles caused: three per cycle, `question.raised`, `question.answered`, `run.completed`),
//! `"webhook_drain_s"` (from the end of the cycles until all of them had arrived, `null` if not
//! within 120 s) and `"webhook_duplicates"` (deliveries of a `webhook-id` already received).

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use anyhow::{Context, bail};
use clap::Args;
use serde_json::{Value, json};

/// Options of `askloop-bench http`.
#[derive(Args, Clone)]
pub(crate) struct HttpArgs {
    /// The `askloop` binary to start as the server.
    #[arg(long, default_value = "target/release/askloop")]
    askloop: PathBuf,
    /// Drive a server already running here instead (e.g. `http://127.0.0.1:4112`).
    #[arg(long)]
    url: Option<String>,
    /// With `--url`: the server's process id, to read its memory.
    #[arg(long)]
    pid: Option<u32>,
    /// What `--url`'s server is called in the output.
    #[arg(long, default_value = "external")]
    name: String,
    /// Store URL of the started server (`sqlite://PATH?synchronous=normal`, `postgres://…`);
    /// default: a fresh SQLite file with `synchronous=normal`.
    #[arg(long)]
    store: Option<String>,
    /// The agent whose routes are used.
    #[arg(long, default_value = "assistant")]
    agent: String,
    /// Full cycles to run.
    #[arg(long, default_value_t = 6400)]
    n: usize,
    /// Clients at once, each doing whole cycles one after another.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Runs left suspended after the cycles, before the memory is read.
    #[arg(long, default_value_t = 10_000)]
    suspended: usize,
    /// Give the started server a webhook endpoint (a receiver in this process) and report
    /// the deliveries (not with `--url`).
    #[arg(long)]
    webhooks: bool,
}

/// The scripted model of the started server: the first step asks, the second answers.
const SCRIPT: &str = r#"{"steps":[
  {"toolCalls":[{"id":"c1","name":"ask_user","args":{"question":"Which repo?","options":[{"label":"main"},{"label":"docs"}]}}]},
  {"text":"done"}]}"#;

/// A server process this benchmark started; killed when dropped.
pub(crate) struct Started {
    child: Child,
    _dir: tempfile::TempDir,
}

impl Started {
    /// The server's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the benchmark and prints its line.
pub(crate) async fn run(args: HttpArgs) -> anyhow::Result<()> {
    if args.webhooks && args.url.is_some() {
        bail!("--webhooks starts its own server: not with --url");
    }
    let receiver = match args.webhooks {
        true => Some(crate::receiver::Receiver::start().await?),
        false => None,
    };
    let (base, pid, server_name, store_label, sync_label, _started) = match &args.url {
        Some(url) => (
            url.trim_end_matches('/').to_owned(),
            args.pid,
            args.name.clone(),
            "external".to_owned(),
            "external".to_owned(),
            None,
        ),
        None => {
            let hook = receiver.as_ref().map(|receiver| receiver.url.clone());
            let (started, base, store) =
                start_server_with(&args.askloop, args.store.as_deref(), hook.as_deref())?;
            let pid = started.child.id();
            let (kind, sync) = describe_store(&store);
            (
                base,
                Some(pid),
                "askloop".to_owned(),
                kind,
                sync,
                Some(started),
            )
        }
    };
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(args.concurrency)
        .build()?;
    let bench = Bench {
        client,
        base,
        agent: args.agent.clone(),
    };
    // One cycle first: the server answers, and its first requests' one-time costs are paid
    // as a user's first request pays them (not excluded from anything after).
    bench.cycle().await.context("the first cycle failed")?;

    let done = Arc::new(AtomicUsize::new(0));
    let received_before = receiver.as_ref().map_or(0, |receiver| receiver.received());
    let started_at = Instant::now();
    let mut clients = Vec::with_capacity(args.concurrency);
    for _ in 0..args.concurrency {
        let bench = bench.clone();
        let done = Arc::clone(&done);
        let n = args.n;
        clients.push(tokio::spawn(async move {
            let mut timings = Vec::new();
            while done.fetch_add(1, Ordering::Relaxed) < n {
                timings.push(bench.cycle().await?);
            }
            anyhow::Ok(timings)
        }));
    }
    let mut streams = Vec::with_capacity(args.n);
    let mut resumes = Vec::with_capacity(args.n);
    for client in clients {
        for timing in client.await?? {
            streams.push(timing.stream);
            resumes.push(timing.resume);
        }
    }
    let seconds = started_at.elapsed().as_secs_f64();
    let hooks = match &receiver {
        // The first cycle's three events, then three per measured cycle.
        Some(receiver) => Some(
            receiver
                .report(received_before, seconds, 3 * (streams.len() + 1))
                .await,
        ),
        None => None,
    };
    let rss_after_cycles =
        pid.and_then(|pid| crate::process_memory_mb(&pid.to_string()).map(|memory| memory.0));

    // Suspended runs, started `concurrency` at a time.
    bench.suspend_many(args.suspended, args.concurrency).await?;
    let (rss_suspended, peak) = match pid.and_then(|pid| crate::process_memory_mb(&pid.to_string()))
    {
        Some((rss, peak)) => (Some(rss), Some(peak)),
        None => (None, None),
    };

    let mut line = json!({
            "bench": "http",
            "server": server_name,
            "store": store_label,
            "sync": sync_label,
            "cycles": streams.len(),
            "concurrency": args.concurrency,
            "seconds": round(seconds),
            "cycles_per_s": round(streams.len() as f64 / seconds),
            "resume_p50_ms": round(percentile(&mut resumes, 0.50)),
            "resume_p99_ms": round(percentile(&mut resumes, 0.99)),
            "stream_p50_ms": round(percentile(&mut streams, 0.50)),
            "stream_p99_ms": round(percentile(&mut streams, 0.99)),
            "rss_after_cycles_mb": rss_after_cycles.map(round),
            "suspended_runs": args.suspended,
            "rss_suspended_mb": rss_suspended.map(round),
            "peak_rss_mb": peak.map(round),
    });
    if let (Some(hooks), Some(object)) = (hooks, line.as_object_mut()) {
        object.insert("webhooks".into(), json!(true));
        object.extend(hooks);
    }
    println!("{line}");
    Ok(())
}

/// Starts `askloop serve` (the binary `askloop`) on a free loopback port with the scripted
/// model and `store` (default: a fresh SQLite file with `synchronous=normal`); returns it, its
/// base URL and its store URL.
pub(crate) fn start_server(
    askloop: &Path,
    store: Option<&str>,
) -> anyhow::Result<(Started, String, String)> {
    start_server_with(askloop, store, None)
}

/// [`start_server`], with one `[[webhooks]]` endpoint at `webhook` when given (its
/// askloop.toml in the server's scratch folder).
fn start_server_with(
    askloop: &Path,
    store: Option<&str>,
    webhook: Option<&str>,
) -> anyhow::Result<(Started, String, String)> {
    let dir = tempfile::tempdir()?;
    if let Some(url) = webhook {
        std::fs::write(
            dir.path().join("askloop.toml"),
            format!(
                "[[webhooks]]\nurl = \"{url}\"\nsecret = \"{}\"\n",
                crate::receiver::SECRET
            ),
        )?;
    }
    let script = dir.path().join("script.json");
    std::fs::write(&script, SCRIPT)?;
    let store = match store {
        Some(store) => store.to_owned(),
        None => format!(
            "sqlite://{}?synchronous=normal",
            dir.path().join("runs.db").display()
        ),
    };
    // The server runs in the scratch folder: a relative binary path is the caller's.
    let binary = std::fs::canonicalize(askloop)
        .with_context(|| format!("no askloop binary at {}", askloop.display()))?;
    let mut child = Command::new(&binary)
        .args([
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--store",
            &store,
            "--model",
        ])
        .arg(format!("scripted:{}", script.display()))
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("cannot start {}", askloop.display()))?;
    let stdout = child.stdout.take().context("no stdout")?;
    let started = Started { child, _dir: dir };
    let base = listening_url(stdout)?;
    Ok((started, base, store))
}

/// Reads the server's start line (`askloop serve: listening on http://ADDR …`) for its URL;
/// the rest of its output is drained on a thread.
fn listening_url(stdout: std::process::ChildStdout) -> anyhow::Result<String> {
    let mut lines = std::io::BufReader::new(stdout).lines();
    for line in lines.by_ref() {
        let line = line?;
        if let Some(rest) = line.split("listening on ").nth(1) {
            let url = rest
                .split_whitespace()
                .next()
                .context("no URL after `listening on`")?
                .to_owned();
            std::thread::spawn(move || for _ in lines {});
            return Ok(url);
        }
    }
    bail!("the server exited before it said where it listens")
}

/// `("sqlite"|"postgres"|…, "normal"|"full")` of a store URL.
fn describe_store(store: &str) -> (String, String) {
    let kind = store.split(':').next().unwrap_or("unknown").to_owned();
    let sync = if store.contains("synchronous=normal") {
        "normal"
    } else {
        "full"
    };
    (kind, sync.to_owned())
}

/// Milliseconds of one cycle's two requests.
struct Timing {
    stream: f64,
    resume: f64,
}

/// A client of the server's agent routes.
#[derive(Clone)]
struct Bench {
    client: reqwest::Client,
    base: String,
    agent: String,
}

/// Starts `total` runs of `agent` on the server at `base` and leaves each suspended at its
/// question, `concurrency` at a time.
pub(crate) async fn suspend_runs(
    base: &str,
    agent: &str,
    total: usize,
    concurrency: usize,
) -> anyhow::Result<()> {
    let bench = Bench {
        client: reqwest::Client::builder()
            .pool_max_idle_per_host(concurrency)
            .build()?,
        base: base.to_owned(),
        agent: agent.to_owned(),
    };
    bench.suspend_many(total, concurrency).await
}

impl Bench {
    /// Starts `total` runs, `concurrency` at a time, each left suspended.
    async fn suspend_many(&self, total: usize, concurrency: usize) -> anyhow::Result<()> {
        let left = Arc::new(AtomicUsize::new(0));
        let mut fillers = Vec::with_capacity(concurrency);
        for _ in 0..concurrency.max(1) {
            let bench = self.clone();
            let left = Arc::clone(&left);
            fillers.push(tokio::spawn(async move {
                while left.fetch_add(1, Ordering::Relaxed) < total {
                    bench.suspend().await?;
                }
                anyhow::Ok(())
            }));
        }
        for filler in fillers {
            filler.await??;
        }
        Ok(())
    }

    /// Starts a run and reads its stream to the suspension: `(run id, tool call id)`.
    async fn suspend(&self) -> anyhow::Result<(String, String)> {
        let body = self
            .post(
                "stream",
                json!({"messages": [{"role": "user", "content": "Summarize my project"}]}),
            )
            .await?;
        chunks(&body)
            .find(|chunk| chunk["type"] == "tool-call-suspended")
            .and_then(|chunk| {
                Some((
                    chunk["runId"].as_str()?.to_owned(),
                    chunk["payload"]["toolCallId"].as_str()?.to_owned(),
                ))
            })
            .with_context(|| format!("no tool-call-suspended chunk in: {body}"))
    }

    /// One full cycle.
    async fn cycle(&self) -> anyhow::Result<Timing> {
        let started = Instant::now();
        let (run_id, tool_call_id) = self.suspend().await?;
        let stream = started.elapsed();
        let started = Instant::now();
        let body = self
            .post(
                "resume-stream",
                json!({"runId": run_id, "toolCallId": tool_call_id, "resumeData": "main"}),
            )
            .await?;
        let resume = started.elapsed();
        if !chunks(&body).any(|chunk| chunk["type"] == "finish") {
            bail!("no finish chunk in the resumed stream: {body}");
        }
        Ok(Timing {
            stream: crate::ms(stream),
            resume: crate::ms(resume),
        })
    }

    /// POSTs JSON to an agent route and reads the whole SSE body.
    async fn post(&self, route: &str, body: Value) -> anyhow::Result<String> {
        let response = self
            .client
            .post(format!("{}/api/agents/{}/{route}", self.base, self.agent))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await?;
        let status = response.status();
        let text = response.text().await?;
        if !status.is_success() {
            bail!("{route}: HTTP {status}: {text}");
        }
        Ok(text)
    }
}

/// The JSON chunks of an SSE body (`data: {…}` events; `[DONE]` and comments skipped).
fn chunks(body: &str) -> impl Iterator<Item = Value> + '_ {
    body.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(str::trim)
        .filter(|data| *data != "[DONE]")
        .filter_map(|data| serde_json::from_str(data).ok())
}

/// The `q` quantile (nearest rank) of `values`, sorting them; 0 when empty.
fn percentile(values: &mut [f64], q: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let rank = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len());
    values[rank - 1]
}

fn round(value: f64) -> f64 {
    crate::round(value, 2)
}
