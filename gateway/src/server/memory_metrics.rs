//! The memory gauges of `/metrics`: what each share of the node's budget holds,
//! its limit, what it gave back, and the process's resident memory.

use awaken_actors::memory::NodeMemory;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct CacheLabels {
    cache: &'static str,
}

/// Copied from the node's [`NodeMemory`] when scraped.
#[derive(Debug, Default)]
pub(crate) struct MemoryGauges {
    held: Family<CacheLabels, Gauge>,
    limit: Family<CacheLabels, Gauge>,
    evictions: Family<CacheLabels, Counter>,
    budget: Gauge,
    resident: Gauge,
}

impl MemoryGauges {
    pub(crate) fn register(&self, registry: &mut Registry) {
        registry.register_with_unit(
            "memory",
            "Bytes each share of the node's memory budget holds (an estimate): warm_threads, ended_runs, settled_dispatches, admitted",
            Unit::Bytes,
            self.held.clone(),
        );
        registry.register_with_unit(
            "memory_limit",
            "Bytes each share may hold: caches give memory back past it, admitted work is refused past it",
            Unit::Bytes,
            self.limit.clone(),
        );
        registry.register(
            "memory_evictions",
            "Entries each cache gave back to stay within its share",
            self.evictions.clone(),
        );
        registry.register_with_unit(
            "memory_budget",
            "The node's whole memory budget (node.memory_budget, or 3/4 of the container limit)",
            Unit::Bytes,
            self.budget.clone(),
        );
        registry.register_with_unit(
            "memory_resident",
            "The process's resident memory, as the kernel counts it against a container limit",
            Unit::Bytes,
            self.resident.clone(),
        );
    }

    pub(crate) fn refresh(&self, memory: &NodeMemory) {
        let gauge = |bytes: u64| i64::try_from(bytes).unwrap_or(i64::MAX);
        for meter in memory.meters() {
            let labels = CacheLabels {
                cache: meter.share().name(),
            };
            self.held.get_or_create(&labels).set(gauge(meter.bytes()));
            self.limit.get_or_create(&labels).set(gauge(meter.limit()));
            self.evictions
                .get_or_create(&labels)
                .inner()
                .store(meter.evictions(), std::sync::atomic::Ordering::Relaxed);
        }
        self.budget.set(gauge(memory.budget().total()));
        if let Some(resident) = resident_bytes() {
            self.resident.set(gauge(resident));
        }
    }
}

/// The process's resident set in bytes (`/proc/self/statm`, Linux only).
pub(crate) fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * u64::try_from(rustix::param::page_size()).ok()?)
}
