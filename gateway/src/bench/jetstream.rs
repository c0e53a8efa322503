//! JetStream's own figures for the cluster scenarios: how many messages the
//! server's streams took (a KV put is one), and the raw publish rate of the same
//! server, measured in the same process run so a scenario can give its ratio.

use async_nats::jetstream::{self, stream};
use futures::TryStreamExt;

use super::BenchOptions;
use super::driver::{RunSample, drive};
use super::report::BenchReport;
use crate::error::{GatewayError, Result};

/// The raw half's name in progress lines and reports.
pub(crate) const RAW: &str = "raw-publish";

fn bench_error(error: impl std::fmt::Display) -> GatewayError {
    GatewayError::Bench(error.to_string())
}

/// Refuses a server some cluster uses: the cluster scenarios start nodes under
/// the default bucket and stream names, so on such a server they would claim
/// its runs and its nodes theirs. Members that crashed count until their entry
/// expires (one lease TTL).
pub(crate) async fn refuse_a_used_server(nats_url: &str) -> Result<()> {
    let client = async_nats::connect(nats_url).await.map_err(bench_error)?;
    let js = jetstream::new(client);
    let members = awaken_cluster::membership::registered(
        &js,
        awaken_cluster::membership::DEFAULT_MEMBERS_BUCKET,
    )
    .await
    .map_err(bench_error)?;
    if members.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = members.iter().map(|member| member.as_str()).collect();
    Err(GatewayError::Bench(format!(
        "the NATS server at {nats_url} has cluster members ({}): the cluster \
         scenarios run nodes under the cluster's own names, so point them at a \
         server no cluster uses (a node that crashed stays listed for one lease \
         TTL, 5 s by default)",
        names.join(", ")
    )))
}

/// Messages every stream on the server has taken so far (the sum of their last
/// sequence numbers): the difference across a scenario is its stream writes.
/// Purges and deleted streams are not writes; streams of other users of the
/// server are counted too, so measure on a server nothing else writes to.
pub(crate) async fn stream_writes(js: &jetstream::Context) -> Result<u64> {
    js.streams()
        .map_err(bench_error)
        .try_fold(0_u64, |sum, info| async move {
            Ok(sum + info.state.last_sequence)
        })
        .await
}

/// Publishes `options.runs` small messages to a scratch stream at
/// `options.concurrency`, each waiting for its acknowledgement, then deletes the
/// stream: the server's raw JetStream publish rate.
pub(crate) async fn raw_publishes(
    js: &jetstream::Context,
    options: &BenchOptions,
) -> Result<BenchReport> {
    let scratch = format!("awaken_bench_{}", uuid::Uuid::now_v7().simple());
    let name = format!("{scratch}_raw");
    let subject = format!("{scratch}.raw");
    js.create_stream(stream::Config {
        name: name.clone(),
        subjects: vec![subject.clone()],
        ..Default::default()
    })
    .await
    .map_err(bench_error)?;
    let publisher = js.clone();
    let raw = drive(RAW, options.runs, options.concurrency, options, move |_| {
        let (js, subject) = (publisher.clone(), subject.clone());
        async move {
            let ack = js
                .publish(subject, "dispatch".into())
                .await
                .map_err(|e| e.to_string())?;
            ack.await.map_err(|e| e.to_string())?;
            Ok(RunSample::default())
        }
    })
    .await;
    let deleted = js.delete_stream(&name).await.map_err(bench_error);
    let raw = raw?;
    deleted?;
    Ok(raw.report(RAW, options.concurrency))
}
