//! Where a run's chunks go: text to stdout and tool activity to stderr for people, or one wire
//! JSON line per chunk on stdout (`--json`). A sub-agent's work (`Chunk::Subagent`) is tool
//! activity: its text and tool calls go to stderr, whole lines prefixed with its path
//! (`  [researcher] …`, two more spaces per level). Everything printed for people passes
//! [`escape_controls`], so a model's text cannot drive the terminal.

use std::io::Write;

use askloop_core::{AgentId, AskUser, Chunk, RunId, Tool as _, wire};
use serde_json::Value;

use crate::format::{SHOW_LIMIT, agent_path, cut, escape_controls, result_summary};
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
    /// A sub-agent's text whose line is not finished yet: its line prefix and the text.
    nested_line: Option<(String, String)>,
}

impl Output {
    /// Output in this mode.
    pub(crate) fn new(mode: Mode) -> Self {
        Self {
            mode,
            stdout: std::io::stdout(),
            at_line_start: true,
            nested_line: None,
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
        if let Chunk::Subagent { .. } = chunk {
            return self.subagent_chunk(chunk);
        }
        self.end_subagent_line()?;
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

    /// Prints a chunk of a sub-agent's run (of a grandchild's, …) for people, on stderr: its
    /// text in whole lines, its tool calls and results, each line prefixed with the path of
    /// sub-agents ([`subagent_prefix`]); the rest (steps, finish) only ends its open line.
    fn subagent_chunk(&mut self, chunk: &Chunk) -> std::io::Result<()> {
        let (path, inner) = nested_parts(chunk);
        let prefix = subagent_prefix(&path);
        if let Chunk::TextDelta { text } = inner {
            return self.subagent_text(prefix, text);
        }
        self.end_subagent_line()?;
        match inner {
            Chunk::ToolCall { call } if call.name != AskUser::NAME => self.note(&format!(
                "{prefix}» {} {}",
                call.name,
                cut(&call.args.to_value().to_string(), SHOW_LIMIT)
            )),
            Chunk::ToolResult { result, .. } => {
                self.note(&format!("{prefix}« {}", result_summary(result)))
            }
            _ => Ok(()),
        }
    }

    /// A sub-agent's text as it streams: each finished line printed on stderr after `prefix`
    /// (blank lines left out), the unfinished rest kept until more comes or its line ends.
    fn subagent_text(&mut self, prefix: String, text: &str) -> std::io::Result<()> {
        if self
            .nested_line
            .as_ref()
            .is_some_and(|(open, _)| *open != prefix)
        {
            self.end_subagent_line()?;
        }
        let (prefix, mut line) = self
            .nested_line
            .take()
            .unwrap_or_else(|| (prefix, String::new()));
        line.push_str(text);
        while let Some(at) = line.find('\n') {
            let rest = line.split_off(at + 1);
            let finished = std::mem::replace(&mut line, rest);
            let finished = finished.trim_end();
            if !finished.trim().is_empty() {
                self.note(&format!("{prefix}{finished}"))?;
            }
        }
        self.nested_line = Some((prefix, line));
        Ok(())
    }

    /// Prints the sub-agent's unfinished line, if any (its text ended, or other output comes).
    ///
    /// # Errors
    /// Finishing stdout's line failed.
    pub(crate) fn end_subagent_line(&mut self) -> std::io::Result<()> {
        if let Some((prefix, line)) = self.nested_line.take()
            && !line.trim().is_empty()
        {
            self.note(&format!("{prefix}{}", line.trim_end()))?;
        }
        Ok(())
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

/// A chunk as a sub-agent's run streamed it: the path of sub-agents down to that run (empty for
/// the run's own chunk) and the chunk inside.
pub(crate) fn nested_parts(chunk: &Chunk) -> (Vec<&AgentId>, &Chunk) {
    let mut path = Vec::new();
    let mut inner = chunk;
    while let Chunk::Subagent {
        agent_id, chunk, ..
    } = inner
    {
        path.push(agent_id);
        inner = chunk;
    }
    (path, inner)
}

/// The prefix of a sub-agent's lines: two spaces per level and the path of sub-agents from the
/// run followed down to the one that wrote, `  [researcher] ` or `    [researcher › analyst] `.
pub(crate) fn subagent_prefix(path: &[&AgentId]) -> String {
    format!(
        "{}[{}] ",
        "  ".repeat(path.len()),
        agent_path(path.iter().copied())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sub_agents_lines_carry_its_path() {
        let researcher = AgentId::from("researcher");
        let analyst = AgentId::from("analyst");
        assert_eq!(subagent_prefix(&[&researcher]), "  [researcher] ");
        assert_eq!(
            subagent_prefix(&[&researcher, &analyst]),
            "    [researcher › analyst] "
        );
    }
}
