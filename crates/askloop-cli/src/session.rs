//! Following a run to its end: print its chunks, and at each suspension ask the questions inline
//! and resume, or leave the run suspended and say how to answer it later.

use askloop_core::model::{FinishReason, ModelError, ToolCall};
use askloop_core::{
    Agent, AgentError, AgentId, AgentStream, Chunk, PendingKind, PendingToolCall, ResumeError,
    RunKey, StoreError, ToolCallId, error_chain_text, wire,
};
use futures::StreamExt;
use serde_json::Value;

use crate::context::Context;
use crate::exit::{FAILURE, HUNG_UP, INTERRUPTED, Interrupted, RunFailed, TERMINATED};
use crate::format::{SHOW_LIMIT, agent_path, answer_example, approval_line, cut, question_lines};
use crate::interrupt::Interrupt;
use crate::output::{Mode, Output, nested_parts};
use crate::prompt::{Answerer, Asked};

/// How following a run ended (errors aside).
#[derive(Debug, PartialEq)]
pub(crate) enum Ended {
    /// The run finished.
    Finished,
    /// The run waits for answers nobody here could give.
    Suspended,
}

/// Whether the stream being followed belongs to a run already stored (a resumed or continued
/// run) or to a new one, stored only once its `start` chunk arrives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Origin {
    /// `Agent::stream`: nothing is stored before the `start` chunk.
    New,
    /// `resume_stream` / `continue_stream`: the run is stored.
    Stored,
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
    /// Ctrl-C, SIGTERM, SIGHUP.
    pub(crate) interrupt: Interrupt,
    /// Say which call the next tool result answers (`answered c1: "Which repo?"`): set when
    /// an answer was given by run id alone.
    pub(crate) announce_answered: bool,
}

impl<'a> Session<'a> {
    /// A session printing in `mode`, asking on the terminal when there is one (and not
    /// `--json`), with the signal handler installed.
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
            interrupt: Interrupt::get(),
            announce_answered: false,
        }
    }

    /// Prints `stream` to its end; then, while the run is suspended and someone can answer,
    /// asks each pending question and resumes.
    ///
    /// # Errors
    /// [`RunFailed`] when the run fails; [`Interrupted`] when the person stops a prompt; resume
    /// refusals; output and store errors.
    pub(crate) async fn follow(
        &mut self,
        stream: AgentStream,
        origin: Origin,
    ) -> anyhow::Result<Ended> {
        let run = stream.run_key().clone();
        if self.drain(stream, origin).await? {
            return Ok(Ended::Finished);
        }
        self.answer_pending(&run).await
    }

    /// While `run` is suspended and someone can answer: asks its first pending question,
    /// resumes with the answer (naming the call it answers) and prints the resumed stream; an
    /// answer the tool refuses is explained and asked again. Without anyone to answer, prints
    /// the questions and how to answer them later.
    ///
    /// # Errors
    /// As [`Session::follow`].
    pub(crate) async fn answer_pending(&mut self, run: &RunKey) -> anyhow::Result<Ended> {
        let run_id = &run.run_id;
        // The call whose question was last shown, so a retry does not print it again.
        let mut shown: Option<ToolCallId> = None;
        loop {
            let state = self.context.load_run(run).await?;
            let pending = state.pending_tool_calls();
            let Some(call) = pending.first() else {
                self.output
                    .note(&format!("run {run_id} is {}", state.status()))?;
                return Ok(Ended::Suspended);
            };
            let repeat = shown.as_ref() == Some(&call.tool_call_id);
            if pending.len() > 1 && !repeat && self.output.mode() == Mode::Human {
                self.output
                    .note(&format!("{} questions are waiting", pending.len()))?;
            }
            let asked = if self.output.mode() == Mode::Json {
                Asked::Unanswered
            } else {
                self.answerer.ask(call, &mut self.output, !repeat)?
            };
            if !matches!(self.answerer, Answerer::Nobody) {
                shown = Some(call.tool_call_id.clone());
            }
            match asked {
                Asked::Answer(answer) => {
                    match self
                        .agent
                        .respond(run)
                        .actor(self.context.actor("cli prompt"))
                        .answer(&call.tool_call_id, answer)
                        .stream()
                        .await
                    {
                        Ok(stream) => {
                            if self.drain(stream, Origin::Stored).await? {
                                return Ok(Ended::Finished);
                            }
                        }
                        // Someone is here to answer again: say why, and ask again.
                        Err(
                            refused @ (ResumeError::InvalidAnswer { .. }
                            | ResumeError::InvalidArgs { .. }),
                        ) => {
                            self.output.note(&format!("{refused}; try again"))?;
                        }
                        Err(refused) => return Err(self.context.refused(run, refused)),
                    }
                }
                Asked::Unanswered => {
                    self.print_waiting(run, &pending, shown.as_ref())?;
                    return Ok(Ended::Suspended);
                }
                Asked::Stopped => {
                    self.print_waiting(run, &pending, None)?;
                    return Err(anyhow::Error::new(Interrupted {
                        status: INTERRUPTED,
                        message: format!("stopped; run {run_id} is still waiting for an answer"),
                    }));
                }
            }
        }
    }

    /// Prints a stream's chunks; true when it ended with `finish`. A signal cancels it
    /// meanwhile.
    async fn drain(&mut self, mut stream: AgentStream, origin: Origin) -> anyhow::Result<bool> {
        let run = stream.run_key().clone();
        let run_id = run.run_id.clone();
        let _watching = self.interrupt.watch(stream.cancel_handle());
        let mut stored = origin == Origin::Stored;
        let mut finished = false;
        let mut step_limit = false;
        // If stdout goes away (a closed pipe), the run still runs to its next commit point:
        // stopping mid-stream would leave it `running` until someone continues it.
        let mut write_error = None;
        while let Some(item) = stream.next().await {
            match item {
                Ok(chunk) => {
                    stored = true;
                    finished |= matches!(chunk, Chunk::Finish { .. });
                    step_limit |= matches!(
                        chunk,
                        Chunk::Finish {
                            reason: FinishReason::MaxSteps,
                            ..
                        }
                    );
                    // A sub-agent's question is answered inside its run: its result comes
                    // nested.
                    if let (path, Chunk::ToolResult { call, .. }) = nested_parts(&chunk)
                        && std::mem::take(&mut self.announce_answered)
                    {
                        self.output.end_subagent_line()?;
                        self.output.note(&answered_line(call, &path))?;
                    }
                    if write_error.is_none() {
                        write_error = self.output.chunk(&run_id, &chunk).err();
                    }
                }
                Err(error) if write_error.is_none() => {
                    return Err(self.failed(&run, &error, stored));
                }
                Err(error) => {
                    return Err(
                        anyhow::Error::new(error).context("the run failed after stdout closed")
                    );
                }
            }
        }
        if let Some(error) = write_error {
            return Err(error.into());
        }
        self.output.end_subagent_line()?;
        if step_limit {
            self.say_step_limit(&run).await?;
        }
        Ok(finished)
    }

    /// Says (on stderr) that the run stopped at its step limit, and what to do.
    async fn say_step_limit(&mut self, run: &RunKey) -> anyhow::Result<()> {
        let run_id = &run.run_id;
        let state = self.context.load_run(run).await?;
        let file = self.context.config().path.as_ref().map_or_else(
            || crate::config::DEFAULT_CONFIG_FILE.to_owned(),
            |path| path.display().to_string(),
        );
        let agent = state.agent_id().as_str();
        let again = self
            .context
            .command("run")
            .agent(agent)
            .model(self.context.model_flag.as_deref())
            .flag("--thread", Some(state.thread_id().as_str()))
            .flag("--resource", state.resource_id().map(|id| id.as_str()))
            .raw("…");
        let steps = state.steps();
        let plural = if steps == 1 { "" } else { "s" };
        self.output.note(&format!(
            "note: run {run_id} stopped at its step limit ({steps} model step{plural}) before \
             the agent finished; to allow more, set `max_steps` under [agents.{agent}] in \
             {file}, then go on in the same thread with `{again}`",
        ))?;
        Ok(())
    }

    /// Reports a stream error (as a wire `error` line with `--json`) and makes the error that
    /// ends the command. The hint to continue the run is given only for a run that is stored.
    fn failed(&mut self, run: &RunKey, error: &AgentError, stored: bool) -> anyhow::Error {
        let run_id = &run.run_id;
        let text = error_chain_text(error);
        if self.output.mode() == Mode::Json {
            let line = wire::error_to_json(run_id, error.code(), &text);
            if let Err(write_error) = self.output.json_line(&line) {
                return write_error.into();
            }
        } else if let Err(write_error) = self.output.end_line() {
            return write_error.into();
        }
        let continue_hint = format!(
            "`{}`",
            self.context
                .command("runs continue")
                .run(run)
                .model(self.context.model_flag.as_deref())
        );
        let (status, message) = match error {
            // The thread's turn is another run's: nothing was stored.
            AgentError::ThreadBusy {
                running_run_id: Some(running),
                ..
            } => (
                FAILURE,
                format!(
                    "{text}; {}",
                    self.context
                        .busy_remedy(&RunKey::new(run.resource_id.clone(), running.clone()))
                ),
            ),
            _ if !stored => (
                FAILURE,
                format!("{text}; the run was not stored, so there is nothing to continue"),
            ),
            // Cancelled elsewhere (`runs cancel`, the server): final, nothing to continue.
            AgentError::RunCancelled { .. } => (FAILURE, text),
            AgentError::Store(StoreError::Conflict { .. }) => {
                (FAILURE, format!("{text}; another process is running it"))
            }
            AgentError::Model(ModelError::Cancelled) => {
                let status = self.interrupt.received().unwrap_or(INTERRUPTED);
                let by = match status {
                    TERMINATED => " by SIGTERM",
                    HUNG_UP => " by SIGHUP",
                    _ => "",
                };
                let saved = if self.context.is_durable() {
                    format!("; run {run_id} is saved: retry its step with {continue_hint}")
                } else {
                    String::new()
                };
                (status, format!("cancelled{by}{saved}"))
            }
            _ if !self.context.is_durable() => (FAILURE, text),
            _ => (
                FAILURE,
                format!("{text}; retry the run's step with {continue_hint}"),
            ),
        };
        anyhow::Error::new(RunFailed { status, message })
    }

    /// Says which questions the run waits on and how to answer them: on stdout for people, or
    /// only the commands, on stderr, with `--json` (stdout stays JSON lines). The question of
    /// `shown` was just printed and is not repeated.
    fn print_waiting(
        &mut self,
        run: &RunKey,
        pending: &[PendingToolCall],
        shown: Option<&ToolCallId>,
    ) -> anyhow::Result<()> {
        print_pending(&mut self.output, self.context, run, pending, shown)?;
        if !self.context.is_durable() {
            self.output.note(
                "note: the memory store keeps nothing after this process ends, so this run \
                 cannot be resumed; use the default store or --store sqlite://PATH",
            )?;
        }
        Ok(())
    }
}

/// `answered c1: "Which repo?"`: which call a tool result answers (`answered c7 of
/// researcher: …` for a call of a sub-agent's run, `path` leading down to it).
fn answered_line(call: &ToolCall, path: &[&AgentId]) -> String {
    let args = call.args.to_value();
    let what = args
        .get("question")
        .and_then(Value::as_str)
        .map_or_else(|| call.name.clone(), |question| format!("{question:?}"));
    let of = if path.is_empty() {
        String::new()
    } else {
        format!(" of {}", agent_path(path.iter().copied()))
    };
    format!(
        "answered {}{of}: {}",
        call.id,
        cut(&what.replace('\n', " "), SHOW_LIMIT)
    )
}

/// Whether a person is at this terminal: stdin and stdout both terminals.
pub(crate) fn is_terminal() -> bool {
    use std::io::IsTerminal;
    std::io::stdin().is_terminal() && std::io::stdout().is_terminal()
}

/// Prints each pending question with the command that answers it, naming its tool call (so a
/// repeated command is refused as already answered, never applied to the next question). In
/// JSON mode only the commands are printed, on stderr. The question of `shown` is not
/// repeated.
///
/// # Errors
/// Writing to stdout failed.
pub(crate) fn print_pending(
    output: &mut Output,
    context: &Context,
    run: &RunKey,
    pending: &[PendingToolCall],
    shown: Option<&ToolCallId>,
) -> std::io::Result<()> {
    let human = output.mode() == Mode::Human;
    if human {
        output.line(&format!("run {} is waiting for an answer", run.run_id))?;
    }
    for call in pending {
        if call.kind == PendingKind::Approval {
            print_approval(output, context, run, call, shown)?;
            continue;
        }
        if human {
            output.line("")?;
            if shown != Some(&call.tool_call_id) {
                for line in question_lines(call) {
                    output.line(&line)?;
                }
            }
        }
        if context.is_durable() {
            let command = format!(
                "answer with: {}",
                context
                    .command("resume")
                    .run(run)
                    .flag("--tool-call-id", Some(call.tool_call_id.as_str()))
                    .model(context.model_flag.as_deref())
                    .raw(&answer_example(call))
            );
            if human {
                output.line(&command)?;
            } else {
                output.note(&command)?;
            }
        }
    }
    Ok(())
}

/// A call waiting for approval: the tool and its arguments, and the commands that approve or
/// decline it.
fn print_approval(
    output: &mut Output,
    context: &Context,
    run: &RunKey,
    call: &PendingToolCall,
    shown: Option<&ToolCallId>,
) -> std::io::Result<()> {
    let human = output.mode() == Mode::Human;
    if human {
        output.line("")?;
        if shown != Some(&call.tool_call_id) {
            output.line(&approval_line(call))?;
        }
    }
    if !context.is_durable() {
        return Ok(());
    }
    let command = |verb: &str| {
        context
            .command(verb)
            .run(run)
            .flag("--tool-call-id", Some(call.tool_call_id.as_str()))
            .to_string()
    };
    let line = format!(
        "approve with: {}   decline with: {} --reason '<why>'",
        command("approve"),
        command("decline")
    );
    if human {
        output.line(&line)
    } else {
        output.note(&line)
    }
}
