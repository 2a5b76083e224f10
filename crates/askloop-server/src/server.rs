//! [`Server`] and [`ServerBuilder`]: building the shared state of every route, the router, and
//! serving with graceful shutdown.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use askloop_core::RunStore;
use askloop_core::registry::AgentRegistry;
use tokio::net::TcpListener;

use crate::closing::{Closing, SHUTDOWN_GRACE};
use crate::edge::{AllowedHost, CorsOrigin, Edge};
use crate::error::ServerError;
use crate::hub::RunHub;
use crate::inbox::Inbox;
use crate::keys::{ApiKey, KeyRing};
use crate::limits::Limits;
use crate::links::LinkSettings;
use crate::metrics::Metrics;
use crate::state::AppState;
use crate::webhooks::{Deliverer, RetryPolicy, Webhook};

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

/// Builds a [`Server`]: keys (none: open), limits, the hosts it answers to, the origins whose
/// pages may call it, the sweep interval.
#[must_use]
pub struct ServerBuilder {
    agents: Arc<dyn AgentRegistry>,
    store: Arc<dyn RunStore>,
    keys: Vec<ApiKey>,
    limits: Limits,
    allowed_hosts: Vec<AllowedHost>,
    cors_origins: Vec<CorsOrigin>,
    sweep_interval: Duration,
    webhooks: Vec<Webhook>,
    webhook_policy: RetryPolicy,
    links: LinkSettings,
}

impl std::fmt::Debug for ServerBuilder {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("ServerBuilder")
            .field("keys", &self.keys.len())
            .field("limits", &self.limits)
            .field("allowed_hosts", &self.allowed_hosts)
            .field("cors_origins", &self.cors_origins)
            .field("sweep_interval", &self.sweep_interval)
            .field("webhooks", &self.webhooks)
            .field("links", &self.links)
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
            allowed_hosts: Vec::new(),
            cors_origins: Vec::new(),
            sweep_interval: Duration::from_secs(5),
            webhooks: Vec::new(),
            webhook_policy: RetryPolicy::default(),
            links: LinkSettings::default(),
        }
    }

    /// Every route, with its layers (auth, the Host and Origin rules, CORS, limits, timeouts,
    /// metrics, tracing). Serving it yourself (e.g. with `axum::serve`) runs no background
    /// sweep and applies none of the connection limits ([`Limits::max_connections`],
    /// [`Limits::header_read_timeout`], [`Limits::idle_timeout`]), and the Host rule then knows
    /// no connection's address; [`Server::serve`] does all of that.
    pub fn router(&self) -> axum::Router {
        crate::routes::router(self.state.clone())
    }

    /// Serves on `listener` until `shutdown` completes, with the background sweep (expired
    /// questions, lease recovery) every [`ServerBuilder::sweep_interval`], under the
    /// connection limits of [`Limits`] (at most [`Limits::max_connections`] at once; a
    /// connection that idles past [`Limits::idle_timeout`] or sends its request head slower
    /// than [`Limits::header_read_timeout`] is closed; responses being sent, SSE included, are
    /// never cut), HTTP/1.1 (and HTTP/2 with prior knowledge) with TCP_NODELAY. At shutdown it
    /// stops accepting and lets open requests end: idle connections close, the inbox's event
    /// streams end at once, a run's stream when its run ends or at most 10 s later; then it
    /// waits up to 10 s for run tasks to end; a run still going is left `running` under a
    /// lease that expires, so any instance recovers it.
    ///
    /// # Errors
    /// [`ServerError::Keys`] before serving anything when two keys have the same secret
    /// ([`ApiKey::check_distinct`]); [`ServerError::Io`] when serving fails.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServerError> {
        if let Some(error) = self.state.keys.duplicate() {
            return Err(ServerError::Keys(error.clone()));
        }
        let (stop_sweep, sweep_stopped) = tokio::sync::watch::channel(false);
        let deliverer = self
            .state
            .webhooks
            .as_ref()
            .map(|deliverer| tokio::spawn(deliverer.clone().run(sweep_stopped.clone())));
        let sweeper = tokio::spawn(crate::sweep::run(self.state.clone(), sweep_stopped));
        let router = self.router();
        let closing = self.state.closing.clone();
        crate::connections::serve(
            listener,
            router,
            &self.state.limits,
            self.state.metrics.connections(),
            async move {
                shutdown.await;
                closing.begin();
            },
        )
        .await;
        let _ = stop_sweep.send(true);
        let _ = sweeper.await;
        if let Some(deliverer) = deliverer {
            let _ = deliverer.await;
        }
        if !self.state.hub.wait_idle(SHUTDOWN_GRACE).await {
            tracing::warn!(
                live = self.state.hub.live_count(),
                "shutdown: runs still going are left to their leases (another instance recovers them)"
            );
        }
        Ok(())
    }

    /// Runs one background sweep now: expires due questions and approvals and continues runs
    /// whose lease expired. [`Server::serve`] does this every [`ServerBuilder::sweep_interval`].
    pub async fn sweep_once(&self) {
        crate::sweep::sweep_once(&self.state).await;
    }

    /// Runs one webhook delivery round now (what the background worker does every
    /// [`RetryPolicy::poll_interval`]; with no endpoint configured it fans events out to nobody
    /// and prunes); `None` when the HTTP client could not be built.
    ///
    /// # Errors
    /// The store's (see [`Deliverer::deliver_due`]).
    pub async fn deliver_webhooks_once(
        &self,
    ) -> Option<Result<crate::webhooks::Round, askloop_core::StoreError>> {
        let deliverer = self.state.webhooks.as_ref()?;
        Some(deliverer.deliver_due().await)
    }

    /// How many runs this server drives now (live run tasks).
    pub fn live_runs(&self) -> usize {
        self.state.hub.live_count()
    }
}

impl ServerBuilder {
    /// The accepted keys. With none (the default) every request is allowed: bind loopback then.
    /// No two may have the same secret ([`ApiKey::check_distinct`]): such a secret is refused
    /// (401) and [`Server::serve`] fails with [`ServerError::Keys`].
    pub fn keys(mut self, keys: Vec<ApiKey>) -> Self {
        self.keys = keys;
        self
    }

    /// Size and time limits ([`Limits::default`] otherwise).
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Hosts the server answers to besides `localhost`, `127.0.0.1`, `[::1]` and the address a
    /// connection came in on (default: none): the names it is reached by through DNS or a
    /// proxy. A request naming another host is refused with 421 `host_not_allowed` (DNS
    /// rebinding: a page of `evil.example` whose name now resolves to this server still says
    /// `Host: evil.example`). `*` allows every host. Repeated calls add.
    pub fn allowed_hosts(mut self, hosts: impl IntoIterator<Item = AllowedHost>) -> Self {
        self.allowed_hosts.extend(hosts);
        self
    }

    /// Origins whose pages may call the server from a browser (default: none): their requests
    /// get CORS headers (preflights answered) and may change state. A state-changing request
    /// from any other origin but the server's own is refused with 403 `cross_origin`. Repeated
    /// calls add.
    pub fn cors_origins(mut self, origins: impl IntoIterator<Item = CorsOrigin>) -> Self {
        self.cors_origins.extend(origins);
        self
    }

    /// How often the background sweep runs (default 5 s).
    pub fn sweep_interval(mut self, interval: Duration) -> Self {
        self.sweep_interval = interval;
        self
    }

    /// Webhook endpoints: the store's events are delivered to them by a background worker
    /// while the server serves ([`crate::webhooks`]). Repeated calls add. Without any, the
    /// worker still runs: it marks events fanned out (to nobody) and prunes the outbox
    /// ([`RetryPolicy::retention`]).
    pub fn webhooks(mut self, hooks: impl IntoIterator<Item = Webhook>) -> Self {
        self.webhooks.extend(hooks);
        self
    }

    /// How webhook deliveries are timed and retried ([`RetryPolicy::default`] otherwise).
    pub fn webhook_policy(mut self, policy: RetryPolicy) -> Self {
        self.webhook_policy = policy;
        self
    }

    /// How answer links are made ([`LinkSettings`]: the public URL they start with, and how
    /// long they live at most; default: no public URL, 24 h). The public URL also puts links
    /// in webhook payloads (`answerUrl`, the Slack button); without it they carry none.
    pub fn answer_links(mut self, settings: LinkSettings) -> Self {
        self.links = settings;
        self
    }

    /// The server.
    ///
    /// # Errors
    /// [`ServerError::Webhooks`] when webhooks are configured and their HTTP client cannot be
    /// built.
    pub fn try_build(self) -> Result<Server, ServerError> {
        let deliverer = Deliverer::new(
            self.store.clone(),
            self.webhooks.clone(),
            self.webhook_policy.clone(),
        )
        .map(|deliverer| deliverer.answer_links(self.links.clone()));
        let webhooks = match deliverer {
            Ok(deliverer) => Some(deliverer),
            Err(error) if self.webhooks.is_empty() => {
                tracing::warn!(error = %askloop_core::error_chain_text(&error), "outbox pruning disabled");
                None
            }
            Err(error) => return Err(error.into()),
        };
        Ok(self.build_with(webhooks))
    }

    /// The server. With webhooks whose HTTP client cannot be built (TLS setup), they are left
    /// out and the error is logged; [`ServerBuilder::try_build`] reports it instead.
    pub fn build(self) -> Server {
        let webhooks = match Deliverer::new(
            self.store.clone(),
            self.webhooks.clone(),
            self.webhook_policy.clone(),
        ) {
            Ok(deliverer) => Some(deliverer.answer_links(self.links.clone())),
            Err(error) => {
                tracing::error!(error = %askloop_core::error_chain_text(&error), "webhooks disabled");
                None
            }
        };
        self.build_with(webhooks)
    }

    fn build_with(self, webhooks: Option<Deliverer>) -> Server {
        let store = self.store;
        let metrics = Arc::new(Metrics::default());
        Server {
            state: Arc::new(AppState {
                agents: self.agents,
                store: store.clone(),
                keys: KeyRing::new(self.keys),
                limits: self.limits,
                edge: Arc::new(Edge::new(self.allowed_hosts, self.cors_origins)),
                sweep_interval: self.sweep_interval,
                hub: RunHub::new(metrics.clone()),
                inbox: Inbox::new(store),
                closing: Closing::default(),
                metrics,
                webhooks,
                links: self.links,
            }),
        }
    }
}
