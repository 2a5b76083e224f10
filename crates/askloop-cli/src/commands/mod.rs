//! One module per subcommand.

pub(crate) mod chat;
pub(crate) mod resume;
pub(crate) mod run;
pub(crate) mod runs;
