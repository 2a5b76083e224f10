//! Exit statuses, the CLI's own error kinds, and the one place errors are reported.
//!
//! | status | meaning |
//! |---|---|
//! | 0 | done (finished, or suspended without a terminal) |
//! | 1 | the model or the store failed, or another process resumed the run first |
//! | 2 | invalid input: flags, askloop.toml, the answer, an unknown id, a question already answered, a run in the wrong state |
//! | 129 | hung up (SIGHUP) |
//! | 130 | interrupted (Ctrl-C, SIGINT) |
//! | 143 | terminated (SIGTERM) |
//!
//! The status is chosen from the error's type ([`InvalidInput`], [`RunFailed`],
//! [`Interrupted`], core's [`ResumeError`] and [`StoreError`] variants), never from its text.

use std::io::Write;
use std::process::ExitCode;

use askloop_core::{ResumeError, StoreError};

use crate::format::escape_controls;

/// Exit status of a failure.
pub(crate) const FAILURE: u8 = 1;
/// Exit status of invalid input.
pub(crate) const INVALID_INPUT: u8 = 2;
/// Exit status after SIGHUP (128 + 1).
pub(crate) const HUNG_UP: u8 = 129;
/// Exit status after Ctrl-C (SIGINT, 128 + 2).
pub(crate) const INTERRUPTED: u8 = 130;
/// Exit status after SIGTERM (128 + 15).
pub(crate) const TERMINATED: u8 = 143;

/// Something the user gave is wrong (a flag, the config, an answer, an id): exit status 2.
#[derive(Debug)]
pub(crate) struct InvalidInput(pub(crate) String);

impl std::fmt::Display for InvalidInput {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(&self.0)
    }
}

impl std::error::Error for InvalidInput {}

/// An [`InvalidInput`] error with this message.
pub(crate) fn invalid(message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(InvalidInput(message.into()))
}

/// A run's stream ended with an error; the run is recorded as failed when the store allowed.
#[derive(Debug)]
pub(crate) struct RunFailed {
    /// The exit status: [`FAILURE`], or the signal's status when a signal cancelled the run.
    pub(crate) status: u8,
    /// The whole line to print.
    pub(crate) message: String,
}

impl std::fmt::Display for RunFailed {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(&self.message)
    }
}

impl std::error::Error for RunFailed {}

/// The person stopped a prompt (Ctrl-C or Esc); the run stays as it is (exit 130).
#[derive(Debug)]
pub(crate) struct Interrupted(pub(crate) String);

impl std::fmt::Display for Interrupted {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(&self.0)
    }
}

impl std::error::Error for Interrupted {}

/// The exit status for an error: the first cause that decides it, else 1.
pub(crate) fn exit_status(error: &anyhow::Error) -> u8 {
    for cause in error.chain() {
        if cause.is::<InvalidInput>() {
            return INVALID_INPUT;
        }
        if cause.is::<Interrupted>() {
            return INTERRUPTED;
        }
        if let Some(failed) = cause.downcast_ref::<RunFailed>() {
            return failed.status;
        }
        if let Some(refused) = cause.downcast_ref::<ResumeError>() {
            return match refused {
                ResumeError::Conflict { .. } | ResumeError::Store(_) => FAILURE,
                _ => INVALID_INPUT,
            };
        }
        if let Some(StoreError::NotFound { .. }) = cause.downcast_ref::<StoreError>() {
            return INVALID_INPUT;
        }
    }
    FAILURE
}

/// Whether the error is a closed stdout (`askloop … | head`): then exit quietly.
fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// The error and its causes as one line, `outer: cause: root cause`, each cause once: a cause
/// whose text the previous one already contains (a message that embeds its source) is left
/// out. Newlines become spaces.
pub(crate) fn one_line(error: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in error.chain() {
        let text = cause.to_string().replace(['\n', '\r'], " ");
        let text = text.trim();
        if text.is_empty() || parts.last().is_some_and(|last| last.contains(text)) {
            continue;
        }
        parts.push(text.to_owned());
    }
    parts.join(": ")
}

/// Prints `error: …` as one line on stderr and returns the exit status.
pub(crate) fn report(error: &anyhow::Error) -> ExitCode {
    if is_broken_pipe(error) {
        return ExitCode::SUCCESS;
    }
    let line = one_line(error);
    let _ = writeln!(std::io::stderr(), "error: {}", escape_controls(&line));
    ExitCode::from(exit_status(error))
}

#[cfg(test)]
mod tests {
    use askloop_core::RunId;

    use super::*;

    #[test]
    fn resume_refusals_are_invalid_input_except_conflicts() {
        let not_found = anyhow::Error::new(ResumeError::RunNotFound {
            run_id: RunId::new("r"),
        });
        assert_eq!(exit_status(&not_found), INVALID_INPUT);
        let conflict = anyhow::Error::new(ResumeError::Conflict {
            run_id: RunId::new("r"),
        });
        assert_eq!(exit_status(&conflict), FAILURE);
        let repeated = anyhow::Error::new(ResumeError::AlreadyAnswered {
            run_id: RunId::new("r"),
            tool_call_id: "c1".into(),
        });
        assert_eq!(exit_status(&repeated), INVALID_INPUT);
    }

    #[test]
    fn context_does_not_hide_the_kind() {
        let error = invalid("bad").context("while reading askloop.toml");
        assert_eq!(exit_status(&error), INVALID_INPUT);
        assert_eq!(exit_status(&anyhow::anyhow!("other")), FAILURE);
    }

    #[test]
    fn a_run_failed_by_a_signal_exits_with_its_status() {
        let error = anyhow::Error::new(RunFailed {
            status: TERMINATED,
            message: "cancelled".into(),
        });
        assert_eq!(exit_status(&error), TERMINATED);
    }

    #[test]
    fn issue7_errors_every_cause_is_printed_once() {
        // A message that embeds its source, as sqlx's database errors do.
        let root = std::io::Error::other("(code: 14) unable to open database file");
        let error = anyhow::Error::new(root)
            .context("error returned from database: (code: 14) unable to open database file")
            .context("cannot open store sqlite:///x.db");
        assert_eq!(
            one_line(&error),
            "cannot open store sqlite:///x.db: error returned from database: (code: 14) unable \
             to open database file"
        );
        let nested = anyhow::anyhow!("root\ncause").context("outer");
        assert_eq!(one_line(&nested), "outer: root cause");
    }
}
