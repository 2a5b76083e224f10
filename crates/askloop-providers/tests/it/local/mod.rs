//! Tests of the embedded local model (feature `local`) on the real default model file.
//!
//! They fetch the default model through the first-use path (`fetch_model`, as `askloop model
//! pull` does) into the data folder, once: later runs find it there.

mod agent;
mod constrained;
mod errors;
mod fetch;
mod support;
mod tokenizer;
