//! `askloop-bench local`: the embedded model on the built-in agent's first step.
//!
//! Prints one JSON line: the model, load time, the prompt's length in tokens (the built-in
//! agent's instructions, the `ask_user` tool in the model's own format, the user's message),
//! time to first token and prefill tokens per second for that prompt in a fresh process, the
//! time to a complete `ask_user` question (the first step as `askloop run` makes it), decode
//! tokens per second for free text, peak RSS, and, with `--askloop PATH`, the time from starting
//! `askloop run "Help me plan a trip"` on a pseudo-terminal (through `script`) to the question
//! on screen, twice: with the prompt cache the measured first step left (as from the second run
//! on) and without one (as the first run after installing), each with the time to the first
//! visible sign of progress (`first_progress_s`, `first_progress_first_run_s`). The model's prompt cache is removed
//! before measuring, so the first step and the prefill figures are always measured from nothing.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use askloop_core::model::{Message, ModelEvent, ModelRequest, ModelSettings, ToolChoice};
use askloop_core::testing::ScriptedModel;
use askloop_core::{Agent, AskUser};
use askloop_providers::local::{
    CatalogueModel, DEFAULT_MODEL, FetchOptions, LocalModel, catalogue_model, fetch_model,
    prompt_cache_path,
};
use serde_json::{Value, json};

/// The built-in agent's instructions: the text `askloop run`'s built-in `assistant` sends
/// (core's [`AskUser::ASK_FIRST_INSTRUCTIONS`]), so the prompt is the one a first run processes.
const BUILTIN_INSTRUCTIONS: &str = AskUser::ASK_FIRST_INSTRUCTIONS;

/// The first run's request.
const PROMPT: &str = "Help me plan a trip";

/// The request of the built-in agent's first step.
fn request(choice: ToolChoice, max_tokens: u32) -> anyhow::Result<ModelRequest> {
    let agent = Agent::builder("bench")
        .model(ScriptedModel::from_steps(vec![]))
        .tool(AskUser::new())
        .build()?;
    Ok(ModelRequest::new(vec![Message::user(PROMPT)])
        .with_system(BUILTIN_INSTRUCTIONS)
        .with_tools(agent.tool_definitions().to_vec())
        .with_settings(
            ModelSettings::new()
                .with_seed(1)
                .with_max_tokens(max_tokens)
                .with_tool_choice(choice),
        ))
}

/// Peak resident memory of this process (VmHWM), in MB.
fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmHWM:"))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// Runs one request; returns the time to the first event, the times of the text deltas, the
/// output tokens and whether it ended in a tool call.
fn timed(
    model: &LocalModel,
    request: &ModelRequest,
) -> anyhow::Result<(Duration, Vec<Instant>, u64, bool)> {
    let start = Instant::now();
    let mut first = None;
    let mut deltas = Vec::new();
    let mut tokens = 0;
    let mut called = false;
    let result = model.generate_blocking(request, |event| {
        let now = Instant::now();
        first.get_or_insert(now - start);
        match event {
            ModelEvent::TextDelta(_) => deltas.push(now),
            ModelEvent::ToolCall(_) => called = true,
            ModelEvent::Finish { usage, .. } => tokens = usage.output_tokens,
            _ => {}
        }
        true
    });
    // A budget of one token that starts a tool call ends in `ToolCallCutOff`: still timed.
    if let Err(error) = result
        && !matches!(
            error,
            askloop_providers::local::LocalModelError::ToolCallCutOff { .. }
        )
    {
        return Err(error.into());
    }
    Ok((
        first.unwrap_or_else(|| start.elapsed()),
        deltas,
        tokens,
        called,
    ))
}

fn round(value: f64, places: i32) -> f64 {
    let scale = 10f64.powi(places);
    (value * scale).round() / scale
}

/// The model file: a catalogue name (fetched if missing), a path, or the default.
async fn model_file(model: Option<&str>) -> anyhow::Result<PathBuf> {
    let catalogued: Option<&CatalogueModel> = match model {
        None => Some(DEFAULT_MODEL),
        Some(name) => catalogue_model(name),
    };
    match (catalogued, model) {
        (Some(entry), _) => Ok(fetch_model(entry, &FetchOptions::from_data_dir()?, |_| {}).await?),
        (None, Some(path)) => Ok(PathBuf::from(path)),
        (None, None) => bail!("no model"),
    }
}

/// What a person sees after starting `askloop run "Help me plan a trip"` on a pseudo-terminal:
/// seconds to the first visible sign of progress (the first printable character that is not
/// part of an escape sequence: the status line) and to the question's `?` on screen.
struct OnScreen {
    first_progress: f64,
    question: f64,
}

/// Whether `text` (what the terminal received) shows anything: a printable, non-space character
/// outside ANSI escape sequences (`ESC [ … final byte` and `ESC ] … BEL/ST`).
fn shows_something(text: &str) -> bool {
    let mut characters = text.chars().peekable();
    while let Some(character) = characters.next() {
        match character {
            '\u{1b}' => match characters.next() {
                Some('[') => {
                    for next in characters.by_ref() {
                        if ('@'..='~').contains(&next) {
                            break;
                        }
                    }
                }
                Some(']') => {
                    while let Some(next) = characters.next() {
                        if next == '\u{7}' || (next == '\u{1b}' && characters.peek() == Some(&'\\'))
                        {
                            break;
                        }
                    }
                }
                _ => {}
            },
            character if !character.is_whitespace() && !character.is_control() => return true,
            _ => {}
        }
    }
    false
}

/// Starts `askloop run "Help me plan a trip"` on a pseudo-terminal and times [`OnScreen`]; the
/// process is then stopped.
fn question_on_screen(askloop: &Path, model: Option<&str>) -> anyhow::Result<OnScreen> {
    let data = tempfile_dir()?;
    let mut command_line = format!("{} run", shell_quote(&askloop.display().to_string()));
    if let Some(model) = model {
        command_line.push_str(&format!(
            " --model {}",
            shell_quote(&format!("local:{model}"))
        ));
    }
    command_line.push_str(&format!(" {}", shell_quote(PROMPT)));
    let started = Instant::now();
    let mut child = Command::new("script")
        .args(["-qfec", &command_line, "/dev/null"])
        .env(
            "ASKLOOP_STORE",
            format!("sqlite://{}/askloop.db", data.display()),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot start `script` (util-linux)")?;
    let mut stdout = child.stdout.take().context("no stdout")?;
    let mut seen = Vec::new();
    let mut buffer = [0u8; 4096];
    let mut first_progress = None;
    let outcome = loop {
        let read = stdout.read(&mut buffer)?;
        if read == 0 {
            break Err(anyhow::anyhow!(
                "askloop ended before asking: {}",
                String::from_utf8_lossy(&seen)
            ));
        }
        seen.extend_from_slice(&buffer[..read]);
        // inquire draws the question as `? QUESTION`; the question itself ends with `?`.
        let text = String::from_utf8_lossy(&seen);
        if first_progress.is_none() && shows_something(&text) {
            first_progress = Some(started.elapsed().as_secs_f64());
        }
        if text.matches('?').count() >= 2 {
            let question = started.elapsed().as_secs_f64();
            break Ok(OnScreen {
                first_progress: first_progress.unwrap_or(question),
                question,
            });
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&data);
    outcome
}

fn remove_if_present(path: &Path) -> anyhow::Result<()> {
    match std::fs::remove_file(path) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
            Err(error).with_context(|| format!("cannot remove {}", path.display()))
        }
        _ => Ok(()),
    }
}

fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

fn tempfile_dir() -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("askloop-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// The `local` command.
pub(crate) async fn local(
    model: Option<String>,
    askloop: Option<PathBuf>,
    prompt_out: Option<PathBuf>,
) -> anyhow::Result<()> {
    let path = model_file(model.as_deref()).await?;
    // Measured from nothing: the prompt cache an earlier run left is removed first.
    let cache = prompt_cache_path(&path);
    remove_if_present(&cache)?;
    let line = tokio::task::spawn_blocking(move || measure(&path, prompt_out.as_deref())).await??;
    let mut line = line;
    if let Some(askloop) = askloop {
        // As from the second run on: the prompt cache the first step above stored.
        let seen = question_on_screen(&askloop, model.as_deref())?;
        line["question_on_screen_s"] = json!(round(seen.question, 2));
        line["first_progress_s"] = json!(round(seen.first_progress, 2));
        // As the first run after installing (or after the instructions change): no cache.
        remove_if_present(&cache)?;
        let seen = question_on_screen(&askloop, model.as_deref())?;
        line["question_on_screen_first_run_s"] = json!(round(seen.question, 2));
        line["first_progress_first_run_s"] = json!(round(seen.first_progress, 2));
    }
    println!("{line}");
    Ok(())
}

fn measure(path: &Path, prompt_out: Option<&Path>) -> anyhow::Result<Value> {
    let started = Instant::now();
    let model = LocalModel::load(path)?;
    let load = started.elapsed();

    // The first step as `askloop run` makes it in a fresh process: `ask_user` forced, the
    // whole prompt processed, the question complete.
    let question = request(ToolChoice::Tool("ask_user".into()), 200)?;
    let prompt_text = model.prompt(&question)?;
    let prompt_tokens = model.tokenizer().encode(&prompt_text).len();
    if let Some(out) = prompt_out {
        std::fs::write(out, &prompt_text)
            .with_context(|| format!("cannot write {}", out.display()))?;
    }
    let (question_time, _, question_tokens, called) = timed(&model, &question)?;

    // The same prompt, changed at its start so that nothing of the cache is reused: prefill,
    // then one token.
    let mut first = request(ToolChoice::Auto, 1)?;
    first.system = Some(format!("Note: {BUILTIN_INSTRUCTIONS}"));
    let first_tokens = model.tokenizer().encode(&model.prompt(&first)?).len();
    let (ttft, _, _, _) = timed(&model, &first)?;

    // Free text, for decode speed.
    let mut story = request(ToolChoice::None, 128)?;
    story.messages = vec![Message::user(
        "Write a long story about a dragon who learns to fly.",
    )];
    let (_, deltas, tokens, _) = timed(&model, &story)?;
    let decode = match (deltas.first(), deltas.last()) {
        (Some(first), Some(last)) if deltas.len() > 1 => {
            (deltas.len() - 1) as f64 / last.duration_since(*first).as_secs_f64().max(1e-9)
        }
        _ => 0.0,
    };
    Ok(json!({
        "model": path.file_name().map(|name| name.to_string_lossy().into_owned()),
        "threads": std::thread::available_parallelism().map(usize::from).unwrap_or(1),
        "load_ms": load.as_millis() as u64,
        "prompt_tokens": prompt_tokens,
        "ttft_ms": ttft.as_millis() as u64,
        "prefill_tokens_per_s": round(first_tokens as f64 / ttft.as_secs_f64().max(1e-9), 1),
        "question_ms": question_time.as_millis() as u64,
        "question_tokens": question_tokens,
        "question_is_tool_call": called,
        "decode_tokens": tokens,
        "decode_tokens_per_s": round(decode, 1),
        "peak_rss_mb": peak_rss_mb().round(),
    }))
}

#[cfg(test)]
mod tests {
    use super::shows_something;

    #[test]
    fn escape_sequences_alone_show_nothing() {
        assert!(!shows_something("\u{1b}[?25l\u{1b}[2K\r \n"));
        assert!(!shows_something("\u{1b}]0;title\u{7}"));
        assert!(shows_something(
            "\u{1b}[2K\u{1b}[36m⠋\u{1b}[0m Loading the model"
        ));
    }
}
