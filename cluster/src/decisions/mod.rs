//! The decision bus: approvals published straight onto NATS resume waiting runs.
//!
//! Anyone with a NATS client publishes a decision to `awaken.decisions.<thread_id>`
//! with JetStream (the stream `AWAKEN_DECISIONS` acknowledges it, so an accepted
//! decision is never lost). The nodes share one durable work-queue consumer: a
//! decision is taken by one node, forwarded to the node that owns the thread
//! ([`RoutedDecisions`], a thread call) and removed from the stream only once applied
//! (or refused). When it cannot be applied now (no owner mid-failover, owner moving
//! or gone silent) the node gives it back for redelivery, so it is applied after a
//! failover too. Decision ids make it idempotent: a redelivered or republished
//! decision is acknowledged, not applied twice.
//!
//! A malformed decision, or one the thread refuses (unknown call, call already
//! decided or finished, wrong run), is removed and reported on
//! `awaken.advisories.decisions.rejected` (JSON [`Rejection`]); it changes nothing.

mod routed;
mod runtime;
mod wire;

use std::sync::Arc;
use std::time::Duration;

use awaken_actors::backoff::Backoff;
use awaken_actors::clock::now_ms;

use async_nats::HeaderMap;
use async_nats::jetstream::{self, AckKind, consumer, stream};
use async_trait::async_trait;
use awaken_actors::telemetry::{self, DecisionOutcome, DecisionSource, RunMetrics};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;
use tokio_util::task::AbortOnDropHandle;

pub use routed::RoutedDecisions;
pub use runtime::RuntimeDecisions;
pub use wire::{
    DECISION_SUBJECT_PREFIX, Decision, DecisionPayload, Encoding, MAX_DECISION_BYTES,
    parse_decision,
};

use crate::error::ClusterError;
use crate::reconnects::Reconnects;
use crate::streams::ensure_stream;
use crate::trace_headers::{self, traceparent};

/// The stream that keeps published decisions until they are applied.
pub const DECISIONS_STREAM: &str = "AWAKEN_DECISIONS";
/// The durable consumer every node pulls decisions from.
pub const DECISIONS_CONSUMER: &str = "awaken-decisions";
/// Where rejected decisions are reported.
pub const REJECTED_SUBJECT: &str = "awaken.advisories.decisions.rejected";

/// Tunables of the decision bus.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecisionBusConfig {
    /// Copies of the stream on a clustered server.
    pub replicas: usize,
    /// A decision taken by a node that neither applies nor returns it (the node
    /// died) is redelivered after this long.
    pub ack_wait: Duration,
    /// How long a decision that could not be applied yet waits before redelivery.
    /// Mid-failover every attempt is one request nobody answers, and the pause is
    /// added to the failover, so it is short.
    pub retry_delay: Duration,
    /// Decisions nobody could apply for this long are dropped by the stream.
    pub max_age: Duration,
    /// Decisions one node applies at once (each is held until the run it resumed
    /// finishes or waits again).
    pub max_in_flight: usize,
}

impl Default for DecisionBusConfig {
    fn default() -> Self {
        Self {
            replicas: 1,
            ack_wait: Duration::from_secs(30),
            retry_delay: Duration::from_millis(100),
            max_age: Duration::from_secs(7 * 24 * 3600),
            max_in_flight: 1024,
        }
    }
}

/// What became of a decision handed to a [`DecisionTarget`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Delivery {
    /// Applied; `duplicate` when its decision id had been applied before.
    Applied {
        /// The decision id had been applied already; nothing was done again.
        duplicate: bool,
    },
    /// The thread refused it for good (unknown call, already decided, ...).
    Refused(String),
    /// It cannot be applied here now; try again later (possibly elsewhere).
    Retry(String),
}

/// Where decisions taken from the bus are applied.
#[async_trait]
pub trait DecisionTarget: Send + Sync + 'static {
    /// Applies `decision` to its thread.
    async fn deliver(&self, decision: Decision) -> Delivery;
}

/// The advisory published for a rejected decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rejection {
    /// The subject the decision was published on.
    pub subject: String,
    /// Its decision id, when it could be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision_id: Option<String>,
    /// Why it was rejected.
    pub error: String,
}

/// The decision bus of one node.
#[derive(Debug, Clone)]
pub struct DecisionBus {
    js: jetstream::Context,
    config: DecisionBusConfig,
}

/// The consumer span of one decision taken off the bus (messaging conventions),
/// a child of its publisher's `traceparent`; disabled when spans are not
/// exported.
fn process_span(subject: &str, headers: Option<&HeaderMap>) -> telemetry::Span {
    telemetry::Span::start(
        &["process awaken.decisions"],
        telemetry::SpanKind::Consumer,
        traceparent(headers).as_ref().into(),
        |attributes| {
            attributes
                .set("messaging.system", "nats")
                .set("messaging.operation.type", "process")
                .set("messaging.operation.name", "process")
                .set("messaging.destination.name", subject)
                .set(
                    "messaging.destination.template",
                    "awaken.decisions.{thread_id}",
                )
                .set("messaging.consumer.group.name", DECISIONS_CONSUMER);
        },
    )
}

fn content_type(headers: Option<&HeaderMap>) -> Option<&str> {
    let headers = headers?;
    headers
        .get("Content-Type")
        .or_else(|| headers.get("content-type"))
        .map(|value| value.as_str())
}

impl DecisionBus {
    /// Opens the bus, creating its stream and consumer when missing.
    pub async fn open(
        js: jetstream::Context,
        config: DecisionBusConfig,
    ) -> Result<Self, ClusterError> {
        let bus = Self { js, config };
        bus.stream().await?;
        Ok(bus)
    }

    async fn stream(&self) -> Result<stream::Stream, ClusterError> {
        ensure_stream(
            &self.js,
            stream::Config {
                name: DECISIONS_STREAM.to_owned(),
                subjects: vec![format!("{DECISION_SUBJECT_PREFIX}>")],
                retention: stream::RetentionPolicy::WorkQueue,
                max_age: self.config.max_age,
                max_message_size: i32::try_from(MAX_DECISION_BYTES * 2).unwrap_or(i32::MAX),
                duplicate_window: Duration::from_secs(120),
                num_replicas: self.config.replicas,
                ..Default::default()
            },
        )
        .await
    }

    /// Publishes a decision as JSON and waits for the stream to accept it. The
    /// decision id is the message id, so a republish within two minutes is
    /// dropped by the stream (and any later one by the thread).
    pub async fn publish(
        &self,
        thread_id: &str,
        payload: &DecisionPayload,
    ) -> Result<(), ClusterError> {
        let mut headers = HeaderMap::new();
        headers.insert("Content-Type", "application/json");
        headers.insert("Nats-Msg-Id", payload.decision_id.as_str());
        trace_headers::insert_current(&mut headers);
        let body = serde_json::to_vec(payload).map_err(ClusterError::codec)?;
        self.js
            .publish_with_headers(
                format!("{DECISION_SUBJECT_PREFIX}{thread_id}"),
                headers,
                body.into(),
            )
            .await
            .map_err(ClusterError::nats)?
            .await
            .map_err(ClusterError::nats)?;
        Ok(())
    }

    /// Starts taking decisions off the bus and applying them to `target`,
    /// counting their outcomes in `metrics`.
    pub async fn serve(
        &self,
        target: Arc<dyn DecisionTarget>,
        metrics: Arc<RunMetrics>,
    ) -> Result<DecisionWorker, ClusterError> {
        let consumer: consumer::PullConsumer = self
            .stream()
            .await?
            // Create, or update the settings of the consumer the nodes share (2.9
            // updates an existing durable's editable fields such as `ack_wait`).
            .create_consumer(consumer::pull::Config {
                durable_name: Some(DECISIONS_CONSUMER.to_owned()),
                ack_policy: consumer::AckPolicy::Explicit,
                ack_wait: self.config.ack_wait,
                max_ack_pending: i64::try_from(self.config.max_in_flight.saturating_mul(16))
                    .unwrap_or(i64::MAX),
                ..Default::default()
            })
            .await
            .map_err(ClusterError::nats)?;
        let first = consumer.messages().await.map_err(ClusterError::nats)?;
        let client = self.js.client();
        let config = self.config.clone();
        let slots = Arc::new(Semaphore::new(config.max_in_flight.max(1)));
        let task = tokio::spawn(async move {
            let mut messages = first;
            loop {
                let pulled = pull(&client, &mut messages, |message| {
                    let slots = Arc::clone(&slots);
                    let client = client.clone();
                    let target = Arc::clone(&target);
                    let config = config.clone();
                    let metrics = Arc::clone(&metrics);
                    async move {
                        let Ok(slot) = slots.acquire_owned().await else {
                            return false;
                        };
                        tokio::spawn(async move {
                            handle(&client, target.as_ref(), &metrics, message, &config).await;
                            drop(slot);
                        });
                        true
                    }
                })
                .await;
                if !pulled {
                    return;
                }
                messages = pull_again(&consumer).await;
            }
        });
        Ok(DecisionWorker {
            _task: AbortOnDropHandle::new(task),
        })
    }
}

/// How often the worker looks whether its connection was re-established.
const RECONNECT_CHECK: Duration = Duration::from_secs(1);

/// The first pause before the worker asks for its pull stream again.
const REPULL_PAUSE: Duration = Duration::from_millis(100);

/// Hands each pulled decision to `take` until the stream ends or the connection
/// was re-established (`true`: pull again; a pull in flight then may have been
/// lost, and the client would only notice when it expires), or `take` says the
/// worker is closing (`false`).
async fn pull<F, Fut>(
    client: &async_nats::Client,
    messages: &mut consumer::pull::Stream,
    mut take: F,
) -> bool
where
    F: FnMut(jetstream::Message) -> Fut,
    Fut: Future<Output = bool>,
{
    let mut reconnects = Reconnects::of(client);
    let mut check = tokio::time::interval(RECONNECT_CHECK);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let message = tokio::select! {
            message = messages.next() => message,
            _ = check.tick() => {
                if reconnects.happened() {
                    tracing::info!("decision bus: connection re-established; pulling again");
                    return true;
                }
                continue;
            }
        };
        match message {
            Some(Ok(message)) => {
                if !take(message).await {
                    return false;
                }
            }
            Some(Err(error)) => tracing::warn!(%error, "decision bus: pull failed"),
            None => {
                tracing::warn!("decision bus: pull stream ended; pulling again");
                return true;
            }
        }
    }
}

/// A new pull stream on `consumer`, asked for until it is given.
async fn pull_again(consumer: &consumer::PullConsumer) -> consumer::pull::Stream {
    let mut backoff = Backoff::new(REPULL_PAUSE, RECONNECT_CHECK * 5);
    loop {
        match consumer.messages().await {
            Ok(messages) => return messages,
            Err(error) => {
                tracing::warn!(%error, "decision bus: pull stream not opened yet");
                backoff.wait().await;
            }
        }
    }
}

async fn handle(
    client: &async_nats::Client,
    target: &dyn DecisionTarget,
    metrics: &RunMetrics,
    message: jetstream::Message,
    config: &DecisionBusConfig,
) {
    let retry_delay = config.retry_delay;
    let subject = message.subject.to_string();
    let span = process_span(&subject, message.headers.as_ref());
    let parsed = Encoding::from_content_type(content_type(message.headers.as_ref()))
        .and_then(|encoding| parse_decision(&subject, encoding, &message.payload, now_ms()));
    let outcome = match parsed {
        Err(error) => Err((None, error)),
        Ok(mut decision) => {
            let decision_id = decision.resume.decision_id.to_string();
            span.set("messaging.message.id", &decision_id);
            decision.resume.trace = span
                .context()
                .or_else(|| traceparent(message.headers.as_ref()));
            let delivery = span.traced(target.deliver(decision));
            match with_progress(&message, config.ack_wait, delivery).await {
                Delivery::Applied { duplicate } => {
                    let outcome = if duplicate {
                        DecisionOutcome::Duplicate
                    } else {
                        DecisionOutcome::Applied
                    };
                    metrics.decision(DecisionSource::Nats, outcome);
                    span.set(
                        "awaken.decision.outcome",
                        if duplicate { "duplicate" } else { "applied" },
                    );
                    Ok(AckKind::Ack)
                }
                Delivery::Retry(reason) => {
                    span.set("awaken.decision.outcome", "retry");
                    tracing::debug!(%subject, %reason, "decision bus: retrying later");
                    Ok(AckKind::Nak(Some(retry_delay)))
                }
                Delivery::Refused(error) => Err((Some(decision_id), error)),
            }
        }
    };
    let ack = match outcome {
        Ok(ack) => ack,
        Err((decision_id, error)) => {
            let rejection = Rejection {
                subject,
                decision_id,
                error,
            };
            metrics.decision(DecisionSource::Nats, DecisionOutcome::Rejected);
            span.set("awaken.decision.outcome", "rejected");
            span.failed("rejected");
            tracing::info!(?rejection, "decision rejected");
            if let Ok(body) = serde_json::to_vec(&rejection) {
                let _ = client.publish(REJECTED_SUBJECT, body.into()).await;
            }
            AckKind::Term
        }
    };
    // Confirmed acks: once applied, a decision must not come back after a crash.
    if let Err(error) = message.double_ack_with(ack).await {
        tracing::warn!(%error, "decision bus: ack failed; the decision may be redelivered");
    }
}

/// Runs `delivery`, telling the server every third of `ack_wait` that the decision
/// is still being worked on, so a long resumed run does not get it redelivered.
async fn with_progress(
    message: &jetstream::Message,
    ack_wait: Duration,
    delivery: impl Future<Output = Delivery>,
) -> Delivery {
    let mut delivery = std::pin::pin!(delivery);
    let period = (ack_wait / 3).max(Duration::from_millis(10));
    // The first tick a period from now, not an immediate one to await: an elapsed
    // timer still waits for the timer wheel's next millisecond, which held every
    // decision back by about a millisecond (decision 0053; `bench cluster --scenario
    // hitl-remote`).
    let mut progress = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    loop {
        tokio::select! {
            outcome = &mut delivery => return outcome,
            _ = progress.tick() => {
                if let Err(error) = message.ack_with(AckKind::Progress).await {
                    tracing::warn!(%error, "decision bus: progress ack failed");
                }
            }
        }
    }
}

/// A running decision consumer; stops when dropped.
#[derive(Debug)]
pub struct DecisionWorker {
    _task: AbortOnDropHandle<()>,
}
