//! `askloop runs fork`: fork a run at one of its questions with another answer, and follow the
//! fork (a new run in a new thread) from there.

use std::process::ExitCode;

use askloop_core::answer::{answer_from_inputs, answered_question_schema, normalize_answer};
use askloop_core::store::RunState;
use askloop_core::{ResumeError, ToolCallId};
use serde_json::Value;

use crate::cli::{ForkArgs, GlobalArgs};
use crate::commands::resume::{Given, given_answer};
use crate::context::{Access, Context};
use crate::exit::invalid;
use crate::output::Mode;
use crate::registry::FlagScope;
use crate::session::{Origin, Session};

/// Runs `askloop runs fork`: the answer is read as the question reads answers (its resume
/// schema, as `askloop resume` reads them), the fork is made and followed like a resumed run;
/// the original run is not changed. The fork's id is printed first (on stderr, and in every
/// chunk's `runId` with `--json`).
///
/// # Errors
/// Invalid input for bad JSON, an answer the question does not accept, a call that is not a
/// question of the run (the core's [`ResumeError`]); an unknown run; the fork's failure.
pub(crate) async fn fork(global: &GlobalArgs, args: ForkArgs) -> anyhow::Result<ExitCode> {
    let Some(given) = given_answer(args.answer, args.answer_file.as_deref(), args.answer_json)?
    else {
        return Err(invalid(
            "no answer given: pass --answer TEXT, --answer-file PATH or --answer-json JSON",
        ));
    };
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
            let state = context.load_run(&run).await?;
            let tool_call_id = ToolCallId::new(args.tool_call_id.as_str());
            let answer = answer_for(&state, &tool_call_id, given)?;
            let agent = context.agent_for_run(&state).await?;
            let stream = agent
                .fork(&run, &tool_call_id, answer)
                .actor(context.actor("cli runs fork"))
                .stream()
                .await
                .map_err(|error| refusal(context, &run, error))?;
            if !args.json {
                eprintln!(
                    "forked run {} at {tool_call_id} as run {}",
                    run.run_id,
                    stream.run_key().run_id
                );
            }
            let mode = if args.json { Mode::Json } else { Mode::Human };
            let mut session = Session::new(context, agent, mode);
            session.follow(stream, Origin::Stored).await?;
            Ok(ExitCode::SUCCESS)
        })
        .await
}

/// The JSON answer `given` makes for the question `tool_call_id` of `state`, read with the
/// question's resume schema (as it was asked, else as an `ask_user` call's arguments make it).
///
/// # Errors
/// Invalid input for an unknown or ambiguous label, or input the schema does not take.
fn answer_for(state: &RunState, tool_call_id: &ToolCallId, given: Given) -> anyhow::Result<Value> {
    let schema = state
        .question(tool_call_id)
        .and_then(|question| question.resume_schema.clone())
        .or_else(|| answered_question_schema(state, tool_call_id));
    let answer = match given {
        Given::Typed(inputs) => answer_from_inputs(schema.as_ref(), &inputs),
        Given::Json(value) => normalize_answer(schema.as_ref(), value),
    };
    answer.map_err(|error| invalid(format!("invalid answer for call {tool_call_id}: {error}")))
}

/// A refused fork of `run`, with a hint where one helps.
fn refusal(context: &Context, run: &askloop_core::RunKey, error: ResumeError) -> anyhow::Error {
    match &error {
        ResumeError::NotAQuestion { .. } => invalid(format!(
            "{error}; `{}` lists its calls",
            context.command("runs show").run(run)
        )),
        _ => context.refused(run, error),
    }
}
