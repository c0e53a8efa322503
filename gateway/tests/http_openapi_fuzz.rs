//! The OpenAPI document held to the server by the standard third-party fuzzer,
//! schemathesis (installed by `scripts/setup.sh`, pinned in
//! `tests/clients/requirements.txt`): every check, every phase (examples,
//! coverage, fuzzing, stateful), on a node without keys and on one with keys;
//! any failure fails the test with schemathesis' report. Where a check does not
//! apply to a route, `tests/clients/schemathesis.toml` says so and why.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod http_support;

use std::collections::BTreeMap;

use awaken_gateway::server::ServerConfig;
use http_support::TestServer;

/// The venv's schemathesis.
const SCHEMATHESIS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../target/py-venv/bin/schemathesis"
);
const CONFIG: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/clients/schemathesis.toml"
);
/// Cases per operation and phase: enough to reach every route's refusals and
/// a created thread's routes, in about a minute per node.
const EXAMPLES: &str = "12";
/// How long the approval stream stays open for the fuzzer, which reads each
/// answer to its end.
const STREAM_MS: u64 = 100;
/// A fixed seed, so a failure found in CI is found again by the same command.
const SEED: &str = "20261201";

/// Runs schemathesis against `server`, with `headers` on every request, and
/// fails with its report unless it found nothing.
async fn fuzz(server: &TestServer, headers: &[&str]) {
    assert!(
        std::path::Path::new(SCHEMATHESIS).exists(),
        "schemathesis is not installed: run scripts/setup.sh"
    );
    let report = tempfile::tempdir().unwrap();
    let mut command = tokio::process::Command::new(SCHEMATHESIS);
    command
        .args(["--config-file", CONFIG, "run"])
        .arg(server.url("/v1/openapi.json"))
        .args(["--max-examples", EXAMPLES, "--seed", SEED, "--no-color"])
        .args(["--generation-database", "none"])
        .arg("--report-dir")
        .arg(report.path())
        // Its own hypothesis cache stays out of the source tree.
        .current_dir(report.path())
        .kill_on_drop(true);
    for header in headers {
        command.args(["--header", header]);
    }
    let output = command.output().await.expect("schemathesis runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "schemathesis found failures ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    // Every operation it found was selected and tested: none was skipped for
    // a schema it could not use.
    let counted = |label: &str| {
        stdout
            .lines()
            .find_map(|line| line.trim().strip_prefix(label).map(str::to_owned))
    };
    let selected = counted("Selected: ").unwrap_or_default();
    let tested = counted("Tested: ").unwrap_or_default();
    let (chosen, found) = selected.split_once('/').unwrap_or_default();
    assert!(
        !found.is_empty() && chosen == found && tested == found,
        "not every operation was tested (selected {selected}, tested {tested}):\n{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fuzzer_finds_nothing_on_a_node_without_keys() {
    let server = TestServer::local(ServerConfig {
        approval_stream_max_ms: STREAM_MS,
        ..ServerConfig::default()
    })
    .await;
    fuzz(&server, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fuzzer_finds_nothing_on_a_node_with_keys() {
    // No admin tenant: config writes answer 403 here. The config API's own
    // tests cover writes; entries drawn at random would have the node start
    // MCP servers and call providers at random addresses.
    let keys = BTreeMap::from([("fuzz-key".to_owned(), "fuzz-tenant".to_owned())]);
    let server = TestServer::local(ServerConfig {
        api_keys: keys.into(),
        approval_stream_max_ms: STREAM_MS,
        ..ServerConfig::default()
    })
    .await;
    fuzz(&server, &["Authorization: Bearer fuzz-key"]).await;
}
