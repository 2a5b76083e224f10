//! `askloop-bench idle-connections`: the server's memory before, while and after many idle
//! connections are held open (issue 31: 10,000 idle sockets took `askloop serve` from 17 to
//! 281 MB, held forever and not returned).
//!
//! Starts `askloop serve` as `askloop-bench http` does (or measures a server already running at
//! `--url` with `--pid`), warms it up (a few requests, a few connections opened and closed),
//! waits `--settle-ms` and reads its resident memory (`VmRSS`). Then it opens `--connections`
//! TCP connections, `--concurrency` attempts at a time, each given `--connect-timeout-ms` to
//! complete (a server at its connection cap leaves the rest in the kernel's backlog, where a
//! connect waits), and holds every one that opened for `--hold-ms` without sending a byte,
//! sampling the server's memory; then it closes them all, waits `--settle-ms`, checks the
//! server still answers, and reads its memory again. One JSON line:
//! `{"bench":"idle-connections","server":"askloop","connections":10000,"opened":…,
//! "closed_by_server":…,"rss_start_mb":…,"rss_held_max_mb":…,"peak_rss_mb":…,
//! "rss_after_mb":…,"after_over_start":…,"answers_after":true}`. `closed_by_server` counts the
//! held connections the server had closed by the end of the hold (its timeouts);
//! `after_over_start` is `rss_after_mb / rss_start_mb` (the target: at most 1.2).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use futures::StreamExt;
use serde_json::json;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// Options of `askloop-bench idle-connections`.
#[derive(Args, Clone)]
pub(crate) struct IdleArgs {
    /// The `askloop` binary to start as the server.
    #[arg(long, default_value = "target/release/askloop")]
    askloop: PathBuf,
    /// Measure a server already running here instead (e.g. `http://127.0.0.1:4111`).
    #[arg(long)]
    url: Option<String>,
    /// With `--url`: the server's process id, to read its memory.
    #[arg(long)]
    pid: Option<u32>,
    /// Connections to open.
    #[arg(long, default_value_t = 10_000)]
    connections: usize,
    /// Connection attempts in flight at once.
    #[arg(long, default_value_t = 1000)]
    concurrency: usize,
    /// How long one connection attempt may take before it counts as not accepted, ms.
    #[arg(long, default_value_t = 2000)]
    connect_timeout_ms: u64,
    /// How long the open connections are held, ms.
    #[arg(long, default_value_t = 5000)]
    hold_ms: u64,
    /// How long to wait before each memory reading at rest, ms.
    #[arg(long, default_value_t = 3000)]
    settle_ms: u64,
}

/// Runs the benchmark and prints its line.
pub(crate) async fn run(args: IdleArgs) -> anyhow::Result<()> {
    let (base, pid, server_name, _started) = match &args.url {
        Some(url) => (
            url.trim_end_matches('/').to_owned(),
            args.pid
                .context("--url needs --pid, to read the server's memory")?,
            "external".to_owned(),
            None,
        ),
        None => {
            let (started, base, _store) = crate::http::start_server(&args.askloop, None)?;
            let pid = started.pid();
            (base, pid, "askloop".to_owned(), Some(started))
        }
    };
    let address: SocketAddr = base
        .strip_prefix("http://")
        .context("the server's URL is not http://HOST:PORT")?
        .parse()
        .context("the server's URL is not http://IP:PORT")?;
    let rss = || crate::process_memory_mb(&pid.to_string()).map(|(rss, _)| rss);
    let settle = Duration::from_millis(args.settle_ms);

    // Warm up: requests and connections of the kind measured, so that one-time costs (the
    // first request's, the runtime's first connections) are in the baseline.
    let client = reqwest::Client::new();
    for _ in 0..20 {
        answers(&client, &base).await?;
    }
    for _ in 0..50 {
        drop(TcpStream::connect(address).await?);
    }
    tokio::time::sleep(settle).await;
    let start = rss().context("cannot read the server's memory")?;

    // Open, hold, sample.
    let connect_timeout = Duration::from_millis(args.connect_timeout_ms);
    let held: Vec<TcpStream> = futures::stream::iter(0..args.connections)
        .map(|_| async move {
            tokio::time::timeout(connect_timeout, TcpStream::connect(address))
                .await
                .ok()
                .and_then(Result::ok)
        })
        .buffer_unordered(args.concurrency.max(1))
        .filter_map(|stream| async move { stream })
        .collect()
        .await;
    let opened = held.len();
    let closed_by_server = Arc::new(AtomicUsize::new(0));
    let (release, released) = tokio::sync::watch::channel(false);
    let holders: Vec<_> = held
        .into_iter()
        .map(|mut stream| {
            let closed_by_server = closed_by_server.clone();
            let released = released.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 256];
                tokio::select! {
                    read = stream.read(&mut buf) => {
                        if matches!(read, Ok(0) | Err(_)) {
                            closed_by_server.fetch_add(1, Ordering::Relaxed);
                        }
                        until_released(released).await;
                    }
                    () = until_released(released.clone()) => {}
                }
                drop(stream);
            })
        })
        .collect();
    let mut held_max = rss().unwrap_or(0.0);
    let hold_until = tokio::time::Instant::now() + Duration::from_millis(args.hold_ms);
    while tokio::time::Instant::now() < hold_until {
        tokio::time::sleep(Duration::from_millis(250)).await;
        held_max = held_max.max(rss().unwrap_or(0.0));
    }
    let closed = closed_by_server.load(Ordering::Relaxed);
    let _ = release.send(true);
    for holder in holders {
        holder.await?;
    }

    // At rest again.
    tokio::time::sleep(settle).await;
    let answers_after = answers(&client, &base).await.is_ok();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after = rss().context("cannot read the server's memory")?;
    let peak = crate::process_memory_mb(&pid.to_string()).map(|(_, peak)| peak);
    println!(
        "{}",
        json!({
            "bench": "idle-connections",
            "server": server_name,
            "connections": args.connections,
            "opened": opened,
            "closed_by_server": closed,
            "hold_s": args.hold_ms as f64 / 1000.0,
            "rss_start_mb": round(start),
            "rss_held_max_mb": round(held_max),
            "peak_rss_mb": peak.map(round),
            "rss_after_mb": round(after),
            "after_over_start": round(after / start),
            "answers_after": answers_after,
        })
    );
    Ok(())
}

/// Completes once the connections are released.
async fn until_released(mut released: tokio::sync::watch::Receiver<bool>) {
    let _ = released.wait_for(|released| *released).await.map(|_| ());
}

/// `GET /healthz` answers `ok`.
async fn answers(client: &reqwest::Client, base: &str) -> anyhow::Result<()> {
    let response = client.get(format!("{base}/healthz")).send().await?;
    let status = response.status();
    let text = response.text().await?;
    if !status.is_success() || text != "ok" {
        bail!("GET /healthz: HTTP {status}: {text}");
    }
    Ok(())
}

fn round(value: f64) -> f64 {
    crate::round(value, 2)
}
