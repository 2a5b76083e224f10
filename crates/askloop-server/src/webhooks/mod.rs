//! Webhooks: the outbox's events (core's `event`, written by the store with each commit) sent
//! to configured endpoints, signed as the Standard Webhooks specification says
//! (<https://www.standardwebhooks.com>: headers `webhook-id`, `webhook-timestamp`,
//! `webhook-signature: v1,<base64 HMAC-SHA256>`), at least once, retried with exponential
//! backoff and jitter, each attempt recorded in the store.
//!
//! - `mod.rs` — [`Webhook`] (one endpoint: URL, secret, events, tenant, format),
//!   [`WebhookFormat`], [`RetryPolicy`], [`WebhookError`];
//! - `body.rs` — what an endpoint receives: the event JSON, or a Slack incoming-webhook message;
//! - `retry.rs` — what follows an attempt (delivered, retried when, failed);
//! - `deliver.rs` — [`Deliverer`]: fan-out, claims, sending, recording, pruning; the server's
//!   background worker and `askloop runs sweep` both use it.
//!
//! Receivers must dedupe by `webhook-id` (the event's id): an event may arrive more than once
//! (a deliverer that dies after sending and before recording; a replay).

mod body;
mod deliver;
mod retry;

use std::collections::HashSet;
use std::time::Duration;

use askloop_core::ResourceId;
use askloop_core::event::{RunEvent, RunEventKind};
use sha2::{Digest, Sha256};

pub use deliver::{Deliverer, Round};

/// What an endpoint receives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum WebhookFormat {
    /// The event as JSON (`askloop_core::event`), signed: any Standard Webhooks library
    /// verifies it.
    #[default]
    Standard,
    /// A Slack incoming-webhook message (`text` and `blocks`: the question, its options, a
    /// button to the answer link when there is one), signed the same way (Slack ignores the
    /// headers).
    Slack,
}

impl std::str::FromStr for WebhookFormat {
    type Err = WebhookError;

    /// `standard` or `slack`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "standard" => Ok(Self::Standard),
            "slack" => Ok(Self::Slack),
            other => Err(WebhookError::Format {
                given: other.to_owned(),
            }),
        }
    }
}

/// Why a webhook's configuration is refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WebhookError {
    /// The URL is not an absolute `http` or `https` URL.
    #[error("webhook url {url:?} is not an http(s) URL")]
    Url {
        /// The URL given (shown: configuration, not a secret of askloop's making).
        url: String,
    },
    /// The secret is not `whsec_` followed by base64 of at least 24 bytes.
    #[error("webhook secret must be whsec_ followed by base64 of 24 to 64 bytes")]
    Secret,
    /// An event name that is not one of the events.
    #[error("unknown webhook event {given:?} (known: {})", known_events())]
    Event {
        /// The name given.
        given: String,
    },
    /// A format that is neither `standard` nor `slack`.
    #[error("unknown webhook format {given:?} (known: standard, slack)")]
    Format {
        /// The name given.
        given: String,
    },
    /// The HTTP client could not be built (TLS setup).
    #[error("the webhook HTTP client could not be built")]
    Client(#[source] reqwest::Error),
}

fn known_events() -> String {
    RunEventKind::ALL
        .iter()
        .map(|kind| kind.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// One endpoint: where events go, signed with which secret, which events, of which tenant, in
/// which format. Build with [`Webhook::new`] and the setters.
///
/// ```
/// use askloop_server::webhooks::{Webhook, WebhookFormat};
///
/// let hook = Webhook::new("https://hooks.example/askloop", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")?
///     .events(["question.raised", "approval.requested"])?
///     .format(WebhookFormat::Slack);
/// assert_eq!(hook.url(), "https://hooks.example/askloop");
/// # Ok::<(), askloop_server::webhooks::WebhookError>(())
/// ```
#[derive(Clone)]
pub struct Webhook {
    name: String,
    url: reqwest::Url,
    secret: String,
    events: Option<HashSet<RunEventKind>>,
    resource: Option<ResourceId>,
    format: WebhookFormat,
}

impl std::fmt::Debug for Webhook {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Webhook")
            .field("name", &self.name)
            .field("events", &self.events)
            .field("resource", &self.resource)
            .field("format", &self.format)
            .finish_non_exhaustive()
    }
}

impl Webhook {
    /// An endpoint at `url` (absolute `http`/`https`) signing with `secret` (`whsec_` and
    /// base64, as Standard Webhooks libraries make them), for every event of every tenant, in
    /// the standard format. Its name (what deliveries record) is `hook-` and the first 12 hex
    /// digits of the URL's SHA-256: a URL may hold a token (Slack's do), so it is never stored.
    ///
    /// # Errors
    /// [`WebhookError::Url`], [`WebhookError::Secret`].
    pub fn new(url: &str, secret: &str) -> Result<Self, WebhookError> {
        let parsed = reqwest::Url::parse(url).map_err(|_| WebhookError::Url {
            url: url.to_owned(),
        })?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
            return Err(WebhookError::Url {
                url: url.to_owned(),
            });
        }
        check_secret(secret)?;
        let digest = Sha256::digest(url.as_bytes());
        let name = format!(
            "hook-{}",
            digest
                .iter()
                .take(6)
                .map(|byte| format!("{byte:02x}"))
                .collect::<String>()
        );
        Ok(Self {
            name,
            url: parsed,
            secret: secret.to_owned(),
            events: None,
            resource: None,
            format: WebhookFormat::Standard,
        })
    }

    /// Only these events (names as `question.raised`); all when never called.
    ///
    /// # Errors
    /// [`WebhookError::Event`] naming the first unknown name.
    pub fn events<'a>(
        mut self,
        names: impl IntoIterator<Item = &'a str>,
    ) -> Result<Self, WebhookError> {
        let mut kinds = HashSet::new();
        for name in names {
            let kind = RunEventKind::parse(name).ok_or_else(|| WebhookError::Event {
                given: name.to_owned(),
            })?;
            kinds.insert(kind);
        }
        self.events = Some(kinds);
        Ok(self)
    }

    /// Only the runs of this resource (tenant).
    #[must_use]
    pub fn resource(mut self, resource: ResourceId) -> Self {
        self.resource = Some(resource);
        self
    }

    /// The format (default [`WebhookFormat::Standard`]).
    #[must_use]
    pub fn format(mut self, format: WebhookFormat) -> Self {
        self.format = format;
        self
    }

    /// The URL.
    pub fn url(&self) -> &str {
        self.url.as_str()
    }

    /// The name deliveries record (`hook-…`, see [`Webhook::new`]).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether this endpoint wants `event`: one of its events, of its tenant.
    pub fn wants(&self, event: &RunEvent) -> bool {
        self.events
            .as_ref()
            .is_none_or(|kinds| kinds.contains(&event.kind))
            && self
                .resource
                .as_ref()
                .is_none_or(|resource| event.resource_id() == Some(resource))
    }
}

/// `whsec_` and base64 of 24 to 64 bytes (the Standard Webhooks secret form).
fn check_secret(secret: &str) -> Result<(), WebhookError> {
    let Some(encoded) = secret.strip_prefix("whsec_") else {
        return Err(WebhookError::Secret);
    };
    // The signing library decodes it; a secret it cannot decode is refused here, once.
    match standardwebhooks::Webhook::new(secret) {
        Ok(_) if (32..=88).contains(&encoded.len()) => Ok(()),
        _ => Err(WebhookError::Secret),
    }
}

/// How deliveries are timed: the request timeout, the backoff between attempts (doubling from
/// `first_backoff` up to `max_backoff`, each with jitter: a random 50–100 % of it), how long
/// an event is retried before it is failed (`window`, from its fan-out), how often the
/// worker looks for due deliveries, and how long finished events are kept (`retention`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// One request's limit (default 10 s); past it the attempt counts as a timeout.
    pub timeout: Duration,
    /// The wait after the first failed attempt (default 5 s).
    pub first_backoff: Duration,
    /// The longest wait between attempts (default 1 h).
    pub max_backoff: Duration,
    /// How long a delivery is retried, from its creation (default 24 h).
    pub window: Duration,
    /// How often the server's worker delivers what is due (default 1 s).
    pub poll_interval: Duration,
    /// How long an event is kept after its fan-out (default 7 days): then, once none of its
    /// deliveries is pending, each round deletes it and its deliveries (at most 1000 events a
    /// round; `askloop webhooks list` and replays no longer see them).
    pub retention: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(10),
            first_backoff: Duration::from_secs(5),
            max_backoff: Duration::from_secs(3600),
            window: Duration::from_secs(24 * 3600),
            poll_interval: Duration::from_secs(1),
            retention: Duration::from_secs(7 * 24 * 3600),
        }
    }
}

impl RetryPolicy {
    /// The default policy with this first backoff (tests use milliseconds).
    #[must_use]
    pub fn first_backoff(mut self, backoff: Duration) -> Self {
        self.first_backoff = backoff;
        self
    }

    /// With this longest backoff.
    #[must_use]
    pub fn max_backoff(mut self, backoff: Duration) -> Self {
        self.max_backoff = backoff;
        self
    }

    /// With this retry window.
    #[must_use]
    pub fn window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// With this request timeout.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// With this poll interval.
    #[must_use]
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// With this retention of finished events (from their fan-out).
    #[must_use]
    pub fn retention(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }
}
