//! `askloop approve` and `askloop decline`: answer a call that waits for a person's approval
//! (`tool-call-approval`), then follow the run from there.

use std::process::ExitCode;

use askloop_core::store::RunState;
use askloop_core::{CallResponse, PendingKind, ResumeError, RunKey, RunStatus, ToolCallId};
use serde_json::Value;

use crate::cli::{ApproveArgs, DeclineArgs, GlobalArgs};
use crate::context::{Access, Context};
use crate::exit::{invalid, invalid_because};
use crate::output::Mode;
use crate::session::{Origin, Session};

/// Runs `askloop approve RUN_ID [--tool-call-id ID] [--args JSON]`: the call's tool runs (with
/// the edited arguments, when `--args` gives them).
///
/// # Errors
/// Invalid input for an unknown run or call, a call that does not wait for approval, several
/// approvals waiting without `--tool-call-id`, `--args` that are not JSON; the core's refusals
/// (among them [`ResumeError::InvalidArgs`], every problem listed: exit status 2); the run's
/// failure.
pub(crate) async fn approve(global: &GlobalArgs, args: ApproveArgs) -> anyhow::Result<ExitCode> {
    let run = (args.run_id, args.resource);
    let decision = match args.args {
        Some(text) => Decision::ApproveWith(edited_args(&text)?),
        None => Decision::Approve,
    };
    respond(global, run, args.tool_call_id, decision, args.json).await
}

/// The arguments `--args` gives: JSON text.
///
/// # Errors
/// Invalid input when the text is not JSON.
fn edited_args(text: &str) -> anyhow::Result<Value> {
    serde_json::from_str(text).map_err(|error| {
        invalid_because(
            "--args is not JSON (give the arguments as a JSON object)",
            error,
        )
    })
}

/// What `approve` or `decline` decides.
enum Decision {
    /// Approve as the model wrote the call.
    Approve,
    /// Approve with these arguments instead.
    ApproveWith(Value),
    /// Decline, with an optional reason for the model.
    Decline(Option<String>),
}

/// Runs `askloop decline RUN_ID [--tool-call-id ID] [--reason TEXT]`: the call's tool never
/// runs; the model gets the reason.
///
/// # Errors
/// As [`approve`].
pub(crate) async fn decline(global: &GlobalArgs, args: DeclineArgs) -> anyhow::Result<ExitCode> {
    respond(
        global,
        (args.run_id, args.resource),
        args.tool_call_id,
        Decision::Decline(args.reason),
        args.json,
    )
    .await
}

/// Applies `decision` to one waiting approval of the run (`RUN_ID`, `--resource`).
async fn respond(
    global: &GlobalArgs,
    (run_id, resource): (String, Option<String>),
    tool_call_id: Option<String>,
    decision: Decision,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let context = Context::open(global, Access::Update).await?;
    context
        .run(async |context| {
            let run = context.resolve_run(&run_id, resource.as_deref()).await?;
            let stored = context.load_stored(&run).await?;
            let verb = match decision {
                Decision::Decline(_) => "decline",
                _ => "approve",
            };
            let tool_call_id = match tool_call_id {
                Some(id) => ToolCallId::new(id),
                None => only_approval(context, &run, &stored.state, verb)?,
            };
            let agent = context.agent_for_run(&stored.state).await?;
            // The claim starts from the copy just read: one store read, not two.
            let respond = agent
                .respond(&run)
                .actor(context.actor(&format!("cli {verb}")))
                .loaded(stored);
            let response = match decision {
                Decision::Approve => CallResponse::Approve,
                Decision::ApproveWith(args) => CallResponse::ApproveWith { args },
                Decision::Decline(reason) => CallResponse::Decline { reason },
            };
            let respond = respond.response(&tool_call_id, response);
            let stream = match respond.stream().await {
                Ok(stream) => stream,
                // The same response again: nothing to do, nothing changed.
                Err(ResumeError::AlreadyAnswered {
                    same_answer: true,
                    tool_call_id,
                    ..
                }) => {
                    context.already_answered(&run, &tool_call_id).await?;
                    return Ok(ExitCode::SUCCESS);
                }
                Err(error) => return Err(context.refused(&run, error)),
            };
            let mode = if json { Mode::Json } else { Mode::Human };
            let mut session = Session::new(context, agent, mode);
            session.follow(stream, Origin::Stored).await?;
            Ok(ExitCode::SUCCESS)
        })
        .await
}

/// The one call of `state` waiting for approval, when `--tool-call-id` names none.
///
/// # Errors
/// Invalid input when no call or several wait for approval; the core's refusal of a run that
/// is not suspended.
fn only_approval(
    context: &Context,
    run: &RunKey,
    state: &RunState,
    verb: &str,
) -> anyhow::Result<ToolCallId> {
    let run_id = &run.run_id;
    let waiting: Vec<_> = state
        .pending_tool_calls()
        .into_iter()
        .filter(|call| call.kind == PendingKind::Approval)
        .collect();
    match waiting.as_slice() {
        [only] => Ok(only.tool_call_id.clone()),
        [] if state.status() != RunStatus::Suspended => Err(context.refused(
            run,
            ResumeError::NotSuspended {
                run_id: run_id.clone(),
                status: state.status(),
            },
        )),
        [] => Err(invalid(format!(
            "run {run_id} has no tool call waiting for approval (see `{}`)",
            context.command("runs show").run(run)
        ))),
        several => {
            let ids: Vec<&str> = several
                .iter()
                .map(|call| call.tool_call_id.as_str())
                .collect();
            Err(invalid(format!(
                "run {run_id} has {} tool calls waiting for approval: {}; say which one to \
                 {verb} with --tool-call-id",
                several.len(),
                ids.join(", ")
            )))
        }
    }
}
