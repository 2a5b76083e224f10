//! `askloop-bench`: measures askloop's durable ask-and-resume cycle, and the embedded local
//! model (`askloop-bench local`, see the `local` module).
//!
//! Every subcommand prints JSON lines on stdout (one per figure), and nothing else:
//!
//! - `cycles --n N --store URL --sync normal|full [--concurrency C]`: N full cycles — stream →
//!   `ask_user` suspends → commit → resume with an answer → final text → finish — with the
//!   scripted model, by C runs at a time (default 1: one after another). One line:
//!   `{"bench":"cycles","store":"sqlite","sync":"full","cycles":N,"concurrency":C,"pinned":false,
//!   "seconds":…,"cycles_per_s":…,"fsync_p50_us":…,"fsync_p99_us":…,"rss_mb":…,"peak_rss_mb":…}`.
//!   `fsync_*` is the disk's own latency, measured in the same run just before the cycles:
//!   a 4 KiB write and `fsync` of a file in the store's folder, 200 times.
//!   With `--subagents`, the same run also measures N two-level cycles — a supervisor's run
//!   calls a researcher sub-agent, whose child run asks (`ask_user`); the root's stream ends with
//!   the child's question (`PARENT_CALL~CHILD_CALL`), the answer given to the root resumes the
//!   child, then the root, and both finish — in the same store, alternating with the one-level
//!   cycles (halves in the order one, two, two, one, so drift of a busy machine hits both), and
//!   adds `"two_level_seconds":…,"two_level_cycles_per_s":…,"two_level_ratio":…` (two-level rate
//!   over one-level rate) to the line.
//! - `long-run --questions 200 --store URL`: one run that asks 200 questions, answered one by one;
//!   the time of each resume (answer → next question stored) from the first to the last:
//!   `{"bench":"long-run","questions":200,"resume_first_ms":…,"resume_last_ms":…,
//!   "first10_mean_ms":…,"last10_mean_ms":…,"ratio_last_first":…,
//!   "store_commits_first10_mean_ms":…,"store_commits_last10_mean_ms":…,
//!   "store_load_first10_mean_ms":…,"store_load_last10_mean_ms":…}`; the `store_*` figures are
//!   the store's own share of a resume (its commits, and its load of the run), timed around
//!   the store.
//! - `inbox --runs 100000 --store URL`: fills the store with suspended runs and, at each
//!   checkpoint (default 1,000 and the total), measures the inbox query — the first page of
//!   suspended runs (their pending questions), newest first — and the resident memory of a
//!   fresh process that opens the store and runs that query:
//!   `{"bench":"inbox","suspended_runs":…,"page":50,"query_ms_first":…,"query_ms_p50":…,
//!   "rows":…,"probe_rss_mb":…,"probe_peak_rss_mb":…,"filler_rss_mb":…}`.
//!
//! - `http [--askloop PATH | --url URL --pid PID] [--store URL] [--n 6400] [--concurrency 64]
//!   [--suspended 10000]`: full cycles over HTTP against `askloop serve` (started by the
//!   benchmark) or another server speaking the same agent routes; resume latency; the server's
//!   memory with many suspended runs (see the `http` module).
//! - `idle-connections [--askloop PATH | --url URL --pid PID] [--connections 10000]`: the
//!   server's memory before, while and after many idle connections are held open (see the
//!   `connections` module).
//! - `inbox-streams [--askloop PATH] [--runs 10000] [--streams 0,1,10] [--window-ms 10000]`:
//!   the server's CPU and memory with many suspended runs while inbox event streams are open
//!   (see the `inbox_streams` module).
//!
//! No CPU pinning unless `--pin` asks for it (then the process and its threads run on one core,
//! which on a 2-core VM avoids cross-core wake-ups between the runtime and the store's thread).
//! The runtime is tokio's multi-threaded one, as `#[tokio::main]` gives, unless
//! `--current-thread`.

mod connections;
mod http;
mod inbox_streams;
mod local;
mod receiver;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use askloop_core::store::{Lease, RunFilter, RunPage, RunState, StoredRun, ThreadHistory};
use askloop_core::testing::ScriptedModel;
use askloop_core::{
    Agent, AskUser, Chunk, RunKey, RunStatus, RunStore, StoreError, ThreadKey, ToolCallId,
};
use askloop_store::{OpenOptions, StoreUrl, Synchronous, open_store};
use clap::{Args, Parser, Subcommand};
use futures::StreamExt;
use serde_json::{Value, json};

#[derive(Parser)]
#[command(name = "askloop-bench", about = "Benchmarks of askloop")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Options every benchmark takes.
#[derive(Args, Clone)]
struct Common {
    /// Store URL: `memory`, `sqlite://PATH` (created if needed) or any URL `--store` takes.
    #[arg(long, default_value = "memory")]
    store: String,
    /// Commit durability: `full` (waits for the disk; the stores' default) or `normal`.
    #[arg(long, default_value = "full")]
    sync: Synchronous,
    /// Run the process on one core (off by default: users' processes are not pinned).
    #[arg(long)]
    pin: bool,
    /// Use tokio's current-thread runtime instead of the multi-threaded one.
    #[arg(long)]
    current_thread: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Full ask-and-resume cycles with the scripted model.
    Cycles {
        /// Number of cycles.
        #[arg(long, default_value_t = 2000)]
        n: usize,
        /// Runs in flight at once (each does whole cycles, one after another).
        #[arg(long, default_value_t = 1)]
        concurrency: usize,
        /// Also N two-level cycles (supervisor → researcher sub-agent that asks), in the same
        /// run and store, and their rate beside the one-level one.
        #[arg(long)]
        subagents: bool,
        #[command(flatten)]
        common: Common,
    },
    /// One run that asks many questions: time of its first and last resume.
    LongRun {
        /// Questions the run asks.
        #[arg(long, default_value_t = 200)]
        questions: usize,
        #[command(flatten)]
        common: Common,
    },
    /// The inbox query (pending questions, newest first) and memory over many suspended runs.
    Inbox {
        /// Suspended runs in the store at the end.
        #[arg(long, default_value_t = 100_000)]
        runs: usize,
        /// Counts of suspended runs at which to measure (the total is always one).
        #[arg(long, value_delimiter = ',', default_value = "1000")]
        checkpoints: Vec<usize>,
        /// Page size of the inbox query.
        #[arg(long, default_value_t = 50)]
        page: usize,
        /// Runs created at once while filling.
        #[arg(long, default_value_t = 64)]
        concurrency: usize,
        #[command(flatten)]
        common: Common,
    },
    /// (Internal) opens the store read-only, runs the inbox query, prints its memory.
    #[command(hide = true)]
    InboxProbe {
        /// Store URL.
        #[arg(long)]
        store: String,
        /// Page size.
        #[arg(long, default_value_t = 50)]
        page: usize,
    },
    /// The embedded local model on the built-in agent's first step: TTFT, prefill and decode
    /// tokens per second, peak RSS, and the time to the question on screen.
    Local {
        /// A catalogue name (`qwen2.5-coder-1.5b`) or a GGUF path [default: the default model,
        /// fetched if missing]
        #[arg(long)]
        model: Option<String>,
        /// The `askloop` binary, to time `askloop run "Help me plan a trip"` to the question on
        /// screen (on a pseudo-terminal through `script`; the model must be downloaded)
        #[arg(long)]
        askloop: Option<PathBuf>,
        /// Also write the prompt text of the first step to this file (for
        /// `llama-cpp/bench.mjs`, the same measurement on llama.cpp)
        #[arg(long, value_name = "PATH")]
        prompt_out: Option<PathBuf>,
    },
    /// Full ask cycles over HTTP against `askloop serve` (or another server), at many clients
    /// at once; resume latency; the server's memory with many suspended runs.
    Http(http::HttpArgs),
    /// The server's memory before, while and after many idle connections are held open.
    IdleConnections(connections::IdleArgs),
    /// The server's CPU and memory with many suspended runs and open inbox streams.
    InboxStreams(inbox_streams::InboxStreamsArgs),
}

const CYCLE_SCRIPT: &str = r#"{"steps":[
  {"toolCalls":[{"id":"c1","name":"ask_user","args":{"question":"Which repo?","options":[{"label":"main"},{"label":"docs"}]}}]},
  {"text":"Summary of main."}]}"#;

/// The supervisor of the two-level cycle (`cycles --subagents`): delegates to the researcher,
/// whose child run asks with [`CYCLE_SCRIPT`], then answers with the researcher's result.
const SUPERVISOR_SCRIPT: &str = r#"{"steps":[
  {"toolCalls":[{"id":"c1","name":"researcher","args":{"prompt":"Summarize the user's project; ask which repo."}}]},
  {"text":"The researcher's summary of main."}]}"#;

/// Resident and peak resident memory of this process, in MB, from `/proc/self/status`.
fn memory_mb() -> (f64, f64) {
    process_memory_mb("self").unwrap_or((0.0, 0.0))
}

/// Resident and peak resident memory (`VmRSS`, `VmHWM`) of process `pid` (`"self"` for this
/// one), in MB, from `/proc/PID/status`; `None` if it cannot be read.
fn process_memory_mb(pid: &str) -> Option<(f64, f64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kb| kb.parse::<f64>().ok())
            .map(|kb| kb / 1024.0)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

fn round(value: f64, places: i32) -> f64 {
    let scale = 10f64.powi(places);
    (value * scale).round() / scale
}

fn ms(duration: Duration) -> f64 {
    round(duration.as_secs_f64() * 1000.0, 3)
}

/// The store's kind, as the JSON lines name it: the URL's scheme.
fn store_kind(url: &str) -> &str {
    url.split(':').next().unwrap_or(url)
}

/// The folder the store's data lives in, for the fsync probe (the current folder for stores
/// that are not files).
fn store_folder(url: &StoreUrl) -> PathBuf {
    let text = url.to_string();
    text.strip_prefix("sqlite://")
        .map(|path| path.split('?').next().unwrap_or(path))
        .map(Path::new)
        .and_then(Path::parent)
        .filter(|parent| !parent.as_os_str().is_empty())
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// The disk's write+fsync latency in `folder`: `samples` writes of 4 KiB at offset 0 of a
/// scratch file, each followed by `fsync`; returns (p50, p99) in microseconds.
fn fsync_latency_us(folder: &Path, samples: usize) -> anyhow::Result<(f64, f64)> {
    use std::io::{Seek, SeekFrom, Write};
    std::fs::create_dir_all(folder)?;
    let path = folder.join(format!(".askloop-bench-fsync-{}", std::process::id()));
    let mut file = std::fs::File::create(&path)?;
    let block = [7u8; 4096];
    let mut times = Vec::with_capacity(samples);
    for _ in 0..samples {
        let started = Instant::now();
        file.seek(SeekFrom::Start(0))?;
        file.write_all(&block)?;
        file.sync_all()?;
        times.push(started.elapsed().as_secs_f64() * 1e6);
    }
    drop(file);
    std::fs::remove_file(&path)?;
    times.sort_by(f64::total_cmp);
    let at = |quantile: f64| times[((times.len() - 1) as f64 * quantile).round() as usize];
    Ok((round(at(0.5), 1), round(at(0.99), 1)))
}

async fn open(common: &Common) -> anyhow::Result<(StoreUrl, Arc<dyn RunStore>)> {
    // `--sync` decides, whatever the URL says.
    let url = common
        .store
        .parse::<StoreUrl>()?
        .with_synchronous(common.sync);
    let store = open_store(&url, &OpenOptions::new())
        .await
        .with_context(|| format!("cannot open {url}"))?;
    Ok((url, store))
}

fn agent(store: Arc<dyn RunStore>, script: &str, max_steps: u32) -> anyhow::Result<Agent> {
    Ok(Agent::builder("assistant")
        .model(ScriptedModel::from_json(script)?)
        .tool(AskUser::new())
        .max_steps(max_steps)
        .shared_store(store)
        .build()?)
}

/// The supervisor of the two-level cycle and its researcher sub-agent, both on `store`: the
/// researcher runs [`CYCLE_SCRIPT`] (asks, then answers), the supervisor
/// [`SUPERVISOR_SCRIPT`] (calls the researcher, then answers).
fn supervisor(store: Arc<dyn RunStore>) -> anyhow::Result<Agent> {
    let researcher = Agent::builder("researcher")
        .model(ScriptedModel::from_json(CYCLE_SCRIPT)?)
        .tool(AskUser::new())
        .max_steps(10)
        .shared_store(store.clone())
        .build()?;
    Ok(Agent::builder("supervisor")
        .model(ScriptedModel::from_json(SUPERVISOR_SCRIPT)?)
        .subagent(researcher)
        .max_steps(10)
        .shared_store(store)
        .build()?)
}

/// What a drained stream did.
struct Drained {
    /// The call it suspended on, if it did (the run's own, or a sub-agent's under its
    /// `PARENT_CALL~CHILD_CALL` id).
    suspended: Option<ToolCallId>,
    /// Whether the run finished.
    finished: bool,
    /// How many sub-agents' runs finished in it (their `Finish` chunks, nested).
    subagents_finished: usize,
}

/// Drains a stream.
async fn drain(mut stream: askloop_core::AgentStream) -> anyhow::Result<Drained> {
    let mut drained = Drained {
        suspended: None,
        finished: false,
        subagents_finished: 0,
    };
    while let Some(chunk) = stream.next().await {
        match chunk? {
            Chunk::ToolCallSuspended { call, .. } => drained.suspended = Some(call.id),
            Chunk::Finish { .. } => drained.finished = true,
            Chunk::Subagent { chunk, .. } if matches!(*chunk, Chunk::Finish { .. }) => {
                drained.subagents_finished += 1;
            }
            _ => {}
        }
    }
    Ok(drained)
}

/// Starts a run and drives it to its first question.
async fn start_suspended(agent: &Agent) -> anyhow::Result<(RunKey, ToolCallId)> {
    let stream = agent.stream("Summarize my project");
    let run_id = stream.run_key().clone();
    match drain(stream).await?.suspended {
        Some(call) => Ok((run_id, call)),
        None => bail!("run {run_id} did not suspend"),
    }
}

/// One cycle of `agent`: it asks, is answered, and finishes. With `subagents` levels below the
/// root (0 or 1), the question is its sub-agent's, and the answer's stream must show the
/// sub-agent's run finish too.
async fn one_cycle(agent: &Agent, subagents: usize) -> anyhow::Result<()> {
    let (run_id, call) = start_suspended(agent).await?;
    let resumed = agent
        .resume_stream(json!("main"), &run_id, Some(&call))
        .await?;
    let drained = drain(resumed).await?;
    if !drained.finished || drained.subagents_finished != subagents {
        bail!(
            "run {run_id} did not finish after its resume (finished: {}, sub-agents finished: \
             {} of {subagents})",
            drained.finished,
            drained.subagents_finished
        );
    }
    Ok(())
}

/// Runs `n` cycles of `agent` (with `subagents` levels below its root, see [`one_cycle`]) with
/// `concurrency` tasks taking cycles from a shared counter.
async fn run_cycles(
    agent: Arc<Agent>,
    subagents: usize,
    n: usize,
    concurrency: usize,
) -> anyhow::Result<()> {
    let next = Arc::new(AtomicUsize::new(0));
    let tasks = (0..concurrency.max(1)).map(|_| {
        let agent = agent.clone();
        let next = next.clone();
        tokio::spawn(async move {
            loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= n {
                    return Ok::<(), anyhow::Error>(());
                }
                one_cycle(&agent, subagents)
                    .await
                    .with_context(|| format!("cycle {index}"))?;
            }
        })
    });
    for result in futures::future::join_all(tasks).await {
        result??;
    }
    Ok(())
}

/// Runs `n` cycles of `agent` (see [`run_cycles`]); returns the seconds they took.
async fn timed_cycles(
    agent: &Arc<Agent>,
    subagents: usize,
    n: usize,
    concurrency: usize,
) -> anyhow::Result<f64> {
    let started = Instant::now();
    run_cycles(agent.clone(), subagents, n, concurrency).await?;
    Ok(started.elapsed().as_secs_f64())
}

async fn cycles(
    n: usize,
    concurrency: usize,
    subagents: bool,
    common: Common,
    pinned: bool,
) -> anyhow::Result<()> {
    let (url, store) = open(&common).await?;
    let (fsync_p50_us, fsync_p99_us) = fsync_latency_us(&store_folder(&url), 200)?;
    let agent = Arc::new(agent(store.clone(), CYCLE_SCRIPT, 10)?);
    let (seconds, two_level_seconds) = if subagents {
        // Halves in the order one, two, two, one: a machine that speeds up or slows down during
        // the run weighs on both alike.
        let supervisor = Arc::new(supervisor(store.clone())?);
        let (first, second) = (n / 2, n - n / 2);
        let mut one = timed_cycles(&agent, 0, first, concurrency).await?;
        let mut two = timed_cycles(&supervisor, 1, first, concurrency).await?;
        two += timed_cycles(&supervisor, 1, second, concurrency).await?;
        one += timed_cycles(&agent, 0, second, concurrency).await?;
        (one, Some(two))
    } else {
        (timed_cycles(&agent, 0, n, concurrency).await?, None)
    };
    let (rss_mb, peak_rss_mb) = memory_mb();
    store.close().await;
    let mut line = json!({
        "bench": "cycles",
        "store": store_kind(&common.store),
        "sync": common.sync.as_str(),
        "cycles": n,
        "concurrency": concurrency,
        "pinned": pinned,
        "runtime": runtime_name(&common),
        "seconds": round(seconds, 3),
        "cycles_per_s": (n as f64 / seconds).round(),
        "fsync_p50_us": fsync_p50_us,
        "fsync_p99_us": fsync_p99_us,
        "rss_mb": round(rss_mb, 1),
        "peak_rss_mb": round(peak_rss_mb, 1),
    });
    if let Some(two_level_seconds) = two_level_seconds {
        line["two_level_seconds"] = json!(round(two_level_seconds, 3));
        line["two_level_cycles_per_s"] = json!((n as f64 / two_level_seconds).round());
        line["two_level_ratio"] = json!(round(seconds / two_level_seconds, 3));
    }
    print_line(line);
    Ok(())
}

/// A script that asks `questions` free-text questions, one per step, then answers.
fn long_script(questions: usize) -> String {
    let mut steps: Vec<Value> = (1..=questions)
        .map(|index| {
            json!({"toolCalls": [{"id": format!("q{index}"), "name": "ask_user",
                "args": {"question": format!("Question {index}: what next? {}", "x".repeat(200))}}]})
        })
        .collect();
    steps.push(json!({"text": "All answered."}));
    json!({ "steps": steps }).to_string()
}

/// A store that times its inner store's commits and loads (for `long-run`).
struct TimedStore {
    inner: Arc<dyn RunStore>,
    commits: std::sync::Mutex<Vec<Duration>>,
    loads: std::sync::Mutex<Vec<Duration>>,
}

impl TimedStore {
    fn take(times: &std::sync::Mutex<Vec<Duration>>) -> Vec<Duration> {
        std::mem::take(
            &mut *times
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    fn record(times: &std::sync::Mutex<Vec<Duration>>, started: Instant) {
        times
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(started.elapsed());
    }
}

#[async_trait::async_trait]
impl RunStore for TimedStore {
    async fn insert_run_with_events(
        &self,
        state: &RunState,
        lease: Option<&Lease>,
        events: &[askloop_core::event::RunEvent],
    ) -> Result<u64, StoreError> {
        self.inner
            .insert_run_with_events(state, lease, events)
            .await
    }
    async fn update_run_with_events(
        &self,
        state: &RunState,
        expected_version: u64,
        lease: Option<&Lease>,
        events: &[askloop_core::event::RunEvent],
    ) -> Result<u64, StoreError> {
        let started = Instant::now();
        let result = self
            .inner
            .update_run_with_events(state, expected_version, lease, events)
            .await;
        Self::record(&self.commits, started);
        result
    }
    async fn renew_lease(
        &self,
        run: &RunKey,
        expected_version: u64,
        lease: &Lease,
    ) -> Result<(), StoreError> {
        self.inner.renew_lease(run, expected_version, lease).await
    }
    async fn load_run(&self, run: &RunKey) -> Result<StoredRun, StoreError> {
        let started = Instant::now();
        let result = self.inner.load_run(run).await;
        Self::record(&self.loads, started);
        result
    }
    async fn keys_of_run(
        &self,
        run_id: &askloop_core::RunId,
    ) -> Result<Vec<askloop_core::RunKey>, askloop_core::StoreError> {
        self.inner.keys_of_run(run_id).await
    }
    async fn list_runs(&self, filter: &RunFilter) -> Result<RunPage, StoreError> {
        self.inner.list_runs(filter).await
    }
    async fn run_counts(&self) -> Result<askloop_core::store::RunCounts, StoreError> {
        self.inner.run_counts().await
    }
    async fn thread_history(
        &self,
        thread: &ThreadKey,
        through: Option<u64>,
    ) -> Result<ThreadHistory, StoreError> {
        self.inner.thread_history(thread, through).await
    }
    async fn watch_changes(&self) -> Option<askloop_core::store::RunChanges> {
        self.inner.watch_changes().await
    }
    async fn close(&self) {
        self.inner.close().await;
    }
    fn answer_links(&self) -> Option<&dyn askloop_core::store::AnswerLinks> {
        self.inner.answer_links()
    }
    fn outbox(&self) -> Option<&dyn askloop_core::store::Outbox> {
        self.inner.outbox()
    }
}

async fn long_run(questions: usize, common: Common, pinned: bool) -> anyhow::Result<()> {
    let (_url, inner) = open(&common).await?;
    let timed = Arc::new(TimedStore {
        inner,
        commits: std::sync::Mutex::default(),
        loads: std::sync::Mutex::default(),
    });
    let store: Arc<dyn RunStore> = timed.clone();
    let steps = u32::try_from(questions + 1)?;
    let agent = agent(store.clone(), &long_script(questions), steps)?;
    let (run_id, mut call) = start_suspended(&agent).await?;
    let mut times = Vec::with_capacity(questions);
    // Per resume: the store's commit times (claim, suspension) and its load times.
    let mut commits = Vec::with_capacity(questions);
    let mut loads = Vec::with_capacity(questions);
    for index in 1..=questions {
        TimedStore::take(&timed.commits);
        TimedStore::take(&timed.loads);
        let started = Instant::now();
        let stream = agent
            .resume_stream(json!(format!("answer {index}")), &run_id, Some(&call))
            .await?;
        let Drained {
            suspended: next,
            finished,
            ..
        } = drain(stream).await?;
        times.push(started.elapsed());
        commits.push(
            TimedStore::take(&timed.commits)
                .into_iter()
                .sum::<Duration>(),
        );
        loads.push(TimedStore::take(&timed.loads).into_iter().sum::<Duration>());
        match next {
            Some(next) => call = next,
            None if finished && index == questions => {}
            None => bail!("run {run_id} stopped asking at question {index}"),
        }
    }
    let stored = store.load_run(&run_id).await?;
    if stored.state.status() != RunStatus::Completed {
        bail!(
            "run {run_id} is {} after its last answer",
            stored.state.status().as_str()
        );
    }
    let (rss_mb, _) = memory_mb();
    store.close().await;
    let mean = |slice: &[Duration]| {
        ms(slice.iter().sum::<Duration>() / u32::try_from(slice.len().max(1)).unwrap_or(1))
    };
    let first = times.first().copied().unwrap_or_default();
    let last = times.last().copied().unwrap_or_default();
    let ten = times.len().min(10);
    print_line(json!({
        "bench": "long-run",
        "store": store_kind(&common.store),
        "sync": common.sync.as_str(),
        "questions": questions,
        "pinned": pinned,
        "runtime": runtime_name(&common),
        "resume_first_ms": ms(first),
        "resume_last_ms": ms(last),
        "first10_mean_ms": mean(&times[..ten]),
        "last10_mean_ms": mean(&times[times.len() - ten..]),
        "ratio_last_first": round(mean(&times[times.len() - ten..]) / mean(&times[..ten]).max(1e-9), 2),
        "store_commits_first10_mean_ms": mean(&commits[..ten]),
        "store_commits_last10_mean_ms": mean(&commits[commits.len() - ten..]),
        "store_load_first10_mean_ms": mean(&loads[..ten]),
        "store_load_last10_mean_ms": mean(&loads[loads.len() - ten..]),
        "rss_mb": round(rss_mb, 1),
    }));
    Ok(())
}

/// Times the inbox query: the first page of suspended runs, newest first.
async fn inbox_query(store: &dyn RunStore, page: usize) -> anyhow::Result<(Duration, usize)> {
    let started = Instant::now();
    let listed = store
        .list_runs(&RunFilter::new().status(RunStatus::Suspended).limit(page))
        .await?;
    let elapsed = started.elapsed();
    let with_questions = listed
        .runs
        .iter()
        .filter_map(|run| run.summary())
        .filter(|summary| !summary.pending.is_empty())
        .count();
    Ok((elapsed, with_questions))
}

async fn inbox(
    runs: usize,
    mut checkpoints: Vec<usize>,
    page: usize,
    concurrency: usize,
    common: Common,
    pinned: bool,
) -> anyhow::Result<()> {
    let (_url, store) = open(&common).await?;
    let agent = Arc::new(agent(store.clone(), CYCLE_SCRIPT, 10)?);
    checkpoints.push(runs);
    checkpoints.retain(|&count| count <= runs);
    checkpoints.sort_unstable();
    checkpoints.dedup();
    let mut made = 0;
    for checkpoint in checkpoints {
        let next = Arc::new(AtomicUsize::new(made));
        let tasks = (0..concurrency.max(1)).map(|_| {
            let agent = agent.clone();
            let next = next.clone();
            tokio::spawn(async move {
                while next.fetch_add(1, Ordering::Relaxed) < checkpoint {
                    start_suspended(&agent).await?;
                }
                Ok::<(), anyhow::Error>(())
            })
        });
        for result in futures::future::join_all(tasks).await {
            result??;
        }
        made = checkpoint;
        let (first, rows) = inbox_query(store.as_ref(), page).await?;
        let mut times = Vec::new();
        for _ in 0..20 {
            times.push(inbox_query(store.as_ref(), page).await?.0);
        }
        times.sort();
        let (filler_rss_mb, _) = memory_mb();
        let probe = probe(&common.store, page)?;
        print_line(json!({
            "bench": "inbox",
            "store": store_kind(&common.store),
            "suspended_runs": checkpoint,
            "page": page,
            "rows": rows,
            "query_ms_first": ms(first),
            "query_ms_p50": ms(times[times.len() / 2]),
            "probe_query_ms": probe["query_ms"],
            "probe_rss_mb": probe["rss_mb"],
            "probe_peak_rss_mb": probe["peak_rss_mb"],
            "filler_rss_mb": round(filler_rss_mb, 1),
            "pinned": pinned,
        }));
    }
    store.close().await;
    Ok(())
}

/// Runs `inbox-probe` in a fresh process and returns its JSON line.
fn probe(store: &str, page: usize) -> anyhow::Result<Value> {
    let output = std::process::Command::new(std::env::current_exe()?)
        .args(["inbox-probe", "--store", store, "--page", &page.to_string()])
        .output()?;
    if !output.status.success() {
        bail!(
            "inbox-probe failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(serde_json::from_slice(&output.stdout)?)
}

async fn inbox_probe(store: &str, page: usize) -> anyhow::Result<()> {
    let url: StoreUrl = store.parse()?;
    let store = open_store(&url, &OpenOptions::new().read_only(true)).await?;
    let (elapsed, rows) = inbox_query(store.as_ref(), page).await?;
    let (rss_mb, peak_rss_mb) = memory_mb();
    store.close().await;
    print_line(json!({
        "query_ms": ms(elapsed),
        "rows": rows,
        "rss_mb": round(rss_mb, 1),
        "peak_rss_mb": round(peak_rss_mb, 1),
    }));
    Ok(())
}

fn print_line(line: Value) {
    println!("{line}");
}

fn runtime_name(common: &Common) -> &'static str {
    if common.current_thread {
        "current_thread"
    } else {
        "multi_thread"
    }
}

/// Pins this thread (and so every thread it spawns later) to the first core.
fn pin() -> bool {
    core_affinity::get_core_ids()
        .and_then(|cores| cores.first().copied())
        .is_some_and(core_affinity::set_for_current)
}

fn block_on<F: Future<Output = anyhow::Result<()>>>(
    common: &Common,
    future: impl FnOnce(bool) -> F,
) -> anyhow::Result<()> {
    // Threads inherit the affinity of the thread that spawns them, so pinning this one before
    // the runtime and the store start pins theirs too.
    let pinned = common.pin && pin();
    let runtime = if common.current_thread {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?
    };
    runtime.block_on(future(pinned))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Cycles {
            n,
            concurrency,
            subagents,
            common,
        } => block_on(&common.clone(), |pinned| {
            cycles(n, concurrency, subagents, common, pinned)
        }),
        Command::LongRun { questions, common } => block_on(&common.clone(), |pinned| {
            long_run(questions, common, pinned)
        }),
        Command::Inbox {
            runs,
            checkpoints,
            page,
            concurrency,
            common,
        } => block_on(&common.clone(), |pinned| {
            inbox(runs, checkpoints, page, concurrency, common, pinned)
        }),
        Command::InboxProbe { store, page } => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(anyhow::Error::from)
            .and_then(|runtime| runtime.block_on(inbox_probe(&store, page))),
        Command::Local {
            model,
            askloop,
            prompt_out,
        } => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(anyhow::Error::from)
            .and_then(|runtime| runtime.block_on(local::local(model, askloop, prompt_out))),
        Command::Http(args) => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(anyhow::Error::from)
            .and_then(|runtime| runtime.block_on(http::run(args))),
        Command::IdleConnections(args) => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(anyhow::Error::from)
            .and_then(|runtime| runtime.block_on(connections::run(args))),
        Command::InboxStreams(args) => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(anyhow::Error::from)
            .and_then(|runtime| runtime.block_on(inbox_streams::run(args))),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}
