//! How the loop's phases emit chunks: an [`Emitter`] they await on, and [`driven`], the stream
//! that runs the loop as the consumer polls it.
//!
//! The loop is a plain async function that awaits [`Emitter::emit`] for each chunk. The stream
//! owns that future and polls it only while the consumer polls the stream, and the channel holds
//! at most one chunk per emitter, so the loop runs at most one chunk ahead of its consumer and
//! stops when the stream is dropped. No task is spawned.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::channel::mpsc;
use futures::{SinkExt, Stream, StreamExt};

use crate::chunk::Chunk;
use crate::error::AgentError;

/// The sending end of a run's stream.
pub(crate) struct Emitter {
    sender: mpsc::Sender<Chunk>,
}

impl Emitter {
    /// Hands a chunk to the stream, waiting until the consumer took the previous one.
    pub(crate) async fn emit(&mut self, chunk: Chunk) {
        // The receiver lives in the stream that owns this future: if it is gone, so is the
        // loop, and nobody is left to tell.
        let _ = self.sender.send(chunk).await;
    }
}

type Driver = Pin<Box<dyn Future<Output = Result<(), AgentError>> + Send>>;

/// The stream of chunks that `run` emits, ending with its error if it returns one.
pub(crate) fn driven<F, Fut>(run: F) -> impl Stream<Item = Result<Chunk, AgentError>> + Send
where
    F: FnOnce(Emitter) -> Fut,
    Fut: Future<Output = Result<(), AgentError>> + Send + 'static,
{
    let (sender, receiver) = mpsc::channel(0);
    DrivenStream {
        driver: Some(Box::pin(run(Emitter { sender }))),
        receiver,
        error: None,
        done: false,
    }
}

struct DrivenStream {
    driver: Option<Driver>,
    receiver: mpsc::Receiver<Chunk>,
    error: Option<AgentError>,
    done: bool,
}

impl Stream for DrivenStream {
    type Item = Result<Chunk, AgentError>;

    fn poll_next(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if this.done {
            return Poll::Ready(None);
        }
        loop {
            if let Poll::Ready(Some(chunk)) = this.receiver.poll_next_unpin(context) {
                return Poll::Ready(Some(Ok(chunk)));
            }
            let Some(driver) = this.driver.as_mut() else {
                // The loop has returned and every chunk it sent has been taken.
                this.done = true;
                return Poll::Ready(this.error.take().map(Err));
            };
            match driver.as_mut().poll(context) {
                Poll::Ready(result) => {
                    this.driver = None;
                    this.error = result.err();
                    // Loop: take what it sent last, then end.
                }
                Poll::Pending => {
                    return match this.receiver.poll_next_unpin(context) {
                        Poll::Ready(Some(chunk)) => Poll::Ready(Some(Ok(chunk))),
                        _ => Poll::Pending,
                    };
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[tokio::test]
    async fn chunks_then_the_error_then_the_end() {
        let stream = driven(|mut out| async move {
            out.emit(Chunk::TextDelta { text: "a".into() }).await;
            out.emit(Chunk::TextDelta { text: "b".into() }).await;
            Err(AgentError::Model(crate::model::ModelError::Cancelled))
        });
        let items: Vec<_> = stream.collect().await;
        assert_eq!(items.len(), 3);
        assert!(matches!(&items[1], Ok(Chunk::TextDelta { text }) if text == "b"));
        assert!(matches!(&items[2], Err(AgentError::Model(_))));
    }

    #[tokio::test]
    async fn the_loop_runs_at_most_one_chunk_ahead_and_stops_when_dropped() {
        let emitted = Arc::new(AtomicUsize::new(0));
        let counter = emitted.clone();
        let mut stream = Box::pin(driven(move |mut out| async move {
            for index in 0..100 {
                out.emit(Chunk::StepStart { step: index }).await;
                counter.fetch_add(1, Ordering::SeqCst);
            }
            Ok(())
        }));
        assert!(stream.next().await.is_some());
        assert!(emitted.load(Ordering::SeqCst) <= 2, "ran ahead");
        drop(stream);
        tokio::task::yield_now().await;
        assert!(emitted.load(Ordering::SeqCst) <= 2, "ran after drop");
    }
}
