//! askloop-mcp against real MCP servers from npm (`@modelcontextprotocol/server-everything` and
//! `@modelcontextprotocol/server-filesystem`, pinned in `tests/npm/package-lock.json`), run with
//! the machine's `node`. They are installed once into a cache folder (see `askloop_mcp::testing`); a
//! missing `node` or `npm` fails the tests, it never skips them.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod agent;
mod elicitation;
mod http;
mod servers;
mod stdio;
