//! Identifier newtypes: runs, threads, resources, agents and tool calls.
//!
//! Every id is a string on the wire and in the store. Newtypes keep them from being mixed up:
//! a [`ToolCallId`] can never be passed where a [`RunId`] is expected.

use std::fmt;

use serde::{Deserialize, Serialize};

macro_rules! string_id {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// Wraps an existing id string as-is.
            pub fn new(id: impl Into<String>) -> Self {
                Self(id.into())
            }

            /// The id as a string slice.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
                formatter.write_str(&self.0)
            }
        }

        impl From<&str> for $name {
            fn from(id: &str) -> Self {
                Self(id.to_owned())
            }
        }

        impl From<String> for $name {
            fn from(id: String) -> Self {
                Self(id)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }
    };
}

string_id!(
    /// Identifies one run: one call of `stream`, with every suspension and resume that follows it.
    ///
    /// New run ids are UUID v7 strings (time-ordered), e.g. `0193a4c2-…`.
    RunId
);
string_id!(
    /// Identifies one tool call inside a run, as chosen by the model (`call_abc…` for OpenAI,
    /// `toolu_…` for Anthropic, whatever a scripted model says).
    ToolCallId
);
string_id!(
    /// Identifies a thread: a conversation whose later runs see the messages of the earlier ones.
    ThreadId
);
string_id!(
    /// Identifies the user or tenant that owns a run and its thread.
    ResourceId
);
string_id!(
    /// Identifies an agent definition (`"assistant"` for the default agent).
    AgentId
);
string_id!(
    /// Identifies who drives a run: one per [`crate::Agent`] value (a UUID v4 string made by
    /// `AgentBuilder::build`), recorded with the run's [`crate::store::Lease`].
    LeaseHolder
);

impl LeaseHolder {
    /// A fresh holder id (UUID v4).
    pub fn generate() -> Self {
        Self(uuid::Uuid::new_v4().to_string())
    }
}

impl RunId {
    /// A fresh, time-ordered run id (UUID v7).
    pub fn generate() -> Self {
        Self(uuid::Uuid::now_v7().to_string())
    }
}

impl ThreadId {
    /// A fresh thread id (UUID v7).
    pub fn generate() -> Self {
        Self(uuid::Uuid::now_v7().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_serialize_as_plain_strings() {
        let id = ToolCallId::new("c1");
        assert_eq!(serde_json::to_string(&id).unwrap(), "\"c1\"");
        let back: ToolCallId = serde_json::from_str("\"c1\"").unwrap();
        assert_eq!(back, id);
    }

    #[test]
    fn generated_run_ids_are_distinct() {
        assert_ne!(RunId::generate(), RunId::generate());
    }
}
