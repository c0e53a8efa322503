//! `awaken bench http`: workload W over the HTTP API. Clients `POST /v1/runs` (the
//! `bench` agent: inference → `echo` → inference → text, scripted model, in-memory
//! store) and read each SSE stream to its `run_finish`; a run counts only when it
//! ended naturally with the scripted answer.
//!
//! Without `--url` the benchmark starts `awaken serve` (this executable, embedded
//! defaults, a free loopback port) as a child process, so server and clients are
//! separate processes and their CPU is told apart. Extra report fields then:
//!
//! | field | meaning |
//! |---|---|
//! | `server_cpu_us_per_run` | the server process's CPU time (user + system) per run |
//! | `client_cpu_us_per_run` | this process's CPU time per run (the HTTP clients) |
//! | `inprocess_cpu_us_per_run` | CPU per run of the same workload through `AgentRuntime` in this process, measured right after (the `bench local` figure) |
//! | `gateway_cpu_us_per_run` | `server_cpu_us_per_run - inprocess_cpu_us_per_run`: what HTTP, SSE, the mailbox hop and event fan-out cost per run |
//! | `server_sys_cpu_us_per_run`, `inprocess_sys_cpu_us_per_run` | the system-time part of the two CPU figures |
//! | `server_page_faults_per_run`, `inprocess_page_faults_per_run` | minor page faults per run: the heap's growth |
//!
//! CPU times come from `/proc/<pid>/stat` in clock ticks (10 ms): use enough runs
//! (the default 5,000 take seconds) for the per-run figures to be exact to a µs.
//! The system time and faults show when a figure paid for memory the host had
//! taken back from a VM: each fault then costs several times more (see
//! `docs/benchmarks.md`, fourteenth sitting).

use awaken_actors::AgentId;
use awaken_actors::thread::ThreadConfig;
use serde_json::{Value as JsonValue, json};

use awaken_actors::store::StoreIoCounts;

use super::BenchOptions;
use super::child::ServeChild;
use super::driver::{RunSample, drive};
use super::postgres::{self, BenchSchema};
use super::report::BenchReport;
use super::workload_w;
use crate::demo;
use crate::error::{GatewayError, Result};

/// The scenario's name in reports.
pub const NAME: &str = "http";

/// Runs before the measured ones, so connections and caches are warm.
const WARM_UP_RUNS: usize = 200;
/// Linux reports process CPU times in ticks of 1/100 s (`USER_HZ`).
const MICROS_PER_TICK: u64 = 10_000;

fn bench_error(error: impl std::fmt::Display) -> GatewayError {
    GatewayError::Bench(error.to_string())
}

/// The store of the server `awaken bench http` starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpStore {
    /// The embedded default: threads in memory.
    Memory,
    /// PostgreSQL at this URL, in a schema the benchmark creates and drops.
    Postgres(String),
}

/// Drives workload W over HTTP against `url`, or against a server it starts on
/// `store`.
pub async fn run(
    url: Option<&str>,
    store: &HttpStore,
    options: &BenchOptions,
) -> Result<BenchReport> {
    match (url, store) {
        (_, HttpStore::Memory) => measure(url, None, options).await,
        (Some(_), HttpStore::Postgres(_)) => Err(bench_error(
            "--store postgres measures a server the benchmark starts: leave out --url",
        )),
        (None, HttpStore::Postgres(database)) => {
            let schema = BenchSchema::create(database).await?;
            let measured = measure(None, Some(schema.url()), options).await;
            let dropped = schema.drop_now().await;
            let report = measured?;
            dropped?;
            Ok(report)
        }
    }
}

/// [`run`], with the child's PostgreSQL URL (its schema set) when it runs on one.
async fn measure(
    url: Option<&str>,
    postgres: Option<String>,
    options: &BenchOptions,
) -> Result<BenchReport> {
    let mut server = match url {
        Some(_) => None,
        None => Some(start_server(postgres.as_deref()).await?),
    };
    let base = match (&server, url) {
        (Some(server), _) => server.base.clone(),
        (None, Some(url)) => url.trim_end_matches('/').to_owned(),
        (None, None) => return Err(bench_error("no server to measure")),
    };
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(options.concurrency)
        .tcp_nodelay(true)
        .build()
        .map_err(bench_error)?;
    let start_url = format!("{base}/v1/runs");
    let job = {
        let client = client.clone();
        move |_| one_run(client.clone(), start_url.clone())
    };
    let warm_up = BenchOptions {
        progress: false,
        ..options.clone()
    };
    let warmed = drive(
        NAME,
        WARM_UP_RUNS,
        options.concurrency,
        &warm_up,
        job.clone(),
    )
    .await?;
    if let Some(error) = warmed.first_error {
        return Err(bench_error(format!("warm-up run failed: {error}")));
    }

    let sent_before = match postgres {
        Some(_) => Some(store_counts_of(&client, &base).await?),
        None => None,
    };
    let server_pid = server.as_ref().and_then(ServeChild::pid);
    let server_before = server_pid.map(ProcessUsage::of).transpose()?;
    let client_before = ProcessUsage::of_self()?;
    let driven = drive(NAME, options.runs, options.concurrency, options, job).await?;
    let client_usage = ProcessUsage::of_self()?.since(&client_before);
    let server_usage = match (server_pid, server_before) {
        (Some(pid), Some(before)) => Some(ProcessUsage::of(pid)?.since(&before)),
        _ => None,
    };
    let sent = match sent_before {
        Some(before) => Some(postgres::since(
            store_counts_of(&client, &base).await?,
            before,
        )),
        None => None,
    };
    if let Some(server) = server.take() {
        server.stop().await;
    }

    let runs = driven.completed.max(1);
    let mut report = driven
        .report(NAME, options.concurrency)
        .with("url", base)
        .with("client_cpu_us_per_run", client_usage.cpu_micros() / runs);
    if let Some(server) = server_usage {
        report = report
            .with("server_cpu_us_per_run", server.cpu_micros() / runs)
            .with("server_sys_cpu_us_per_run", server.system_micros / runs)
            .with("server_page_faults_per_run", server.faults_per(runs));
    }
    match (postgres, sent) {
        (Some(url), Some(sent)) => {
            report = postgres::with_reference(report, &url, sent, options).await?;
        }
        _ => {
            if let Some(server) = server_usage {
                report = with_inprocess_usage(report, options, server, runs).await?;
            }
        }
    }
    Ok(report)
}

/// Adds the in-process figures beside the server's (the memory store only: the
/// in-process run keeps its threads in memory too).
async fn with_inprocess_usage(
    report: BenchReport,
    options: &BenchOptions,
    server: ProcessUsage,
    runs: u64,
) -> Result<BenchReport> {
    let (inprocess, inprocess_runs) = inprocess_usage(options).await?;
    let server_per_run = server.cpu_micros() / runs;
    let inprocess_per_run = inprocess.cpu_micros() / inprocess_runs;
    Ok(report
        .with("inprocess_cpu_us_per_run", inprocess_per_run)
        .with(
            "gateway_cpu_us_per_run",
            i64::try_from(server_per_run).unwrap_or(i64::MAX)
                - i64::try_from(inprocess_per_run).unwrap_or(i64::MAX),
        )
        .with(
            "inprocess_sys_cpu_us_per_run",
            inprocess.system_micros / inprocess_runs,
        )
        .with(
            "inprocess_page_faults_per_run",
            inprocess.faults_per(inprocess_runs),
        ))
}

/// The server's store counters, from its `/metrics`.
async fn store_counts_of(client: &reqwest::Client, base: &str) -> Result<StoreIoCounts> {
    let text = client
        .get(format!("{base}/metrics"))
        .send()
        .await
        .map_err(bench_error)?
        .text()
        .await
        .map_err(bench_error)?;
    postgres::store_counts(&text)
        .ok_or_else(|| bench_error("the server's /metrics has no store counters"))
}

/// One run: POST, read the stream to its end, check the finish.
pub(super) async fn one_run(client: reqwest::Client, url: String) -> Result<RunSample, String> {
    let body = json!({
        "agentId": demo::BENCH_AGENT,
        "messages": [{"role": "user", "content": "go"}],
    });
    let response = client
        .post(&url)
        .json(&body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status();
    let text = response.text().await.map_err(|e| e.to_string())?;
    if !status.is_success() {
        return Err(format!("{status}: {text}"));
    }
    check_finish(&text)
}

/// Fails unless the stream's last event ends the run naturally with the W answer.
fn check_finish(stream: &str) -> Result<RunSample, String> {
    let last = stream
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .next_back()
        .ok_or("the stream has no event")?;
    let event: JsonValue = serde_json::from_str(last.trim()).map_err(|e| e.to_string())?;
    let natural =
        event["event_type"] == "run_finish" && event["termination"]["type"] == "natural_end";
    let answered = event["result"]["response"]
        .as_str()
        .is_some_and(|text| text.starts_with(demo::BENCH_ANSWER_PREFIX));
    if natural && answered {
        Ok(RunSample::default())
    } else {
        Err(format!("the run ended with {last}"))
    }
}

/// What workload W through `AgentRuntime` in this process used, and its runs.
async fn inprocess_usage(options: &BenchOptions) -> Result<(ProcessUsage, u64)> {
    let quiet = BenchOptions {
        progress: false,
        ..options.clone()
    };
    let runtime = demo::runtime(ThreadConfig::default())?;
    let agent = AgentId::new(demo::BENCH_AGENT).map_err(bench_error)?;
    let warm = runtime.clone();
    let warm_agent = agent.clone();
    drive(NAME, WARM_UP_RUNS, options.concurrency, &quiet, move |_| {
        workload_w::one_run(warm.clone(), warm_agent.clone())
    })
    .await?;
    let before = ProcessUsage::of_self()?;
    let measured = runtime.clone();
    let driven = drive(NAME, options.runs, options.concurrency, &quiet, move |_| {
        workload_w::one_run(measured.clone(), agent.clone())
    })
    .await?;
    let used = ProcessUsage::of_self()?.since(&before);
    runtime.shutdown().await;
    Ok((used, driven.completed.max(1)))
}

/// A process's CPU time and minor page faults so far, or between two readings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ProcessUsage {
    user_micros: u64,
    system_micros: u64,
    minor_faults: u64,
}

impl ProcessUsage {
    /// The usage of process `pid`, from `/proc/<pid>/stat`.
    fn of(pid: u32) -> Result<Self> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
        Self::parse(&stat).ok_or_else(|| bench_error(format!("unreadable /proc/{pid}/stat")))
    }

    fn of_self() -> Result<Self> {
        Self::of(std::process::id())
    }

    /// `minflt`, `utime` and `stime` of a `/proc/<pid>/stat` line (fields 10, 14
    /// and 15; the command name in field 2 may hold spaces and parentheses, so
    /// fields are counted after its last `)`).
    fn parse(stat: &str) -> Option<Self> {
        let rest = &stat[stat.rfind(')')? + 1..];
        let mut fields = rest.split_whitespace().skip(7);
        let minor_faults = fields.next()?.parse().ok()?;
        let mut times = fields.skip(3);
        let user: u64 = times.next()?.parse().ok()?;
        let system: u64 = times.next()?.parse().ok()?;
        Some(Self {
            user_micros: user * MICROS_PER_TICK,
            system_micros: system * MICROS_PER_TICK,
            minor_faults,
        })
    }

    /// What was used after `earlier`, a reading of the same process.
    fn since(&self, earlier: &Self) -> Self {
        Self {
            user_micros: self.user_micros.saturating_sub(earlier.user_micros),
            system_micros: self.system_micros.saturating_sub(earlier.system_micros),
            minor_faults: self.minor_faults.saturating_sub(earlier.minor_faults),
        }
    }

    fn cpu_micros(&self) -> u64 {
        self.user_micros + self.system_micros
    }

    /// Faults per run, to two decimals.
    fn faults_per(&self, runs: u64) -> f64 {
        let per_run = self.minor_faults as f64 / runs.max(1) as f64;
        (per_run * 100.0).round() / 100.0
    }
}

/// `awaken serve` (this executable) with the embedded defaults, as a child
/// process, on the PostgreSQL store at `postgres` if given.
async fn start_server(postgres: Option<&str>) -> Result<ServeChild> {
    let exe = std::env::current_exe()?;
    let env: Vec<(&str, &str)> = match postgres {
        Some(url) => vec![
            ("AWAKEN_STORE__KIND", "postgres"),
            ("AWAKEN_STORE__URL", url),
            // The A2A push sweeper claims webhooks every 5 s: a statement
            // no run sends, which would land in the counted window now and
            // then (`statements_per_run` 4.01 for 4). An hour keeps it out.
            ("AWAKEN_SERVER__A2A_PUSH__SWEEP_INTERVAL_MS", "3600000"),
        ],
        None => Vec::new(),
    };
    ServeChild::start(&exe, &env).await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn usage_fields_are_counted_after_the_command_name() {
        let stat = "4242 (awaken (x) y) S 1 4242 4242 0 -1 4194560 500 0 0 0 \
                    731 42 0 0 20 0 3 0 100 2000000 1000 18446744073709551615";
        let usage = ProcessUsage::parse(stat).unwrap();
        assert_eq!(
            usage,
            ProcessUsage {
                user_micros: 7_310_000,
                system_micros: 420_000,
                minor_faults: 500,
            }
        );
        assert_eq!(usage.cpu_micros(), 7_730_000);
        assert_eq!(ProcessUsage::parse("garbage"), None);
        assert_eq!(ProcessUsage::parse("1 (x) S 1 2"), None);
    }

    #[test]
    fn usage_between_readings_and_per_run() {
        let earlier = ProcessUsage {
            user_micros: 10,
            system_micros: 20,
            minor_faults: 100,
        };
        let later = ProcessUsage {
            user_micros: 40,
            system_micros: 50,
            minor_faults: 325,
        };
        let used = later.since(&earlier);
        assert_eq!(used.cpu_micros(), 60);
        assert!((used.faults_per(100) - 2.25).abs() < 1e-9);
        assert!((used.faults_per(3) - 75.0).abs() < 1e-9);
        assert!(ProcessUsage::of_self().unwrap().minor_faults > 0);
    }

    #[test]
    fn only_a_natural_end_with_the_answer_counts() {
        let finish = |termination: &str, response: &str| {
            format!(
                "id: 1\ndata: {{\"event_type\":\"step_end\"}}\n\nid: 2\ndata: {}\n\n",
                json!({"event_type": "run_finish", "termination": {"type": termination},
                       "result": {"response": response}})
            )
        };
        assert!(check_finish(&finish("natural_end", "echoed: go")).is_ok());
        assert!(check_finish(&finish("natural_end", "other")).is_err());
        assert!(check_finish(&finish("cancelled", "echoed: go")).is_err());
        assert!(check_finish("").is_err());
    }
}
