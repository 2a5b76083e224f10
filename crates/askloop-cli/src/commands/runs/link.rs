//! `askloop runs link`: prints an answer link to a waiting call (`askloop_server::links`), or
//! revokes the call's links.

use std::process::ExitCode;

use askloop_core::store::StoredRun;
use askloop_core::time::{lease_now_ms, rfc3339};
use askloop_core::{RunKey, ToolCallId};
use askloop_server::links::{LinkError, LinkRequest, LinkToken, PublicUrl, issue_link, links_of};

use crate::cli::{GlobalArgs, LinkArgs};
use crate::context::{Access, Context};
use crate::exit::invalid;
use crate::output::{Mode, Output};

/// Where `askloop serve` listens by default (its `--addr`): links start there when neither
/// `--base-url` nor `[server] public_url` says otherwise.
const DEFAULT_BASE_URL: &str = "http://127.0.0.1:4111";

/// Runs `askloop runs link`: prints the URL of a new answer link to the waiting call (stdout,
/// one line; when it expires on stderr), or with `--revoke` revokes the call's links.
///
/// # Errors
/// Invalid input for an unknown run, a call that does not wait, several waiting calls without
/// `--tool-call-id`, a bad role or `[server]` setting; a store without answer links; the
/// store's errors.
pub(crate) async fn link(global: &GlobalArgs, args: LinkArgs) -> anyhow::Result<ExitCode> {
    let context = Context::open(global, Access::Update).await?;
    context
        .run(async |context| link_with(context, args).await)
        .await
}

async fn link_with(context: &Context, args: LinkArgs) -> anyhow::Result<ExitCode> {
    let run = context
        .resolve_run(&args.run_id, args.resource.as_deref())
        .await?;
    let stored = context.load_stored(&run).await?;
    let tool_call_id = waiting_call(context, &run, &stored, args.tool_call_id.as_deref())?;
    let refused = |error: LinkError| match error {
        LinkError::Refused(refusal) => context.refused(&run, refusal),
        LinkError::Unsupported => invalid(format!(
            "the store {} keeps no answer links",
            context.store_url
        )),
        LinkError::Store(store) => store.into(),
        other => invalid(other.to_string()),
    };
    let mut output = Output::new(Mode::Human);
    if args.revoke {
        let links = links_of(context.store.as_ref()).map_err(refused)?;
        let revoked = links
            .revoke_links(&run, &tool_call_id, lease_now_ms())
            .await?;
        output.note(&format!(
            "revoked {revoked} link(s) of tool call {tool_call_id} of run {run}"
        ))?;
        return Ok(ExitCode::SUCCESS);
    }
    let server = &context.config().config.server;
    let settings = server.link_settings(None)?;
    let base = match (args.base_url, settings.public_url.clone()) {
        (Some(url), _) | (None, Some(url)) => url,
        (None, None) => DEFAULT_BASE_URL
            .parse::<PublicUrl>()
            .map_err(|error| invalid(error.to_string()))?,
    };
    // The link is the operator's: an answer through it acts as `cli:NAME` (with its role only).
    let mut request = LinkRequest::new()
        .role(args.role)
        .issuer(context.actor("cli runs link"));
    if let Some(expires_in) = args.expires_in {
        request = request.expires_in(expires_in);
    }
    let issued = issue_link(
        context.store.as_ref(),
        &stored,
        &tool_call_id,
        &request,
        settings.max_age,
        LinkToken::generate(),
    )
    .await
    .map_err(refused)?;
    output.line(&base.link(&issued.token))?;
    output.note(&format!(
        "answers tool call {tool_call_id} of run {run} once, without a key, until {}; \
         revoke it with `{}`",
        rfc3339(issued.link.expires_at_ms),
        context
            .command("runs link")
            .run(&run)
            .flag("--tool-call-id", Some(tool_call_id.as_str()))
            .raw("--revoke")
    ))?;
    Ok(ExitCode::SUCCESS)
}

/// The call a link is for: `given`, else the run's one waiting call (refused when it waits on
/// none, or on several: then `--tool-call-id` must say which).
fn waiting_call(
    context: &Context,
    run: &RunKey,
    stored: &StoredRun,
    given: Option<&str>,
) -> anyhow::Result<ToolCallId> {
    Ok(match given {
        Some(id) => ToolCallId::new(id),
        None => {
            let pending = stored.state.pending_tool_calls();
            match pending.as_slice() {
                [only] => only.tool_call_id.clone(),
                [] => {
                    return Err(invalid(format!(
                        "run {run} has no waiting call (it is {}); see `{}`",
                        stored.state.status(),
                        context.command("runs show").run(run)
                    )));
                }
                several => {
                    let ids: Vec<&str> = several
                        .iter()
                        .map(|call| call.tool_call_id.as_str())
                        .collect();
                    return Err(invalid(format!(
                        "run {run} has {} waiting calls; say which with --tool-call-id: {}",
                        ids.len(),
                        ids.join(", ")
                    )));
                }
            }
        }
    })
}
