//! Commands printed for people to paste into a shell: this program as it can be typed, and
//! [`CommandLine`], built word by word with each value quoted.

use askloop_core::{ResourceId, RunKey};

use crate::config::DEFAULT_AGENT;
use crate::format::shell_quote;

/// A command printed for the user to paste, built word by word, each value shell-quoted
/// ([`shell_quote`]). It keeps every flag that finds the same run and agent: build it with
/// [`crate::context::Context::command`] (store and config), then [`CommandLine::agent`],
/// [`CommandLine::model`] and [`CommandLine::flag`] for `--resource`, `--thread` and the
/// rest, each only when given.
#[derive(Clone, Debug)]
pub(crate) struct CommandLine(String);

impl CommandLine {
    /// A command line starting with `start` (the program and its global flags, already
    /// quoted, and the subcommand's words).
    pub(crate) fn new(start: String) -> Self {
        Self(start)
    }

    /// Adds one argument, quoted.
    pub(crate) fn arg(mut self, word: &str) -> Self {
        self.0.push(' ');
        self.0.push_str(&shell_quote(word));
        self
    }

    /// Adds a run: its id, and `--resource R` when it has one (the run ids of two resources may
    /// be the same).
    pub(crate) fn run(self, run: &RunKey) -> Self {
        self.arg(run.run_id.as_str()).flag(
            "--resource",
            run.resource_id.as_ref().map(ResourceId::as_str),
        )
    }

    /// Adds `NAME VALUE` (the value quoted) when there is a value.
    pub(crate) fn flag(mut self, name: &str, value: Option<&str>) -> Self {
        if let Some(value) = value {
            self.0.push(' ');
            self.0.push_str(name);
            self = self.arg(value);
        }
        self
    }

    /// Adds `--agent ID` unless it is the built-in agent (the default).
    pub(crate) fn agent(self, agent: &str) -> Self {
        let agent = (agent != DEFAULT_AGENT).then_some(agent);
        self.flag("--agent", agent)
    }

    /// Adds `--model SPEC` when one was given ([`crate::context::Context::model_flag`]: a relative path in it
    /// is made absolute, as the command may be pasted elsewhere).
    pub(crate) fn model(self, spec: Option<&str>) -> Self {
        self.flag("--model", spec)
    }

    /// Adds text as it is (e.g. `--answer '<your answer>'` or `…`), unquoted.
    pub(crate) fn raw(mut self, text: &str) -> Self {
        self.0.push(' ');
        self.0.push_str(text);
        self
    }
}

impl std::fmt::Display for CommandLine {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(&self.0)
    }
}

/// This program as a command that works when pasted in a shell: `askloop` when the `askloop`
/// found on `PATH` is this very file, otherwise this executable's own path, quoted (e.g. after
/// `cargo run`, or when another askloop comes first on `PATH`).
pub(crate) fn program() -> String {
    let Some(exe) = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.canonicalize().ok())
    else {
        return "askloop".to_owned();
    };
    let on_path = std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(PROGRAM_NAME))
        .find(|candidate| candidate.is_file());
    match on_path.and_then(|found| found.canonicalize().ok()) {
        Some(found) if found == exe => "askloop".to_owned(),
        _ => shell_quote(&exe.display().to_string()),
    }
}

/// The binary's file name.
const PROGRAM_NAME: &str = if cfg!(windows) {
    "askloop.exe"
} else {
    "askloop"
};
