//! `awaken bench cluster --scenario dispatch`: the mailbox ledger's enqueue →
//! claim → ack cycle on one node, beside raw JetStream publishes on the same server.
//!
//! Both halves run through the same driver with the same number in flight: the raw
//! half publishes one small message per run to a scratch stream and waits for its
//! acknowledgement; the dispatch half enqueues a dispatch on a fresh thread, claims
//! it and acks it on a scratch ledger. The report's `runs_per_s` is dispatch
//! cycles per second; `raw_publish_per_s` and `ratio_to_raw` put it beside the
//! raw figure. Scratch streams and buckets are deleted afterwards.

use std::sync::Arc;

use async_nats::jetstream as js_api;
use awaken_actors::clock::now_ms;
use awaken_actors::contract::RunDispatch;
use awaken_actors::ids::{RunId, ThreadId};
use awaken_actors::mailbox::{MailboxConfig, MailboxStore};
use awaken_cluster::ledger::{self, LedgerMailbox};

use super::BenchOptions;
use super::driver::{Driven, RunSample, drive};
use super::jetstream;
use super::report::BenchReport;
use crate::error::{GatewayError, Result};

/// The scenario's name in reports.
pub const NAME: &str = "dispatch";

const LEASE_MS: u64 = 30_000;

fn bench_error(error: impl std::fmt::Display) -> GatewayError {
    GatewayError::Bench(error.to_string())
}

/// Measures raw publishes, then dispatch cycles, against the server at `nats_url`.
pub async fn run(nats_url: &str, options: &BenchOptions) -> Result<BenchReport> {
    let client = async_nats::connect(nats_url).await.map_err(bench_error)?;
    let js = js_api::new(client);
    let scratch = format!("awaken_bench_{}", uuid::Uuid::now_v7().simple());

    let raw_report = jetstream::raw_publishes(&js, options).await?;

    let ledger_name = format!("{scratch}_ledger");
    let ledger = LedgerMailbox::open(&js, &ledger_name, 1, MailboxConfig::default())
        .await
        .map_err(bench_error)?;
    let cycles = run_cycles(Arc::new(ledger), options).await?;
    js.delete_stream(ledger::stream_name(&ledger_name))
        .await
        .map_err(bench_error)?;
    js.delete_stream(format!("KV_{}", ledger::snapshot_bucket(&ledger_name)))
        .await
        .map_err(bench_error)?;

    let report = cycles.report(NAME, options.concurrency);
    let ratio = if raw_report.runs_per_s > 0.0 {
        (report.runs_per_s / raw_report.runs_per_s * 1000.0).round() / 1000.0
    } else {
        0.0
    };
    Ok(report
        .with("raw_publish_per_s", raw_report.runs_per_s)
        .with("raw_p50_us", raw_report.p50_us)
        .with("ratio_to_raw", ratio)
        .with("raw_errors", raw_report.errors))
}

/// Runs dispatch cycles on `mailbox` through the shared driver.
async fn run_cycles(mailbox: Arc<dyn MailboxStore>, options: &BenchOptions) -> Result<Driven> {
    drive(
        NAME,
        options.runs,
        options.concurrency,
        options,
        move |_| {
            let mailbox = Arc::clone(&mailbox);
            async move { cycle(mailbox.as_ref()).await.map(|()| RunSample::default()) }
        },
    )
    .await
}

/// One dispatch through its queue lifecycle on a fresh thread.
async fn cycle(mailbox: &dyn MailboxStore) -> std::result::Result<(), String> {
    let thread = ThreadId::generate();
    let dispatch = RunDispatch::new(thread.clone(), RunId::generate(), 0, now_ms());
    let queued = mailbox
        .enqueue(dispatch, now_ms())
        .await
        .map_err(|e| e.to_string())?;
    let claimed = mailbox
        .claim(&thread, "bench", 1, LEASE_MS, now_ms())
        .await
        .map_err(|e| e.to_string())?;
    let Some(claimed) = claimed.into_iter().next() else {
        return Err(format!("dispatch {} was not claimable", queued.dispatch_id));
    };
    let token = claimed.claim_token.unwrap_or_default();
    mailbox
        .ack(&claimed.dispatch_id, &token, now_ms())
        .await
        .map_err(|e| e.to_string())?;
    Ok(())
}
