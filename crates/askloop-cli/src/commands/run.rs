//! `askloop run`: start a run and follow it, asking its questions inline on a terminal.

use std::process::ExitCode;

use askloop_core::{ResourceId, RunOptions, ThreadId};

use crate::cli::{GlobalArgs, RunArgs};
use crate::context::Context;
use crate::output::Mode;
use crate::session::Session;

/// Runs `askloop run`.
///
/// # Errors
/// Invalid input (agent, model, config); the run's failure; store and output errors.
pub(crate) async fn run(global: &GlobalArgs, args: RunArgs) -> anyhow::Result<ExitCode> {
    let context = Context::open(global).await?;
    let agent = context
        .agent_for_new_run(&args.agent, args.model.model.as_deref())
        .await?;
    let options = RunOptions {
        thread_id: args.thread.map(ThreadId::new),
        resource_id: args.resource.map(ResourceId::new),
    };
    let stream = agent.stream_with(args.prompt.join(" "), options);
    let mode = if args.json { Mode::Json } else { Mode::Human };
    let mut session = Session::new(&context, agent, mode);
    session.follow(stream).await?;
    Ok(ExitCode::SUCCESS)
}
