//! Following a run to its end: print its chunks, and at each suspension ask the questions inline
//! and resume, or leave the run suspended and say how to answer it later.

use askloop_core::{Agent, AgentError, AgentStream, Chunk, PendingToolCall, RunId, wire};
use futures::StreamExt;

use crate::context::Context;
use crate::exit::{Interrupted, RunFailed};
use crate::format::{answer_example, question_lines};
use crate::interrupt::Interrupt;
use crate::output::{Mode, Output};
use crate::prompt::{Answerer, Asked};

/// How following a run ended (errors aside).
#[derive(Debug, PartialEq)]
pub(crate) enum Ended {
    /// The run finished.
    Finished,
    /// The run waits for answers nobody here could give.
    Suspended,
}

/// One agent's runs as this command follows them.
pub(crate) struct Session<'a> {
    /// The store and config.
    pub(crate) context: &'a Context,
    /// The agent that runs them.
    pub(crate) agent: Agent,
    /// Where chunks go.
    pub(crate) output: Output,
    /// Who answers questions.
    pub(crate) answerer: Answerer,
    /// Ctrl-C.
    pub(crate) interrupt: Interrupt,
}

impl<'a> Session<'a> {
    /// A session printing in `mode`, asking on the terminal when there is one (and not
    /// `--json`), with the Ctrl-C handler installed.
    pub(crate) fn new(context: &'a Context, agent: Agent, mode: Mode) -> Self {
        let answerer = if mode == Mode::Human && is_terminal() {
            Answerer::Terminal
        } else {
            Answerer::Nobody
        };
        Self {
            context,
            agent,
            output: Output::new(mode),
            answerer,
            interrupt: Interrupt::install(),
        }
    }

    /// Prints `stream` to its end; then, while the run is suspended and someone can answer,
    /// asks each pending question and resumes.
    ///
    /// # Errors
    /// [`RunFailed`] when the run fails; [`Interrupted`] when the person stops a prompt; resume
    /// refusals; output and store errors.
    pub(crate) async fn follow(&mut self, stream: AgentStream) -> anyhow::Result<Ended> {
        let run_id = stream.run_id().clone();
        if self.drain(stream).await? {
            return Ok(Ended::Finished);
        }
        self.answer_pending(&run_id).await
    }

    /// While run `run_id` is suspended and someone can answer: asks its first pending question,
    /// resumes with the answer and prints the resumed stream. Without anyone to answer, prints
    /// the questions and how to answer them later.
    ///
    /// # Errors
    /// As [`Session::follow`].
    pub(crate) async fn answer_pending(&mut self, run_id: &RunId) -> anyhow::Result<Ended> {
        loop {
            let state = self.context.load_run(run_id).await?;
            let pending = state.pending_tool_calls();
            let Some(call) = pending.first() else {
                self.output
                    .note(&format!("run {run_id} is {}", state.status))?;
                return Ok(Ended::Suspended);
            };
            if pending.len() > 1 && self.output.mode() == Mode::Human {
                self.output
                    .note(&format!("{} questions are waiting", pending.len()))?;
            }
            let asked = if self.output.mode() == Mode::Json {
                Asked::Unanswered
            } else {
                self.answerer.ask(call, &mut self.output)?
            };
            match asked {
                Asked::Answer(answer) => {
                    let stream = self
                        .agent
                        .resume_stream(answer, run_id, Some(&call.tool_call_id))
                        .await?;
                    if self.drain(stream).await? {
                        return Ok(Ended::Finished);
                    }
                }
                Asked::Unanswered => {
                    self.print_waiting(run_id, &pending)?;
                    return Ok(Ended::Suspended);
                }
                Asked::Stopped => {
                    self.print_waiting(run_id, &pending)?;
                    return Err(anyhow::Error::new(Interrupted(format!(
                        "stopped; run {run_id} is still waiting for an answer"
                    ))));
                }
            }
        }
    }

    /// Prints a stream's chunks; true when it ended with `finish`. Ctrl-C cancels it meanwhile.
    async fn drain(&mut self, mut stream: AgentStream) -> anyhow::Result<bool> {
        let run_id = stream.run_id().clone();
        let _watching = self.interrupt.watch(stream.cancel_handle());
        let mut finished = false;
        // If stdout goes away (a closed pipe), the run still runs to its next commit point:
        // stopping mid-stream would leave it `running` until someone continues it.
        let mut write_error = None;
        while let Some(item) = stream.next().await {
            match item {
                Ok(chunk) => {
                    finished |= matches!(chunk, Chunk::Finish { .. });
                    if write_error.is_none() {
                        write_error = self.output.chunk(&run_id, &chunk).err();
                    }
                }
                Err(error) if write_error.is_none() => return Err(self.failed(&run_id, &error)),
                Err(error) => {
                    return Err(
                        anyhow::Error::new(error).context("the run failed after stdout closed")
                    );
                }
            }
        }
        match write_error {
            Some(error) => Err(error.into()),
            None => Ok(finished),
        }
    }

    /// Reports a stream error (as a wire `error` line with `--json`) and makes the error that
    /// ends the command.
    fn failed(&mut self, run_id: &RunId, error: &AgentError) -> anyhow::Error {
        let code = error.code();
        if self.output.mode() == Mode::Json {
            let line = wire::error_to_json(run_id, code, &error.to_string());
            if let Err(write_error) = self.output.json_line(&line) {
                return write_error.into();
            }
        } else if let Err(write_error) = self.output.end_line() {
            return write_error.into();
        }
        let prefix = self.context.command_prefix();
        let message = match code {
            "conflict" => format!("{error}; another process is running it"),
            "cancelled" => format!(
                "cancelled; run {run_id} is saved: retry its step with `{prefix} runs continue {run_id}`"
            ),
            _ if !self.context.is_durable() => format!("{error}"),
            _ => format!("{error}; retry the run's step with `{prefix} runs continue {run_id}`"),
        };
        anyhow::Error::new(RunFailed { code, message })
    }

    /// Says (on stdout, for people) which questions the run waits on and how to answer them.
    fn print_waiting(&mut self, run_id: &RunId, pending: &[PendingToolCall]) -> anyhow::Result<()> {
        if self.output.mode() == Mode::Json {
            return Ok(());
        }
        print_pending(&mut self.output, self.context, run_id, pending)?;
        if !self.context.is_durable() {
            self.output.note(
                "note: the memory store keeps nothing after this process ends, so this run \
                 cannot be resumed; use the default store or --store sqlite://PATH",
            )?;
        }
        Ok(())
    }
}

/// Whether a person is at this terminal: stdin and stdout both terminals.
pub(crate) fn is_terminal() -> bool {
    use std::io::IsTerminal;
    std::io::stdin().is_terminal() && std::io::stdout().is_terminal()
}

/// Prints each pending question with the command that answers it.
///
/// # Errors
/// Writing to stdout failed.
pub(crate) fn print_pending(
    output: &mut Output,
    context: &Context,
    run_id: &RunId,
    pending: &[PendingToolCall],
) -> std::io::Result<()> {
    let prefix = context.command_prefix();
    output.line(&format!("run {run_id} is waiting for an answer"))?;
    for call in pending {
        output.line("")?;
        for line in question_lines(call) {
            output.line(&line)?;
        }
        let tool_call = if pending.len() > 1 {
            format!(" --tool-call-id {}", call.tool_call_id)
        } else {
            String::new()
        };
        if context.is_durable() {
            output.line(&format!(
                "answer with: {prefix} resume {run_id}{tool_call} {}",
                answer_example(call)
            ))?;
        }
    }
    Ok(())
}
