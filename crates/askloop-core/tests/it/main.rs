//! Integration tests of askloop-core: the wire format against the reference captures.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod formats;
mod wire;
