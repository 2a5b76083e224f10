//! `askloop`: run agents whose tools ask a person, answer their questions inline or later (from
//! another process), and list, inspect and continue runs.
//!
//! This binary is the one place in the workspace that picks concrete types: the store from
//! `--store` / `ASKLOOP_STORE` (`askloop-store`), the model from a model SPEC ([`model`]), and
//! the agent from `askloop.toml` or the built-in `assistant` ([`agent`]). Errors are `anyhow`
//! here only; [`exit`] turns them into one line on stderr and an exit status.

mod agent;
mod cli;
mod commands;
mod config;
mod context;
mod exit;
mod format;
mod interrupt;
mod model;
mod output;
mod prompt;
mod session;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command, ModelCommand, RunsCommand};

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing();
    match run(cli) {
        Ok(code) => code,
        Err(error) => exit::report(&error),
    }
}

/// Logs go to stderr, filtered by `RUST_LOG` (default `warn`).
fn init_tracing() {
    // By default only askloop's own warnings: the final error line already says what failed,
    // and genai logs every retried request at ERROR level.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,genai=off"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
}

/// Runs one command. The command runs on this thread; one worker thread runs the Ctrl-C
/// handler, so it works even while the command blocks on a prompt or on stdin.
fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let global = cli.global;
        match cli.command {
            Command::Run(args) => commands::run::run(&global, args).await,
            Command::Resume(args) => commands::resume::resume(&global, args).await,
            Command::Chat(args) => commands::chat::chat(&global, args).await,
            Command::Runs(RunsCommand::List(args)) => commands::runs::list(&global, args).await,
            Command::Runs(RunsCommand::Show(args)) => commands::runs::show(&global, args).await,
            Command::Runs(RunsCommand::Continue(args)) => {
                commands::runs::continue_run(&global, args).await
            }
            Command::Model(ModelCommand::Pull) => commands::model::pull().await,
            Command::Model(ModelCommand::Path) => commands::model::path(),
        }
    })
}
