//! Integration tests of askloop-store: the core conformance suite on SQLite and PostgreSQL, the upgrade of
//! format-1 databases, opening options, and durability
//! across store instances (as across processes).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod conformance;
mod durability;
mod open;
mod postgres;
mod upgrade;
