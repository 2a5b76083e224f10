//! Where a run's chunks go: text to stdout and tool activity to stderr for people, or one wire
//! JSON line per chunk on stdout (`--json`). Everything printed for people passes
//! [`escape_controls`], so a model's text cannot drive the terminal.

use std::io::Write;

use askloop_core::{AskUser, Chunk, RunId, Tool as _, wire};
use serde_json::Value;

use crate::format::{SHOW_LIMIT, cut, escape_controls, result_summary};
use crate::status;

/// How chunks are printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Text as it streams, activity on stderr.
    Human,
    /// Every chunk as one line of wire JSON, nothing else on stdout.
    Json,
}

/// Stdout and stderr, keeping track of whether stdout's last line is finished so notes on
/// stderr never land in the middle of the model's text.
pub(crate) struct Output {
    mode: Mode,
    stdout: std::io::Stdout,
    at_line_start: bool,
}

impl Output {
    /// Output in this mode.
    pub(crate) fn new(mode: Mode) -> Self {
        Self {
            mode,
            stdout: std::io::stdout(),
            at_line_start: true,
        }
    }

    /// The mode.
    pub(crate) fn mode(&self) -> Mode {
        self.mode
    }

    /// Prints one chunk of run `run_id`.
    ///
    /// # Errors
    /// Writing to stdout failed (e.g. a closed pipe).
    pub(crate) fn chunk(&mut self, run_id: &RunId, chunk: &Chunk) -> std::io::Result<()> {
        if self.mode == Mode::Json {
            return self.json_line(&wire::chunk_to_json(run_id, chunk));
        }
        match chunk {
            Chunk::TextDelta { text } => self.text(text),
            Chunk::ToolCall { call } if call.name != AskUser::NAME => {
                self.note(&format!(
                    "» {} {}",
                    call.name,
                    cut(&call.args.to_value().to_string(), SHOW_LIMIT)
                ))?;
                Ok(())
            }
            Chunk::ToolResult { result, .. } => {
                self.note(&format!("« {}", result_summary(result)))?;
                Ok(())
            }
            Chunk::ToolCallApproval { .. } => Ok(()),
            Chunk::Finish { .. } => self.end_line(),
            _ => Ok(()),
        }
    }

    /// Prints one JSON value as a line on stdout.
    ///
    /// # Errors
    /// Writing to stdout failed.
    pub(crate) fn json_line(&mut self, value: &Value) -> std::io::Result<()> {
        let mut stdout = self.stdout.lock();
        writeln!(stdout, "{value}")?;
        stdout.flush()
    }

    /// Prints text on stdout as it comes: for people with its control characters escaped, as
    /// it is in JSON mode (a JSON document).
    ///
    /// # Errors
    /// Writing to stdout failed.
    pub(crate) fn text(&mut self, text: &str) -> std::io::Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        let text = match self.mode {
            Mode::Human => escape_controls(text),
            Mode::Json => text.into(),
        };
        // The model's text replaces the status line.
        let stdout = &self.stdout;
        let written = status::printing(|| {
            let mut stdout = stdout.lock();
            let written = stdout
                .write_all(text.as_bytes())
                .and_then(|()| stdout.flush());
            (written, Some(!text.ends_with('\n')))
        });
        written?;
        self.at_line_start = text.ends_with('\n');
        Ok(())
    }

    /// Prints a whole line on stdout (after finishing the current one).
    ///
    /// # Errors
    /// Writing to stdout failed.
    pub(crate) fn line(&mut self, line: &str) -> std::io::Result<()> {
        self.end_line()?;
        self.text(line)?;
        self.text("\n")
    }

    /// Finishes stdout's current line, if text left it open.
    ///
    /// # Errors
    /// Writing to stdout failed.
    pub(crate) fn end_line(&mut self) -> std::io::Result<()> {
        if self.at_line_start {
            return Ok(());
        }
        self.text("\n")
    }

    /// A line for people on stderr (after finishing stdout's current line), control
    /// characters escaped, in either mode. Failing to write to stderr is ignored: there is
    /// nowhere left to say so.
    ///
    /// # Errors
    /// Finishing stdout's line failed.
    pub(crate) fn note(&mut self, line: &str) -> std::io::Result<()> {
        if self.mode == Mode::Human {
            self.end_line()?;
        }
        status::printing(|| {
            let _ = writeln!(std::io::stderr(), "{}", escape_controls(line));
            ((), None)
        });
        Ok(())
    }
}
