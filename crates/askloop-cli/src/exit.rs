//! Exit statuses, the CLI's own error kinds, and the one place errors are reported.
//!
//! | status | meaning |
//! |---|---|
//! | 0 | done (finished, or suspended without a terminal) |
//! | 1 | the model or the store failed, or another process resumed the run first |
//! | 2 | invalid input: flags, askloop.toml, the answer, an unknown id, a run in the wrong state |
//! | 130 | interrupted (Ctrl-C) |

use std::io::Write;
use std::process::ExitCode;

use askloop_core::{ResumeError, StoreError};

/// Exit status of a failure.
pub(crate) const FAILURE: u8 = 1;
/// Exit status of invalid input.
pub(crate) const INVALID_INPUT: u8 = 2;
/// Exit status after Ctrl-C.
pub(crate) const INTERRUPTED: u8 = 130;

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

/// A run's stream ended with an error; the run is recorded as failed (exit 1, or 130 when it
/// was cancelled by Ctrl-C).
#[derive(Debug)]
pub(crate) struct RunFailed {
    /// The agent error's stable code (`"model_error"`, `"cancelled"`, …).
    pub(crate) code: &'static str,
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
            return if failed.code == "cancelled" {
                INTERRUPTED
            } else {
                FAILURE
            };
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

/// Prints `error: …` as one line on stderr and returns the exit status.
pub(crate) fn report(error: &anyhow::Error) -> ExitCode {
    if is_broken_pipe(error) {
        return ExitCode::SUCCESS;
    }
    let line = format!("{error:#}").replace('\n', " ");
    let _ = writeln!(std::io::stderr(), "error: {line}");
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
    }

    #[test]
    fn context_does_not_hide_the_kind() {
        let error = invalid("bad").context("while reading askloop.toml");
        assert_eq!(exit_status(&error), INVALID_INPUT);
        assert_eq!(exit_status(&anyhow::anyhow!("other")), FAILURE);
    }

    #[test]
    fn a_cancelled_run_exits_like_an_interrupt() {
        let error = anyhow::Error::new(RunFailed {
            code: "cancelled",
            message: "cancelled".into(),
        });
        assert_eq!(exit_status(&error), INTERRUPTED);
    }
}
