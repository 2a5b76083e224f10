//! [`AgentStream`]: a run's chunks, with its run id, a text-only view, and [`RunOutput`].

use std::pin::Pin;
use std::task::{Context, Poll};

use futures::{Stream, StreamExt};

use crate::cancel::CancelHandle;
use crate::chunk::Chunk;
use crate::error::AgentError;
use crate::ids::{ResourceId, RunId, RunKey};
use crate::message::{FinishReason, Usage};
use crate::run::PendingToolCall;

type ChunkStream = Pin<Box<dyn Stream<Item = Result<Chunk, AgentError>> + Send>>;

/// The stream of one run (or one resume of it). Ends after `Finish`, after the last
/// `ToolCallSuspended`, or after an error.
pub struct AgentStream {
    run_key: RunKey,
    cancel: CancelHandle,
    inner: ChunkStream,
}

impl std::fmt::Debug for AgentStream {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("AgentStream")
            .field("run", &self.run_key)
            .finish_non_exhaustive()
    }
}

impl AgentStream {
    pub(crate) fn new(run_key: RunKey, cancel: CancelHandle, inner: ChunkStream) -> Self {
        Self {
            run_key,
            cancel,
            inner,
        }
    }

    /// A handle that cancels this stream's model calls from elsewhere (e.g. a Ctrl-C handler).
    /// See [`CancelHandle`] for what cancelling does to the run.
    pub fn cancel_handle(&self) -> CancelHandle {
        self.cancel.clone()
    }

    /// The id of the run this stream belongs to.
    pub fn run_id(&self) -> &RunId {
        &self.run_key.run_id
    }

    /// The exact key of the run this stream belongs to (its resource and id); pass it to
    /// `resume_stream` after a suspension.
    pub fn run_key(&self) -> &RunKey {
        &self.run_key
    }

    /// Waits for the stream's first chunk and returns the stream, that chunk still to come. On
    /// a new run's stream ([`crate::Agent::stream_with`]) the first chunk (`start`) comes once
    /// the run is stored and holds its thread's turn, so this tells a run that started from
    /// one that was refused before anything was stored — the thread had a turn running
    /// ([`AgentError::ThreadBusy`]), an id was refused ([`AgentError::InvalidId`]), the run id
    /// is taken in its resource ([`AgentError::Store`] with
    /// [`crate::StoreError::AlreadyExists`]) — which a server answers before its response
    /// starts.
    ///
    /// # Errors
    /// The stream's first item when it is an error (the stream ends with it).
    pub async fn started(mut self) -> Result<Self, AgentError> {
        match self.inner.next().await {
            Some(Ok(first)) => {
                let rest = std::mem::replace(&mut self.inner, Box::pin(futures::stream::empty()));
                self.inner = Box::pin(futures::stream::once(async move { Ok(first) }).chain(rest));
                Ok(self)
            }
            Some(Err(error)) => Err(error),
            None => Ok(self),
        }
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
            run_id: self.run_key.run_id.clone(),
            resource_id: self.run_key.resource_id.clone(),
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
                Chunk::ToolCallSuspended {
                    call,
                    suspension,
                    subagent,
                } => {
                    if let RunOutcome::Suspended { pending } = &mut output.status {
                        let mut call = PendingToolCall::new(&call, &suspension);
                        call.subagent = subagent;
                        pending.push(call);
                    }
                }
                Chunk::ToolCallApproval {
                    call,
                    expires_at_ms,
                    approvals,
                    quorum,
                    subagent,
                    ..
                } => {
                    if let RunOutcome::Suspended { pending } = &mut output.status {
                        let mut call = PendingToolCall::approval(&call, expires_at_ms)
                            .with_votes(approvals, quorum);
                        call.subagent = subagent;
                        pending.push(call);
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
    /// Its resource (with `run_id`, its key: [`RunOutput::run_key`]).
    pub resource_id: Option<ResourceId>,
    /// All visible text of this stream, concatenated.
    pub text: String,
    /// How the stream ended.
    pub status: RunOutcome,
    /// Tokens used by the model calls of this stream.
    pub usage: Usage,
}

impl RunOutput {
    /// The run's key (resource and id), what `resume_stream` takes to answer it exactly.
    pub fn run_key(&self) -> RunKey {
        RunKey::new(self.resource_id.clone(), self.run_id.clone())
    }
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
