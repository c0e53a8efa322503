//! The thread store's latency by operation, measured around a database-backed
//! store ([`TimedStore`](crate::store::TimedStore)): what an operator watches
//! when checkpoints slow down.

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

/// Bucket bounds in seconds: 100 µs to 10 s.
const STORE_BUCKETS: [f64; 14] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 2.5, 10.0,
];

/// The store operations measured, by their `operation` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StoreOperation {
    CreateThread,
    LoadThread,
    UpdateThread,
    DeleteThread,
    ListThreads,
    LoadMessages,
    LoadSnapshot,
    CreateRun,
    LoadRun,
    LatestRun,
    ListRuns,
    LoadApproval,
    ListApprovals,
    UnpublishedApprovals,
    ApprovalsPublished,
    Checkpoint,
    Fence,
    FenceAndLoad,
}

impl StoreOperation {
    const ALL: [Self; 18] = [
        Self::CreateThread,
        Self::LoadThread,
        Self::UpdateThread,
        Self::DeleteThread,
        Self::ListThreads,
        Self::LoadMessages,
        Self::LoadSnapshot,
        Self::CreateRun,
        Self::LoadRun,
        Self::LatestRun,
        Self::ListRuns,
        Self::LoadApproval,
        Self::ListApprovals,
        Self::UnpublishedApprovals,
        Self::ApprovalsPublished,
        Self::Checkpoint,
        Self::Fence,
        Self::FenceAndLoad,
    ];

    fn label(self) -> &'static str {
        match self {
            Self::CreateThread => "create_thread",
            Self::LoadThread => "load_thread",
            Self::UpdateThread => "update_thread",
            Self::DeleteThread => "delete_thread",
            Self::ListThreads => "list_threads",
            Self::LoadMessages => "load_messages",
            Self::LoadSnapshot => "load_snapshot",
            Self::CreateRun => "create_run",
            Self::LoadRun => "load_run",
            Self::LatestRun => "latest_run",
            Self::ListRuns => "list_runs",
            Self::LoadApproval => "load_approval",
            Self::ListApprovals => "list_approvals",
            Self::UnpublishedApprovals => "unpublished_approvals",
            Self::ApprovalsPublished => "approvals_published",
            Self::Checkpoint => "checkpoint",
            Self::Fence => "fence",
            Self::FenceAndLoad => "fence_and_load",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct OperationLabel {
    operation: &'static str,
}

/// One histogram per operation, created up front: recording is an index.
#[derive(Debug)]
pub(crate) struct StoreMetrics {
    family: Family<OperationLabel, Histogram, fn() -> Histogram>,
    by_operation: [Histogram; StoreOperation::ALL.len()],
    /// Checkpoints that waited for the store to come back.
    outage_waits: Counter,
    /// Seconds runs spent waiting for the store, summed.
    outage_wait_seconds: Counter<f64, AtomicU64>,
    /// Checkpoints given up when the store stayed away past the outage timeout.
    outage_failures: Counter,
    /// Runs waiting for the store now.
    outage_waiting: Gauge,
    /// Reads and nothing-written writes that waited for the store.
    request_waits: Counter,
    /// Seconds they spent waiting, summed.
    request_wait_seconds: Counter<f64, AtomicU64>,
    /// Those that gave up past the backend wait.
    request_failures: Counter,
}

fn store_histogram() -> Histogram {
    Histogram::new(STORE_BUCKETS)
}

impl Default for StoreMetrics {
    fn default() -> Self {
        let family: Family<OperationLabel, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(store_histogram);
        let by_operation = StoreOperation::ALL.map(|operation| {
            family.get_or_create_owned(&OperationLabel {
                operation: operation.label(),
            })
        });
        Self {
            family,
            by_operation,
            outage_waits: Counter::default(),
            outage_wait_seconds: Counter::default(),
            outage_failures: Counter::default(),
            outage_waiting: Gauge::default(),
            request_waits: Counter::default(),
            request_wait_seconds: Counter::default(),
            request_failures: Counter::default(),
        }
    }
}

impl StoreMetrics {
    /// Registers the histogram in `awaken`, the runtime's prefixed registry.
    pub(crate) fn register(&self, awaken: &mut Registry) {
        awaken.register_with_unit(
            "store_operation_duration",
            "Latency of the thread store's operations (database-backed stores), success or not",
            Unit::Seconds,
            self.family.clone(),
        );
        awaken.register(
            "store_outage_waits",
            "Checkpoints that waited for the thread store to come back",
            self.outage_waits.clone(),
        );
        awaken.register_with_unit(
            "store_outage_wait",
            "Time runs spent waiting for the thread store to come back, summed",
            Unit::Seconds,
            self.outage_wait_seconds.clone(),
        );
        awaken.register(
            "store_outage_failures",
            "Checkpoints given up because the thread store stayed away past store.outage_timeout",
            self.outage_failures.clone(),
        );
        awaken.register(
            "store_outage_runs_waiting",
            "Runs waiting for the thread store now",
            self.outage_waiting.clone(),
        );
        awaken.register(
            "store_request_waits",
            "Store reads and writes that waited for the thread store to come back",
            self.request_waits.clone(),
        );
        awaken.register_with_unit(
            "store_request_wait",
            "Time store reads and writes spent waiting for the thread store to come back, summed",
            Unit::Seconds,
            self.request_wait_seconds.clone(),
        );
        awaken.register(
            "store_request_failures",
            "Store reads and writes given up because the store stayed away past server.backend_wait",
            self.request_failures.clone(),
        );
    }

    /// `operation` took `elapsed`.
    pub(crate) fn observe(&self, operation: StoreOperation, elapsed: Duration) {
        self.by_operation[operation as usize].observe(elapsed.as_secs_f64());
    }

    /// A run began waiting for the store.
    pub(crate) fn outage_began(&self) {
        self.outage_waits.inc();
        self.outage_waiting.inc();
    }

    /// A store request stopped waiting for the store after `waited`,
    /// `recovered` or not.
    pub(crate) fn request_waited(&self, waited: Duration, recovered: bool) {
        self.request_waits.inc();
        self.request_wait_seconds.inc_by(waited.as_secs_f64());
        if !recovered {
            self.request_failures.inc();
        }
    }

    /// A run stopped waiting for the store after `waited`, `recovered` or not.
    pub(crate) fn outage_ended(&self, waited: Duration, recovered: bool) {
        self.outage_waiting.dec();
        self.outage_wait_seconds.inc_by(waited.as_secs_f64());
        if !recovered {
            self.outage_failures.inc();
        }
    }
}
