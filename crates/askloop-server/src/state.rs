//! [`AppState`], what every route shares (agents, store, keys, limits, the run hub, the inbox,
//! the shutdown, the metrics), and [`State`], the extractor handlers take it with.

use std::sync::Arc;
use std::time::Duration;

use askloop_core::RunStore;
use askloop_core::registry::AgentRegistry;

use crate::closing::Closing;
use crate::edge::Edge;
use crate::hub::RunHub;
use crate::inbox::Inbox;
use crate::keys::KeyRing;
use crate::limits::Limits;
use crate::links::LinkSettings;
use crate::metrics::Metrics;
use crate::webhooks::Deliverer;

/// Shared state as the handlers see it.
pub(crate) type State = axum::extract::State<Arc<AppState>>;

/// What every route shares.
pub(crate) struct AppState {
    pub(crate) agents: Arc<dyn AgentRegistry>,
    pub(crate) store: Arc<dyn RunStore>,
    pub(crate) keys: KeyRing,
    pub(crate) limits: Limits,
    /// The Host and Origin rules, and the CORS origins.
    pub(crate) edge: Arc<Edge>,
    pub(crate) sweep_interval: Duration,
    pub(crate) hub: RunHub,
    pub(crate) inbox: Inbox,
    /// The shutdown as open responses see it.
    pub(crate) closing: Closing,
    /// `/metrics`' registry; the run hub records stream durations in it.
    pub(crate) metrics: Arc<Metrics>,
    /// The webhook deliverer, when endpoints are configured.
    pub(crate) webhooks: Option<Deliverer>,
    /// How answer links are made: their public URL, their longest life.
    pub(crate) links: LinkSettings,
}
