//! The request body deadline the router applies ([`crate::Limits::body_read_timeout`]): a body that
//! does not arrive whole in time fails to read with [`BodyReadTimeout`], which the extractors
//! answer with 408 `timeout`.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::Request;
use http_body::{Frame, SizeHint};
use tokio::time::{Instant, Sleep};

/// Why a request body was cut: it did not arrive whole in time.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {} s", .after.as_secs_f64())]
pub(crate) struct BodyReadTimeout {
    /// [`crate::Limits::body_read_timeout`].
    pub(crate) after: Duration,
}

/// A request body that must arrive whole by a deadline ([`crate::Limits::body_read_timeout`] after
/// its head reached the router); past it, reading fails with [`BodyReadTimeout`], which the
/// extractors answer with 408 `timeout`.
pub(crate) struct DeadlineBody {
    body: Body,
    deadline: Instant,
    after: Duration,
    /// Armed on the first read that has to wait (a body already here costs no timer).
    sleep: Option<Pin<Box<Sleep>>>,
}

impl DeadlineBody {
    /// The body of `request`, due within `after` from now.
    pub(crate) fn limit(request: Request, after: Duration) -> Request {
        request.map(|body| {
            Body::new(Self {
                body,
                deadline: Instant::now() + after,
                after,
                sleep: None,
            })
        })
    }
}

impl http_body::Body for DeadlineBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        if let Poll::Ready(frame) = Pin::new(&mut this.body).poll_frame(context) {
            if frame.is_none() {
                this.sleep = None;
            }
            return Poll::Ready(frame);
        }
        let deadline = this.deadline;
        let sleep = this
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        match sleep.as_mut().poll(context) {
            Poll::Ready(()) => Poll::Ready(Some(Err(axum::Error::new(BodyReadTimeout {
                after: this.after,
            })))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// Whether `error` or one of its causes is a [`BodyReadTimeout`]; the timeout, if so.
pub(crate) fn body_read_timeout(error: &(dyn std::error::Error + 'static)) -> Option<Duration> {
    let mut current = Some(error);
    while let Some(error) = current {
        if let Some(timeout) = error.downcast_ref::<BodyReadTimeout>() {
            return Some(timeout.after);
        }
        current = error.source();
    }
    None
}
