//! `awaken serve` pushes the metrics of `/metrics` over OTLP: a collector in
//! the test (HTTP and gRPC, decoding with the OpenTelemetry project's own
//! protobuf definitions) receives them under the GenAI conventions' names and
//! units, with values matching the runs the test made and the names a
//! Prometheus-side backend maps back to the ones `/metrics` serves.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod http_support;
mod otlp_support;

use std::collections::BTreeSet;

use http_support::{EventReader, awaken_serve_with, run_ids};
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use otlp_support::{Export, export_where, full_collector, full_grpc_collector, spans_until};
use serde_json::json;

const CONFIG: &str = "demo_agents = true\n[server]\naddress = \"127.0.0.1:0\"\n";

/// Runs the demo agent `bench` (workload W: two model calls, one tool) to its
/// end on `base`; its thread and run ids.
async fn run_bench(base: &str) -> (String, String) {
    let response = reqwest::Client::new()
        .post(format!("{base}/v1/runs"))
        .json(&json!({
            "agent_id": "bench",
            "messages": [{"role": "user", "content": "hello"}],
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    run_ids(&EventReader::new(response).rest().await)
}

/// Stops `child` with SIGTERM (what Kubernetes sends) and waits for its exit.
async fn terminate(child: &mut tokio::process::Child) {
    let pid = child.id().unwrap().to_string();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(status.success());
    assert!(child.wait().await.unwrap().success());
}

/// The `POST /v1/runs` requests whose latency `export` holds.
fn run_requests(export: &Export) -> Option<u64> {
    export
        .has("awaken.http_request_duration")
        .then(|| {
            export
                .metric("awaken.http_request_duration")
                .count(&[("method", "POST"), ("route", "/v1/runs")])
        })
        .flatten()
}

/// The runs of `agent` that `export` counts as finished.
fn finished(export: &Export, agent: &str) -> Option<f64> {
    export
        .has("awaken.runs_finished")
        .then(|| {
            export
                .metric("awaken.runs_finished")
                .value(&[("agent", agent)])
        })
        .flatten()
}

/// The family names of a `/metrics` scrape (its `# TYPE` lines).
async fn scraped_families(base: &str) -> BTreeSet<String> {
    let text = reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .map(|rest| rest.split(' ').next().unwrap().to_owned())
        .collect()
}

/// The family name a Prometheus backend gives an OTLP metric: dots to
/// underscores, the unit as a suffix (counters get `_total` on their samples).
fn prometheus_family(name: &str, unit: &str) -> String {
    let base = name.replace('.', "_");
    match unit {
        "s" => format!("{base}_seconds"),
        "By" => format!("{base}_bytes"),
        _ => base,
    }
}

#[tokio::test]
async fn metrics_are_pushed_over_otlp_http_under_the_convention_names() {
    let mut collector = full_collector().await;
    let (_server, base, _dir) = awaken_serve_with(
        CONFIG,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &collector.endpoint),
            ("OTEL_SERVICE_NAME", "awaken-under-test"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "100"),
            (
                "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
                "authorization=Bearer%20metrics-key",
            ),
        ],
    )
    .await
    .unwrap();
    let (thread_id, run_id) = run_bench(&base).await;
    run_bench(&base).await;

    // A scripted run can end before its request's handler has answered (the
    // request is counted when it answers), so wait for both to be in one push.
    let export = export_where(&mut collector.metrics, |export| {
        finished(export, "bench") == Some(2.0) && run_requests(export) == Some(2)
    })
    .await;

    assert_eq!(export.resource["service.name"], "awaken-under-test");
    assert_eq!(export.scope, "awaken");
    assert_eq!(
        export.authorization.as_deref(),
        Some("Bearer metrics-key"),
        "the metrics' own headers"
    );
    let started = export.metric("awaken.runs_started");
    assert!(matches!(&started.data, Data::Sum(sum) if sum.is_monotonic));
    assert_eq!(started.value(&[("agent", "bench")]), Some(2.0));
    assert_eq!(
        export
            .metric("awaken.runs_finished")
            .value(&[("agent", "bench"), ("termination", "natural_end")]),
        Some(2.0)
    );
    let operation = export.metric("gen_ai.client.operation.duration");
    assert_eq!(operation.unit, "s");
    assert_eq!(
        operation.count(&[
            ("gen_ai.operation.name", "chat"),
            ("gen_ai.provider.name", "bench"),
            ("gen_ai.request.model", "scripted"),
        ]),
        Some(4),
        "two model calls per W run"
    );
    let attempts = operation.attribute_sets();
    assert!(
        attempts.iter().all(|set| !set.contains_key("error.type")),
        "no call failed, so none names an error: {attempts:?}"
    );
    assert_eq!(
        export.metric("gen_ai.client.token.usage").unit,
        "{token}",
        "the convention's unit"
    );
    assert_eq!(export.metric("awaken.http_request_duration").unit, "s");
    assert!(matches!(
        export.metric("awaken.runs_waiting").data,
        Data::Gauge(_)
    ));
    for metric in &export.metrics {
        for set in metric.attribute_sets() {
            for value in set.values() {
                assert!(
                    value != &thread_id && value != &run_id,
                    "{} carries an id: {set:?}",
                    metric.name
                );
            }
        }
    }

    // One dashboard reads both: every pushed metric is a family of the scrape,
    // under the name a Prometheus backend gives it.
    let scraped = scraped_families(&base).await;
    let pushed: BTreeSet<String> = export
        .metrics
        .iter()
        .map(|m| prometheus_family(&m.name, &m.unit))
        .collect();
    assert_eq!(pushed, scraped);
}

#[tokio::test]
async fn metrics_go_over_grpc_and_the_last_values_leave_at_shutdown() {
    let mut collector = full_grpc_collector().await;
    // No tick within the test: what arrives is the push of the shutdown.
    let (mut server, base, _dir) = awaken_serve_with(
        CONFIG,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &collector.endpoint),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "3600000"),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "authorization=Bearer%20grpc-key",
            ),
        ],
    )
    .await
    .unwrap();
    run_bench(&base).await;
    terminate(&mut server).await;

    let export = collector.metrics.try_recv().expect("the shutdown's push");
    assert_eq!(finished(&export, "bench"), Some(1.0));
    assert_eq!(export.authorization.as_deref(), Some("Bearer grpc-key"));
    assert!(
        collector.metrics.try_recv().is_err(),
        "one push: the interval never passed"
    );
}

#[tokio::test]
async fn spans_without_metrics_when_the_metrics_exporter_is_none() {
    let mut collector = full_collector().await;
    let (mut server, base, _dir) = awaken_serve_with(
        CONFIG,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &collector.endpoint),
            ("OTEL_METRICS_EXPORTER", "none"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "100"),
            ("OTEL_BSP_SCHEDULE_DELAY", "50"),
        ],
    )
    .await
    .unwrap();
    run_bench(&base).await;
    spans_until(&mut collector.spans, |spans| {
        spans.iter().any(|s| s.name == "invoke_agent bench")
    })
    .await;
    terminate(&mut server).await;
    assert!(
        collector.metrics.try_recv().is_err(),
        "no metric push, not even at shutdown"
    );
}
