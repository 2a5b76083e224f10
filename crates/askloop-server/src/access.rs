//! Who may see and use what: the resource a request acts on, the exact run it names and
//! whether the caller may see it, the agents it may use, and the scope of a listing (a keyed
//! caller's tenant). Another tenant's run is never told apart from a missing one.

use askloop_core::store::{RunFilter, StoredRun};
use askloop_core::{Agent, AgentId, ResourceId, RunId, RunKey, StoreError};

use crate::checks::check_id;
use crate::error::ApiError;
use crate::keys::Caller;
use crate::state::AppState;

/// The resource whose runs and threads a request acts on: the key's for a keyed caller (a
/// `resourceId` given that differs is 403), else the one given (checked), else none.
pub(crate) fn resource_of(
    caller: &Caller,
    given: Option<&str>,
) -> Result<Option<ResourceId>, ApiError> {
    match (caller.resource(), given) {
        (Some(own), Some(given)) if own.as_str() != given => Err(ApiError::forbidden(
            "resourceId differs from the API key's resource",
        )),
        (Some(own), _) => Ok(Some(own.clone())),
        (None, Some(given)) => {
            check_id("resourceId", given)?;
            Ok(Some(ResourceId::new(given)))
        }
        (None, None) => Ok(None),
    }
}

/// The exact run a request names by `run_id` (and, on a server without keys, optionally a
/// `resourceId`): a keyed caller names a run of its own resource (another `resourceId` names
/// nothing: 404); a caller without key names the run of the resource given, or, without one,
/// the one run with this id (404 none, 409 `ambiguous_run` when several resources use it,
/// naming them).
pub(crate) async fn run_key_for(
    state: &AppState,
    caller: &Caller,
    run_id: &str,
    resource: Option<&str>,
) -> Result<RunKey, ApiError> {
    check_id("runId", run_id)?;
    let run = RunId::new(run_id);
    match (caller.resource(), resource) {
        (Some(own), Some(given)) if own.as_str() != given => Err(ApiError::run_not_found(run_id)),
        (Some(own), _) => Ok(RunKey::new(Some(own.clone()), run)),
        (None, Some(given)) => {
            check_id("resourceId", given)?;
            Ok(RunKey::new(Some(ResourceId::new(given)), run))
        }
        (None, None) => {
            let mut keys = state.store.keys_of_run(&run).await?;
            match keys.len() {
                0 => Err(ApiError::run_not_found(run_id)),
                1 => Ok(keys.remove(0)),
                _ => Err(askloop_core::ResumeError::AmbiguousRun {
                    run_id: run,
                    resources: keys.into_iter().map(|key| key.resource_id).collect(),
                }
                .into()),
            }
        }
    }
}

/// The agent of new runs under `agent_id`, if the caller may use it (403 otherwise; 404
/// unknown).
pub(crate) async fn agent_for_caller(
    state: &AppState,
    caller: &Caller,
    agent_id: &AgentId,
) -> Result<Agent, ApiError> {
    check_id("agentId", agent_id.as_str())
        .map_err(|_| ApiError::agent_not_found(agent_id.as_str()))?;
    may_use_agent(caller, agent_id)?;
    Ok(state.agents.agent(agent_id).await?)
}

/// Whether the caller may use `agent_id` (a key restricted to other agents: 403).
pub(crate) fn may_use_agent(caller: &Caller, agent_id: &AgentId) -> Result<(), ApiError> {
    if caller.may_use(agent_id) {
        Ok(())
    } else {
        Err(ApiError::forbidden(format!(
            "this key may not use agent {:?}",
            agent_id.as_str()
        )))
    }
}

/// The stored run a request names ([`run_key_for`]), if the caller may see it: another
/// tenant's run is 404, like a missing one (a keyed caller only ever names runs of its own
/// resource; a key restricted to some agents sees only their runs).
pub(crate) async fn visible_run(
    state: &AppState,
    caller: &Caller,
    run_id: &str,
    resource: Option<&str>,
) -> Result<StoredRun, ApiError> {
    let key = run_key_for(state, caller, run_id, resource).await?;
    let stored = match state.store.load_run(&key).await {
        Ok(stored) => stored,
        Err(StoreError::NotFound { .. }) => return Err(ApiError::run_not_found(run_id)),
        Err(error) => return Err(error.into()),
    };
    if !caller.may_see(stored.state.resource_id(), stored.state.agent_id()) {
        return Err(ApiError::run_not_found(run_id));
    }
    Ok(stored)
}

/// The stored run behind a resume of `agent_id`'s run: the caller may use the agent (403
/// otherwise) and see the run ([`visible_run`]), and the run is the agent's (404 otherwise).
pub(crate) async fn run_of_agent(
    state: &AppState,
    caller: &Caller,
    agent_id: &AgentId,
    run_id: &str,
    resource: Option<&str>,
) -> Result<StoredRun, ApiError> {
    may_use_agent(caller, agent_id)?;
    let stored = visible_run(state, caller, run_id, resource).await?;
    if stored.state.agent_id() != agent_id {
        return Err(ApiError::run_not_found(run_id));
    }
    Ok(stored)
}

/// The agent that drives a stored run.
pub(crate) async fn agent_of_run(state: &AppState, stored: &StoredRun) -> Result<Agent, ApiError> {
    Ok(state.agents.agent_for_run(&stored.state).await?)
}

/// `filter` narrowed to the runs a listing shows the caller, who names `given` (the query's
/// `resourceId`, if any): a keyed caller lists its own resource's runs, and naming another
/// resource lists nothing (`None`: an empty listing, not 403, so existence does not leak); a
/// caller without key lists the runs of the resource given (checked), or of every resource.
pub(crate) fn listing_scope(
    filter: RunFilter,
    caller: &Caller,
    given: Option<&str>,
) -> Result<Option<RunFilter>, ApiError> {
    match (caller.resource(), given) {
        (Some(own), Some(given)) if own.as_str() != given => {
            check_id("resourceId", given)?;
            Ok(None)
        }
        (Some(own), _) => Ok(Some(filter.resource(own.clone()))),
        (None, Some(given)) => {
            check_id("resourceId", given)?;
            Ok(Some(filter.resource(given)))
        }
        (None, None) => Ok(Some(filter)),
    }
}
