//! [`CallResponse`]: what a person gives a waiting tool call — an answer to a suspended call,
//! or the approval (as the model wrote it, or with arguments the person edited) or decline of a
//! call that requires approval.

use serde_json::Value;

use crate::run::approval_schema;
use crate::tool::ResumeRejection;

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
    /// Approves a call awaiting approval with arguments the person edited: they are checked
    /// against the tool's input schema before anything changes
    /// ([`crate::ResumeError::InvalidArgs`] lists every problem), the tool runs with them, the
    /// model is told in the call's result that the person changed the arguments and to what,
    /// and the audit keeps both versions ([`crate::AuditRecord::args_edit`]). The model's call
    /// itself stays as the model wrote it. Arguments equal to the model's are a plain
    /// [`CallResponse::Approve`].
    ApproveWith {
        /// The arguments the tool runs with (a JSON object, as the tool's input schema wants).
        args: Value,
    },
    /// Declines a call awaiting approval: its tool never runs, and the model gets an error
    /// result with the reason (a default text when `None`).
    Decline {
        /// Why, for the model.
        reason: Option<String>,
    },
}

impl CallResponse {
    /// Reads a decision given as JSON, the reference framework's approval resume data:
    /// `{"approved": true}` approves, `{"approved": true, "args": {…}}` approves with edited
    /// arguments ([`CallResponse::ApproveWith`], askloop's), `{"approved": false, "reason"?:
    /// "…"}` declines. Anything else — `approved` missing, `null`, `"true"` as a text, a number,
    /// other fields, `args` that are not an object, `args` beside a decline (a declined tool
    /// never runs) — is no decision: an approval is one only when it says so. Every front end
    /// reads approvals given as JSON through this (an answer to a call awaiting approval
    /// included).
    ///
    /// # Errors
    /// A [`ResumeRejection`] saying what an approval looks like, with every problem found.
    ///
    /// ```
    /// use askloop_core::CallResponse;
    /// use serde_json::json;
    ///
    /// assert_eq!(CallResponse::from_approval(&json!({"approved": true})), Ok(CallResponse::Approve));
    /// assert_eq!(
    ///     CallResponse::from_approval(&json!({"approved": true, "args": {"path": "/tmp/a"}})),
    ///     Ok(CallResponse::ApproveWith { args: json!({"path": "/tmp/a"}) })
    /// );
    /// assert_eq!(
    ///     CallResponse::from_approval(&json!({"approved": false, "reason": "not now"})),
    ///     Ok(CallResponse::Decline { reason: Some("not now".into()) })
    /// );
    /// for not_a_decision in [
    ///     json!({}),
    ///     json!({"approved": "true"}),
    ///     json!({"approved": null}),
    ///     json!({"approved": false, "args": {"path": "/tmp/a"}}),
    /// ] {
    ///     assert!(CallResponse::from_approval(&not_a_decision).is_err());
    /// }
    /// ```
    pub fn from_approval(value: &Value) -> Result<Self, ResumeRejection> {
        let schema = approval_schema();
        let mut problems = crate::schema::SchemaValidator::new(&schema)
            .map(|validator| validator.problems(value))
            .unwrap_or_default();
        let args = value.get("args");
        let approved = value.get("approved").and_then(Value::as_bool);
        if approved == Some(false) && args.is_some() {
            problems.push("a decline takes no args: the declined tool does not run".into());
        }
        match approved {
            Some(true) if problems.is_empty() => Ok(match args {
                Some(args) => Self::ApproveWith { args: args.clone() },
                None => Self::Approve,
            }),
            Some(false) if problems.is_empty() => Ok(Self::Decline {
                reason: value
                    .get("reason")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            }),
            _ => Err(ResumeRejection {
                expected: "an approval: {\"approved\": true, \"args\"?: {…}} or {\"approved\": false, \"reason\"?: \"…\"}"
                    .into(),
                problems,
            }),
        }
    }
}
