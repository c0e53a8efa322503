//! Every `bench local` scenario, run through the library with tiny sizes: the report
//! has the documented fields with sane values (no timing is asserted).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic

use std::time::Duration;

use awaken_cluster::RunInputPlacement;
use awaken_cluster::membership::{MemberRecord, Membership, MembershipConfig, NodeId};
use awaken_cluster::testing::NatsServer;
use awaken_gateway::bench::{self, BenchOptions, Scenario};
use serde_json::Value;

fn tiny() -> BenchOptions {
    BenchOptions {
        runs: 12,
        concurrency: 4,
        threads: 6,
        timeout: Duration::from_secs(60),
        run_timeout: Duration::from_secs(20),
        progress: false,
        ..BenchOptions::default()
    }
}

/// Runs `scenario`, checks the fields every report has, returns the JSON object.
async fn checked(scenario: Scenario, expected_runs: u64, concurrency: u64) -> Value {
    let report = bench::run(scenario, &tiny()).await.unwrap();
    let line = report.to_json_line();
    assert!(!line.contains('\n'), "one line: {line}");
    let json: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(json["scenario"], scenario.name());
    assert_eq!(json["runs"], expected_runs, "{line}");
    assert_eq!(json["concurrency"], concurrency);
    assert_eq!(json["errors"], 0, "{line}");
    assert_eq!(json["timed_out"], false);
    assert_eq!(json["nodes"], 1);
    let number = |key: &str| {
        json[key]
            .as_f64()
            .unwrap_or_else(|| panic!("`{key}` is a number: {line}"))
    };
    assert!(number("runs_per_s") > 0.0);
    assert!(number("p50_us") > 0.0);
    assert!(number("p50_us") <= number("p90_us"));
    assert!(number("p90_us") <= number("p99_us"));
    assert!(number("p99_us") <= number("max_us"));
    if cfg!(target_os = "linux") {
        assert!(number("peak_rss_kb") > 0.0);
    }
    json
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workload_w_reports_every_run() {
    let json = checked(Scenario::WorkloadW, 12, 4).await;
    assert_eq!(json["live_threads_at_end"], 0, "idle threads hold no actor");
    assert_eq!(
        json["warm_threads_at_end"], 12,
        "default: idle threads stay warm"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequential_runs_one_at_a_time() {
    checked(Scenario::Sequential, 12, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hitl_reports_decision_latency() {
    let json = checked(Scenario::Hitl, 12, 4).await;
    let p50 = json["decision_p50_us"].as_u64().unwrap();
    let p99 = json["decision_p99_us"].as_u64().unwrap();
    assert!(0 < p50 && p50 <= p99, "{json}");
    assert!(p99 <= json["max_us"].as_u64().unwrap());
    assert_eq!(json["passivate_while_waiting"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_threads_passivate() {
    let json = checked(Scenario::IdleThreads, 12, 4).await;
    assert_eq!(json["threads"], 6);
    assert_eq!(json["live_threads"], 0, "{json}");
    assert_eq!(json["warm_threads"], 6, "{json}");
    assert!(json["bytes_per_warm_thread"].is_u64());
    assert!(json["bytes_per_passivated_thread"].is_u64());
    assert!(json["bytes_per_warm_core"].is_u64());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scenario_stops_at_its_time_limit() {
    let options = BenchOptions {
        runs: 1_000_000,
        timeout: Duration::from_millis(200),
        ..tiny()
    };
    let report = bench::run(Scenario::WorkloadW, &options).await.unwrap();
    assert!(report.timed_out);
    assert!(report.runs < 1_000_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hitl_remote_resumes_every_run_by_a_published_decision() {
    let server = NatsServer::start().await.unwrap();
    let report = bench::hitl_remote::run(&server.url(), RunInputPlacement::Inbox, &tiny())
        .await
        .unwrap();
    let json: Value = serde_json::from_str(&report.to_json_line()).unwrap();
    assert_eq!(json["scenario"], "hitl-remote");
    assert_eq!(json["runs"], 12, "{json}");
    assert_eq!(json["errors"], 0, "{json}");
    let p50 = json["decision_p50_us"].as_u64().unwrap();
    let p99 = json["decision_p99_us"].as_u64().unwrap();
    assert!(0 < p50 && p50 <= p99, "{json}");
}

/// Workload W on two nodes of one NATS server, inputs kept as `run_input` says;
/// the report, checked for what every placement must show.
async fn two_node_workload_w(server: &NatsServer, run_input: RunInputPlacement) -> Value {
    let report = Box::pin(bench::cluster_w::run(&server.url(), 2, run_input, &tiny()))
        .await
        .unwrap();
    let json: Value = serde_json::from_str(&report.to_json_line()).unwrap();
    assert_eq!(json["scenario"], "cluster-workload-w");
    assert_eq!(json["nodes"], 2, "{json}");
    assert_eq!(json["runs"], 12, "{json}");
    assert_eq!(json["errors"], 0, "{json}");
    let field = |name: &str| {
        json[name]
            .as_f64()
            .unwrap_or_else(|| panic!("{name} in {json}"))
    };
    assert!(field("raw_publish_per_s") > 0.0, "{json}");
    let per_raw = field("runs_per_s") / field("raw_publish_per_s");
    assert!(
        (field("runs_per_raw_publish") - per_raw).abs() < 0.001,
        "{json}"
    );
    let expected = per_raw * field("stream_writes_per_run");
    assert!((field("ratio_to_raw") - expected).abs() < 0.001, "{json}");
    json
}

/// Messages the KV inbox's stream has ever stored.
async fn inbox_writes(server: &NatsServer) -> u64 {
    let client = async_nats::connect(server.url()).await.unwrap();
    let js = async_nats::jetstream::new(client);
    let mut stream = js.get_stream("KV_awaken_inbox").await.unwrap();
    stream.info().await.unwrap().state.last_sequence
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_workload_w_runs_every_run_on_its_threads_owner_across_two_nodes() {
    let server = NatsServer::start().await.unwrap();
    let json = two_node_workload_w(&server, RunInputPlacement::Inbox).await;
    // At least each run's input in the inbox bucket; the mailbox's commands
    // share ledger batches, so no fixed count beyond it.
    assert!(
        json["stream_writes_per_run"].as_f64().unwrap() >= 1.0,
        "{json}"
    );
    assert!(inbox_writes(&server).await >= 12);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_inputs_in_the_ledger_no_run_touches_the_inbox() {
    let server = NatsServer::start().await.unwrap();
    two_node_workload_w(&server, RunInputPlacement::Ledger).await;
    assert_eq!(
        inbox_writes(&server).await,
        0,
        "every input went with its dispatch"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_scenarios_refuse_a_server_a_cluster_uses() {
    let server = NatsServer::start().await.unwrap();
    let js = async_nats::jetstream::new(async_nats::connect(server.url()).await.unwrap());
    let _live = Membership::join(
        &js,
        &MembershipConfig::default(),
        MemberRecord {
            node_id: NodeId::new("production-node").unwrap(),
            joined_at_ms: 0,
            http_url: None,
            features: Vec::new(),
        },
    )
    .await
    .unwrap();

    let refused = Box::pin(bench::cluster_w::run(
        &server.url(),
        1,
        RunInputPlacement::Auto,
        &tiny(),
    ))
    .await
    .unwrap_err()
    .to_string();
    assert!(refused.contains("production-node"), "{refused}");
    let refused = bench::hitl_remote::run(&server.url(), RunInputPlacement::Auto, &tiny())
        .await
        .unwrap_err()
        .to_string();
    assert!(refused.contains("cluster members"), "{refused}");
    let refused = Box::pin(bench::delegation::run_cluster(&server.url(), &tiny()))
        .await
        .unwrap_err()
        .to_string();
    assert!(refused.contains("cluster members"), "{refused}");
    // Nothing of the cluster's was touched: no mailbox ledger was even opened.
    assert!(js.get_stream("LEDGER_awaken_mailbox").await.is_err());
}

/// `awaken bench slow-clients` with tiny sizes, as the binary runs it: its one
/// JSON line has the documented fields, every ordinary request was answered and
/// every slow connection got its 408.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_prints_its_line_with_the_fields() {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_awaken"))
        .args([
            "bench",
            "slow-clients",
            "--one-address",
            "4",
            "--spread",
            "6",
            "--addresses",
            "2",
            "--byte-every-ms",
            "300",
            "--body-timeout-s",
            "3",
            "--requests",
            "12",
            "--concurrency",
            "2",
            "--quiet",
        ])
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {stdout}");
    let json: Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(json["scenario"], "slow-clients");
    // The requests stop a second before the slow bodies' deadline: as many as
    // fit, at most 12.
    let runs = json["runs"].as_u64().unwrap();
    assert!((1..=12).contains(&runs), "{json}");
    assert_eq!(json["errors"], 0, "{json}");
    assert_eq!(json["answered"], runs, "{json}");
    assert_eq!(json["refused_503"], 0, "{json}");
    assert_eq!(json["slow_connections"], 10, "{json}");
    assert_eq!(json["slow_addresses"], 3, "{json}");
    assert_eq!(json["slow_408"], 10, "{json}");
    assert_eq!(json["server_bodies_arriving"], 10.0, "{json}");
    let number = |key: &str| {
        json[key]
            .as_u64()
            .unwrap_or_else(|| panic!("`{key}` is a whole number: {json}"))
    };
    assert!(0 < number("p50_us") && number("p50_us") <= number("p99_us"));
    assert!(number("server_rss_with_kb") > 0);
    assert!(number("server_peak_rss_kb") >= number("server_rss_with_kb"));
    assert!(number("peak_rss_kb") > 0);
    number("server_bytes_per_connection");
    assert!(number("slow_408_after_ms_min") <= number("slow_408_after_ms_max"));
}
