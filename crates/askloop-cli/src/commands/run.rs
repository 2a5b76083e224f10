//! `askloop run`: start a run and follow it, asking its questions inline on a terminal.

use std::process::ExitCode;

use askloop_core::{IdKind, ResourceId, RunOptions, ThreadId, is_blank};

use crate::cli::{GlobalArgs, RunArgs};
use crate::context::{Access, Context};
use crate::exit::{check_key_id, invalid};
use crate::output::Mode;
use crate::registry::FlagScope;
use crate::session::{Origin, Session};

/// Runs `askloop run`.
///
/// # Errors
/// Invalid input (a blank prompt, agent, model, config); the run's failure; store and output
/// errors.
pub(crate) async fn run(global: &GlobalArgs, args: RunArgs) -> anyhow::Result<ExitCode> {
    let prompt = args.prompt.join(" ");
    if is_blank(&prompt) {
        return Err(invalid(
            "the prompt is empty; expected what to ask the agent, e.g. `run \"Help me plan a trip\"`",
        ));
    }
    if let Some(thread) = &args.thread {
        check_key_id(IdKind::Thread, thread)?;
    }
    if let Some(resource) = &args.resource {
        check_key_id(IdKind::Resource, resource)?;
    }
    let context = Context::open_with_model(
        global,
        Access::Create,
        args.model.model.clone(),
        FlagScope::AllRuns,
    )
    .await?;
    context
        .run(async |context| {
            // Ctrl-C while the model loads ends the process at once: say that nothing started.
            let interrupt = crate::interrupt::Interrupt::get();
            interrupt.set_farewell(Some(format!(
                "stopped before the run started; nothing was stored; run it again with `{}`",
                again(context, &args, &prompt)
            )));
            let agent = context.agent_for_new_run(&args.agent).await;
            interrupt.set_farewell(None);
            let agent = agent?;
            let mut options = RunOptions::new().actor(context.actor("cli run"));
            options.thread_id = args.thread.map(ThreadId::new);
            options.resource_id = args.resource.map(ResourceId::new);
            let stream = agent.stream_with(prompt, options);
            let mode = if args.json { Mode::Json } else { Mode::Human };
            let mut session = Session::new(context, agent, mode);
            session.follow(stream, Origin::New).await?;
            Ok(ExitCode::SUCCESS)
        })
        .await
}

/// The command that starts this run again: the same store, config, agent, model, thread,
/// resource, output format and prompt.
fn again(context: &Context, args: &RunArgs, prompt: &str) -> crate::command_line::CommandLine {
    let mut command = context
        .command("run")
        .agent(&args.agent)
        .model(context.model_flag.as_deref())
        .flag("--thread", args.thread.as_deref())
        .flag("--resource", args.resource.as_deref());
    if args.json {
        command = command.raw("--json");
    }
    if prompt.starts_with('-') {
        command = command.raw("--");
    }
    command.arg(prompt)
}
