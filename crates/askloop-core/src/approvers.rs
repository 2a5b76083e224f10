//! Who may decide on a waiting call: [`ApproverPolicy`] (roles, self-approval, quorum), what a
//! refusal says ([`PolicyRefusal`]), and the one check every claim makes ([`check`]).
//!
//! The rules, as every front end gets them (the claim applies them, `run_loop/claim.rs`):
//!
//! - `roles`: the actor must hold one of them to approve or decline a call of the governed
//!   tools, and — for a policy given per tool ([`crate::AgentBuilder::approvers_for`]) — to
//!   answer that tool's questions. The agent's own policy ([`crate::AgentBuilder::approvers`])
//!   governs approvals of all its tools, not questions: a question asks whoever started the
//!   run unless its tool says otherwise.
//! - `self_approval = false`: the party that started the run ([`crate::RunOptions::actor`]; its
//!   id, or its resource when it was known by its resource alone) cannot approve its calls. It
//!   may still decline them. A run whose starter is unknown (stored before askloop recorded
//!   starters, or started with no actor, `by` or resource) cannot be checked and is not
//!   refused on this ground.
//! - `quorum = N`: N distinct approvers (by actor id) must approve before the tool runs. Each
//!   approval is committed as a vote (an `approve` audit record on the waiting call); the call
//!   keeps waiting until the N-th; one decline declines. All votes approve the same arguments:
//!   an approval with other (edited) arguments than the votes before it is refused, and the
//!   refusal names the arguments approved; a waiting call lists each vote with the arguments
//!   it approved when they are not the model's ([`crate::ApprovalVote::args`]).
//! - A policy that needs to know who acts (any roles, `self_approval = false`, a quorum above
//!   one) refuses an actor-less response.

use serde_json::Value;

use crate::actor::Actor;
use crate::message::{AuditAction, AuditRecord};

/// Who may approve (and, given per tool, answer) the calls of an agent or of one of its tools.
/// The default allows anyone, once: no roles, self-approval allowed, a quorum of one.
///
/// ```
/// use askloop_core::{Agent, ApproverPolicy, testing::ScriptedModel};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let agent = Agent::builder("ops")
///     .model(ScriptedModel::from_json(r#"{"steps":[{"text":"Hi."}]}"#)?)
///     .require_approval(true)
///     .approvers(ApproverPolicy::new().roles(["ops"]).self_approval(false))
///     .approvers_for("transfer", ApproverPolicy::new().roles(["finance"]).quorum(2))
///     .build()?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ApproverPolicy {
    /// The actor must hold one of these roles ([`Actor::roles`]); empty: any actor.
    pub roles: Vec<String>,
    /// Whether the party that started the run may approve its calls (default `true`).
    pub self_approval: bool,
    /// How many distinct approvers a call needs before its tool runs (default and minimum 1).
    pub quorum: u32,
}

impl Default for ApproverPolicy {
    fn default() -> Self {
        Self {
            roles: Vec::new(),
            self_approval: true,
            quorum: 1,
        }
    }
}

impl ApproverPolicy {
    /// Anyone, once (the default).
    pub fn new() -> Self {
        Self::default()
    }

    /// The actor must hold one of these roles (blank names and repeats are dropped).
    #[must_use]
    pub fn roles<I, S>(mut self, roles: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.roles = Actor::new("").roles(roles).roles;
        self
    }

    /// Whether the party that started the run may approve its calls.
    #[must_use]
    pub fn self_approval(mut self, allowed: bool) -> Self {
        self.self_approval = allowed;
        self
    }

    /// How many distinct approvers a call needs (0 counts as 1).
    #[must_use]
    pub fn quorum(mut self, quorum: u32) -> Self {
        self.quorum = quorum.max(1);
        self
    }

    /// Whether this policy must know who acts to decide on an approval.
    fn needs_actor(&self) -> bool {
        !self.roles.is_empty() || !self.self_approval || self.quorum > 1
    }
}

/// Why a policy refused an actor ([`crate::ResumeError::NotPermitted`]). Nothing changed; the
/// call still waits.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyRefusal {
    /// The actor holds none of the roles the policy requires.
    #[error("this needs one of the roles {}", .required.join(", "))]
    MissingRole {
        /// The roles that would do.
        required: Vec<String>,
    },
    /// The actor is the party that started the run, and the policy forbids self-approval.
    #[error("{starter} started this run and may not approve its calls")]
    SelfApproval {
        /// The run's starter, as recorded.
        starter: String,
    },
    /// The actor already approved this call: a quorum needs distinct approvers.
    #[error("{actor} already approved this call; it needs another approver")]
    AlreadyApproved {
        /// The actor.
        actor: String,
    },
    /// The policy must know who acts (roles, no self-approval, or a quorum) and the response
    /// named nobody.
    #[error("the response does not say who acts; this call's policy needs to know")]
    Unidentified,
    /// Earlier approvers of this call approved other arguments.
    #[error(
        "earlier approvers of this call approved other arguments: {approved}; approve the same ones"
    )]
    ArgsDiffer {
        /// The arguments the earlier approvers approved, as JSON, cut to 500 characters (then
        /// `…`).
        approved: String,
    },
}

/// How many characters of the approved arguments' JSON a [`PolicyRefusal::ArgsDiffer`] message
/// shows at most.
pub(crate) const APPROVED_ARGS_CHARS: usize = 500;

/// `args` as JSON, cut to [`APPROVED_ARGS_CHARS`] characters (then `…`).
fn approved_json(args: &Value) -> String {
    let json = args.to_string();
    match json.char_indices().nth(APPROVED_ARGS_CHARS) {
        Some((end, _)) => format!("{}…", &json[..end]),
        None => json,
    }
}

impl PolicyRefusal {
    /// A stable code: `missing_role`, `self_approval`, `already_approved`, `unidentified`,
    /// `args_differ`.
    pub fn code(&self) -> &'static str {
        match self {
            Self::MissingRole { .. } => "missing_role",
            Self::SelfApproval { .. } => "self_approval",
            Self::AlreadyApproved { .. } => "already_approved",
            Self::Unidentified => "unidentified",
            Self::ArgsDiffer { .. } => "args_differ",
        }
    }
}

/// What a person does to a call, as the policy sees it.
pub(crate) enum Decision<'a> {
    /// Answers a question of a tool with a policy of its own.
    Answer,
    /// Approves, with these arguments (the model's, or the person's edit).
    Approve {
        /// The arguments approved.
        args: &'a Value,
    },
    /// Declines.
    Decline,
}

/// What the policy lets a permitted approval do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The decision takes effect (an answer, a decline, the approval that completes a quorum).
    Decide,
    /// The approval is recorded as vote number `recorded` of `quorum`; the call keeps waiting.
    Vote {
        /// This vote's number, from 1.
        recorded: u32,
        /// The votes needed.
        quorum: u32,
    },
}

/// The approvals recorded on a waiting call so far (its slot's `approve` audit records) and the
/// arguments each approved (`model_args` unless it edited them).
pub(crate) fn votes<'a>(
    audit: &'a [AuditRecord],
    model_args: &'a Value,
) -> impl Iterator<Item = (&'a AuditRecord, &'a Value)> {
    audit
        .iter()
        .filter(|record| record.action == AuditAction::Approve)
        .map(move |record| {
            let args = record
                .args_edit
                .as_ref()
                .map_or(model_args, |edit| &edit.edited);
            (record, args)
        })
}

/// Checks `decision` by `actor` on a call governed by `policy`, in a run `starter` started,
/// whose slot's audit so far is `audit` (`model_args`: the call's arguments as the model wrote
/// them). `quorum` is the quorum that counts (the policy's, or a larger one recorded with the
/// call).
///
/// # Errors
/// The [`PolicyRefusal`] saying why the actor may not.
pub(crate) fn check(
    policy: &ApproverPolicy,
    quorum: u32,
    actor: Option<&Actor>,
    starter: Option<&Actor>,
    decision: &Decision<'_>,
    audit: &[AuditRecord],
    model_args: &Value,
) -> Result<Verdict, PolicyRefusal> {
    let needs_actor = match decision {
        Decision::Answer | Decision::Decline => !policy.roles.is_empty(),
        Decision::Approve { .. } => policy.needs_actor() || quorum > 1,
    };
    let Some(actor) = actor else {
        return if needs_actor {
            Err(PolicyRefusal::Unidentified)
        } else {
            Ok(Verdict::Decide)
        };
    };
    if !policy.roles.is_empty() && !policy.roles.iter().any(|role| actor.holds(role)) {
        return Err(PolicyRefusal::MissingRole {
            required: policy.roles.clone(),
        });
    }
    let Decision::Approve { args } = decision else {
        return Ok(Verdict::Decide);
    };
    if !policy.self_approval
        && let Some(starter) = starter
        && actor.is_party_of(starter)
    {
        return Err(PolicyRefusal::SelfApproval {
            starter: starter.id.clone(),
        });
    }
    let mut recorded = 1u32;
    for (vote, approved) in votes(audit, model_args) {
        if vote.by.as_deref() == Some(actor.id.as_str()) {
            return Err(PolicyRefusal::AlreadyApproved {
                actor: actor.id.clone(),
            });
        }
        if approved != *args {
            return Err(PolicyRefusal::ArgsDiffer {
                approved: approved_json(approved),
            });
        }
        recorded = recorded.saturating_add(1);
    }
    if recorded >= quorum {
        Ok(Verdict::Decide)
    } else {
        Ok(Verdict::Vote { recorded, quorum })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn vote(by: &str) -> AuditRecord {
        AuditRecord::now(AuditAction::Approve, Some(by.into()))
    }

    #[test]
    fn roles_self_approval_and_quorum() {
        let policy = ApproverPolicy::new()
            .roles(["ops"])
            .self_approval(false)
            .quorum(2);
        let args = json!({"to": "x"});
        let approve = Decision::Approve { args: &args };
        let starter = Actor::new("alice").roles(["ops"]);
        let bob = Actor::new("bob").roles(["ops"]);
        let carol = Actor::new("carol").roles(["ops"]);
        let check = |actor: Option<&Actor>, audit: &[AuditRecord]| {
            check(&policy, 2, actor, Some(&starter), &approve, audit, &args)
        };
        assert_eq!(check(None, &[]), Err(PolicyRefusal::Unidentified));
        assert!(matches!(
            check(Some(&Actor::new("dan")), &[]),
            Err(PolicyRefusal::MissingRole { .. })
        ));
        assert!(matches!(
            check(Some(&starter), &[]),
            Err(PolicyRefusal::SelfApproval { .. })
        ));
        assert_eq!(
            check(Some(&bob), &[]),
            Ok(Verdict::Vote {
                recorded: 1,
                quorum: 2
            })
        );
        assert!(matches!(
            check(Some(&bob), &[vote("bob")]),
            Err(PolicyRefusal::AlreadyApproved { .. })
        ));
        assert_eq!(check(Some(&carol), &[vote("bob")]), Ok(Verdict::Decide));
        // The starter may decline.
        assert_eq!(
            super::check(
                &policy,
                2,
                Some(&starter),
                Some(&starter),
                &Decision::Decline,
                &[],
                &args
            ),
            Ok(Verdict::Decide)
        );
    }

    #[test]
    fn the_approved_arguments_are_cut() {
        let long = json!({"text": "x".repeat(2 * APPROVED_ARGS_CHARS)});
        let cut = approved_json(&long);
        assert_eq!(cut.chars().count(), APPROVED_ARGS_CHARS + 1);
        assert!(cut.ends_with('…'));
        assert_eq!(approved_json(&json!({"a": 1})), r#"{"a":1}"#);
    }

    #[test]
    fn votes_approve_the_same_arguments() {
        let policy = ApproverPolicy::new().quorum(2);
        let model = json!({"to": "x"});
        let edited = json!({"to": "y"});
        let mut first = vote("bob");
        first.args_edit = Some(crate::message::ArgsEdit::new(model.clone(), edited.clone()));
        let carol = Actor::new("carol");
        let plain = Decision::Approve { args: &model };
        assert_eq!(
            check(
                &policy,
                2,
                Some(&carol),
                None,
                &plain,
                std::slice::from_ref(&first),
                &model
            ),
            Err(PolicyRefusal::ArgsDiffer {
                approved: r#"{"to":"y"}"#.into()
            })
        );
        assert!(
            check(
                &policy,
                2,
                Some(&carol),
                None,
                &plain,
                std::slice::from_ref(&first),
                &model
            )
            .unwrap_err()
            .to_string()
            .contains(r#"approved other arguments: {"to":"y"}"#)
        );
        let same = Decision::Approve { args: &edited };
        assert_eq!(
            check(&policy, 2, Some(&carol), None, &same, &[first], &model),
            Ok(Verdict::Decide)
        );
    }
}
