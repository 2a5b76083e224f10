//! What a run's row holds, encoded on the caller's thread (the writer thread only runs SQL):
//! the head, the pending calls for listing summaries, the lease; and the way back to a
//! summary.

use askloop_core::store::codec;
use askloop_core::store::{Lease, RunState, RunSummary};
use askloop_core::{RunId, RunStatus, StoreError};
use serde_json::{Value, json};

/// Milliseconds as SQLite stores them (saturating at `i64::MAX`).
pub(super) fn millis(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// A stored integer read back as `u64` (negative values, which askloop never writes, read as 0).
pub(super) fn unsigned(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

/// The columns of a run's row that commits write.
#[derive(Debug)]
pub(super) struct Head {
    pub(super) status: &'static str,
    pub(super) updated_at_ms: i64,
    pub(super) head: String,
    pub(super) message_count: i64,
    pub(super) pending: Option<String>,
    pub(super) lease_holder: Option<String>,
    pub(super) lease_expires_at_ms: Option<i64>,
    /// Whether the run has ended (completed or cancelled): it gets a completion sequence.
    pub(super) ended: bool,
}

impl Head {
    /// Encodes `state`'s head, pending calls and `lease`.
    ///
    /// # Errors
    /// [`StoreError::Encode`].
    pub(super) fn of(state: &RunState, lease: Option<&Lease>) -> Result<Self, StoreError> {
        Ok(Self {
            status: state.status().as_str(),
            updated_at_ms: millis(state.updated_at_ms()),
            head: codec::encode_head(state)?,
            message_count: i64::try_from(state.messages().len()).unwrap_or(i64::MAX),
            pending: pending_column(state)?,
            lease_holder: lease.map(|lease| lease.holder.as_str().to_owned()),
            lease_expires_at_ms: lease.map(|lease| millis(lease.expires_at_ms)),
            ended: matches!(state.status(), RunStatus::Completed | RunStatus::Cancelled),
        })
    }
}

/// The `pending` column: the pending tool calls as a JSON array, `None` when there are none.
///
/// # Errors
/// [`StoreError::Encode`].
pub(super) fn pending_column(state: &RunState) -> Result<Option<String>, StoreError> {
    let pending = state.pending_tool_calls();
    if pending.is_empty() {
        return Ok(None);
    }
    serde_json::to_string(&pending)
        .map(Some)
        .map_err(|source| StoreError::Encode {
            run_id: state.run_id().clone(),
            source,
        })
}

/// The columns a listing reads, in `SELECT` order (see `read::LISTED_COLUMNS`).
pub(super) struct ListedColumns {
    pub(super) run_id: String,
    pub(super) thread_id: String,
    pub(super) resource_id: Option<String>,
    pub(super) agent_id: String,
    pub(super) status: String,
    pub(super) created_at_ms: i64,
    pub(super) updated_at_ms: i64,
    pub(super) pending: Option<String>,
    /// The head's `forkedFrom` as JSON text, for a fork.
    pub(super) forked_from: Option<String>,
    /// The head's `parent` as JSON text, for a sub-agent's child run.
    pub(super) parent: Option<String>,
}

/// A summary from a row's columns, its `pending` column, its `forkedFrom` and its `parent`.
///
/// # Errors
/// [`StoreError::Corrupt`] when the pending column or a column's value does not read.
pub(super) fn summary(columns: ListedColumns) -> Result<RunSummary, StoreError> {
    let run_id = RunId::new(columns.run_id.clone());
    let corrupt = |source| StoreError::Corrupt {
        run_id: run_id.clone(),
        source,
    };
    let pending = match &columns.pending {
        Some(text) => serde_json::from_str::<Value>(text).map_err(corrupt)?,
        None => Value::Array(Vec::new()),
    };
    let json_or_null = |text: &Option<String>| match text {
        Some(text) => serde_json::from_str::<Value>(text).map_err(corrupt),
        None => Ok(Value::Null),
    };
    let forked_from = json_or_null(&columns.forked_from)?;
    let parent = json_or_null(&columns.parent)?;
    serde_json::from_value(json!({
        "runId": columns.run_id,
        "agentId": columns.agent_id,
        "threadId": columns.thread_id,
        "resourceId": columns.resource_id,
        "status": columns.status,
        "createdAtMs": unsigned(columns.created_at_ms),
        "updatedAtMs": unsigned(columns.updated_at_ms),
        "pending": pending,
        "forkedFrom": forked_from,
        "parent": parent,
    }))
    .map_err(corrupt)
}

/// The head's leading bytes when it is of the current format, as `codec::encode_head` writes
/// it (`formatVersion` first). A head that starts otherwise is decoded in full to learn why
/// (or that it reads after all).
pub(super) const CURRENT_HEAD_PREFIX: &str = "{\"formatVersion\":2,";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_read_back_from_columns() {
        let summary = summary(ListedColumns {
            run_id: "r1".into(),
            thread_id: "t1".into(),
            resource_id: Some("u1".into()),
            agent_id: "a".into(),
            status: "suspended".into(),
            created_at_ms: 5,
            updated_at_ms: 6,
            pending: None,
            forked_from: None,
            parent: None,
        })
        .unwrap();
        assert_eq!(summary.run_id.as_str(), "r1");
        assert_eq!(summary.status, RunStatus::Suspended);
        assert_eq!(summary.resource_id.unwrap().as_str(), "u1");
        assert!(summary.pending.is_empty());
    }

    #[test]
    fn a_child_run_reads_back_its_parent() {
        let summary = summary(ListedColumns {
            run_id: "c1".into(),
            thread_id: "t1".into(),
            resource_id: None,
            agent_id: "researcher".into(),
            status: "running".into(),
            created_at_ms: 5,
            updated_at_ms: 6,
            pending: None,
            forked_from: None,
            parent: Some(
                r#"{"runId":"p1","toolCallId":"call-1","rootRunId":"root","depth":2}"#.into(),
            ),
        })
        .unwrap();
        let parent = summary.parent.unwrap();
        assert_eq!(
            (
                parent.run_id.as_str(),
                parent.tool_call_id.as_str(),
                parent.root_run_id.as_str(),
                parent.depth
            ),
            ("p1", "call-1", "root", 2)
        );
    }

    #[test]
    fn a_bad_pending_column_is_corrupt() {
        let error = summary(ListedColumns {
            run_id: "r1".into(),
            thread_id: "t1".into(),
            resource_id: None,
            agent_id: "a".into(),
            status: "suspended".into(),
            created_at_ms: 5,
            updated_at_ms: 6,
            pending: Some("[{".into()),
            forked_from: None,
            parent: None,
        })
        .unwrap_err();
        assert!(matches!(error, StoreError::Corrupt { .. }), "{error:?}");
    }
}
