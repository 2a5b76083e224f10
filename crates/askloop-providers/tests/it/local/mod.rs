//! Tests of the embedded local model (feature `local`) on the real default model file.
//!
//! They need the default model in the data folder: run `askloop model pull` (or
//! `cargo run -p askloop-providers --features local --example local_pull`) first. Without it
//! they fail, naming that command.

mod agent;
mod constrained;
mod errors;
mod support;
mod tokenizer;
