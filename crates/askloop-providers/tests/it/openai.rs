//! OpenAI Chat Completions (and OpenAI-compatible servers): the conformance scenarios.

use crate::support::OPENAI;

crate::conformance::conformance!(OPENAI);
