//! What a scenario reports: the JSON line ([`BenchReport`]), latency histograms
//! ([`Latencies`]) and the process's memory figures ([`peak_rss_kb`], [`rss_kb`]).

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::error::{GatewayError, Result};

/// The slowest latency a histogram holds exactly; slower runs are recorded as this.
const MAX_TRACKED_US: u64 = 3_600_000_000;

/// Significant decimal digits kept by the histograms (0.1 % relative error).
const SIGNIFICANT_DIGITS: u8 = 3;

/// One scenario's result, printed as one JSON line.
///
/// The fixed fields come first; scenario-specific ones are in `extra`, flattened into
/// the same object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchReport {
    /// The scenario's name, e.g. `workload-w`.
    pub scenario: String,
    /// Runs that completed (successfully or not).
    pub runs: u64,
    /// Runs in flight at once.
    pub concurrency: usize,
    /// Completed runs per second of wall time.
    pub runs_per_s: f64,
    /// Median wall time of a successful run, microseconds.
    pub p50_us: u64,
    /// 90th percentile, microseconds.
    pub p90_us: u64,
    /// 99th percentile, microseconds.
    pub p99_us: u64,
    /// Slowest run, microseconds.
    pub max_us: u64,
    /// Runs that failed, timed out or ended unexpectedly.
    pub errors: u64,
    /// The first error's text, when there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
    /// Whether the scenario's time limit stopped it before every run was started.
    pub timed_out: bool,
    /// Wall time of the measured part, milliseconds.
    pub elapsed_ms: u64,
    /// The process's peak resident set size so far (`VmHWM`), KiB.
    pub peak_rss_kb: u64,
    /// Nodes the scenario ran on.
    pub nodes: u32,
    /// Scenario-specific fields.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl BenchReport {
    /// Adds a scenario-specific field.
    pub fn with(mut self, key: &str, value: impl Into<serde_json::Value>) -> Self {
        self.extra.insert(key.to_owned(), value.into());
        self
    }

    /// The report as one line of JSON.
    pub fn to_json_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| format!(r#"{{"error":"{e}"}}"#))
    }
}

/// A latency histogram in microseconds.
#[derive(Debug, Clone)]
pub struct Latencies {
    histogram: Histogram<u64>,
}

impl Latencies {
    /// An empty histogram covering 1 µs to one hour at 3 significant digits.
    pub fn new() -> Result<Self> {
        let histogram = Histogram::new_with_bounds(1, MAX_TRACKED_US, SIGNIFICANT_DIGITS)
            .map_err(|e| GatewayError::Bench(format!("histogram: {e}")))?;
        Ok(Self { histogram })
    }

    /// Records one latency (sub-microsecond values count as 1 µs).
    pub fn record(&mut self, latency: Duration) {
        let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.histogram.saturating_record(micros.max(1));
    }

    /// Adds every value of `other`.
    pub fn merge(&mut self, other: &Self) -> Result<()> {
        self.histogram
            .add(&other.histogram)
            .map_err(|e| GatewayError::Bench(format!("histogram merge: {e}")))
    }

    /// Values recorded.
    pub fn len(&self) -> u64 {
        self.histogram.len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.histogram.is_empty()
    }

    /// The value at quantile `q` (0.0–1.0), microseconds; 0 when empty.
    pub fn quantile_us(&self, q: f64) -> u64 {
        if self.is_empty() {
            0
        } else {
            self.histogram.value_at_quantile(q)
        }
    }

    /// The largest value, microseconds; 0 when empty.
    pub fn max_us(&self) -> u64 {
        if self.is_empty() {
            0
        } else {
            self.histogram.max()
        }
    }
}

/// The process's peak resident set size (`VmHWM`), KiB; 0 where `/proc` is missing.
pub fn peak_rss_kb() -> u64 {
    proc_status_kb("VmHWM:").unwrap_or(0)
}

/// The process's current resident set size (`VmRSS`), KiB; 0 where `/proc` is missing.
pub fn rss_kb() -> u64 {
    proc_status_kb("VmRSS:").unwrap_or(0)
}

/// The current resident set size (`VmRSS`) of process `pid`, KiB; 0 where
/// `/proc` is missing.
pub fn rss_kb_of(pid: u32) -> u64 {
    pid_status_kb(pid, "VmRSS:").unwrap_or(0)
}

/// The peak resident set size (`VmHWM`) of process `pid`, KiB; 0 where `/proc`
/// is missing.
pub fn peak_rss_kb_of(pid: u32) -> u64 {
    pid_status_kb(pid, "VmHWM:").unwrap_or(0)
}

/// A `kB` field of `/proc/self/status`.
fn proc_status_kb(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_status_kb(&status, field)
}

/// A `kB` field of `/proc/<pid>/status`.
fn pid_status_kb(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_status_kb(&status, field)
}

fn parse_status_kb(status: &str, field: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|value| value.parse().ok())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn quantiles_come_from_the_histogram() {
        let mut a = Latencies::new().unwrap();
        assert_eq!(a.quantile_us(0.5), 0);
        for micros in 1..=100 {
            a.record(Duration::from_micros(micros));
        }
        let mut b = Latencies::new().unwrap();
        b.record(Duration::from_secs(10));
        a.merge(&b).unwrap();
        assert_eq!(a.len(), 101);
        assert_eq!(a.quantile_us(0.5), 51);
        assert_eq!(a.quantile_us(0.99), 100);
        assert!(a.max_us() >= 9_990_000);
    }

    #[test]
    fn reads_kb_fields_of_proc_status() {
        let status = "Name:\tawaken\nVmHWM:\t  123456 kB\nVmRSS:\t    2048 kB\n";
        assert_eq!(parse_status_kb(status, "VmHWM:"), Some(123_456));
        assert_eq!(parse_status_kb(status, "VmRSS:"), Some(2048));
        assert_eq!(parse_status_kb(status, "VmSwap:"), None);
        if cfg!(target_os = "linux") {
            let rss = rss_kb();
            let peak = peak_rss_kb();
            assert!(peak >= rss && rss > 0, "peak {peak} rss {rss}");
            let me = std::process::id();
            assert!(rss_kb_of(me) > 0 && peak_rss_kb_of(me) >= rss_kb_of(me));
        }
    }

    #[test]
    fn extra_fields_are_flattened() {
        let report = BenchReport {
            scenario: "x".into(),
            runs: 1,
            concurrency: 1,
            runs_per_s: 1.0,
            p50_us: 1,
            p90_us: 1,
            p99_us: 1,
            max_us: 1,
            errors: 0,
            first_error: None,
            timed_out: false,
            elapsed_ms: 1,
            peak_rss_kb: 1,
            nodes: 1,
            extra: serde_json::Map::new(),
        }
        .with("threads", 3);
        let value: serde_json::Value = serde_json::from_str(&report.to_json_line()).unwrap();
        assert_eq!(value["threads"], 3);
        assert_eq!(value["nodes"], 1);
        assert!(value.get("first_error").is_none());
    }
}
