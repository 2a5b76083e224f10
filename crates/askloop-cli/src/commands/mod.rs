//! One module per subcommand.

pub(crate) mod approve;
pub(crate) mod chat;
pub(crate) mod fork;
pub(crate) mod keys;
pub(crate) mod model;
pub(crate) mod resume;
pub(crate) mod run;
pub(crate) mod runs;
pub(crate) mod serve;
pub(crate) mod webhooks;
