//! Prometheus metrics of one server: its HTTP traffic, recorded by a middleware,
//! and its node's threads, read when scraped (`GET /metrics`) or pushed over
//! OTLP.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use awaken_actors::clock::now_ms;
use awaken_actors::contract::RunDispatchStatus;
use awaken_actors::mailbox::DispatchQuery;
use awaken_actors::store::{StoreIoCounts, WaitingRuns};
use awaken_cluster::RunControl;
use axum::extract::{MatchedPath, Request};
use axum::response::Response;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::prometheus_protobuf::{self, prometheus_data_model::MetricFamily};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

use super::memory_metrics::MemoryGauges;
use crate::telemetry::MetricSource;

/// The content type of the OpenMetrics text format that Prometheus scrapes.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// How long a scrape waits for the store's count of waiting runs.
const STORE_READ_LIMIT: Duration = Duration::from_secs(2);

/// The route label of requests that matched no route.
const UNMATCHED: &str = "unmatched";

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    method: String,
    route: String,
    status: u16,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    method: String,
    route: String,
}

fn latency_histogram() -> Histogram {
    // 100 µs … ~3.3 s.
    Histogram::new(exponential_buckets(0.0001, 2.0, 16))
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct DispatchLabels {
    status: &'static str,
}

/// The label of the approval feed's counter: what became of a record.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct FeedLabels {
    outcome: &'static str,
}

/// The dispatch statuses the mailbox gauge reports: the live ones and the dead
/// letters (acked, cancelled and superseded ones are history).
const GAUGED_DISPATCHES: [(RunDispatchStatus, &str); 3] = [
    (RunDispatchStatus::Queued, "queued"),
    (RunDispatchStatus::Claimed, "claimed"),
    (RunDispatchStatus::DeadLetter, "dead_letter"),
];

/// The server's metrics registry and the handles that update it.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    latency: Family<RouteLabels, Histogram, fn() -> Histogram>,
    in_flight: Gauge,
    edge: EdgeGauges,
    live_threads: Gauge,
    warm_threads: Gauge,
    failed_starts: Counter,
    store: StoreCounters,
    dispatches: Family<DispatchLabels, Gauge>,
    waiting: WaitingGauges,
    spans_dropped: Counter,
    memory: MemoryGauges,
    approval_feed: Family<FeedLabels, Counter>,
}

/// What the accept loop and the body read count as they go.
#[derive(Debug, Clone, Default)]
pub(crate) struct EdgeGauges {
    /// Connections open (accepted and not refused by a connection limit).
    pub(crate) connections: Gauge,
    /// Requests whose body is being read.
    pub(crate) bodies_arriving: Gauge,
    /// Bytes those bodies hold so far.
    pub(crate) body_bytes_arriving: Gauge,
}

impl EdgeGauges {
    fn register(&self, registry: &mut Registry) {
        registry.register(
            "http_connections_open",
            "HTTP connections open (refused ones are not counted)",
            self.connections.clone(),
        );
        registry.register(
            "http_request_bodies_arriving",
            "HTTP requests whose body is being read (they hold no in-flight place yet)",
            self.bodies_arriving.clone(),
        );
        registry.register_with_unit(
            "http_request_body_arriving",
            "Bytes received of request bodies still arriving (bounded by server.max_arriving_body_bytes)",
            Unit::Bytes,
            self.body_bytes_arriving.clone(),
        );
    }
}

/// The runs waiting for a human: every node reports the same figure.
#[derive(Debug, Default)]
struct WaitingGauges {
    runs: Gauge,
    oldest: Gauge<f64, AtomicU64>,
}

impl WaitingGauges {
    fn register(&self, registry: &mut Registry) {
        registry.register(
            "runs_waiting",
            "Runs waiting for a human decision, in the whole store (every node reports the same figure)",
            self.runs.clone(),
        );
        registry.register_with_unit(
            "runs_waiting_oldest",
            "How long the longest-waiting run has waited since its suspension; 0 when none waits",
            Unit::Seconds,
            self.oldest.clone(),
        );
    }

    fn set(&self, waiting: WaitingRuns, now_secs: u64) {
        self.runs
            .set(i64::try_from(waiting.count).unwrap_or(i64::MAX));
        let waited = waiting.since_secs.map_or(Duration::ZERO, |since| {
            Duration::from_secs(now_secs.saturating_sub(since))
        });
        self.oldest.set(waited.as_secs_f64());
    }
}

/// The thread store's traffic to its database, copied from the store when scraped.
#[derive(Debug, Default)]
struct StoreCounters {
    checkpoints: Counter,
    statements: Counter,
    round_trips: Counter,
}

impl StoreCounters {
    fn register(&self, registry: &mut Registry) {
        registry.register(
            "store_checkpoints",
            "Checkpoints the PostgreSQL store wrote or refused (0 on other stores)",
            self.checkpoints.clone(),
        );
        registry.register(
            "store_statements",
            "SQL statements the PostgreSQL store sent, BEGIN and COMMIT included",
            self.statements.clone(),
        );
        registry.register(
            "store_round_trips",
            "Waits of the PostgreSQL store for its server: statements and pings",
            self.round_trips.clone(),
        );
    }

    fn copy(&self, counts: StoreIoCounts) {
        self.checkpoints
            .inner()
            .store(counts.checkpoints, Ordering::Relaxed);
        self.statements
            .inner()
            .store(counts.statements, Ordering::Relaxed);
        self.round_trips
            .inner()
            .store(counts.round_trips, Ordering::Relaxed);
    }
}

impl Metrics {
    /// A registry with every metric at zero: the engine's, the node's (`control`)
    /// and the server's own.
    pub fn new(control: &dyn RunControl) -> Self {
        let mut root = Registry::default();
        control.runtime().metrics().register(&mut root);
        let registry = root.sub_registry_with_prefix("awaken");
        control.register_metrics(registry);
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "http_requests",
            "HTTP requests answered, by method, route template and status",
            requests.clone(),
        );
        let latency = Family::<RouteLabels, Histogram, fn() -> Histogram>::new_with_constructor(
            latency_histogram,
        );
        registry.register_with_unit(
            "http_request_duration",
            "Time to the response's headers (an SSE stream counts until it starts)",
            Unit::Seconds,
            latency.clone(),
        );
        let in_flight = Gauge::default();
        registry.register(
            "http_requests_in_flight",
            "HTTP requests received and not yet answered",
            in_flight.clone(),
        );
        let edge = EdgeGauges::default();
        edge.register(registry);
        let live_threads = Gauge::default();
        registry.register(
            "threads_live",
            "Thread actors running on this node",
            live_threads.clone(),
        );
        let warm_threads = Gauge::default();
        registry.register(
            "threads_warm",
            "Passivated threads whose state this node still caches",
            warm_threads.clone(),
        );
        let failed_starts = Counter::default();
        registry.register(
            "runs_failed_to_start",
            "Runs this node ended as failed because their dispatch was dead-lettered before they started",
            failed_starts.clone(),
        );
        let approval_feed = Family::<FeedLabels, Counter>::default();
        registry.register(
            "approval_feed_records",
            "Approval feed records by outcome: published; failed (the sink refused or was away: the catch-up publishes them); overflowed (the queue was full: likewise); caught_up (published by the catch-up sweep)",
            approval_feed.clone(),
        );
        let store = StoreCounters::default();
        store.register(registry);
        let spans_dropped = Counter::default();
        registry.register(
            "telemetry_spans_dropped",
            "Spans dropped because the OTLP export queue was full (a slow or absent collector)",
            spans_dropped.clone(),
        );
        let waiting = WaitingGauges::default();
        waiting.register(registry);
        let memory = MemoryGauges::default();
        memory.register(registry);
        let dispatches = Family::<DispatchLabels, Gauge>::default();
        registry.register(
            "mailbox_dispatches",
            "Dispatches in the mailbox by status: queued (depth), claimed (running), dead_letter",
            dispatches.clone(),
        );
        Self {
            registry: root,
            requests,
            latency,
            in_flight,
            edge,
            live_threads,
            warm_threads,
            failed_starts,
            store,
            dispatches,
            waiting,
            spans_dropped,
            memory,
            approval_feed,
        }
    }

    /// The gauges the accept loop and the body read update.
    pub(crate) fn edge(&self) -> &EdgeGauges {
        &self.edge
    }

    /// The metrics in the OpenMetrics text format, refreshed first.
    pub async fn render(&self, control: &dyn RunControl) -> Result<String, std::fmt::Error> {
        self.refresh(control).await;
        let mut text = String::new();
        encode(&mut text, &self.registry)?;
        Ok(text)
    }

    /// The metrics in the Prometheus data model, refreshed first: what an OTLP
    /// push sends.
    pub async fn families(
        &self,
        control: &dyn RunControl,
    ) -> Result<Vec<MetricFamily>, std::fmt::Error> {
        self.refresh(control).await;
        prometheus_protobuf::encode(&self.registry)
    }

    /// Reads the gauges kept elsewhere: node gauges from `control`, the mailbox
    /// gauges from its mailbox (memory on a single node, the ledger's replica in
    /// a cluster) and the waiting runs from the store (one aggregate query on
    /// PostgreSQL, over a connection of its own). A gauge whose source does not
    /// answer keeps its last value, and it is logged.
    async fn refresh(&self, control: &dyn RunControl) {
        let mailbox = control.mailbox();
        for (status, label) in GAUGED_DISPATCHES {
            let query = DispatchQuery {
                statuses: vec![status],
                limit: 1,
                ..DispatchQuery::default()
            };
            match mailbox.list_dispatches(&query).await {
                Ok(page) => {
                    self.dispatches
                        .get_or_create(&DispatchLabels { status: label })
                        .set(i64::try_from(page.total).unwrap_or(i64::MAX));
                }
                Err(error) => tracing::warn!(%error, "metrics: mailbox not counted"),
            }
        }
        let runtime = control.runtime();
        self.live_threads
            .set(i64::try_from(runtime.live_threads()).unwrap_or(i64::MAX));
        self.warm_threads
            .set(i64::try_from(runtime.warm_threads()).unwrap_or(i64::MAX));
        self.failed_starts
            .inner()
            .store(runtime.failed_starts(), Ordering::Relaxed);
        self.memory.refresh(runtime.memory());
        let feed = runtime.approval_feed().counts();
        for (outcome, count) in [
            ("published", feed.published),
            ("failed", feed.failed),
            ("overflowed", feed.overflowed),
            ("caught_up", feed.caught_up),
        ] {
            self.approval_feed
                .get_or_create(&FeedLabels { outcome })
                .inner()
                .store(count, Ordering::Relaxed);
        }
        // Bounded: a database that does not answer must not hold the scrape past
        // Prometheus' own timeout; the gauge keeps its last value meanwhile.
        match tokio::time::timeout(STORE_READ_LIMIT, control.store().waiting_runs()).await {
            Ok(Ok(waiting)) => self.waiting.set(waiting, now_ms() / 1000),
            Ok(Err(error)) => tracing::warn!(%error, "metrics: waiting runs not counted"),
            Err(_) => tracing::warn!("metrics: the store did not count waiting runs in time"),
        }
        self.spans_dropped
            .inner()
            .store(crate::telemetry::spans_dropped(), Ordering::Relaxed);
        if let Some(counts) = control.store().io_counts() {
            self.store.copy(counts);
        }
    }
}

/// A node's metrics as an OTLP push reads them.
pub struct PushedMetrics {
    metrics: Arc<Metrics>,
    control: Arc<dyn RunControl>,
}

impl PushedMetrics {
    /// The `metrics` of the node `control`.
    pub fn new(metrics: Arc<Metrics>, control: Arc<dyn RunControl>) -> Self {
        Self { metrics, control }
    }
}

impl MetricSource for PushedMetrics {
    async fn collect(&self) -> Option<Vec<MetricFamily>> {
        match self.metrics.families(self.control.as_ref()).await {
            Ok(families) => Some(families),
            Err(error) => {
                tracing::warn!(%error, "metrics: not encoded for the push");
                None
            }
        }
    }
}

/// One request being counted by its route template (not its path, so ids do not
/// make new series): in flight from [`Self::start`] to [`Self::finish`].
pub(crate) struct Observation<'a> {
    metrics: &'a Metrics,
    method: String,
    route: String,
    started: Instant,
}

impl<'a> Observation<'a> {
    /// Counts `request` as in flight; called after routing, so the route is known.
    pub(crate) fn start(metrics: &'a Metrics, request: &Request) -> Self {
        let route = request
            .extensions()
            .get::<MatchedPath>()
            .map_or(UNMATCHED, MatchedPath::as_str)
            .to_owned();
        metrics.in_flight.inc();
        Self {
            metrics,
            method: request.method().to_string(),
            route,
            started: Instant::now(),
        }
    }

    /// Records the request's latency and its answer's status.
    pub(crate) fn finish(self, response: &Response) {
        let metrics = self.metrics;
        metrics.in_flight.dec();
        metrics
            .latency
            .get_or_create(&RouteLabels {
                method: self.method.clone(),
                route: self.route.clone(),
            })
            .observe(self.started.elapsed().as_secs_f64());
        metrics
            .requests
            .get_or_create(&RequestLabels {
                method: self.method,
                route: self.route,
                status: response.status().as_u16(),
            })
            .inc();
    }
}
