//! Exit statuses, the CLI's own error kinds, and the one place errors are reported.
//!
//! | status | meaning |
//! |---|---|
//! | 0 | done (finished, or suspended without a terminal) |
//! | 1 | the model or the store failed, another process resumed the run first, or the thread has another turn running |
//! | 2 | invalid input: flags, askloop.toml, the answer, an unknown id, a question already answered, a call whose deadline passed (expired), a run in the wrong state, a store path that is a folder |
//! | 129 | hung up (SIGHUP) |
//! | 130 | interrupted (Ctrl-C, SIGINT) |
//! | 143 | terminated (SIGTERM) |
//!
//! The status is chosen from the error's type ([`InvalidInput`], [`RunFailed`],
//! [`Interrupted`], core's [`ResumeError`] and [`StoreError`] variants, the store's
//! [`OpenError`] variants), never from its text.

use std::io::Write;
use std::process::ExitCode;

use askloop_core::{ResumeError, StoreError};
use askloop_store::OpenError;

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
/// It keeps the error that showed the problem, if any, so the report prints each of its
/// causes once (`invalid config F: cannot read F: No such file …`).
#[derive(Debug)]
pub(crate) struct InvalidInput {
    /// What is wrong; `None` when the error below says it itself.
    message: Option<String>,
    /// The error that showed it.
    error: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

impl std::fmt::Display for InvalidInput {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.message, &self.error) {
            (Some(message), _) => formatter.write_str(message),
            (None, Some(error)) => std::fmt::Display::fmt(error, formatter),
            (None, None) => formatter.write_str("invalid input"),
        }
    }
}

impl std::error::Error for InvalidInput {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        let error = self.error.as_deref()?;
        if self.message.is_some() {
            Some(error)
        } else {
            error.source()
        }
    }
}

/// An [`InvalidInput`] error with this message.
pub(crate) fn invalid(message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(InvalidInput {
        message: Some(message.into()),
        error: None,
    })
}

/// An [`InvalidInput`] error with this message, caused by `error` (printed after it, with its
/// own causes).
pub(crate) fn invalid_because(
    message: impl Into<String>,
    error: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
) -> anyhow::Error {
    anyhow::Error::new(InvalidInput {
        message: Some(message.into()),
        error: Some(error.into()),
    })
}

/// Refuses a run, thread or resource id that breaks the core's rule for ids
/// ([`askloop_core::IdKind::check`]) as invalid input naming it (printed with its control
/// characters escaped, as every error line is).
///
/// # Errors
/// [`InvalidInput`] naming the id and what is wrong with it.
pub(crate) fn check_key_id(kind: askloop_core::IdKind, id: &str) -> anyhow::Result<()> {
    kind.check(id)
        .map_err(|error| invalid(format!("invalid {kind} id {id}: {error}")))
}

/// `error` (its message and its causes) as invalid input.
pub(crate) fn invalid_error(
    error: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
) -> anyhow::Error {
    anyhow::Error::new(InvalidInput {
        message: None,
        error: Some(error.into()),
    })
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

/// A signal or the person stopped the command where nothing needed cancelling (a prompt, a
/// download); the run stays as it is. Exits with the signal's status (see
/// [`crate::interrupt`]).
#[derive(Debug)]
pub(crate) struct Interrupted {
    /// [`INTERRUPTED`], [`TERMINATED`] or [`HUNG_UP`].
    pub(crate) status: u8,
    /// The whole line to print.
    pub(crate) message: String,
}

impl std::fmt::Display for Interrupted {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(&self.message)
    }
}

impl std::error::Error for Interrupted {}

/// The exit status for an error: the first cause that decides it, else 1.
pub(crate) fn exit_status(error: &anyhow::Error) -> u8 {
    for cause in error.chain() {
        if cause.is::<InvalidInput>() {
            return INVALID_INPUT;
        }
        if let Some(interrupted) = cause.downcast_ref::<Interrupted>() {
            return interrupted.status;
        }
        if let Some(failed) = cause.downcast_ref::<RunFailed>() {
            return failed.status;
        }
        if let Some(refused) = cause.downcast_ref::<ResumeError>() {
            return match refused {
                ResumeError::Conflict { .. }
                | ResumeError::InProgress { .. }
                | ResumeError::Interrupted { .. }
                | ResumeError::ThreadBusy { .. }
                | ResumeError::Store(_) => FAILURE,
                _ => INVALID_INPUT,
            };
        }
        if let Some(StoreError::NotFound { .. }) = cause.downcast_ref::<StoreError>() {
            return INVALID_INPUT;
        }
        // A store URL that cannot name a database (the user's flag or setting).
        if let Some(OpenError::IsDirectory { .. } | OpenError::InvalidUrl { .. }) =
            cause.downcast_ref::<OpenError>()
        {
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
            same_answer: false,
        });
        assert_eq!(exit_status(&repeated), INVALID_INPUT);
        let busy = anyhow::Error::new(ResumeError::ThreadBusy {
            run_id: RunId::new("r"),
            thread_id: "t".into(),
            running_run_id: Some(RunId::new("other")),
        });
        assert_eq!(exit_status(&busy), FAILURE);
        let ambiguous = anyhow::Error::new(ResumeError::AmbiguousRun {
            run_id: RunId::new("r"),
            resources: vec![Some("a".into()), None],
        });
        assert_eq!(exit_status(&ambiguous), INVALID_INPUT);
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
    fn invalid_input_keeps_its_causes_each_printed_once() {
        let root = std::io::Error::other("No such file or directory (os error 2)");
        let error = invalid_because("cannot read /x/askloop.toml", root).context("while starting");
        assert_eq!(exit_status(&error), INVALID_INPUT);
        assert_eq!(
            one_line(&error),
            "while starting: cannot read /x/askloop.toml: No such file or directory (os error 2)"
        );
        // An error taken as it is keeps its message and its own causes.
        let inner = anyhow::anyhow!("root cause").context("what failed");
        let boxed: Box<dyn std::error::Error + Send + Sync> = inner.into();
        let error = invalid_error(boxed);
        assert_eq!(exit_status(&error), INVALID_INPUT);
        assert_eq!(one_line(&error), "what failed: root cause");
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
