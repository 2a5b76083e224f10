//! Integration tests of the HTTP server: the router driven with `tower::ServiceExt::oneshot`
//! (and one real socket), each scenario on SQLite and on PostgreSQL.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    missing_docs,
    unreachable_pub
)]

mod audit;
mod cancel;
mod chat_resume;
mod connections;
mod edge;
mod fork;
mod inbox;
mod links;
mod metrics;
mod pending_call;
mod policy;
mod repeats;
mod scenarios;
mod socket;
mod subagents;
mod support;
mod tenancy;
mod waits;
mod webhooks;
