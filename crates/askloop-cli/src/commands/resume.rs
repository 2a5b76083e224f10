//! `askloop resume`: answer a suspended run's question and follow the run from there.

use std::process::ExitCode;

use askloop_core::{ResumeError, RunId, RunStatus, ToolCallId};
use serde_json::Value;

use crate::cli::{GlobalArgs, ResumeArgs};
use crate::context::{Access, Context};
use crate::exit::invalid;
use crate::output::Mode;
use crate::prompt::Answerer;
use crate::session::{Origin, Session};

/// Runs `askloop resume`. The run names its agent and model SPEC, so neither is needed
/// (`--model` overrides the SPEC).
///
/// With `--tool-call-id`, the answer goes to that call only: repeating the command after it
/// succeeded is refused as already answered. Without it, the answer goes to the call pending
/// now, whichever that is, and the command says which question it answered.
///
/// # Errors
/// Invalid input for bad JSON, an answer the question does not accept, unknown ids, a call
/// already answered or a run that is not suspended (the core's [`ResumeError`]); a conflict
/// when another process resumed first; the run's failure.
pub(crate) async fn resume(global: &GlobalArgs, args: ResumeArgs) -> anyhow::Result<ExitCode> {
    let answer = match (args.answer, args.answer_json) {
        (Some(text), _) => Some(Value::String(text)),
        (None, Some(json)) => Some(serde_json::from_str::<Value>(&json).map_err(|error| {
            invalid(format!(
                "--answer-json is not valid JSON ({error}); expected e.g. '\"main\"' or '[\"a\",\"b\"]'"
            ))
        })?),
        (None, None) => None,
    };
    // Not read-only: the lookup is followed by the claim, a write, on the same store.
    let context = Context::open(global, Access::Update).await?;
    let result: anyhow::Result<ExitCode> = async {
        let run_id = RunId::new(args.run_id);
        let state = context.load_run(&run_id).await?;
        if state.status() == RunStatus::Failed {
            // Said before the model is built, so a missing key does not hide the real problem.
            return Err(invalid(format!(
                "run {run_id} is failed, not suspended; retry its step with `{} runs continue {run_id}`",
                context.command_prefix()
            )));
        }
        let agent = context
            .agent_for_run(&state, args.model.model.as_deref())
            .await?;
        let mode = if args.json { Mode::Json } else { Mode::Human };
        let mut session = Session::new(&context, agent.clone(), mode);
        let Some(answer) = answer else {
            if args.tool_call_id.is_some() || !matches!(session.answerer, Answerer::Terminal) {
                return Err(invalid(
                    "no answer given: pass --answer TEXT or --answer-json JSON (on a terminal \
                     without --json and --tool-call-id, askloop asks the pending questions instead)",
                ));
            }
            if state.status() != RunStatus::Suspended {
                return Err(ResumeError::NotSuspended {
                    run_id,
                    status: state.status(),
                }
                .into());
            }
            session.answer_pending(&run_id).await?;
            return Ok(ExitCode::SUCCESS);
        };
        let tool_call_id = args.tool_call_id.map(ToolCallId::new);
        session.announce_answered = tool_call_id.is_none();
        let stream = agent
            .resume_stream(answer, &run_id, tool_call_id.as_ref())
            .await
            .map_err(|error| refusal(&context, error))?;
        session.follow(stream, Origin::Stored).await?;
        Ok(ExitCode::SUCCESS)
    }
    .await;
    context.close().await;
    result
}

/// A refused resume, with a hint where a flag fixes it.
fn refusal(context: &Context, error: ResumeError) -> anyhow::Error {
    match &error {
        ResumeError::Ambiguous { .. } | ResumeError::UnknownToolCall { .. } => {
            invalid(format!("{error}; pass one with --tool-call-id"))
        }
        ResumeError::AlreadyAnswered { run_id, .. } => invalid(format!(
            "{error}; nothing changed (see `{} runs show {run_id}`)",
            context.command_prefix()
        )),
        _ => context.refused(error),
    }
}
