//! Helpers for testing agents and stores: [`ScriptedModel`], a model that replays a script, and
//! (feature `test-support`) the store conformance suite, `conformance`.

mod scripted;

#[cfg(any(test, feature = "test-support"))]
pub mod conformance;

pub use scripted::{ScriptError, ScriptStep, ScriptToolCall, ScriptedModel};
