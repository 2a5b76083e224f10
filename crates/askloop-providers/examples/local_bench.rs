//! Benchmark of the local model: time to first token for a prompt with tools, decode speed and
//! peak memory, printed as one JSON line.
//!
//! `cargo run --release -p askloop-providers --features local --example local_bench [MODEL.gguf]`
//! (the default model when no path is given; pull it first).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use askloop_core::model::{Message, ModelEvent, ModelRequest, ModelSettings, ToolChoice};
use askloop_core::{Agent, AskUser};
use askloop_providers::local::{LocalModel, default_model_path};

fn request(prompt: &str, choice: ToolChoice, max_tokens: u32) -> Result<ModelRequest, String> {
    let agent = Agent::builder("bench")
        .model(askloop_core::testing::ScriptedModel::from_steps(vec![]))
        .tool(AskUser::new())
        .build()
        .map_err(|error| error.to_string())?;
    Ok(ModelRequest::new(vec![Message::user(prompt)])
        .with_tools(agent.tool_definitions().to_vec())
        .with_settings(
            ModelSettings::new()
                .with_seed(1)
                .with_max_tokens(max_tokens)
                .with_tool_choice(choice),
        ))
}

/// Time to the first event, time from the first to the last text delta, and text deltas.
fn timed(model: &LocalModel, request: &ModelRequest) -> Result<(Duration, Duration, u64), String> {
    let start = Instant::now();
    let mut first: Option<Instant> = None;
    let mut last = start;
    let mut output_tokens = 0;
    model
        .generate_blocking(request, |event| {
            let now = Instant::now();
            first.get_or_insert(now);
            match event {
                ModelEvent::TextDelta(_) => last = now,
                ModelEvent::Finish { usage, .. } => output_tokens = usage.output_tokens,
                _ => {}
            }
            true
        })
        .map_err(|error| error.to_string())?;
    let first = first.unwrap_or(last);
    Ok((
        first - start,
        last.saturating_duration_since(first),
        output_tokens,
    ))
}

/// Peak resident memory of this process (VmHWM), in MB.
fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|line| line.starts_with("VmHWM:"))
                .and_then(|line| line.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

fn run() -> Result<String, String> {
    let path = match std::env::args_os().nth(1) {
        Some(path) => PathBuf::from(path),
        None => default_model_path().map_err(|error| error.to_string())?,
    };
    let started = Instant::now();
    let model = LocalModel::load(&path).map_err(|error| error.to_string())?;
    let load = started.elapsed();

    // A fresh process's first call: the whole prompt (system prompt, tool list, user message)
    // is processed before the first token.
    let with_tools = request("Help me plan a trip to Lisbon in May", ToolChoice::Auto, 8)?;
    let prompt_tokens = model
        .tokenizer()
        .encode(
            &model
                .prompt(&with_tools)
                .map_err(|error| error.to_string())?,
        )
        .len();
    let (ttft, _, _) = timed(&model, &with_tools)?;

    let story = request(
        "Write a long story about a dragon who learns to fly.",
        ToolChoice::None,
        160,
    )?;
    let (_, decode, tokens) = timed(&model, &story)?;
    let decode_tokens_per_s = tokens.saturating_sub(1) as f64 / decode.as_secs_f64().max(1e-9);

    Ok(serde_json::json!({
        "model": path.file_name().map(|name| name.to_string_lossy().into_owned()),
        "load_ms": load.as_millis() as u64,
        "prompt_tokens": prompt_tokens,
        "ttft_ms": ttft.as_millis() as u64,
        "decode_tokens": tokens,
        "decode_tokens_per_s": (decode_tokens_per_s * 10.0).round() / 10.0,
        "peak_rss_mb": peak_rss_mb().round(),
    })
    .to_string())
}

fn main() -> ExitCode {
    match run() {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}
