//! Answer links (`crate::links`): making and revoking them with a key
//! (`POST`/`DELETE /api/runs/{runId}/calls/{toolCallId}/link`), and answering through one
//! without a key (`POST /answer/{token}`; the page at `GET /answer/{token}` is in `page.rs`).
//!
//! An answer through a link goes through the same claim as every other route (core's
//! `Agent::respond`, the call's compare-and-swap): the link is first taken
//! ([`askloop_core::store::AnswerLinks::use_link`], a conditional update: of two racing
//! submits one gets it, the other is told the link no longer works), then the claim runs; a
//! claim that refuses gives the link back, so an invalid answer (400) does not burn it. A
//! process that dies between the two leaves the link used and the call waiting: one link
//! never answers twice. A link whose call no longer waits (answered elsewhere, expired,
//! cancelled), or that is unknown, used, revoked or expired, gets the one answer 410
//! `link_gone`, "this link no longer works".

use askloop_core::store::{AnswerLink, StoredRun};
use askloop_core::time::{lease_now_ms, rfc3339};
use askloop_core::{Actor, ResumeError, ToolCallId};
use axum::Json;
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::access::{agent_of_run, visible_run};
use crate::api::{
    LinkAnswerRequest, LinkAnsweredBody, LinkBody, LinkRequestBody, RevokedLinksBody, RunQuery,
};
use crate::checks::{check_answer, check_edited_args, check_text, check_tool_call_id};
use crate::error::{ApiError, ErrorBody};
use crate::extract::{Params, PathParam};
use crate::keys::Caller;
use crate::links::{LinkError, LinkRequest, LinkToken, OpenLink, issue_link, links_of, open_link};
use crate::metrics::StreamKind;
use crate::resume::{refuse_child_run, resume_refused};
use crate::state::State;

/// Who answers through `link`: its issuer — the issuer's id and resource (`link:<id>` and no
/// resource when the issuer is unknown, as for links stored before issuers were kept) —
/// holding only the role the link was issued for (if any, never the issuer's other roles),
/// from the route `POST /answer/{token} (link <id>)` so the audit shows the link. So a link
/// is its issuer under the approver policy: the run's starter's link is refused by a policy
/// without self-approval, and two links of one issuer are one approver of a quorum.
fn link_actor(link: &AnswerLink) -> Actor {
    let actor = match &link.issuer {
        Some(issuer) => {
            let actor = Actor::new(issuer.id.as_str());
            match &issuer.resource {
                Some(resource) => actor.resource(resource.clone()),
                None => actor,
            }
        }
        None => Actor::new(format!("link:{}", link.id)),
    };
    actor
        .roles(link.role.iter().cloned())
        .route(format!("POST /answer/{{token}} (link {})", link.id))
}

/// A refused link operation as an `ApiError`: a call that does not wait answers as a resume
/// of it would (404 `unknown_tool_call`, 409 `already_answered` / `not_suspended`, 410
/// `expired`).
fn link_refused(error: LinkError, stored: &StoredRun) -> ApiError {
    match error {
        LinkError::Refused(refusal) => resume_refused(refusal, stored),
        LinkError::InvalidRole { .. } => ApiError::bad_request(error.to_string()),
        LinkError::Unsupported => unsupported(),
        LinkError::Store(store) => store.into(),
    }
}

/// 501 `unsupported`: the server's store keeps no answer links.
fn unsupported() -> ApiError {
    ApiError::new(
        StatusCode::NOT_IMPLEMENTED,
        "unsupported",
        "this server's store keeps no answer links",
    )
}

/// The URL a link made by this request starts with: the public URL, else `http://` and the
/// request's `Host` (which the edge has checked), else `http://localhost`.
fn base_url(state: &crate::state::AppState, headers: &HeaderMap) -> String {
    if let Some(url) = &state.links.public_url {
        return url.to_string();
    }
    let host = headers
        .get(header::HOST)
        .and_then(|value| value.to_str().ok())
        .unwrap_or("localhost");
    format!("http://{host}")
}

/// `POST /api/runs/{runId}/calls/{toolCallId}/link`: a link that answers this waiting call
/// (a question or an approval) once, without a key.
#[utoipa::path(post, path = "/api/runs/{runId}/calls/{toolCallId}/link", tag = "runs",
    params(("runId" = String, Path, description = "The run"),
           ("toolCallId" = String, Path, description = "The waiting call"), RunQuery),
    request_body(content = Option<LinkRequestBody>, description = "Optional: `{expiresInSeconds?, role?}`"),
    responses(
        (status = 201, description = "The link (only here in clear: the store keeps its hash)", body = LinkBody),
        (status = 400, description = "bad_request (ids, body, role)", body = ErrorBody),
        (status = 401, description = "No or bad API key", body = ErrorBody),
        (status = 403, description = "not_permitted: the key does not hold the role asked for", body = ErrorBody),
        (status = 404, description = "run_not_found (also another tenant's run), unknown_tool_call", body = ErrorBody),
        (status = 409, description = "child_run (a sub-agent's child run: link its call through its root run; details.rootRunId), already_answered, not_suspended, ambiguous_run", body = ErrorBody),
        (status = 410, description = "expired: the call's deadline passed", body = ErrorBody),
        (status = 501, description = "unsupported: the store keeps no answer links", body = ErrorBody),
    ))]
pub(crate) async fn create_link(
    state: State,
    caller: Caller,
    PathParam((run_id, tool_call_id)): PathParam<(String, String)>,
    Params(query): Params<RunQuery>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<(StatusCode, Json<LinkBody>), ApiError> {
    let stored = visible_run(&state, &caller, &run_id, query.resource_id.as_deref()).await?;
    refuse_child_run(&stored)?;
    check_tool_call_id(&tool_call_id)?;
    let asked: LinkRequestBody = if body.iter().all(u8::is_ascii_whitespace) {
        LinkRequestBody::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|error| ApiError::bad_request(format!("invalid body: {error}")))?
    };
    // A link acts with its role: only a key holding the role may vouch for it (a role of a
    // bad form is a 400 first).
    if let Some(role) = asked.role.as_deref() {
        crate::links::check_role(role).map_err(|error| ApiError::bad_request(error.to_string()))?;
        if !caller.holds_role(role) {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "not_permitted",
                format!(
                    "this key does not hold the role {role:?}, so it cannot issue a link for it"
                ),
            ));
        }
    }
    let mut request = LinkRequest::new()
        .role(asked.role)
        .issuer(caller.actor("POST /api/runs/{runId}/calls/{toolCallId}/link"));
    if let Some(seconds) = asked.expires_in_seconds {
        if seconds == 0 {
            return Err(ApiError::bad_request("expiresInSeconds must be at least 1"));
        }
        request = request.expires_in(std::time::Duration::from_secs(seconds));
    }
    let issued = issue_link(
        state.store.as_ref(),
        &stored,
        &ToolCallId::new(tool_call_id.as_str()),
        &request,
        state.links.max_age,
        LinkToken::generate(),
    )
    .await
    .map_err(|error| link_refused(error, &stored))?;
    tracing::info!(run_id = %stored.state.run_id(), tool_call_id = %tool_call_id, link = %issued.link.id, "answer link made");
    let path = issued.token.path();
    Ok((
        StatusCode::CREATED,
        Json(LinkBody {
            url: format!("{}{path}", base_url(&state, &headers)),
            path,
            expires_at: rfc3339(issued.link.expires_at_ms),
            link_id: issued.link.id.0,
        }),
    ))
}

/// `DELETE /api/runs/{runId}/calls/{toolCallId}/link`: revokes every link of the call (used
/// ones too: one being submitted whose answer is then refused stays dead).
#[utoipa::path(delete, path = "/api/runs/{runId}/calls/{toolCallId}/link", tag = "runs",
    params(("runId" = String, Path, description = "The run"),
           ("toolCallId" = String, Path, description = "The call"), RunQuery),
    responses(
        (status = 200, description = "How many links were revoked", body = RevokedLinksBody),
        (status = 400, description = "bad_request (ids)", body = ErrorBody),
        (status = 401, description = "No or bad API key", body = ErrorBody),
        (status = 404, description = "run_not_found (also another tenant's run)", body = ErrorBody),
        (status = 409, description = "ambiguous_run", body = ErrorBody),
        (status = 501, description = "unsupported: the store keeps no answer links", body = ErrorBody),
    ))]
pub(crate) async fn revoke_links(
    state: State,
    caller: Caller,
    PathParam((run_id, tool_call_id)): PathParam<(String, String)>,
    Params(query): Params<RunQuery>,
) -> Result<Json<RevokedLinksBody>, ApiError> {
    let stored = visible_run(&state, &caller, &run_id, query.resource_id.as_deref()).await?;
    check_tool_call_id(&tool_call_id)?;
    let links = links_of(state.store.as_ref()).map_err(|_| unsupported())?;
    let revoked = links
        .revoke_links(
            &stored.state.key(),
            &ToolCallId::new(tool_call_id.as_str()),
            lease_now_ms(),
        )
        .await?;
    tracing::info!(run_id = %stored.state.run_id(), tool_call_id = %tool_call_id, revoked, "answer links revoked");
    Ok(Json(RevokedLinksBody { revoked }))
}

/// 410 `link_gone`: the one answer to every link that does not work (unknown, used, revoked,
/// expired, or its call no longer waits).
pub(crate) fn link_gone() -> ApiError {
    ApiError::new(StatusCode::GONE, "link_gone", "this link no longer works")
}

/// Whether a refused claim means the call no longer waits (the link is then as dead as its
/// call).
fn call_gone(error: &ResumeError) -> bool {
    matches!(
        error,
        ResumeError::AlreadyAnswered { .. }
            | ResumeError::Expired { .. }
            | ResumeError::NotSuspended { .. }
            | ResumeError::UnknownToolCall { .. }
            | ResumeError::RunNotFound { .. }
    )
}

/// `POST /answer/{token}`: answers the link's call once, with no key (the token is the
/// credential), through the same checks as every route; the run goes on in the server.
#[utoipa::path(post, path = "/answer/{token}", tag = "runs",
    params(("token" = String, Path, description = "The link's token")),
    request_body = LinkAnswerRequest,
    responses(
        (status = 200, description = "Answered (approved, declined): the run goes on in the server", body = LinkAnsweredBody),
        (status = 400, description = "invalid_answer, invalid_args, bad_request: nothing changed and the link still works", body = ErrorBody),
        (status = 403, description = "not_permitted: the call's approver policy refuses the link (its role, a vote already given): nothing changed and the link still works", body = ErrorBody),
        (status = 409, description = "in_progress, interrupted, conflict, thread_busy: nothing changed and the link still works", body = ErrorBody),
        (status = 410, description = "link_gone: this link no longer works (unknown, used, revoked, expired, or its call no longer waits); the same answer for every such link", body = ErrorBody),
        (status = 413, description = "too_large", body = ErrorBody),
    ))]
pub(crate) async fn answer(
    state: State,
    PathParam(token): PathParam<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let started = std::time::Instant::now();
    let request: LinkAnswerRequest = serde_json::from_slice(&body)
        .map_err(|error| ApiError::bad_request(format!("invalid body: {error}")))?;
    check_link_answer(&state, &request)?;
    let open = match open_link(state.store.as_ref(), &token).await {
        Ok(Some(open)) => open,
        Ok(None) | Err(LinkError::Unsupported) => return Err(link_gone()),
        Err(LinkError::Store(error)) => return Err(error.into()),
        Err(_) => return Err(link_gone()),
    };
    let OpenLink { stored, .. } = open;
    let links = links_of(state.store.as_ref()).map_err(|_| link_gone())?;
    let Some(token) = LinkToken::parse(&token) else {
        return Err(link_gone());
    };
    let used_at = lease_now_ms();
    let Some(link) = links.use_link(&token.hash(), used_at).await? else {
        // Another submit took it first (or it died since it was read).
        return Err(link_gone());
    };
    let outcome = match request.approved {
        None => "answered",
        Some(true) => "approved",
        Some(false) => "declined",
    };
    let agent = match agent_of_run(&state, &stored).await {
        Ok(agent) => agent,
        Err(error) => {
            give_back(links, &link, used_at).await;
            return Err(error);
        }
    };
    let id = &link.tool_call_id;
    let respond = agent
        .respond(stored.state.key())
        .loaded(stored.clone())
        .actor(link_actor(&link));
    let respond = match (request.resume_data, request.approved, request.args) {
        (Some(answer), _, _) => respond.answer(id, answer),
        (None, Some(true), Some(args)) => respond.approve_with(id, args),
        (None, Some(true), None) => respond.approve(id),
        (None, _, _) => respond.decline(id, request.reason),
    };
    let run = match respond.stream().await {
        Ok(run) => run,
        Err(error) => {
            give_back(links, &link, used_at).await;
            return Err(if call_gone(&error) {
                link_gone()
            } else {
                resume_refused(error, &stored)
            });
        }
    };
    tracing::info!(run_id = %stored.state.run_id(), tool_call_id = %link.tool_call_id, link = %link.id, outcome, "answered through a link");
    let agent_id = stored.state.agent_id().clone();
    // The run goes on in a task of the hub; nobody follows its stream here.
    drop(state.hub.spawn(
        run,
        &agent_id,
        StreamKind::Resume(started),
        Some(stored.state),
    ));
    Ok(Json(LinkAnsweredBody {
        outcome: outcome.to_owned(),
    })
    .into_response())
}

/// Checks the form of an answer through a link before the link is touched: exactly one of
/// `resumeData` (checked as any answer) or `approved` (with `args` only when approving, and a
/// bounded `reason`).
fn check_link_answer(
    state: &crate::state::AppState,
    request: &LinkAnswerRequest,
) -> Result<(), ApiError> {
    match (&request.resume_data, request.approved) {
        (Some(answer), None) => check_answer(state, answer)?,
        (None, Some(approved)) => {
            if let Some(args) = &request.args {
                if !approved {
                    return Err(ApiError::bad_request("args go with approved: true only"));
                }
                check_edited_args(state, args)?;
            }
            if let Some(reason) = &request.reason {
                check_text("reason", reason, state.limits.answer_bytes)?;
            }
        }
        _ => {
            return Err(ApiError::bad_request(
                "the body needs exactly one of resumeData or approved",
            ));
        }
    }
    Ok(())
}

/// Gives the use of `link` taken at `used_at` back after a refused answer (logged when the
/// store fails: the link then stays used, which never lets it answer twice).
async fn give_back(links: &dyn askloop_core::store::AnswerLinks, link: &AnswerLink, used_at: u64) {
    if let Err(error) = links.release_link(link.id, used_at).await {
        tracing::warn!(link = %link.id, error = %askloop_core::error_chain_text(&error), "an answer link could not be given back after a refused answer");
    }
}
