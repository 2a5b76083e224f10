//! [`Server`] and [`ServerBuilder`]: the shared state of every route, the router, and serving
//! with graceful shutdown.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use askloop_core::RunStore;
use askloop_core::registry::AgentRegistry;
use tokio::net::TcpListener;

use crate::closing::{Closing, SHUTDOWN_GRACE};
use crate::error::ServerError;
use crate::hub::RunHub;
use crate::inbox::Inbox;
use crate::keys::{ApiKey, KeyRing};
use crate::limits::Limits;
use crate::metrics::Metrics;

/// The askloop HTTP server: agents, a store, keys and limits, shared by every route. Cheap to
/// clone (an `Arc` inside). Build it with [`Server::builder`].
///
/// ```no_run
/// # async fn demo(agents: std::sync::Arc<dyn askloop_core::registry::AgentRegistry>,
/// #   store: std::sync::Arc<dyn askloop_core::RunStore>) -> Result<(), askloop_server::ServerError> {
/// use askloop_server::Server;
///
/// let server = Server::builder(agents, store).build();
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:4111").await?;
/// server.serve(listener, async { let _ = tokio::signal::ctrl_c().await; }).await
/// # }
/// ```
#[derive(Clone)]
pub struct Server {
    pub(crate) state: Arc<AppState>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Server").finish_non_exhaustive()
    }
}

/// What every route shares.
pub(crate) struct AppState {
    pub(crate) agents: Arc<dyn AgentRegistry>,
    pub(crate) store: Arc<dyn RunStore>,
    pub(crate) keys: KeyRing,
    pub(crate) limits: Limits,
    pub(crate) sweep_interval: Duration,
    pub(crate) hub: RunHub,
    pub(crate) inbox: Inbox,
    /// The shutdown as open responses see it.
    pub(crate) closing: Closing,
    /// `/metrics`' registry; the run hub records stream durations in it.
    pub(crate) metrics: Arc<Metrics>,
}

/// Builds a [`Server`]: keys (none: open), limits, the sweep interval.
#[must_use]
pub struct ServerBuilder {
    agents: Arc<dyn AgentRegistry>,
    store: Arc<dyn RunStore>,
    keys: Vec<ApiKey>,
    limits: Limits,
    sweep_interval: Duration,
}

impl std::fmt::Debug for ServerBuilder {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("ServerBuilder")
            .field("keys", &self.keys.len())
            .field("limits", &self.limits)
            .field("sweep_interval", &self.sweep_interval)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// A builder of a server offering `agents`, with runs kept in `store`. The agents should
    /// use the same store (the server reads runs from `store` and drives them through the
    /// agents).
    pub fn builder(agents: Arc<dyn AgentRegistry>, store: Arc<dyn RunStore>) -> ServerBuilder {
        ServerBuilder {
            agents,
            store,
            keys: Vec::new(),
            limits: Limits::default(),
            sweep_interval: Duration::from_secs(5),
        }
    }

    /// Every route, with its layers (auth, limits, timeouts, tracing). Serving it yourself
    /// (e.g. with `axum::serve`) runs no background sweep; [`Server::serve`] does.
    pub fn router(&self) -> axum::Router {
        crate::routes::router(self.state.clone())
    }

    /// Serves on `listener` until `shutdown` completes, with the background sweep (expired
    /// questions, lease recovery) every [`ServerBuilder::sweep_interval`]. At shutdown it stops
    /// accepting and lets open requests end: the inbox's event streams end at once, a run's
    /// stream when its run ends or at most 10 s later; then it waits up to 10 s for run tasks
    /// to end; a run still going is left `running` under a lease that expires, so any instance
    /// recovers it.
    ///
    /// # Errors
    /// [`ServerError::Io`] when serving fails.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServerError> {
        let (stop_sweep, sweep_stopped) = tokio::sync::watch::channel(false);
        let sweeper = tokio::spawn(crate::sweep::run(self.state.clone(), sweep_stopped));
        let router = self.router();
        // TCP_NODELAY: SSE frames and small JSON answers go out at once instead of waiting
        // for the peer's delayed ACK (~40 ms per response on Linux otherwise).
        let listener = axum::serve::ListenerExt::tap_io(listener, |stream| {
            if let Err(error) = stream.set_nodelay(true) {
                tracing::debug!(%error, "cannot set TCP_NODELAY");
            }
        });
        let closing = self.state.closing.clone();
        let served = axum::serve(listener, router)
            .with_graceful_shutdown(async move {
                shutdown.await;
                closing.begin();
            })
            .await;
        let _ = stop_sweep.send(true);
        let _ = sweeper.await;
        if !self.state.hub.wait_idle(SHUTDOWN_GRACE).await {
            tracing::warn!(
                live = self.state.hub.live_count(),
                "shutdown: runs still going are left to their leases (another instance recovers them)"
            );
        }
        served.map_err(ServerError::Io)
    }

    /// Runs one background sweep now: expires due questions and approvals and continues runs
    /// whose lease expired. [`Server::serve`] does this every [`ServerBuilder::sweep_interval`].
    pub async fn sweep_once(&self) {
        crate::sweep::sweep_once(&self.state).await;
    }

    /// How many runs this server drives now (live run tasks).
    pub fn live_runs(&self) -> usize {
        self.state.hub.live_count()
    }
}

impl ServerBuilder {
    /// The accepted keys. With none (the default) every request is allowed: bind loopback then.
    pub fn keys(mut self, keys: Vec<ApiKey>) -> Self {
        self.keys = keys;
        self
    }

    /// Size and time limits ([`Limits::default`] otherwise).
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// How often the background sweep runs (default 5 s).
    pub fn sweep_interval(mut self, interval: Duration) -> Self {
        self.sweep_interval = interval;
        self
    }

    /// The server.
    pub fn build(self) -> Server {
        let store = self.store;
        let metrics = Arc::new(Metrics::default());
        Server {
            state: Arc::new(AppState {
                agents: self.agents,
                store: store.clone(),
                keys: KeyRing::new(self.keys),
                limits: self.limits,
                sweep_interval: self.sweep_interval,
                hub: RunHub::new(metrics.clone()),
                inbox: Inbox::new(store),
                closing: Closing::default(),
                metrics,
            }),
        }
    }
}
