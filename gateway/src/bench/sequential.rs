//! `sequential`: workload W with one run at a time — the latency of a run on an
//! otherwise idle runtime.

use super::BenchOptions;
use super::report::BenchReport;
use super::workload_w;
use crate::error::Result;

/// The scenario's name in reports.
pub const NAME: &str = "sequential";

/// Runs `options.runs` W runs one after the other (`options.concurrency` is ignored).
pub async fn run(options: &BenchOptions) -> Result<BenchReport> {
    workload_w::run_named(NAME, options, 1).await
}
