//! `askloop chat`: a conversation in one thread, one run per message; questions are answered
//! inline (inquire on a terminal, the next line of stdin otherwise).

use std::io::BufRead;
use std::process::ExitCode;

use askloop_core::{ResourceId, RunOptions, ThreadId};
use inquire::{InquireError, Text};

use crate::cli::{ChatArgs, GlobalArgs};
use crate::context::{Access, Context};
use crate::exit::{FAILURE, INTERRUPTED, RunFailed};
use crate::format::is_blank;
use crate::output::Mode;
use crate::prompt::Answerer;
use crate::session::{Ended, Origin, Session, is_terminal};

/// Runs `askloop chat` until the person ends it (Ctrl-D, Esc, `/exit`, or end of stdin).
///
/// # Errors
/// Invalid input (agent, model, config); store, terminal and output errors; a run cancelled by
/// SIGTERM or SIGHUP. A failed run (or one cancelled by Ctrl-C) is reported and the chat goes
/// on.
pub(crate) async fn chat(global: &GlobalArgs, args: ChatArgs) -> anyhow::Result<ExitCode> {
    let context = Context::open(global, Access::Create).await?;
    let result: anyhow::Result<ExitCode> = async {
        let agent = context
            .agent_for_new_run(&args.agent, args.model.model.as_deref())
            .await?;
        let thread_id = args.thread.map_or_else(ThreadId::generate, ThreadId::new);
        let resource_id = args.resource.map(ResourceId::new);
        let terminal = is_terminal();
        let mut session = Session::new(&context, agent.clone(), Mode::Human);
        session.answerer = if terminal {
            Answerer::Terminal
        } else {
            Answerer::Lines
        };
        session.output.note(&format!(
            "chatting with {} in thread {thread_id} (Ctrl-D or /exit ends)",
            agent.name()
        ))?;
        loop {
            let Some(input) = read_message(terminal)? else {
                break;
            };
            let input = input.trim();
            if is_blank(input) {
                continue;
            }
            if input == "/exit" || input == "/quit" {
                break;
            }
            let mut options = RunOptions::new().thread(thread_id.clone());
            options.resource_id = resource_id.clone();
            match session
                .follow(agent.stream_with(input, options), Origin::New)
                .await
            {
                Ok(Ended::Finished) => {}
                Ok(Ended::Suspended) => return Ok(ExitCode::SUCCESS),
                // A failed run, or one cancelled by Ctrl-C, is reported and the chat goes on;
                // SIGTERM and SIGHUP end it.
                Err(error)
                    if error
                        .downcast_ref::<RunFailed>()
                        .is_some_and(|failed| matches!(failed.status, FAILURE | INTERRUPTED)) =>
                {
                    session.output.note(&format!("error: {error}"))?;
                }
                Err(error) => return Err(error),
            }
        }
        session.output.note(&format!(
            "continue this conversation with `{} chat --thread {thread_id}`",
            context.command_prefix()
        ))?;
        Ok(ExitCode::SUCCESS)
    }
    .await;
    context.close().await;
    result
}

/// The person's next message; `None` when they end the chat.
fn read_message(terminal: bool) -> anyhow::Result<Option<String>> {
    if terminal {
        return match Text::new("you:").prompt() {
            Ok(text) => Ok(Some(text)),
            Err(InquireError::OperationCanceled | InquireError::OperationInterrupted) => Ok(None),
            Err(error) => Err(error.into()),
        };
    }
    let mut line = String::new();
    if std::io::stdin().lock().read_line(&mut line)? == 0 {
        return Ok(None);
    }
    Ok(Some(line))
}
