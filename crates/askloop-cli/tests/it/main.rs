//! Integration tests of the `askloop` binary: each test runs the real binary in a fresh
//! temporary directory, with its own data folder and store, and stdin closed (no terminal).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    missing_docs,
    unreachable_pub
)]

// The tests that pause a process at a chosen point or use the test tools need the binary's
// test hooks (`--all-features` builds them in).
#[cfg(all(unix, feature = "test-hooks"))]
mod cancel;
mod chat;
mod config;
#[cfg(all(unix, feature = "test-hooks"))]
mod crash;
mod fork;
mod hitl;
#[cfg(unix)]
mod interrupt;
mod issue7;
#[cfg(unix)]
mod links;
#[cfg(feature = "local")]
mod local;
mod mcp;
mod otlp;
#[cfg(feature = "test-hooks")]
mod policy;
#[cfg(unix)]
mod postgres;
mod providers;
mod qa;
mod race;
mod resume;
mod run;
mod runs;
#[cfg(unix)]
mod serve;
mod store;
#[cfg(all(unix, feature = "test-hooks"))]
mod subagents;
mod support;
mod tenancy;
#[cfg(unix)]
mod terminal;
#[cfg(all(unix, feature = "test-hooks"))]
mod webhooks;
