//! `askloop resume`: answer a suspended run's question and follow the run from there.

use std::process::ExitCode;

use askloop_core::answer::{
    AnswerError, answer_from_inputs, answered_question_schema, answered_with, normalize_answer,
};
use askloop_core::store::RunState;
use askloop_core::{ResumeError, RunKey, RunStatus, ToolCallId};
use serde_json::Value;

use crate::cli::{GlobalArgs, ResumeArgs};
use crate::context::{Access, Context};
use crate::exit::{invalid, invalid_because};
use crate::output::Mode;
use crate::prompt::Answerer;
use crate::registry::FlagScope;
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
    let given = given_answer(args.answer, args.answer_file.as_deref(), args.answer_json)?;
    // Not read-only: the lookup is followed by the claim, a write, on the same store.
    let context = Context::open_with_model(
        global,
        Access::Update,
        args.model.model.clone(),
        FlagScope::AllRuns,
    )
    .await?;
    context
        .run(async |context| {
            let run = context
                .resolve_run(&args.run_id, args.resource.as_deref())
                .await?;
            let stored = context.load_stored(&run).await?;
            let tool_call_id = args.tool_call_id.map(ToolCallId::new);
            let answer = given
                .map(|given| answer_for(&stored.state, tool_call_id.as_ref(), given))
                .transpose()?;
            if stored.state.status() == RunStatus::Failed {
                return failed_run(context, &run, &stored.state, tool_call_id, answer).await;
            }
            let agent = context.agent_for_run(&stored.state).await?;
            let mode = if args.json { Mode::Json } else { Mode::Human };
            let mut session = Session::new(context, agent.clone(), mode);
            let Some(answer) = answer else {
                return ask_pending(&mut session, &run, &stored.state, tool_call_id.is_some())
                    .await;
            };
            session.announce_answered = tool_call_id.is_none();
            // The claim starts from the copy just read: one store read, not two.
            let respond = agent
                .respond(&run)
                .actor(context.actor("cli resume"))
                .loaded(stored);
            let respond = match &tool_call_id {
                Some(id) => respond.answer(id, answer),
                None => respond.answer_pending_call(answer),
            };
            let stream = match respond.stream().await {
                Ok(stream) => stream,
                Err(ResumeError::AlreadyAnswered {
                    tool_call_id,
                    same_answer: true,
                    ..
                }) => {
                    context.already_answered(&run, &tool_call_id).await?;
                    return Ok(ExitCode::SUCCESS);
                }
                Err(error) => return Err(refusal(context, &run, error).await),
            };
            session.follow(stream, Origin::Stored).await?;
            Ok(ExitCode::SUCCESS)
        })
        .await
}

/// A resume of a failed run: refused, saying how to retry it, unless the call expired (said
/// so) or the same answer is given again to the call that has it (nothing to do).
///
/// # Errors
/// [`ResumeError::Expired`]; invalid input naming `runs continue`.
async fn failed_run(
    context: &Context,
    run: &RunKey,
    state: &RunState,
    tool_call_id: Option<ToolCallId>,
    answer: Option<Value>,
) -> anyhow::Result<ExitCode> {
    let run_id = run.run_id.clone();
    if let Some(tool_call_id) = tool_call_id {
        // A call that expired says so, as it does in any other run.
        if let Some(expired_at_ms) = state.expired_at_ms(&tool_call_id) {
            return Err(ResumeError::Expired {
                run_id,
                tool_call_id,
                expired_at_ms,
            }
            .into());
        }
        // The same answer again to a call that has it (the step after it failed, or was
        // cancelled): idempotent, as for any other run.
        if let Some(answer) = &answer
            && answered_with(state, &tool_call_id, answer)
        {
            context.already_answered(run, &tool_call_id).await?;
            return Ok(ExitCode::SUCCESS);
        }
    }
    // Said before the model is built, so a missing key does not hide the real problem.
    Err(invalid(format!(
        "run {run_id} is failed, not suspended; retry its step with `{}`",
        context
            .command("runs continue")
            .run(run)
            .model(context.model_flag.as_deref())
    )))
}

/// No answer given: on a terminal (without `--json` and `--tool-call-id`), asks the pending
/// questions of the suspended run and resumes with the answers.
///
/// # Errors
/// Invalid input when nobody can be asked; [`ResumeError::NotSuspended`]; as
/// [`Session::answer_pending`].
async fn ask_pending(
    session: &mut Session<'_>,
    run: &RunKey,
    state: &RunState,
    named_call: bool,
) -> anyhow::Result<ExitCode> {
    if named_call || !matches!(session.answerer, Answerer::Terminal) {
        return Err(invalid(
            "no answer given: pass --answer TEXT, --answer-file PATH or --answer-json JSON \
             (on a terminal without --json and --tool-call-id, askloop asks the pending \
             questions instead)",
        ));
    }
    if state.status() != RunStatus::Suspended {
        return Err(ResumeError::NotSuspended {
            run_id: run.run_id.clone(),
            status: state.status(),
        }
        .into());
    }
    session.answer_pending(run).await?;
    Ok(ExitCode::SUCCESS)
}

/// An answer as the flags give it, before the question's schema reads it.
pub(crate) enum Given {
    /// `--answer` (each one), or the text of `--answer-file`.
    Typed(Vec<String>),
    /// `--answer-json`, parsed.
    Json(Value),
}

/// The answer of the flags, if any: `--answer`s, the text of `--answer-file` (stdin for `-`)
/// without one trailing newline, or `--answer-json` parsed.
///
/// # Errors
/// Invalid input for JSON that does not parse, or a file that cannot be read.
pub(crate) fn given_answer(
    typed: Vec<String>,
    file: Option<&std::path::Path>,
    json: Option<String>,
) -> anyhow::Result<Option<Given>> {
    if let Some(json) = json {
        return serde_json::from_str::<Value>(&json)
            .map(|value| Some(Given::Json(value)))
            .map_err(|error| {
                invalid_because(
                    "--answer-json is not valid JSON (expected e.g. '\"main\"' or '[\"a\",\"b\"]')",
                    error,
                )
            });
    }
    if let Some(path) = file {
        let text = if path.as_os_str() == "-" {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
                .map(|_| text)
                .map_err(|error| invalid_because("--answer-file -: cannot read stdin", error))?
        } else {
            std::fs::read_to_string(path).map_err(|error| {
                invalid_because(
                    format!("--answer-file {}: cannot read it", path.display()),
                    error,
                )
            })?
        };
        return Ok(Some(Given::Typed(vec![without_final_newline(text)])));
    }
    Ok((!typed.is_empty()).then_some(Given::Typed(typed)))
}

/// `text` without one trailing newline (`\n` or `\r\n`): what an editor adds to a file is
/// not part of the answer.
fn without_final_newline(mut text: String) -> String {
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    text
}

/// The JSON answer `given` makes for the call it goes to (the one named, else the only
/// pending one), read with that call's resume schema in the answer forms of
/// [`askloop_core::answer`]. For a named call that is not pending, the text (or JSON) as it was
/// when its question's forms do not read it: the core then refuses the resume and says why
/// (already answered, unknown call), the call's state before the answer's form.
///
/// # Errors
/// Invalid input for an unknown or ambiguous label, or input the schema does not take.
fn answer_for(
    state: &RunState,
    tool_call_id: Option<&ToolCallId>,
    given: Given,
) -> anyhow::Result<Value> {
    let pending = state.pending_tool_calls();
    let call = match tool_call_id {
        Some(id) => pending.iter().find(|call| &call.tool_call_id == id),
        None if pending.len() == 1 => pending.first(),
        None => None,
    };
    // A call answered already is read as its question was, so a repeat by number or in another
    // case is the same answer (the harmless repeat), not a different one.
    let answered_schema = match (call, tool_call_id) {
        (None, Some(id)) => answered_question_schema(state, id),
        _ => None,
    };
    let schema = call
        .and_then(|call| call.resume_schema.as_ref())
        .or(answered_schema.as_ref());
    let (answer, raw) = match given {
        Given::Typed(inputs) => {
            let raw = match inputs.as_slice() {
                [one] => Value::String(one.clone()),
                _ => Value::from(inputs.clone()),
            };
            (answer_from_inputs(schema, &inputs), raw)
        }
        Given::Json(value) => (normalize_answer(schema, value.clone()), value),
    };
    match (answer, call) {
        (Ok(answer), _) => Ok(answer),
        (Err(error), Some(call)) => {
            // The flag that gives a number as the person's own words.
            let flag = match &error {
                AnswerError::NoSuchOption {
                    input,
                    own_words: true,
                    ..
                } => format!(" (--answer-json '{}')", serde_json::json!({"other": input})),
                _ => String::new(),
            };
            Err(invalid(format!(
                "invalid answer for {} call {}: {error}{flag}",
                call.tool_name, call.tool_call_id
            )))
        }
        // The call's state comes before the answer's form: a call that is not pending (answered
        // already, or no call of the run) is refused as such by the core, whatever was typed.
        (Err(_), None) if tool_call_id.is_some() => Ok(raw),
        (Err(error), None) => Err(invalid(format!("invalid answer: {error}"))),
    }
}

/// A refused resume of `run`, with a hint where a flag fixes it; another answer claimed first
/// by a process that still holds the run says until when, and what works from then.
async fn refusal(context: &Context, run: &RunKey, error: ResumeError) -> anyhow::Error {
    if let ResumeError::Conflict { .. } = &error
        && let Ok(stored) = context.load_stored(run).await
        && let Some(lease) = stored.lease.as_ref().filter(|lease| lease.is_live())
    {
        let line = format!("{error}; {}", context.lease_note(run, lease.expires_at_ms));
        return anyhow::Error::new(error).context(line);
    }
    match &error {
        ResumeError::Ambiguous { .. } | ResumeError::UnknownToolCall { .. } => {
            invalid(format!("{error}; pass one with --tool-call-id"))
        }
        ResumeError::AlreadyAnswered { .. } => invalid(format!(
            "{error}; nothing changed (see `{}`)",
            context.command("runs show").run(run)
        )),
        _ => context.refused(run, error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_final_newline_is_not_part_of_a_file_answer() {
        assert_eq!(without_final_newline("Ada\n".into()), "Ada");
        assert_eq!(without_final_newline("Ada\r\n".into()), "Ada");
        assert_eq!(without_final_newline("two\n\n".into()), "two\n");
        assert_eq!(without_final_newline("Ada".into()), "Ada");
    }
}
