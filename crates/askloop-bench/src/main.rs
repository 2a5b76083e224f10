//! `askloop-bench`: measures askloop's durable ask-and-resume cycle.
//!
//! `askloop-bench cycles --n 2000 --store sqlite://PATH --sync normal` runs N full cycles one
//! after another — stream → `ask_user` suspends → commit → resume with an answer → final text →
//! finish — with the scripted model, and prints one JSON line:
//! `{"store":"sqlite","sync":"normal","cycles":2000,"pinned":true,"seconds":…,"cycles_per_s":…,"rss_mb":…,"peak_rss_mb":…}`.
//!
//! The cycles are strictly sequential: the runtime thread and the SQLite driver's worker thread
//! take turns. By default the process runs on one core (`pinned`), as a sequential workload
//! should be measured: on a 2-core VM, waking the other thread on the other, idle core costs
//! more than the work itself (about 2,000 cycles/s unpinned when idle, 5,000 pinned). Pass
//! `--unpinned` to let the OS place the threads.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, bail};
use askloop_core::testing::ScriptedModel;
use askloop_core::{Agent, AskUser, Chunk, RunStore};
use askloop_store::{OpenOptions, StoreUrl, Synchronous, open_store};
use clap::{Parser, Subcommand};
use futures::StreamExt;
use serde_json::json;

#[derive(Parser)]
#[command(name = "askloop-bench", about = "Benchmarks of askloop")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Full ask-and-resume cycles with the scripted model, one after another.
    Cycles {
        /// Number of cycles.
        #[arg(long, default_value_t = 2000)]
        n: usize,
        /// Store URL: `memory` or `sqlite://PATH` (the file is created if needed).
        #[arg(long, default_value = "memory")]
        store: String,
        /// SQLite `synchronous` setting: `normal` or `full`.
        #[arg(long, default_value = "normal")]
        sync: Synchronous,
        /// Let the OS place the threads instead of running the process on one core.
        #[arg(long)]
        unpinned: bool,
    },
}

const SCRIPT: &str = r#"{"steps":[
  {"toolCalls":[{"id":"c1","name":"ask_user","args":{"question":"Which repo?","options":[{"label":"main"},{"label":"docs"}]}}]},
  {"text":"Summary of main."}]}"#;

/// Resident and peak resident memory of this process, in MB, from `/proc/self/status`.
fn memory_mb() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kb| kb.parse::<f64>().ok())
            .map_or(0.0, |kb| kb / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

async fn one_cycle(agent: &Agent) -> anyhow::Result<()> {
    let mut stream = agent.stream("Summarize my project");
    let run_id = stream.run_id().clone();
    let mut suspended = false;
    while let Some(chunk) = stream.next().await {
        suspended |= matches!(chunk?, Chunk::ToolCallSuspended { .. });
    }
    if !suspended {
        bail!("run {run_id} did not suspend");
    }
    let mut resumed = agent.resume_stream(json!("main"), &run_id, None).await?;
    let mut finished = false;
    while let Some(chunk) = resumed.next().await {
        finished |= matches!(chunk?, Chunk::Finish { .. });
    }
    if !finished {
        bail!("run {run_id} did not finish after its resume");
    }
    Ok(())
}

async fn cycles(n: usize, store_url: &str, sync: Synchronous, pinned: bool) -> anyhow::Result<()> {
    let url: StoreUrl = store_url.parse()?;
    let store: Arc<dyn RunStore> = open_store(&url, &OpenOptions::new().synchronous(sync)).await?;
    let agent = Agent::builder("assistant")
        .model(ScriptedModel::from_json(SCRIPT)?)
        .tool(AskUser)
        .shared_store(store)
        .build()?;
    let started = Instant::now();
    for index in 0..n {
        one_cycle(&agent)
            .await
            .with_context(|| format!("cycle {index}"))?;
    }
    let seconds = started.elapsed().as_secs_f64();
    let (rss_mb, peak_rss_mb) = memory_mb();
    let store_kind = match url {
        StoreUrl::Memory => "memory",
        StoreUrl::Sqlite(_) => "sqlite",
        _ => "other",
    };
    let line = json!({
        "store": store_kind,
        "sync": sync.as_str(),
        "cycles": n,
        "pinned": pinned,
        "seconds": (seconds * 1000.0).round() / 1000.0,
        "cycles_per_s": (n as f64 / seconds).round(),
        "rss_mb": (rss_mb * 10.0).round() / 10.0,
        "peak_rss_mb": (peak_rss_mb * 10.0).round() / 10.0,
    });
    println!("{line}");
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Cycles {
            n,
            store,
            sync,
            unpinned,
        } => {
            // Threads inherit the affinity of the thread that spawns them, so pinning this one
            // before the runtime and the store start pins theirs too.
            let pinned = !unpinned
                && core_affinity::get_core_ids()
                    .and_then(|cores| cores.first().copied())
                    .is_some_and(core_affinity::set_for_current);
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(anyhow::Error::from)
                .and_then(|runtime| runtime.block_on(cycles(n, &store, sync, pinned)))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}
