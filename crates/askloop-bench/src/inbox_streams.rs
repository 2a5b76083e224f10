//! `askloop-bench inbox-streams`: the server's CPU and memory with many suspended runs while
//! inbox event streams are open (issue 31: one open inbox on SQLite re-listed every suspended
//! run every 250 ms; with 10,000 of them `askloop serve` went from 2 % to 49 % of a core and
//! from 71 to 222 MB).
//!
//! Starts `askloop serve` as `askloop-bench http` does (a fresh SQLite file with
//! `synchronous=normal`, the scripted model), leaves `--runs` runs suspended at their question
//! (over HTTP, so any askloop version's binary can be measured), then for each count of
//! `--streams` (default `0,1,10`): opens that many `GET /api/inbox/events` streams, each read
//! as it arrives, waits until each has received the questions pending (timed: `snapshot_s`)
//! and then `--settle-ms`, and measures the
//! server over `--window-ms`: CPU time (user + system, `/proc/PID/stat`) as a percentage of one
//! core, and resident memory (`VmRSS`: at the end of the window, and the highest sample);
//! then closes the streams. One JSON line per count:
//! `{"bench":"inbox-streams","server":"askloop","suspended_runs":10000,"streams":N,
//! "window_s":10.0,"snapshot_s":…,"cpu_percent":…,"rss_mb":…,"rss_max_mb":…,"events":…}` (`events`: the
//! inbox events the streams received during the window and the settling), and a last line
//! comparing each count with no stream: `{"bench":"inbox-streams-summary",
//! "cpu_percent":{"0":…,"1":…,"10":…},"rss_mb":{…},"rss_over_no_stream":{"1":…,"10":…}}`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use serde_json::json;

/// How long the streams may take to receive the questions pending when they open.
const SNAPSHOT_WAIT: Duration = Duration::from_secs(120);

/// Options of `askloop-bench inbox-streams`.
#[derive(Args, Clone)]
pub(crate) struct InboxStreamsArgs {
    /// The `askloop` binary to start as the server.
    #[arg(long, default_value = "target/release/askloop")]
    askloop: PathBuf,
    /// Runs left suspended before measuring.
    #[arg(long, default_value_t = 10_000)]
    runs: usize,
    /// Runs started at once while filling.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// The counts of open inbox streams to measure, in order.
    #[arg(long, value_delimiter = ',', default_value = "0,1,10")]
    streams: Vec<usize>,
    /// How long each count is measured, ms.
    #[arg(long, default_value_t = 10_000)]
    window_ms: u64,
    /// How long to wait after opening the streams (or after filling) before measuring, ms.
    #[arg(long, default_value_t = 5_000)]
    settle_ms: u64,
}

/// Runs the benchmark and prints its lines.
pub(crate) async fn run(args: InboxStreamsArgs) -> anyhow::Result<()> {
    let (started, base, _store) = crate::http::start_server(&args.askloop, None)?;
    let pid = started.pid();
    crate::http::suspend_runs(&base, "assistant", args.runs, args.concurrency)
        .await
        .context("filling the store with suspended runs")?;
    let ticks_per_second = clock_ticks_per_second();
    let client = reqwest::Client::new();
    let mut cpu = BTreeMap::new();
    let mut rss = BTreeMap::new();
    for &count in &args.streams {
        let events = Arc::new(AtomicUsize::new(0));
        let mut readers = Vec::with_capacity(count);
        for _ in 0..count {
            let response = client
                .get(format!("{base}/api/inbox/events"))
                .header("accept", "text/event-stream")
                .send()
                .await?;
            if !response.status().is_success() {
                bail!("GET /api/inbox/events: HTTP {}", response.status());
            }
            let events = events.clone();
            readers.push(tokio::spawn(read_events(response, events)));
        }
        // Each stream first receives the questions pending now (one event per suspended run):
        // that opening cost is timed apart, the window measures the streams held open.
        let opened_at = Instant::now();
        while events.load(Ordering::Relaxed) < count * args.runs
            && opened_at.elapsed() < SNAPSHOT_WAIT
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let snapshot_s = opened_at.elapsed().as_secs_f64();
        tokio::time::sleep(Duration::from_millis(args.settle_ms)).await;
        let window = Duration::from_millis(args.window_ms);
        let ticks_before = cpu_ticks(pid).context("cannot read the server's CPU time")?;
        let started_at = Instant::now();
        let mut rss_max: f64 = 0.0;
        while started_at.elapsed() < window {
            tokio::time::sleep(Duration::from_millis(250).min(window)).await;
            rss_max = rss_max.max(rss_mb(pid).unwrap_or(0.0));
        }
        let elapsed = started_at.elapsed().as_secs_f64();
        let ticks_after = cpu_ticks(pid).context("cannot read the server's CPU time")?;
        let rss_end = rss_mb(pid).context("cannot read the server's memory")?;
        let cpu_percent =
            (ticks_after.saturating_sub(ticks_before)) as f64 / ticks_per_second / elapsed * 100.0;
        for reader in &readers {
            reader.abort();
        }
        println!(
            "{}",
            json!({
                "bench": "inbox-streams",
                "server": "askloop",
                "suspended_runs": args.runs,
                "streams": count,
                "window_s": round(elapsed),
                "snapshot_s": round(snapshot_s),
                "cpu_percent": round(cpu_percent),
                "rss_mb": round(rss_end),
                "rss_max_mb": round(rss_max),
                "events": events.load(Ordering::Relaxed),
            })
        );
        cpu.insert(count.to_string(), round(cpu_percent));
        rss.insert(count.to_string(), round(rss_end));
        // The streams' connections close; let the server notice before the next count.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let no_stream = rss.get("0").copied();
    let over: BTreeMap<String, f64> = rss
        .iter()
        .filter(|(count, _)| count.as_str() != "0")
        .filter_map(|(count, mb)| Some((count.clone(), round(mb / no_stream?))))
        .collect();
    println!(
        "{}",
        json!({
            "bench": "inbox-streams-summary",
            "suspended_runs": args.runs,
            "cpu_percent": cpu,
            "rss_mb": rss,
            "rss_over_no_stream": over,
        })
    );
    drop(started);
    Ok(())
}

/// Reads an inbox stream until it ends, counting its events.
async fn read_events(mut response: reqwest::Response, events: Arc<AtomicUsize>) {
    while let Ok(Some(bytes)) = response.chunk().await {
        let frames = bytes
            .windows(6)
            .filter(|window| window == b"data: ")
            .count();
        events.fetch_add(frames, Ordering::Relaxed);
    }
}

/// The process's CPU time so far (user + system), in clock ticks (`/proc/PID/stat` fields 14
/// and 15).
fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces: count from the closing parenthesis.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let user: u64 = fields.get(11)?.parse().ok()?;
    let system: u64 = fields.get(12)?.parse().ok()?;
    Some(user + system)
}

/// Clock ticks per second (`getconf CLK_TCK`; 100, Linux's, if that fails).
fn clock_ticks_per_second() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|output| String::from_utf8(output.stdout).ok())
        .and_then(|text| text.trim().parse::<f64>().ok())
        .filter(|ticks| *ticks > 0.0)
        .unwrap_or(100.0)
}

fn rss_mb(pid: u32) -> Option<f64> {
    crate::process_memory_mb(&pid.to_string()).map(|(rss, _)| rss)
}

fn round(value: f64) -> f64 {
    crate::round(value, 2)
}
