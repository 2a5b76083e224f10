//! [`Deliverer`]: one round of delivery — fan the new events out to the endpoints that want
//! them (to nobody when none does), claim the due deliveries, send each (signed), record each
//! attempt and what follows, prune the old finished events — and the server's worker that runs
//! rounds until shutdown.
//!
//! Several deliverers (servers, `askloop runs sweep`) may share one store: fan-out creates each
//! delivery once, and a claim gives each due delivery to one deliverer until its claim expires
//! (a deliverer that died mid-send leaves it to be claimed again: at least once).

use std::sync::Arc;
use std::time::{Duration, Instant};

use askloop_core::event::RunEventKind;
use askloop_core::store::{
    Delivery, DeliveryAttempt, DeliveryClaim, DeliveryNext, FanOut, Outbox, outbox_of,
};
use askloop_core::time::lease_now_ms;
use askloop_core::{Actor, LeaseHolder, RunKey, RunStore, StoreError, error_chain_text};
use tokio::sync::watch;

use crate::links::{LinkError, LinkRequest, LinkSettings, LinkToken, issue_link};
use crate::webhooks::body::body;
use crate::webhooks::retry::{Answer, jitter, millis, next_step};
use crate::webhooks::{RetryPolicy, Webhook, WebhookError};

/// What a claim lasts beyond twice the attempt timeout (the recording of the attempt).
const CLAIM_MARGIN: Duration = Duration::from_secs(5);
/// Events fanned out per round, at most.
const FAN_OUT_BATCH: usize = 500;
/// Deliveries claimed (and sent concurrently) per round, at most.
const CLAIM_BATCH: usize = 32;
/// The longest error text recorded with an attempt, in characters.
const MAX_ERROR_CHARS: usize = 500;
/// Events pruned per round, at most.
const PRUNE_BATCH: usize = 1000;
/// The id of the party that issues webhook deliveries' answer links: an answer through one
/// acts as `webhooks` (no resource, no role) under the approver policy.
pub(crate) const WEBHOOK_LINK_ISSUER: &str = "webhooks";
/// The error recorded for a claimed delivery whose endpoint this deliverer does not know.
pub(crate) const UNKNOWN_ENDPOINT: &str = "endpoint no longer configured";

/// What one round did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Round {
    /// Events fanned out.
    pub fanned_out: usize,
    /// Attempts made.
    pub attempts: usize,
    /// Deliveries delivered.
    pub delivered: usize,
    /// Deliveries failed for good.
    pub failed: usize,
    /// Old finished events deleted (with their deliveries).
    pub pruned: u64,
    /// Deliveries claimed (each attempted once).
    pub claimed: usize,
}

impl Round {
    /// Whether the round did as much as one round may (a full batch fanned out or claimed):
    /// more may be waiting, so the worker goes on at once instead of waiting for its tick.
    pub fn was_full(&self) -> bool {
        self.fanned_out >= FAN_OUT_BATCH || self.claimed >= CLAIM_BATCH
    }
}

/// Delivers a store's events to webhook endpoints: the server's background worker
/// ([`crate::ServerBuilder::webhooks`]) and `askloop runs sweep` run its rounds.
#[derive(Clone)]
pub struct Deliverer {
    store: Arc<dyn RunStore>,
    hooks: Arc<[Webhook]>,
    policy: RetryPolicy,
    client: reqwest::Client,
    holder: LeaseHolder,
    /// How answer links are made for `answerUrl` (none without a public URL).
    links: LinkSettings,
}

impl std::fmt::Debug for Deliverer {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Deliverer")
            .field("hooks", &self.hooks)
            .field("policy", &self.policy)
            .field("holder", &self.holder)
            .field("links", &self.links)
            .finish_non_exhaustive()
    }
}

impl Deliverer {
    /// A deliverer of `store`'s events to `hooks`, timed by `policy`, claiming as a fresh holder.
    ///
    /// # Errors
    /// [`WebhookError::Client`] when the HTTP client cannot be built.
    pub fn new(
        store: Arc<dyn RunStore>,
        hooks: Vec<Webhook>,
        policy: RetryPolicy,
    ) -> Result<Self, WebhookError> {
        let client = reqwest::Client::builder()
            .timeout(policy.timeout)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("askloop-webhooks/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(WebhookError::Client)?;
        Ok(Self {
            store,
            hooks: hooks.into(),
            policy,
            client,
            holder: LeaseHolder::generate(),
            links: LinkSettings::default(),
        })
    }

    /// Fills `answerUrl` (and the Slack button) of `question.raised` and `approval.requested`
    /// bodies with answer links made as `settings` say; without a public URL (the default)
    /// they carry none. Each delivery gets one link, the same at every attempt: its token is
    /// derived from the endpoint's secret and the delivery (endpoint and event), and stored
    /// (hashed) at the first attempt while the call waits.
    #[must_use]
    pub fn answer_links(mut self, settings: LinkSettings) -> Self {
        self.links = settings;
        self
    }

    /// The endpoints.
    pub fn hooks(&self) -> &[Webhook] {
        &self.hooks
    }

    /// One round: fans out the events not fanned out yet (with no endpoint configured, or none
    /// that wants an event, to nobody: the event counts as fanned out), claims the due
    /// deliveries and sends them, concurrently, recording each attempt (a delivery to an
    /// endpoint no longer configured fails, with that reason), then prunes up to 1000
    /// events fanned out longer than [`RetryPolicy::retention`] ago whose deliveries are all
    /// finished. With no endpoint configured and a store without an outbox it does nothing.
    ///
    /// # Errors
    /// The store's, from fan-out, claiming or pruning (an attempt whose recording fails is
    /// logged: its claim expires and it is sent again).
    pub async fn deliver_due(&self) -> Result<Round, StoreError> {
        let outbox = match outbox_of(&*self.store) {
            Err(StoreError::Unsupported { .. }) if self.hooks.is_empty() => {
                return Ok(Round::default());
            }
            outbox => outbox?,
        };
        let mut round = self.fan_out_and_send(outbox).await?;
        let cutoff = lease_now_ms().saturating_sub(millis(self.policy.retention));
        round.pruned = outbox.prune_outbox(cutoff, PRUNE_BATCH).await?;
        if round.pruned > 0 {
            tracing::debug!(pruned = round.pruned, "webhooks: old events pruned");
        }
        Ok(round)
    }

    /// Fans out what is new, then claims and sends what is due.
    async fn fan_out_and_send(&self, outbox: &dyn Outbox) -> Result<Round, StoreError> {
        let mut round = Round::default();
        loop {
            let events = outbox.unfanned_events(FAN_OUT_BATCH).await?;
            if events.is_empty() {
                break;
            }
            let routes: Vec<FanOut> = events
                .iter()
                .map(|stored| {
                    let endpoints = self
                        .hooks
                        .iter()
                        .filter(|hook| hook.wants(&stored.event))
                        .map(|hook| hook.name().to_owned())
                        .collect();
                    FanOut::new(stored.seq, endpoints)
                })
                .collect();
            let now = lease_now_ms();
            outbox.fan_out(&routes, now).await?;
            round.fanned_out += events.len();
            if events.len() < FAN_OUT_BATCH {
                break;
            }
        }
        let now = lease_now_ms();
        // Long enough for the attempt (at most the timeout) and its recording; a deliverer
        // killed mid-attempt leaves its claim to expire this soon, then another sends again.
        let claim_for = self.policy.timeout.saturating_mul(2) + CLAIM_MARGIN;
        let until = now.saturating_add(millis(claim_for));
        let claim = DeliveryClaim::new(self.holder.clone(), now, until, CLAIM_BATCH);
        let claimed = outbox.claim_deliveries(&claim).await?;
        round.claimed = claimed.len();
        let outcomes = futures::future::join_all(
            claimed
                .iter()
                .map(|delivery| self.attempt(outbox, delivery)),
        )
        .await;
        for next in outcomes.into_iter().flatten() {
            round.attempts += 1;
            match next {
                DeliveryNext::Delivered => round.delivered += 1,
                DeliveryNext::Failed => round.failed += 1,
                _ => {}
            }
        }
        Ok(round)
    }

    /// Sends `delivery` once and records the attempt; what follows, or `None` when it could
    /// not be recorded. A delivery to an endpoint no longer configured is not sent: it fails,
    /// with an attempt saying so ([`UNKNOWN_ENDPOINT`]).
    async fn attempt(&self, outbox: &dyn Outbox, delivery: &Delivery) -> Option<DeliveryNext> {
        let Some(hook) = self
            .hooks
            .iter()
            .find(|hook| hook.name() == delivery.endpoint)
        else {
            let attempt =
                DeliveryAttempt::new(lease_now_ms(), None, 0, Some(UNKNOWN_ENDPOINT.to_owned()));
            return self
                .record(outbox, delivery, &attempt, DeliveryNext::Failed)
                .await;
        };
        let started = lease_now_ms();
        let clock = Instant::now();
        let answer = self.send(hook, delivery).await;
        let latency_ms = u64::try_from(clock.elapsed().as_millis()).unwrap_or(u64::MAX);
        let (answer, attempt) = match answer {
            Ok(answer) => {
                let Answer::Status { code, .. } = &answer else {
                    return None;
                };
                let error = (!(200..300).contains(code)).then(|| format!("HTTP {code}"));
                let attempt = DeliveryAttempt::new(started, Some(*code), latency_ms, error);
                (answer, attempt)
            }
            Err(error) => {
                let text: String = error.chars().take(MAX_ERROR_CHARS).collect();
                let attempt = DeliveryAttempt::new(started, None, latency_ms, Some(text));
                (Answer::NoAnswer, attempt)
            }
        };
        let number = u32::try_from(delivery.attempts.len() + 1).unwrap_or(u32::MAX);
        let next = next_step(
            &self.policy,
            &answer,
            number,
            delivery.created_at_ms,
            lease_now_ms(),
            jitter(),
        );
        self.record(outbox, delivery, &attempt, next).await
    }

    /// Records `attempt` of `delivery` and what follows (`next`, or `None` when recording
    /// failed: logged, the claim expires and the delivery is claimed again).
    async fn record(
        &self,
        outbox: &dyn Outbox,
        delivery: &Delivery,
        attempt: &DeliveryAttempt,
        next: DeliveryNext,
    ) -> Option<DeliveryNext> {
        match outbox
            .record_attempt(delivery.id, &self.holder, attempt, next)
            .await
        {
            Ok(()) => {
                tracing::debug!(delivery = %delivery.id, endpoint = %delivery.endpoint, status = ?attempt.status, error = ?attempt.error, ?next, "webhook attempt");
                Some(next)
            }
            Err(error) => {
                tracing::warn!(delivery = %delivery.id, error = %error_chain_text(&error), "webhook: recording an attempt failed");
                None
            }
        }
    }

    /// Sends the delivery's event to `hook`, signed; the answer's status, or the transport
    /// error as text.
    async fn send(&self, hook: &Webhook, delivery: &Delivery) -> Result<Answer, String> {
        let answer_url = self.answer_url(hook, delivery).await;
        let payload =
            body(&delivery.event, hook.format, answer_url).map_err(|error| error.to_string())?;
        let timestamp = i64::try_from(lease_now_ms() / 1000).unwrap_or(i64::MAX);
        let signer =
            standardwebhooks::Webhook::new(&hook.secret).map_err(|error| error.to_string())?;
        let signature = signer
            .sign(&delivery.event.id, timestamp, &payload)
            .map_err(|error| error.to_string())?;
        let response = self
            .client
            .post(hook.url.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(
                standardwebhooks::HEADER_WEBHOOK_ID,
                delivery.event.id.as_str(),
            )
            .header(
                standardwebhooks::HEADER_WEBHOOK_TIMESTAMP,
                timestamp.to_string(),
            )
            .header(standardwebhooks::HEADER_WEBHOOK_SIGNATURE, signature)
            .body(payload)
            .send()
            .await
            .map_err(|error| error_chain_text(&error))?;
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.trim().parse::<u64>().ok());
        Ok(Answer::Status {
            code: response.status().as_u16(),
            retry_after,
        })
    }

    /// The answer link of `delivery` to `hook`, for a raised question or a requested approval
    /// when a public URL is configured: its token derived from the hook's secret and the
    /// delivery, so every attempt sends the same link; stored (once, hashed) while the call
    /// waits. A call that no longer waits gets the URL all the same (it then answers "this
    /// link no longer works").
    async fn answer_url(&self, hook: &Webhook, delivery: &Delivery) -> Option<String> {
        let public = self.links.public_url.as_ref()?;
        let event = &delivery.event;
        if !matches!(
            event.kind,
            RunEventKind::QuestionRaised | RunEventKind::ApprovalRequested
        ) {
            return None;
        }
        let call = event.data.call.as_ref()?;
        let token = LinkToken::derive(
            hook.secret.as_bytes(),
            &format!("askloop answer link\n{}\n{}", hook.name(), event.id),
        );
        let key = RunKey::new(event.data.resource_id.clone(), event.data.run_id.clone());
        // Every endpoint's link is issued by one party, `webhooks` (no role): two webhook
        // links are one approver, never a quorum.
        let request = LinkRequest::new().issuer(Actor::new(WEBHOOK_LINK_ISSUER));
        let issued = match self.store.load_run(&key).await {
            Ok(stored) => issue_link(
                self.store.as_ref(),
                &stored,
                &call.tool_call_id,
                &request,
                self.links.max_age,
                token.clone(),
            )
            .await
            .map(|_| ()),
            Err(error) => Err(LinkError::Store(error)),
        };
        match issued {
            Ok(()) | Err(LinkError::Refused(_)) => {}
            Err(error) => {
                tracing::warn!(delivery = %delivery.id, error = %error_chain_text(&error), "webhook: the answer link could not be stored");
            }
        }
        Some(public.link(&token))
    }

    /// Runs rounds every `poll_interval` until `stop` turns true (the server's worker).
    pub(crate) async fn run(self, mut stop: watch::Receiver<bool>) {
        let mut ticker = tokio::time::interval(self.policy.poll_interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let stopped = tokio::select! {
                _ = ticker.tick() => false,
                _ = stop.wait_for(|stopped| *stopped) => true,
            };
            if stopped {
                break;
            }
            // Rounds back to back while each finds a full batch (a backlog under load), then
            // the next tick.
            loop {
                match self.deliver_due().await {
                    Ok(round) if round.was_full() && !*stop.borrow() => {}
                    Ok(_) => break,
                    Err(error) => {
                        tracing::warn!(error = %error_chain_text(&error), "webhooks: a delivery round failed");
                        break;
                    }
                }
            }
        }
    }
}
