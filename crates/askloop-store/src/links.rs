//! What both stores share of answer links: a link's row decoded into an
//! [`AnswerLink`](askloop_core::store::AnswerLink).

use askloop_core::store::{AnswerLink, LinkId};
use askloop_core::{ResourceId, RunId, RunKey, ToolCallId};

/// The columns of a link's row, as both stores select them (times in ms; `scope` `''` for no
/// resource).
#[derive(Debug)]
pub(crate) struct LinkRow {
    pub(crate) id: u64,
    pub(crate) scope: String,
    pub(crate) run_id: String,
    pub(crate) tool_call_id: String,
    pub(crate) role: Option<String>,
    pub(crate) created_at_ms: u64,
    pub(crate) expires_at_ms: u64,
    pub(crate) used_at_ms: Option<u64>,
    pub(crate) revoked_at_ms: Option<u64>,
}

/// The columns every link query selects, in [`LinkRow`]'s order.
pub(crate) const LINK_COLUMNS: &str = "id, scope, run_id, tool_call_id, role, created_at_ms, \
     expires_at_ms, used_at_ms, revoked_at_ms";

/// The link of a row.
pub(crate) fn decode_link(row: LinkRow) -> AnswerLink {
    let resource = (!row.scope.is_empty()).then(|| ResourceId::new(row.scope));
    let mut link = AnswerLink::new(
        LinkId(row.id),
        RunKey::new(resource, RunId::new(row.run_id)),
        ToolCallId::new(row.tool_call_id),
        row.created_at_ms,
        row.expires_at_ms,
    );
    link.role = row.role;
    link.used_at_ms = row.used_at_ms;
    link.revoked_at_ms = row.revoked_at_ms;
    link
}
