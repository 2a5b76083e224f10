//! `askloop chat`: a conversation in one thread, one run per message; questions are answered
//! inline (inquire on a terminal, the next line of stdin otherwise).

use std::io::BufRead;
use std::process::ExitCode;

use askloop_core::{Agent, IdKind, ResourceId, RunOptions, ThreadId, is_blank};
use inquire::{InquireError, Text};

use crate::cli::{ChatArgs, GlobalArgs};
use crate::context::{Access, Context};
use crate::exit::{FAILURE, INTERRUPTED, Interrupted, RunFailed, check_key_id};
use crate::output::Mode;
use crate::prompt::Answerer;
use crate::registry::FlagScope;
use crate::session::{Ended, Origin, Session, is_terminal};

/// Runs `askloop chat` until the person ends it (Ctrl-D, Esc, `/exit`, or end of stdin); it
/// then prints the command that continues the conversation, with the flags that find the same
/// store, agent, model and resource. Ctrl-C (at the prompt or during a reply), SIGTERM and
/// SIGHUP end it too, with the same hint and their exit status (130, 143, 129).
///
/// # Errors
/// Invalid input (agent, model, config); store, terminal and output errors; [`Interrupted`]
/// or a cancelled run's [`RunFailed`] after a signal. A failed run is reported and the chat
/// goes on.
pub(crate) async fn chat(global: &GlobalArgs, args: ChatArgs) -> anyhow::Result<ExitCode> {
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
            let agent = context.agent_for_new_run(&args.agent).await?;
            let thread_id = args.thread.map_or_else(ThreadId::generate, ThreadId::new);
            let resource_id = args.resource.map(ResourceId::new);
            let terminal = is_terminal();
            let mut session = Session::new(context, agent.clone(), Mode::Human);
            session.answerer = if terminal {
                Answerer::Terminal
            } else {
                Answerer::Lines
            };
            let hint = format!(
                "continue this conversation with `{}`",
                context
                    .command("chat")
                    .agent(&args.agent)
                    .model(context.model_flag.as_deref())
                    .flag("--thread", Some(thread_id.as_str()))
                    .flag("--resource", resource_id.as_ref().map(ResourceId::as_str))
            );
            // Said also when a signal ends the process at a prompt.
            session.interrupt.set_farewell(Some(hint.clone()));
            session.output.note(&format!(
                "chatting with {} in thread {thread_id} (Ctrl-D or /exit ends)",
                agent.name()
            ))?;
            let mut options = RunOptions::new()
                .actor(context.actor("cli chat"))
                .thread(thread_id);
            options.resource_id = resource_id;
            let ended = converse(&mut session, &agent, &options, terminal).await;
            session.interrupt.set_farewell(None);
            session.output.note(&hint)?;
            ended.map(|()| ExitCode::SUCCESS)
        })
        .await
}

/// One run per message, with the `options` of the conversation, until the person ends it or
/// a run stays suspended. A failed run is reported and the chat goes on; a signal ends it.
///
/// # Errors
/// As [`chat`].
async fn converse(
    session: &mut Session<'_>,
    agent: &Agent,
    options: &RunOptions,
    terminal: bool,
) -> anyhow::Result<()> {
    loop {
        let Some(input) = read_message(terminal)? else {
            return Ok(());
        };
        if is_blank(&input) {
            continue;
        }
        let input = input.trim();
        if input == "/exit" || input == "/quit" {
            return Ok(());
        }
        match session
            .follow(agent.stream_with(input, options.clone()), Origin::New)
            .await
        {
            Ok(Ended::Finished) => {}
            Ok(Ended::Suspended) => return Ok(()),
            Err(error)
                if error
                    .downcast_ref::<RunFailed>()
                    .is_some_and(|failed| failed.status == FAILURE) =>
            {
                session.output.note(&format!("error: {error}"))?;
            }
            Err(error) => return Err(error),
        }
    }
}

/// The person's next message; `None` when they end the chat (Esc, end of stdin).
///
/// # Errors
/// [`Interrupted`] (exit 130) on Ctrl-C at the prompt; terminal and stdin errors.
fn read_message(terminal: bool) -> anyhow::Result<Option<String>> {
    if terminal {
        crate::status::hide();
        return match Text::new("you:").prompt() {
            Ok(text) => Ok(Some(text)),
            Err(InquireError::OperationCanceled) => Ok(None),
            Err(InquireError::OperationInterrupted) => Err(anyhow::Error::new(Interrupted {
                status: INTERRUPTED,
                message: "interrupted".to_owned(),
            })),
            Err(error) => Err(error.into()),
        };
    }
    let mut line = String::new();
    if std::io::stdin().lock().read_line(&mut line)? == 0 {
        return Ok(None);
    }
    Ok(Some(line))
}
