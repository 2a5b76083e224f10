//! What both stores share of answer links: a link's row decoded into an
//! [`AnswerLink`](askloop_core::store::AnswerLink).

use askloop_core::store::{AnswerLink, LinkId};
use askloop_core::{Actor, RunId, RunKey, ToolCallId, resource_of_scope};

/// The columns of a link's row, as both stores select them (times in ms; `scope` `''` for no
/// resource).
#[derive(Debug)]
pub(crate) struct LinkRow {
    pub(crate) id: u64,
    pub(crate) scope: String,
    pub(crate) run_id: String,
    pub(crate) tool_call_id: String,
    pub(crate) role: Option<String>,
    /// The issuer's [`Actor`] as JSON; `None` when unknown.
    pub(crate) issuer: Option<String>,
    pub(crate) created_at_ms: u64,
    pub(crate) expires_at_ms: u64,
    pub(crate) used_at_ms: Option<u64>,
    pub(crate) revoked_at_ms: Option<u64>,
}

/// The columns every link query selects, in [`LinkRow`]'s order.
pub(crate) const LINK_COLUMNS: &str = "id, scope, run_id, tool_call_id, role, issuer, \
     created_at_ms, expires_at_ms, used_at_ms, revoked_at_ms";

/// An issuer as its column holds it: the [`Actor`]'s JSON; `None` when unknown.
pub(crate) fn encode_issuer(issuer: Option<&Actor>) -> Option<String> {
    // An Actor is strings and a list of strings: serializing it cannot fail.
    issuer.and_then(|actor| serde_json::to_string(actor).ok())
}

/// The link of a row. An issuer column that is not an [`Actor`]'s JSON reads as unknown
/// (the link then acts as `link:<id>`, never as someone it does not name).
pub(crate) fn decode_link(row: LinkRow) -> AnswerLink {
    let resource = resource_of_scope(row.scope);
    let mut link = AnswerLink::new(
        LinkId(row.id),
        RunKey::new(resource, RunId::new(row.run_id)),
        ToolCallId::new(row.tool_call_id),
        row.created_at_ms,
        row.expires_at_ms,
    );
    link.role = row.role;
    link.issuer = row.issuer.and_then(|json| {
        serde_json::from_str::<Actor>(&json)
            .inspect_err(|error| {
                tracing::warn!(link = row.id, %error, "an answer link's issuer is unreadable");
            })
            .ok()
    });
    link.used_at_ms = row.used_at_ms;
    link.revoked_at_ms = row.revoked_at_ms;
    link
}
