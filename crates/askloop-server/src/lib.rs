//! askloop's HTTP server: agents over HTTP with SSE.
//!
//! (Crate docs: see below once complete.)

mod api;
mod chat;
mod error;
mod hub;
mod inbox;
mod keys;
mod limits;
mod page;
mod routes;
mod server;
mod sse;
mod sweep;

pub use error::ServerError;
pub use keys::{ApiKey, KeyError};
pub use limits::Limits;
pub use server::{Server, ServerBuilder};
