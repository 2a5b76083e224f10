//! The status line: while a person waits at a terminal for a model, one line on stderr says what
//! is going on and for how long (`⠋ Thinking… 4s`), until the model's text replaces it.
//!
//! A command that runs a model turns it on with [`start`], only for people (not `--json`) and
//! only when stderr is a terminal; elsewhere every function here does nothing. The phases come
//! from where they happen: loading the model ([`crate::registry`]), and what the model streams
//! ([`Observed`], a wrapper of every model the commands build: the request is sent, reasoning
//! arrives, a tool call's arguments arrive). Whatever prints for people
//! ([`crate::output::Output`] through [`printing`]; the prompts, the signal handler, the final
//! error) first takes the line off ([`hide`]); the next phase shows it again, unless stdout's
//! current line is unfinished: the status never lands in the middle of the model's text.

use std::io::IsTerminal;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use askloop_core::model::{LanguageModel, ModelError, ModelEvent, ModelEventStream, ModelRequest};
use askloop_core::{AskUser, Tool as _};
use async_trait::async_trait;
use futures::StreamExt;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::format::escape_controls;

/// What the person is waiting for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// The model is being loaded (or its client made).
    LoadingModel,
    /// The request is sent; the model reads the conversation before it writes anything.
    ReadingPrompt,
    /// The model streams its reasoning.
    Thinking,
    /// The model writes the arguments of an `ask_user` call.
    WritingQuestion,
    /// The model writes the arguments of a call of another tool (its name).
    WritingCall(String),
}

impl Phase {
    /// The words on the line.
    fn words(&self) -> String {
        match self {
            Self::LoadingModel => "Loading the model".to_owned(),
            Self::ReadingPrompt => "Reading the prompt".to_owned(),
            Self::Thinking => "Thinking".to_owned(),
            Self::WritingQuestion => "Writing the question".to_owned(),
            Self::WritingCall(tool) => format!("Writing a call of {}", escape_controls(tool)),
        }
    }
}

/// The line's state, while it is on.
struct Line {
    /// The phase now.
    phase: Phase,
    /// The spinner, while it is shown.
    bar: Option<ProgressBar>,
    /// Whether stdout's current line is unfinished (the spinner then waits).
    line_open: bool,
}

/// The line of this process: `None` while off.
static LINE: Mutex<Option<Line>> = Mutex::new(None);

fn line() -> MutexGuard<'static, Option<Line>> {
    LINE.lock().unwrap_or_else(|error| error.into_inner())
}

/// Turns the status line on, showing `phase` at once, when stderr is a terminal; the caller
/// calls it only for people (not with `--json`).
pub(crate) fn start(phase: Phase) {
    if !std::io::stderr().is_terminal() {
        return;
    }
    let mut slot = line();
    let mut state = Line {
        phase,
        bar: None,
        line_open: false,
    };
    state.show();
    *slot = Some(state);
}

/// The person now waits for `phase`: shown (with the time waited so far) unless stdout's line
/// is unfinished. Nothing while the line is off.
pub(crate) fn set(phase: Phase) {
    let mut slot = line();
    let Some(state) = slot.as_mut() else {
        return;
    };
    if state.phase == phase && state.bar.is_some() {
        return;
    }
    state.phase = phase;
    match &state.bar {
        Some(bar) => {
            bar.set_message(state.phase.words());
            bar.force_draw();
        }
        None if !state.line_open => state.show(),
        None => {}
    }
}

/// Takes the line off the screen before something else is printed or asked; the next
/// [`set`] shows it again.
pub(crate) fn hide() {
    if let Some(state) = line().as_mut()
        && let Some(bar) = state.bar.take()
    {
        bar.finish_and_clear();
    }
}

/// Runs `print` with the line off the screen and kept off until `print` is done (a model's
/// phase arriving meanwhile from another thread waits), so what it prints never shares the
/// line's row. `print` returns its result and, when it wrote to stdout, whether it left
/// stdout's current line unfinished; it must not call this module (the line is locked).
pub(crate) fn printing<R>(print: impl FnOnce() -> (R, Option<bool>)) -> R {
    let mut slot = line();
    if let Some(state) = slot.as_mut()
        && let Some(bar) = state.bar.take()
    {
        bar.finish_and_clear();
    }
    let (result, open) = print();
    if let (Some(state), Some(open)) = (slot.as_mut(), open) {
        state.line_open = open;
    }
    result
}

/// Turns the line off for good (the command ends).
pub(crate) fn stop() {
    hide();
    *line() = None;
}

impl Line {
    /// Shows the spinner with the phase, counting time from now.
    fn show(&mut self) {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template("{spinner} {msg}… {elapsed}") {
            bar.set_style(style);
        }
        bar.set_message(self.phase.words());
        bar.enable_steady_tick(Duration::from_millis(120));
        bar.force_draw();
        self.bar = Some(bar);
    }
}

/// A model whose stream moves the status line along: [`Phase::ReadingPrompt`] when a request
/// is sent, [`Phase::Thinking`] when reasoning arrives, [`Phase::WritingQuestion`] (or
/// [`Phase::WritingCall`]) when a tool call's arguments arrive. Text needs nothing: printing
/// it hides the line. Events pass through unchanged.
pub(crate) struct Observed(Arc<dyn LanguageModel>);

/// `model`, observed for the status line.
pub(crate) fn observe(model: Arc<dyn LanguageModel>) -> Arc<dyn LanguageModel> {
    Arc::new(Observed(model))
}

#[async_trait]
impl LanguageModel for Observed {
    fn provider(&self) -> &str {
        self.0.provider()
    }

    fn model_id(&self) -> &str {
        self.0.model_id()
    }

    async fn stream(&self, request: ModelRequest) -> Result<ModelEventStream, ModelError> {
        set(Phase::ReadingPrompt);
        let events = self.0.stream(request).await?;
        Ok(Box::pin(events.inspect(|event| match event {
            Ok(ModelEvent::ReasoningDelta(_) | ModelEvent::Reasoning { .. }) => {
                set(Phase::Thinking);
            }
            Ok(ModelEvent::ToolCallDelta { name, .. }) if name == AskUser::NAME => {
                set(Phase::WritingQuestion);
            }
            Ok(ModelEvent::ToolCallDelta { name, .. }) if !name.is_empty() => {
                set(Phase::WritingCall(name.clone()));
            }
            _ => {}
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_read_as_words() {
        assert_eq!(Phase::LoadingModel.words(), "Loading the model");
        assert_eq!(Phase::WritingQuestion.words(), "Writing the question");
        assert_eq!(
            Phase::WritingCall("pay\u{1b}".into()).words(),
            r"Writing a call of pay\u{1b}"
        );
    }
}
