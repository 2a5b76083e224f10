//! [`CallResponse`]: what a person gives a waiting tool call — an answer to a suspended call,
//! or the approval or decline of a call that requires approval.

use serde_json::Value;

/// A person's response to one waiting tool call.
///
/// Sent with [`crate::Agent::respond`] (several at once), [`crate::Agent::resume_stream`]
/// (an answer), [`crate::Agent::approve_tool_call`] and [`crate::Agent::decline_tool_call`].
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum CallResponse {
    /// An answer to a suspended call, checked against its resume schema before anything
    /// changes. A call awaiting approval also takes an answer of the reference framework's
    /// shape, `{"approved": true|false, "reason"?: "…"}`.
    Answer(Value),
    /// Approves a call awaiting approval: its tool runs.
    Approve,
    /// Declines a call awaiting approval: its tool never runs, and the model gets an error
    /// result with the reason (a default text when `None`).
    Decline {
        /// Why, for the model.
        reason: Option<String>,
    },
}
