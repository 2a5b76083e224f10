//! Integration tests of askloop-providers: each protocol replayed from recorded streams served by
//! local mock servers, with the outgoing requests checked too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

mod conformance;

mod anthropic;
mod build;
#[cfg(feature = "local")]
mod local;
mod ollama;
mod openai;
mod resume;
