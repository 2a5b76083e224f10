//! The answer a sub-agent's call is resumed with ([`Envelope`]): the responses to its child
//! run's waiting calls and who gave them. Only the claim builds one (`claim.rs`, `route`), after
//! checking the responses against the child; it is stored as the call's resume data, and the
//! sub-agent's tool (`subagent.rs`) claims the child with it.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::actor::Actor;
use crate::ids::ToolCallId;
use crate::response::CallResponse;
use crate::run_loop::claim::Resolution;

/// Responses to a child run's waiting calls (ids relative to the child), and who gave them.
/// Stored form: `{"items": [{"toolCallId", "response": {"kind": "answer", "value"} |
/// {"kind": "approve", "args"?} | {"kind": "decline", "reason"?} | {"kind": "expire"}}],
/// "actor"?}`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Envelope {
    items: Vec<EnvelopeItem>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    actor: Option<Actor>,
}

/// One response of an [`Envelope`].
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct EnvelopeItem {
    tool_call_id: ToolCallId,
    response: EnvelopeResponse,
}

/// A response as an envelope stores it (tagged: an answer may look like an approval).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
enum EnvelopeResponse {
    Answer {
        value: Value,
    },
    Approve {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        args: Option<Value>,
    },
    Decline {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    Expire,
}

impl Envelope {
    /// The envelope of `items` (each named; a nested resolution has no envelope form and is
    /// left out: the claim routes before it builds one), given by `actor`.
    pub(crate) fn new(items: &[(Option<ToolCallId>, Resolution)], actor: Option<&Actor>) -> Self {
        let items = items
            .iter()
            .filter_map(|(id, resolution)| {
                let response = match resolution {
                    Resolution::Respond(CallResponse::Answer(value)) => EnvelopeResponse::Answer {
                        value: value.clone(),
                    },
                    Resolution::Respond(CallResponse::Approve) => {
                        EnvelopeResponse::Approve { args: None }
                    }
                    Resolution::Respond(CallResponse::ApproveWith { args }) => {
                        EnvelopeResponse::Approve {
                            args: Some(args.clone()),
                        }
                    }
                    Resolution::Respond(CallResponse::Decline { reason }) => {
                        EnvelopeResponse::Decline {
                            reason: reason.clone(),
                        }
                    }
                    Resolution::Expire => EnvelopeResponse::Expire,
                    Resolution::Nested(_) => return None,
                };
                Some(EnvelopeItem {
                    tool_call_id: id.clone()?,
                    response,
                })
            })
            .collect();
        Self {
            items,
            actor: actor.cloned(),
        }
    }

    /// The responses as a claim's items.
    pub(crate) fn resolutions(&self) -> Vec<(Option<ToolCallId>, Resolution)> {
        self.items
            .iter()
            .map(|item| {
                let resolution = match item.response.clone() {
                    EnvelopeResponse::Answer { value } => {
                        Resolution::Respond(CallResponse::Answer(value))
                    }
                    EnvelopeResponse::Approve { args: None } => {
                        Resolution::Respond(CallResponse::Approve)
                    }
                    EnvelopeResponse::Approve { args: Some(args) } => {
                        Resolution::Respond(CallResponse::ApproveWith { args })
                    }
                    EnvelopeResponse::Decline { reason } => {
                        Resolution::Respond(CallResponse::Decline { reason })
                    }
                    EnvelopeResponse::Expire => Resolution::Expire,
                };
                (Some(item.tool_call_id.clone()), resolution)
            })
            .collect()
    }

    /// Who gave the responses.
    pub(crate) fn actor(&self) -> Option<&Actor> {
        self.actor.as_ref()
    }
}
