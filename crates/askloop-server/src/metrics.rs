//! The server's Prometheus metrics, which `GET /metrics` serves in the OpenMetrics text format
//! (`prometheus-client`, one explicit [`Registry`] per [`crate::Server`], no global recorder).
//!
//! | metric | type | labels | what |
//! |---|---|---|---|
//! | `askloop_runs` | gauge | `status` | runs of the store in each status, read at scrape time ([`RunStore::run_counts`]: every instance's runs) |
//! | `askloop_pending_questions` | gauge | | pending tool calls of the store's suspended runs, at scrape time (counted over at most [`PENDING_SCAN_RUNS`] suspended runs) |
//! | `askloop_cycle_duration_seconds` | histogram | `outcome` | a new run's stream (`/stream`, a chat message): from the request reaching its handler to the stream's end |
//! | `askloop_resume_duration_seconds` | histogram | `outcome` | a resume's stream (`/resume-stream`, approve, decline, `/responses`, a chat answer): same span |
//! | `askloop_http_requests_total` | counter | `method`, `route`, `status` | requests answered, by route template |
//! | `askloop_http_request_duration_seconds` | histogram | `method`, `route` | until the response head (for SSE: the stream's start, not its end) |
//! | `askloop_http_connections` | gauge | | connections open now ([`crate::Server::serve`]'s; at most [`crate::Limits::max_connections`]) |
//!
//! `outcome` is `suspended` (the stream ended on a suspended call or an approval request),
//! `finished` (a `finish` chunk), `failed` (an `error` chunk) or `interrupted` (it ended
//! otherwise: a cancel, a lost lease). Every label comes from a closed set, never from request
//! text, so that no client can grow the registry: `method` is one of the standard methods
//! (`GET`, `HEAD`, `POST`, `PUT`, `DELETE`, `CONNECT`, `OPTIONS`, `TRACE`, `PATCH`) or
//! `other`; `route` is axum's matched route template (`/api/runs/{run_id}`), never the raw
//! path, or `unmatched`; `status` is the status the server answered.

use std::sync::Arc;
use std::time::Instant;

use askloop_core::store::{ListedRun, RunFilter};
use askloop_core::{RunStatus, RunStore, StoreError};
use axum::extract::{MatchedPath, Request};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

/// The most suspended runs whose pending calls one scrape counts (pages of the store's
/// listing); beyond them `askloop_pending_questions` is a lower bound.
pub(crate) const PENDING_SCAN_RUNS: usize = 10_000;
/// Page size of that listing.
const PENDING_PAGE: usize = 500;

/// How a run's stream ended, as the `outcome` label says.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub(crate) enum Outcome {
    /// It ended on a suspended call or an approval request.
    suspended,
    /// A `finish` chunk: the run completed.
    finished,
    /// An `error` chunk: the run failed (or its stream did).
    failed,
    /// It ended without either (a cancel, a lost lease).
    interrupted,
}

/// Which stream a run task drives, for the duration histograms.
#[derive(Clone, Copy, Debug)]
pub(crate) enum StreamKind {
    /// A new run (`/stream`, a chat message), its request reached at this instant.
    Cycle(Instant),
    /// A resume (answers, approvals, declines), its request reached at this instant.
    Resume(Instant),
    /// Neither (a continue, the sweep's recovery): not measured.
    Other,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: Outcome,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabels {
    status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    method: &'static str,
    route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    method: &'static str,
    route: String,
    status: u16,
}

/// The `method` label: a standard method's name, else `other` (methods are any token a client
/// writes; a label must come from a closed set).
fn method_label(method: &Method) -> &'static str {
    const STANDARD: [&str; 9] = [
        "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH",
    ];
    STANDARD
        .into_iter()
        .find(|standard| *standard == method.as_str())
        .unwrap_or("other")
}

fn duration_histogram() -> Histogram {
    // 1 ms to ~65 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

/// The metrics of one server.
pub(crate) struct Metrics {
    registry: Registry,
    runs: Family<StatusLabels, Gauge>,
    pending_questions: Gauge,
    cycle: Family<OutcomeLabels, Histogram, fn() -> Histogram>,
    resume: Family<OutcomeLabels, Histogram, fn() -> Histogram>,
    http_requests: Family<RequestLabels, Counter>,
    http_duration: Family<RouteLabels, Histogram, fn() -> Histogram>,
    http_connections: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("askloop");
        let runs = Family::<StatusLabels, Gauge>::default();
        registry.register(
            "runs",
            "Runs of the store in each status, at scrape time",
            runs.clone(),
        );
        let pending_questions = Gauge::default();
        registry.register(
            "pending_questions",
            "Pending tool calls of the store's suspended runs, at scrape time",
            pending_questions.clone(),
        );
        let cycle = Family::new_with_constructor(duration_histogram as fn() -> Histogram);
        registry.register_with_unit(
            "cycle_duration",
            "A new run's stream, from its request to the stream's end (suspension or finish)",
            Unit::Seconds,
            cycle.clone(),
        );
        let resume = Family::new_with_constructor(duration_histogram as fn() -> Histogram);
        registry.register_with_unit(
            "resume_duration",
            "A resume's stream, from its request to the stream's end (suspended again or finished)",
            Unit::Seconds,
            resume.clone(),
        );
        let http_requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "http_requests",
            "HTTP requests answered, by route template",
            http_requests.clone(),
        );
        let http_duration = Family::new_with_constructor(duration_histogram as fn() -> Histogram);
        registry.register_with_unit(
            "http_request_duration",
            "HTTP requests until the response head, by route template",
            Unit::Seconds,
            http_duration.clone(),
        );
        let http_connections = Gauge::default();
        registry.register(
            "http_connections",
            "HTTP connections open now",
            http_connections.clone(),
        );
        for status in RunStatus::ALL {
            drop(runs.get_or_create(&StatusLabels {
                status: status.as_str(),
            }));
        }
        Self {
            registry,
            runs,
            pending_questions,
            cycle,
            resume,
            http_requests,
            http_duration,
            http_connections,
        }
    }
}

impl Metrics {
    /// The gauge of open connections, which the accept loop keeps.
    pub(crate) fn connections(&self) -> Gauge {
        self.http_connections.clone()
    }

    /// Records the end of a run task's stream.
    pub(crate) fn stream_ended(&self, kind: StreamKind, outcome: Outcome) {
        let (family, started) = match kind {
            StreamKind::Cycle(started) => (&self.cycle, started),
            StreamKind::Resume(started) => (&self.resume, started),
            StreamKind::Other => return,
        };
        family
            .get_or_create(&OutcomeLabels { outcome })
            .observe(started.elapsed().as_secs_f64());
    }

    /// The text of a scrape: the store's counts read now, then every metric.
    pub(crate) async fn scrape(&self, store: &dyn RunStore) -> Result<String, StoreError> {
        let counts = store.run_counts().await?;
        for (status, count) in counts.iter() {
            self.runs
                .get_or_create(&StatusLabels {
                    status: status.as_str(),
                })
                .set(i64::try_from(count).unwrap_or(i64::MAX));
        }
        let pending = if counts.get(RunStatus::Suspended) == 0 {
            0
        } else {
            count_pending(store).await?
        };
        self.pending_questions
            .set(i64::try_from(pending).unwrap_or(i64::MAX));
        let mut text = String::new();
        if let Err(error) = encode(&mut text, &self.registry) {
            tracing::warn!(%error, "cannot encode the metrics");
        }
        Ok(text)
    }
}

/// The pending calls of the store's suspended runs, over at most [`PENDING_SCAN_RUNS`] runs.
async fn count_pending(store: &dyn RunStore) -> Result<u64, StoreError> {
    let mut filter = RunFilter::new()
        .status(RunStatus::Suspended)
        .limit(PENDING_PAGE);
    let (mut pending, mut scanned) = (0u64, 0usize);
    loop {
        let page = store.list_runs(&filter).await?;
        scanned += page.runs.len();
        pending += page
            .runs
            .iter()
            .filter_map(ListedRun::summary)
            .map(|summary| summary.pending.len() as u64)
            .sum::<u64>();
        match page.next_cursor {
            Some(cursor) if scanned < PENDING_SCAN_RUNS => filter.cursor = Some(cursor),
            _ => return Ok(pending),
        }
    }
}

/// Counts and times every request by its route template.
pub(crate) async fn track_http(metrics: Arc<Metrics>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = method_label(request.method());
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |path| path.as_str().to_owned());
    let response = next.run(request).await;
    let status = response.status();
    metrics
        .http_duration
        .get_or_create(&RouteLabels {
            method,
            route: route.clone(),
        })
        .observe(started.elapsed().as_secs_f64());
    metrics
        .http_requests
        .get_or_create(&RequestLabels {
            method,
            route,
            status: status.as_u16(),
        })
        .inc();
    response
}
