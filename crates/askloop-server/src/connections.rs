//! Serving connections: the accept loop of [`crate::Server::serve`] on hyper-util (HTTP/1.1,
//! and HTTP/2 with prior knowledge, as `axum::serve`), with the bounds `axum::serve` lacks —
//! [`Limits::max_connections`], [`Limits::header_read_timeout`], [`Limits::idle_timeout`]
//! (the request body deadline, [`Limits::body_read_timeout`], is the router's:
//! [`crate::body_deadline`]).
//!
//! A connection is **busy** from a request's head until its response body has been sent
//! (dropped by hyper): an SSE response that streams for hours keeps its connection busy, and
//! none of these timeouts touches it. A connection that is not busy is closed when:
//!
//! - it never sent a whole request head within `header_read_timeout` of being accepted;
//! - it sent nothing for `idle_timeout` since its last response ended;
//! - it started a request head and did not finish it within `header_read_timeout` of its first
//!   byte.
//!
//! hyper's own header timeout is off: it also runs while a keep-alive connection waits, so it
//! would close every connection idle for longer than the header timeout.
//!
//! While `max_connections` are open the loop stops accepting: new connections wait in the
//! kernel's listen backlog (they are neither refused nor answered) until one closes.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::{Pin, pin};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};

use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use prometheus_client::metrics::gauge::Gauge;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tower::ServiceExt;

use crate::edge::ConnectionAddrs;
use crate::limits::Limits;

/// How often, at most, reaching the connection limit is logged as a warning.
const CAPACITY_WARNING_EVERY: Duration = Duration::from_secs(60);

/// Serves `router` on `listener` until `shutdown` completes; then stops accepting, lets every
/// connection finish its requests (hyper's graceful shutdown: idle connections close at once)
/// and returns once all are closed. `open` counts the open connections.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    limits: &Limits,
    open: Gauge,
    shutdown: impl Future<Output = ()>,
) {
    let mut capacity = Capacity::new(limits.max_connections);
    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // Ours instead (see the module docs); `None` also keeps hyper from warning that its default
    // has no timer.
    builder.http1().header_read_timeout(None);
    let connections = Connections {
        builder,
        router,
        open,
        timeouts: Timeouts {
            header: limits.header_read_timeout,
            idle: limits.idle_timeout,
        },
    };
    let mut shutdown = pin!(shutdown);
    loop {
        let Some(permit) = capacity.permit(shutdown.as_mut()).await else {
            break;
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    accept_failed(error).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        connections.spawn(stream, peer, &graceful, permit);
    }
    drop(listener);
    graceful.shutdown().await;
}

/// The bound on open connections: a permit per connection, [`Limits::max_connections`] of them.
struct Capacity {
    permits: Arc<Semaphore>,
    max_connections: usize,
    /// When reaching the limit was last logged.
    last_warned: Option<Instant>,
}

impl Capacity {
    fn new(max_connections: usize) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(max_connections.max(1))),
            max_connections,
            last_warned: None,
        }
    }

    /// A permit for one more connection: at once while fewer are open than the limit, else
    /// once one closes (the wait logged at most once a minute); `None` if `shutdown` completes
    /// first.
    async fn permit(
        &mut self,
        shutdown: Pin<&mut impl Future<Output = ()>>,
    ) -> Option<OwnedSemaphorePermit> {
        if let Ok(permit) = self.permits.clone().try_acquire_owned() {
            return Some(permit);
        }
        if self
            .last_warned
            .is_none_or(|at| at.elapsed() >= CAPACITY_WARNING_EVERY)
        {
            self.last_warned = Some(Instant::now());
            tracing::warn!(
                max_connections = self.max_connections,
                "connection limit reached: new connections wait until one closes \
                 (said at most once a minute)"
            );
        }
        tokio::select! {
            // An error: the semaphore closed, which it never is.
            permit = self.permits.clone().acquire_owned() => permit.ok(),
            () = shutdown => None,
        }
    }
}

/// How every accepted connection is served.
struct Connections {
    builder: auto::Builder<TokioExecutor>,
    router: Router,
    /// The gauge of open connections.
    open: Gauge,
    timeouts: Timeouts,
}

impl Connections {
    /// Serves the connection `stream` from `peer` in a task of its own, under `graceful`'s
    /// shutdown, until it ends or expires ([`Activity::expired`]); `permit` is released then.
    fn spawn(
        &self,
        stream: TcpStream,
        peer: SocketAddr,
        graceful: &GracefulShutdown,
        permit: OwnedSemaphorePermit,
    ) {
        if let Err(error) = stream.set_nodelay(true) {
            // SSE frames and small JSON answers go out at once instead of waiting for the
            // peer's delayed ACK (~40 ms per response on Linux otherwise).
            tracing::debug!(%error, "cannot set TCP_NODELAY");
        }
        let local = stream.local_addr().ok();
        let activity = Arc::new(Activity::new());
        let io = TokioIo::new(Watched {
            stream,
            activity: activity.clone(),
        });
        let service = service(self.router.clone(), activity.clone(), local);
        let builder = self.builder.clone();
        let watcher = graceful.watcher();
        let open = self.open.clone();
        let timeouts = self.timeouts;
        open.inc();
        tokio::spawn(async move {
            let connection = watcher.watch(builder.serve_connection(io, service));
            tokio::select! {
                served = connection => {
                    if let Err(error) = served {
                        tracing::trace!(%peer, error = %error, "connection ended with an error");
                    }
                }
                () = activity.expired(timeouts) => {
                    tracing::debug!(%peer, "connection closed: idle, or too slow to send a request head");
                }
            }
            open.dec();
            drop(permit);
        });
    }
}

/// The hyper service of one connection: `router`, each request marking the connection busy
/// until its response body is sent, and carrying the address it came in on (`local`).
fn service(
    router: Router,
    activity: Arc<Activity>,
    local: Option<SocketAddr>,
) -> impl hyper::service::Service<
    hyper::Request<Incoming>,
    Response = axum::response::Response,
    Error = Infallible,
    Future = impl Future<Output = Result<axum::response::Response, Infallible>> + Send,
> + Clone {
    hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        let busy = activity.request_started();
        let mut request = request.map(Body::new);
        if let Some(local) = local {
            request.extensions_mut().insert(ConnectionAddrs { local });
        }
        let router = router.clone();
        async move {
            let response = match router.oneshot(request).await {
                Ok(response) => response,
                Err(never) => match never {},
            };
            Ok::<_, Infallible>(response.map(|body| Body::new(BusyBody { body, _busy: busy })))
        }
    })
}

/// After a failed accept: connection errors of one client are skipped; anything else (e.g.
/// `EMFILE`, out of file descriptors) is logged and the loop waits a second, as hyper 0.14 and
/// `axum::serve` do, so that closing connections can free what is missing.
async fn accept_failed(error: io::Error) {
    if matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    ) {
        return;
    }
    tracing::error!(%error, "cannot accept a connection; trying again in 1 s");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// The timeouts of a connection that is not busy.
#[derive(Clone, Copy, Debug)]
struct Timeouts {
    header: Duration,
    idle: Duration,
}

/// What a connection is doing, as its expiry needs to know.
struct Activity {
    phase: Mutex<Phase>,
    /// Signalled when the deadline may have changed (the connection went idle, or a request
    /// head started arriving).
    changed: Notify,
}

#[derive(Debug)]
struct Phase {
    /// Requests whose responses are not sent yet.
    busy: usize,
    /// Whether any response was sent (after one, the idle timeout applies).
    served: bool,
    /// When the connection was accepted or its last response ended.
    idle_since: Instant,
    /// The first byte read since then, if any.
    first_byte: Option<Instant>,
}

impl Activity {
    fn new() -> Self {
        Self {
            phase: Mutex::new(Phase {
                busy: 0,
                served: false,
                idle_since: Instant::now(),
                first_byte: None,
            }),
            changed: Notify::new(),
        }
    }

    fn phase(&self) -> std::sync::MutexGuard<'_, Phase> {
        // A panic while holding this lock leaves plain data behind: keep using it.
        self.phase.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A request's head arrived: the connection is busy until the returned guard drops.
    fn request_started(self: &Arc<Self>) -> Busy {
        self.phase().busy += 1;
        Busy(self.clone())
    }

    /// Bytes were read from the connection.
    fn bytes_read(&self) {
        let mut phase = self.phase();
        if phase.busy == 0 && phase.first_byte.is_none() {
            phase.first_byte = Some(Instant::now());
            drop(phase);
            self.changed.notify_one();
        }
    }

    /// When the connection expires, as things stand (`None`: busy, it does not).
    fn deadline(&self, timeouts: Timeouts) -> Option<Instant> {
        let phase = self.phase();
        if phase.busy > 0 {
            None
        } else if !phase.served {
            Some(phase.idle_since + timeouts.header)
        } else {
            Some(match phase.first_byte {
                Some(first) => first + timeouts.header,
                None => phase.idle_since + timeouts.idle,
            })
        }
    }

    /// Completes when the connection should be closed (never while it is busy).
    async fn expired(&self, timeouts: Timeouts) {
        loop {
            // `notify_one` keeps a permit when nobody waits, so no change is missed between
            // reading the deadline and waiting.
            let changed = self.changed.notified();
            match self.deadline(timeouts) {
                None => changed.await,
                Some(deadline) if deadline <= Instant::now() => return,
                Some(deadline) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(deadline) => {}
                        () = changed => {}
                    }
                }
            }
        }
    }
}

/// A request in progress on its connection; dropped with its response body.
struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        let mut phase = self.0.phase();
        phase.busy = phase.busy.saturating_sub(1);
        if phase.busy == 0 {
            phase.served = true;
            phase.idle_since = Instant::now();
            phase.first_byte = None;
            drop(phase);
            self.0.changed.notify_one();
        }
    }
}

/// A response body that keeps its connection busy until hyper drops it (sent, or the
/// connection ended).
struct BusyBody {
    body: Body,
    _busy: Busy,
}

impl http_body::Body for BusyBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(context)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A TCP stream that tells its connection's [`Activity`] when bytes arrive.
struct Watched {
    stream: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(context, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.bytes_read();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(context, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(context, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(context)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(context)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const TIMEOUTS: Timeouts = Timeouts {
        header: Duration::from_secs(10),
        idle: Duration::from_secs(60),
    };

    #[tokio::test(start_paused = true)]
    async fn a_connection_expires_only_when_it_is_not_busy() {
        let activity = Arc::new(Activity::new());
        let opened = Instant::now();
        // A new connection must send a whole head within the header timeout.
        assert_eq!(activity.deadline(TIMEOUTS), Some(opened + TIMEOUTS.header));
        let busy = activity.request_started();
        assert_eq!(activity.deadline(TIMEOUTS), None);
        tokio::time::advance(Duration::from_secs(3600)).await;
        activity.bytes_read();
        assert_eq!(
            activity.deadline(TIMEOUTS),
            None,
            "a long response is not cut"
        );
        drop(busy);
        let idle = Instant::now();
        assert_eq!(activity.deadline(TIMEOUTS), Some(idle + TIMEOUTS.idle));
        tokio::time::advance(Duration::from_secs(5)).await;
        activity.bytes_read();
        assert_eq!(
            activity.deadline(TIMEOUTS),
            Some(idle + Duration::from_secs(5) + TIMEOUTS.header)
        );
        let expired = tokio::spawn({
            let activity = activity.clone();
            async move { activity.expired(TIMEOUTS).await }
        });
        tokio::time::advance(Duration::from_secs(9)).await;
        tokio::task::yield_now().await;
        assert!(!expired.is_finished());
        tokio::time::advance(Duration::from_secs(2)).await;
        tokio::time::timeout(Duration::from_millis(1), expired)
            .await
            .unwrap()
            .unwrap();
    }
}
