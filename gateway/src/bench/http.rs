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
//!
//! CPU times come from `/proc/<pid>/stat` in clock ticks (10 ms): use enough runs
//! (the default 5,000 take seconds) for the per-run figures to be exact to a µs.

use std::time::Duration;

use awaken_actors::AgentId;
use awaken_actors::thread::ThreadConfig;
use serde_json::{Value as JsonValue, json};

use super::BenchOptions;
use super::child::AwakenChild;
use super::driver::{RunSample, drive};
use super::report::BenchReport;
use super::workload_w;
use crate::demo;
use crate::error::{GatewayError, Result};

/// The scenario's name in reports.
pub const NAME: &str = "http";

/// Runs before the measured ones, so connections and caches are warm.
const WARM_UP_RUNS: usize = 200;
/// How long the server child may take to listen.
const START_DEADLINE: Duration = Duration::from_secs(30);
/// Linux reports process CPU times in ticks of 1/100 s (`USER_HZ`).
const MICROS_PER_TICK: u64 = 10_000;

fn bench_error(error: impl std::fmt::Display) -> GatewayError {
    GatewayError::Bench(error.to_string())
}

/// Drives workload W over HTTP against `url`, or against a server it starts.
pub async fn run(url: Option<&str>, options: &BenchOptions) -> Result<BenchReport> {
    let mut server = match url {
        Some(_) => None,
        None => Some(ServerChild::start().await?),
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

    let server_pid = server.as_ref().and_then(ServerChild::pid);
    let server_before = server_pid.map(cpu_micros).transpose()?;
    let client_before = cpu_micros_self()?;
    let driven = drive(NAME, options.runs, options.concurrency, options, job).await?;
    let client_cpu = cpu_micros_self()?.saturating_sub(client_before);
    let server_cpu = match (server_pid, server_before) {
        (Some(pid), Some(before)) => Some(cpu_micros(pid)?.saturating_sub(before)),
        _ => None,
    };
    if let Some(server) = server.take() {
        server.stop().await;
    }

    let runs = driven.completed.max(1);
    let mut report = driven
        .report(NAME, options.concurrency)
        .with("url", base)
        .with("client_cpu_us_per_run", client_cpu / runs);
    if let Some(server_cpu) = server_cpu {
        let inprocess = inprocess_cpu_per_run(options).await?;
        let server_per_run = server_cpu / runs;
        report = report
            .with("server_cpu_us_per_run", server_per_run)
            .with("inprocess_cpu_us_per_run", inprocess)
            .with(
                "gateway_cpu_us_per_run",
                i64::try_from(server_per_run).unwrap_or(i64::MAX)
                    - i64::try_from(inprocess).unwrap_or(i64::MAX),
            );
    }
    Ok(report)
}

/// One run: POST, read the stream to its end, check the finish.
async fn one_run(client: reqwest::Client, url: String) -> Result<RunSample, String> {
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

/// CPU per run of workload W through `AgentRuntime` in this process.
async fn inprocess_cpu_per_run(options: &BenchOptions) -> Result<u64> {
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
    let before = cpu_micros_self()?;
    let measured = runtime.clone();
    let driven = drive(NAME, options.runs, options.concurrency, &quiet, move |_| {
        workload_w::one_run(measured.clone(), agent.clone())
    })
    .await?;
    let cpu = cpu_micros_self()?.saturating_sub(before);
    runtime.shutdown().await;
    Ok(cpu / driven.completed.max(1))
}

/// User + system CPU time of process `pid`, µs.
fn cpu_micros(pid: u32) -> Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_cpu_ticks(&stat)
        .map(|ticks| ticks * MICROS_PER_TICK)
        .ok_or_else(|| bench_error(format!("unreadable /proc/{pid}/stat")))
}

fn cpu_micros_self() -> Result<u64> {
    cpu_micros(std::process::id())
}

/// `utime + stime` of a `/proc/<pid>/stat` line (fields 14 and 15; the command
/// name in field 2 may hold spaces, so fields are counted after its `)`).
fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let user: u64 = fields.next()?.parse().ok()?;
    let system: u64 = fields.next()?.parse().ok()?;
    Some(user + system)
}

/// `awaken serve` with the embedded defaults, as a child process.
struct ServerChild {
    child: AwakenChild,
    base: String,
}

impl ServerChild {
    async fn start() -> Result<Self> {
        let exe = std::env::current_exe()?;
        let args = ["serve", "--address", "127.0.0.1:0"];
        let (child, line) = AwakenChild::start(&exe, &args, START_DEADLINE).await?;
        let listening: JsonValue = serde_json::from_str(&line)
            .map_err(|_| bench_error(format!("awaken serve did not start: {line:?}")))?;
        let address = listening["address"]
            .as_str()
            .ok_or_else(|| bench_error(format!("no address in {line:?}")))?;
        Ok(Self {
            child,
            base: format!("http://{address}"),
        })
    }

    fn pid(&self) -> Option<u32> {
        self.child.pid()
    }

    /// SIGTERM, then SIGKILL if it does not stop within its shutdown deadline.
    async fn stop(self) {
        self.child.stop(Duration::from_secs(35)).await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn cpu_ticks_are_counted_after_the_command_name() {
        let stat = "4242 (awaken (x) y) S 1 4242 4242 0 -1 4194560 500 0 0 0 \
                    731 42 0 0 20 0 3 0 100 2000000 1000 18446744073709551615";
        assert_eq!(parse_cpu_ticks(stat), Some(773));
        assert_eq!(parse_cpu_ticks("garbage"), None);
        assert!(cpu_micros_self().is_ok());
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
