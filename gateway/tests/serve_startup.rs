//! `awaken serve` refuses a configuration it cannot run with one clear error
//! naming the cause and exit code 2, quickly, never a hang: a malformed file, a
//! missing file (a Secret not mounted), a bad value from the environment, an
//! unreachable NATS or PostgreSQL.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

/// Longest a refusal may take: PostgreSQL's pool gives up on an unreachable
/// server after its acquire timeout (10 s).
const REFUSAL: Duration = Duration::from_secs(40);

/// Runs `awaken serve` with `configs` and `env`; its stderr, once it exited with 2.
async fn refused(configs: &[&Path], env: &[(&str, &str)]) -> String {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_awaken"));
    command.arg("serve");
    for config in configs {
        command.arg("--config").arg(config);
    }
    command.args(["--address", "127.0.0.1:0"]);
    command.envs(env.iter().copied());
    command.kill_on_drop(true);
    let output = tokio::time::timeout(REFUSAL, command.output())
        .await
        .expect("the refusal comes in time, not a hang")
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert!(output.stdout.is_empty(), "it never listened");
    stderr
}

fn file(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn postgres_url() -> String {
    std::env::var("AWAKEN_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

#[tokio::test]
async fn a_malformed_or_missing_file_or_a_bad_variable_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let malformed = file(dir.path(), "malformed.toml", "[server\n");
    let error = refused(&[&malformed], &[]).await;
    assert!(error.contains("TOML parse error"), "{error}");

    let good = file(
        dir.path(),
        "awaken.toml",
        "[server]\nmax_body_bytes = 100\n",
    );
    let secret = dir.path().join("secret/secrets.toml");
    let error = refused(&[&good, &secret], &[]).await;
    assert!(error.contains("secrets.toml"), "{error}");

    let error = refused(&[&good], &[("AWAKEN_DEMO_AGENTS", "sometimes")]).await;
    assert!(error.contains("demo_agents"), "{error}");
    let error = refused(&[&good], &[("AWAKEN_SERVER__MAX_BODY_BYTES", "0")]).await;
    assert!(error.contains("max_body_bytes"), "{error}");
    let error = refused(
        &[&good],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
            ("OTEL_TRACES_SAMPLER", "sometimes"),
        ],
    )
    .await;
    assert!(error.contains("OTEL_TRACES_SAMPLER"), "{error}");
    let error = refused(
        &[&good],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "1m"),
        ],
    )
    .await;
    assert!(error.contains("OTEL_METRIC_EXPORT_INTERVAL"), "{error}");
    let metrics = file(
        dir.path(),
        "metrics.toml",
        "[telemetry]
metrics = true
metrics_interval_secs = 0
",
    );
    let error = refused(&[&metrics], &[]).await;
    assert!(error.contains("telemetry.metrics_interval_secs"), "{error}");
    let telemetry = file(
        dir.path(),
        "telemetry.toml",
        "[telemetry]\nendpoint = \"collector:4318\"\n",
    );
    let error = refused(&[&telemetry], &[]).await;
    assert!(error.contains("telemetry.endpoint"), "{error}");
}

#[tokio::test]
async fn an_unreachable_nats_or_postgres_is_refused_naming_the_setting() {
    let dir = tempfile::tempdir().unwrap();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);

    let no_nats = file(
        dir.path(),
        "nats.toml",
        &format!(
            "[store]\nkind = \"postgres\"\nurl = \"{}\"\n\n[cluster]\nnats_url = \"nats://127.0.0.1:{port}\"\n",
            postgres_url()
        ),
    );
    let error = refused(&[&no_nats], &[]).await;
    assert!(error.contains("cluster.nats_url"), "{error}");

    let no_postgres = file(
        dir.path(),
        "postgres.toml",
        &format!(
            "[store]\nkind = \"postgres\"\nurl = \"postgres://postgres@127.0.0.1:{port}/test\"\n"
        ),
    );
    let error = refused(&[&no_postgres], &[]).await;
    assert!(error.contains("store.url"), "{error}");
}
