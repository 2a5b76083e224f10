//! Integration tests of askloop-store: the core conformance suite on SQLite, and durability
//! across store instances (as across processes).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod conformance;
mod durability;
mod open;
