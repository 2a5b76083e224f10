//! [`AgentStream`]: a run's chunks, with its run id, a text-only view, and [`RunOutput`].

use std::pin::Pin;
use std::task::{Context, Poll};

use futures::{Stream, StreamExt};

use crate::cancel::CancelHandle;
use crate::chunk::Chunk;
use crate::error::AgentError;
use crate::ids::RunId;
use crate::message::{FinishReason, Usage};
use crate::run::PendingToolCall;

type ChunkStream = Pin<Box<dyn Stream<Item = Result<Chunk, AgentError>> + Send>>;

/// The stream of one run (or one resume of it). Ends after `Finish`, after the last
/// `ToolCallSuspended`, or after an error.
pub struct AgentStream {
    run_id: RunId,
    cancel: CancelHandle,
    inner: ChunkStream,
}

impl std::fmt::Debug for AgentStream {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("AgentStream")
            .field("run_id", &self.run_id)
            .finish_non_exhaustive()
    }
}

impl AgentStream {
    pub(crate) fn new(run_id: RunId, cancel: CancelHandle, inner: ChunkStream) -> Self {
        Self {
            run_id,
            cancel,
            inner,
        }
    }

    /// A handle that cancels this stream's model calls from elsewhere (e.g. a Ctrl-C handler).
    /// See [`CancelHandle`] for what cancelling does to the run.
    pub fn cancel_handle(&self) -> CancelHandle {
        self.cancel.clone()
    }

    /// The run this stream belongs to; pass it to `resume_stream` after a suspension.
    pub fn run_id(&self) -> &RunId {
        &self.run_id
    }

    /// Only the visible text, delta by delta; errors pass through.
    pub fn text_stream(self) -> impl Stream<Item = Result<String, AgentError>> + Send {
        self.inner.filter_map(|item| async move {
            match item {
                Ok(Chunk::TextDelta { text }) => Some(Ok(text)),
                Ok(_) => None,
                Err(error) => Some(Err(error)),
            }
        })
    }

    /// Drains the stream into a [`RunOutput`].
    ///
    /// # Errors
    /// The [`AgentError`] that ended the stream, if one did.
    pub async fn collect_output(mut self) -> Result<RunOutput, AgentError> {
        let mut output = RunOutput {
            run_id: self.run_id.clone(),
            text: String::new(),
            status: RunOutcome::Suspended {
                pending: Vec::new(),
            },
            usage: Usage::default(),
        };
        let mut finished = None;
        while let Some(chunk) = self.inner.next().await {
            match chunk? {
                Chunk::TextDelta { text } => output.text.push_str(&text),
                Chunk::StepFinish { usage, .. } => output.usage.add(usage),
                Chunk::ToolCallSuspended { call, suspension } => {
                    if let RunOutcome::Suspended { pending } = &mut output.status {
                        pending.push(PendingToolCall::new(&call, &suspension));
                    }
                }
                Chunk::ToolCallApproval {
                    call,
                    expires_at_ms,
                    ..
                } => {
                    if let RunOutcome::Suspended { pending } = &mut output.status {
                        pending.push(PendingToolCall::approval(&call, expires_at_ms));
                    }
                }
                Chunk::Finish { reason, .. } => finished = Some(reason),
                _ => {}
            }
        }
        if let Some(reason) = finished {
            output.status = RunOutcome::Finished { reason };
        }
        Ok(output)
    }
}

impl Stream for AgentStream {
    type Item = Result<Chunk, AgentError>;

    fn poll_next(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(context)
    }
}

/// What `generate` (or [`AgentStream::collect_output`]) returns.
#[derive(Clone, Debug, PartialEq)]
pub struct RunOutput {
    /// The run.
    pub run_id: RunId,
    /// All visible text of this stream, concatenated.
    pub text: String,
    /// How the stream ended.
    pub status: RunOutcome,
    /// Tokens used by the model calls of this stream.
    pub usage: Usage,
}

/// How a stream ended.
#[derive(Clone, Debug, PartialEq)]
pub enum RunOutcome {
    /// The run finished.
    Finished {
        /// Why.
        reason: FinishReason,
    },
    /// The run waits for a person: answers or approvals of these calls (every waiting call of
    /// the step, in call order).
    Suspended {
        /// The waiting calls.
        pending: Vec<PendingToolCall>,
    },
}
