//! `awaken run` as a real process: the built binary, real stdin and stdout, the
//! approval prompt answered by typing, by flags, or not at all. Also `awaken bench
//! http`, whose server is a child process of the same binary.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long one `awaken` process may take.
const LIMIT: Duration = Duration::from_secs(60);

/// Runs `awaken args...` with `stdin` (none when `None`), killing it after [`LIMIT`].
fn awaken(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_awaken"))
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(text) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        pipe.write_all(text.as_bytes()).unwrap();
        // Dropping the pipe closes it: the process sees end of input after `text`.
    }
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > LIMIT {
            child.kill().unwrap();
            panic!("awaken {args:?} did not finish within {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn stdout_lines(output: &Output) -> Vec<String> {
    String::from_utf8(output.stdout.clone())
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The JSON report on the last stdout line of a command that succeeded.
fn last_report(output: &Output) -> serde_json::Value {
    let lines = stdout_lines(output);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{lines:#?}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(lines.last().unwrap()).unwrap()
}

/// Asserts that `expected` appear in `lines` in this order (other lines may sit
/// between them).
fn assert_in_order(lines: &[String], expected: &[&str]) {
    let mut rest = lines.iter();
    for want in expected {
        assert!(
            rest.any(|line| line.starts_with(want)),
            "missing (in order) {want:?} in:\n{}",
            lines.join("\n")
        );
    }
}

const DELETED: &str = r#"{"deleted":"notes.txt","remaining":["draft.md","todo.md"]}"#;

#[test]
fn typing_y_approves_the_deletion() {
    let output = awaken(&["run", "--agent", "demo", "delete notes.txt"], Some("y\n"));
    let lines = stdout_lines(&output);
    assert_eq!(output.status.code(), Some(0), "{lines:#?}");
    assert_in_order(
        &lines,
        &[
            r#"→ tool call delete_file({"path":"notes.txt"})"#,
            "⏸ approval needed: Allow tool `delete_file` with arguments {\"path\":\"notes.txt\"}?",
            "■ run finished: suspended",
            "Approve? [y/N/a(lways)] y",
            &format!("✓ tool result: {DELETED}"),
            &format!("Done. delete_file answered: {DELETED}"),
            "■ run finished: natural_end",
        ],
    );
    assert_eq!(lines.last().unwrap(), "■ run finished: natural_end");
}

#[test]
fn typing_n_refuses_and_the_run_still_ends() {
    let output = awaken(&["run", "--agent", "demo", "delete notes.txt"], Some("n\n"));
    let lines = stdout_lines(&output);
    assert_eq!(output.status.code(), Some(0), "{lines:#?}");
    assert_in_order(
        &lines,
        &[
            "⏸ approval needed:",
            "Approve? [y/N/a(lways)] n",
            "✗ tool failed:",
            "Done. delete_file answered: {\"",
            "■ run finished: natural_end",
        ],
    );
    assert!(
        !lines.iter().any(|l| l.starts_with("✓ tool result")),
        "nothing deleted: {lines:#?}"
    );
}

#[test]
fn typing_a_allows_always() {
    let output = awaken(&["run", "--agent", "demo", "go"], Some("a\n"));
    let lines = stdout_lines(&output);
    assert_eq!(output.status.code(), Some(0), "{lines:#?}");
    assert_in_order(
        &lines,
        &[
            "Approve? [y/N/a(lways)] a",
            &format!("✓ tool result: {DELETED}"),
            "■ run finished: natural_end",
        ],
    );
}

#[test]
fn end_of_input_counts_as_no() {
    let output = awaken(&["run", "--agent", "demo", "go"], Some(""));
    let lines = stdout_lines(&output);
    assert_eq!(output.status.code(), Some(0), "{lines:#?}");
    assert_in_order(
        &lines,
        &[
            "Approve? [y/N/a(lways)] n (end of input)",
            "✗ tool failed:",
            "■ run finished: natural_end",
        ],
    );
}

#[test]
fn flags_answer_without_stdin() {
    let approved = awaken(
        &[
            "run",
            "--agent",
            "demo",
            "--thread",
            "t-1",
            "--approve",
            "go",
        ],
        None,
    );
    let lines = stdout_lines(&approved);
    assert_eq!(approved.status.code(), Some(0), "{lines:#?}");
    assert_in_order(
        &lines,
        &[
            "Approve? [y/N/a(lways)] y (flag)",
            &format!("✓ tool result: {DELETED}"),
        ],
    );

    let denied = awaken(&["run", "--agent", "demo", "--deny", "go"], None);
    let lines = stdout_lines(&denied);
    assert_eq!(denied.status.code(), Some(0), "{lines:#?}");
    assert_in_order(
        &lines,
        &["Approve? [y/N/a(lways)] n (flag)", "✗ tool failed:"],
    );
}

#[test]
fn agents_without_approvals_run_straight_through() {
    let output = awaken(&["run", "--agent", "bench", "hi"], None);
    let lines = stdout_lines(&output);
    assert_eq!(output.status.code(), Some(0), "{lines:#?}");
    assert_in_order(
        &lines,
        &[
            r#"→ tool call echo({"value":42})"#,
            r#"✓ tool result: {"value":42}"#,
            r#"echoed: {"value":42}"#,
            "■ run finished: natural_end",
        ],
    );
    assert!(!lines.iter().any(|l| l.starts_with("Approve?")));
}

#[test]
fn unknown_agent_is_a_usage_error() {
    let output = awaken(&["run", "--agent", "nope", "hi"], None);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains("unknown agent `nope`"), "{stderr}");
    assert!(stderr.contains("demo"), "lists the agents: {stderr}");
    assert!(output.stdout.is_empty());
}

#[test]
fn bad_flags_are_usage_errors() {
    let both = awaken(
        &["run", "--agent", "demo", "--approve", "--deny", "x"],
        None,
    );
    assert_eq!(both.status.code(), Some(2));
    let bad_thread = awaken(&["run", "--agent", "demo", "--thread", "", "x"], None);
    assert_eq!(bad_thread.status.code(), Some(2));
}

#[test]
fn bench_local_prints_one_json_line() {
    let output = awaken(
        &[
            "bench",
            "local",
            "--runs",
            "5",
            "--concurrency",
            "2",
            "--quiet",
        ],
        None,
    );
    assert_eq!(output.status.code(), Some(0));
    let lines = stdout_lines(&output);
    assert_eq!(lines.len(), 1, "{lines:#?}");
    let json: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
    assert_eq!(json["scenario"], "workload-w");
    assert_eq!(json["runs"], 5);
    assert!(output.stderr.is_empty(), "--quiet prints no progress");
}

#[test]
fn the_worker_thread_count_comes_from_the_environment_and_is_checked() {
    let run = |workers: &str| {
        Command::new(env!("CARGO_BIN_EXE_awaken"))
            .args(["bench", "local", "--runs", "3", "--quiet"])
            .env("AWAKEN_WORKER_THREADS", workers)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let one = run("1");
    assert_eq!(one.status.code(), Some(0), "{one:?}");
    assert_eq!(stdout_lines(&one).len(), 1);
    for bad in ["0", "two", "-1", "100000"] {
        let output = run(bad);
        assert_eq!(output.status.code(), Some(2), "{bad}: {output:?}");
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert!(
            stderr.contains("AWAKEN_WORKER_THREADS must be a whole number"),
            "{bad}: {stderr}"
        );
        assert!(output.stdout.is_empty(), "{bad}: nothing ran");
    }
}

/// Decision 0042: the process keeps its heap out of transparent huge pages.
#[cfg(target_os = "linux")]
#[test]
fn the_process_runs_without_transparent_huge_pages() {
    use std::io::{BufRead, BufReader};

    let mut child = Command::new(env!("CARGO_BIN_EXE_awaken"))
        .args(["run", "--agent", "demo", "delete notes.txt"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The run waits for the typed answer: the process is up and has run.
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert!(
        lines.any(|line| line.unwrap().starts_with("■ run finished: suspended")),
        "the run never waited for approval"
    );
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
    let answer = child.stdin.take().unwrap().write_all(b"n\n");
    assert!(child.wait().unwrap().success(), "{answer:?}");
    let thp = status
        .lines()
        .find_map(|line| line.strip_prefix("THP_enabled:"))
        .map(str::trim);
    assert_eq!(thp, Some("0"), "{status}");
}

#[test]
fn bench_http_measures_its_own_server_and_the_in_process_run() {
    let output = awaken(
        &[
            "bench",
            "http",
            "--runs",
            "300",
            "--concurrency",
            "4",
            "--quiet",
        ],
        None,
    );
    let report = last_report(&output);
    assert_eq!(report["scenario"], "http");
    assert_eq!(report["runs"], 300);
    assert_eq!(report["errors"], 0);
    let field = |name: &str| {
        report[name]
            .as_f64()
            .unwrap_or_else(|| panic!("{name} in {report}"))
    };
    assert!(field("server_cpu_us_per_run") > 0.0, "{report}");
    assert!(field("inprocess_cpu_us_per_run") > 0.0, "{report}");
    assert_eq!(
        field("gateway_cpu_us_per_run"),
        field("server_cpu_us_per_run") - field("inprocess_cpu_us_per_run")
    );
    assert!(field("server_sys_cpu_us_per_run") <= field("server_cpu_us_per_run"));
    assert!(field("inprocess_sys_cpu_us_per_run") <= field("inprocess_cpu_us_per_run"));
    // Every run leaves its thread in the in-memory store: both heaps grow.
    assert!(field("server_page_faults_per_run") > 0.0, "{report}");
    assert!(field("inprocess_page_faults_per_run") > 0.0, "{report}");
}

/// Where the PostgreSQL benchmark runs unless `AWAKEN_TEST_POSTGRES_URL` says otherwise.
fn test_postgres_url() -> String {
    std::env::var("AWAKEN_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

#[test]
fn bench_http_on_postgres_counts_what_a_run_sends_beside_the_reference() {
    let url = test_postgres_url();
    let output = awaken(
        &[
            "bench",
            "http",
            "--store",
            "postgres",
            "--postgres-url",
            &url,
            "--runs",
            "100",
            // One run at a time: checkpoints of concurrent runs share statements
            // (group commit), and here every statement is counted exactly.
            "--concurrency",
            "1",
            "--quiet",
        ],
        None,
    );
    let report = last_report(&output);
    assert_eq!(report["store"], "postgres", "{report}");
    assert_eq!(report["runs"], 100);
    assert_eq!(report["errors"], 0);
    let field = |name: &str| {
        report[name]
            .as_f64()
            .unwrap_or_else(|| panic!("{name} in {report}"))
    };
    // Run start, the tool step's end, run end, and nothing else: the new
    // thread's actor starts from the core the request made (decision 0062) and
    // the run's first checkpoint writes the thread (decision 0071).
    assert_eq!(field("checkpoints_per_run"), 3.0, "{report}");
    assert_eq!(field("statements_per_run"), 3.0, "{report}");
    assert!(field("round_trips_per_run") >= 3.0, "{report}");
    assert!(field("reference_tx_per_s") > 0.0, "{report}");
    let expected_ratio =
        field("runs_per_s") * field("checkpoints_per_run") / field("reference_tx_per_s");
    assert!(
        (field("ratio_to_reference") - expected_ratio).abs() < 0.001,
        "{report}"
    );
    assert!(report.get("inprocess_cpu_us_per_run").is_none(), "{report}");
}

#[test]
fn bench_http_on_postgres_needs_a_url_and_its_own_server() {
    let missing = awaken(&["bench", "http", "--store", "postgres", "--quiet"], None);
    assert_eq!(missing.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("--postgres-url"),
        "{missing:?}"
    );
    let url = test_postgres_url();
    let external = awaken(
        &[
            "bench",
            "http",
            "--store",
            "postgres",
            "--postgres-url",
            &url,
            "--url",
            "http://127.0.0.1:9",
            "--quiet",
        ],
        None,
    );
    assert_ne!(external.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&external.stderr);
    assert!(stderr.contains("leave out --url"), "{stderr}");
    assert!(
        !stderr.contains(&url),
        "the database URL is not echoed: {stderr}"
    );
}

#[test]
fn bench_local_runs_the_engine_on_postgres_and_on_files() {
    let url = test_postgres_url();
    let output = awaken(
        &[
            "bench",
            "local",
            "--store",
            "postgres",
            "--postgres-url",
            &url,
            "--scenario",
            "sequential",
            "--runs",
            "50",
            "--quiet",
        ],
        None,
    );
    let report = last_report(&output);
    assert_eq!(report["store"], "postgres", "{report}");
    assert_eq!(report["errors"], 0, "{report}");
    // The engine alone: three checkpoints and the thread actor's snapshot read,
    // no fence (one node owns every thread) and nothing else.
    assert_eq!(report["checkpoints_per_run"], 3.0, "{report}");
    assert_eq!(report["statements_per_run"], 4.0, "{report}");
    assert!(
        report["reference_tx_per_s"].as_f64().unwrap() > 0.0,
        "{report}"
    );

    let output = awaken(
        &[
            "bench",
            "local",
            "--store",
            "file",
            "--scenario",
            "all",
            "--runs",
            "20",
            "-q",
        ],
        None,
    );
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let reports: Vec<serde_json::Value> = stdout_lines(&output)
        .iter()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let scenarios: Vec<&str> = reports
        .iter()
        .map(|r| r["scenario"].as_str().unwrap())
        .collect();
    assert_eq!(
        scenarios,
        ["workload-w", "sequential", "hitl"],
        "what files can serve"
    );
    for report in &reports {
        assert_eq!(report["store"], "file", "{report}");
        assert_eq!(report["errors"], 0, "{report}");
        assert!(report.get("statements_per_run").is_none(), "{report}");
    }

    let refused = awaken(
        &[
            "bench",
            "local",
            "--store",
            "file",
            "--scenario",
            "idle-threads",
            "-q",
        ],
        None,
    );
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("in-memory store only"), "{stderr}");
    let missing = awaken(&["bench", "local", "--store", "postgres", "-q"], None);
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("--postgres-url"));
}
