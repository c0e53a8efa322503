//! `awaken bench slow-clients`: whether slow clients can take the API down.
//!
//! The benchmark starts `awaken serve` (embedded defaults, the body deadline
//! `server.body_read_timeout_secs` set to `--body-timeout-s`) as a child process,
//! then opens slow connections: `--one-address` from 127.0.0.2 and `--spread`
//! spread over `--addresses` more (127.0.0.3 …). Each sends a `POST /v1/threads`
//! head promising a 100,000-byte body, then one body byte every `--byte-every-ms`.
//! Once the server has seen every one of them (or answered it), another client
//! (127.0.0.1) sends `--requests` ordinary requests with `--concurrency` at a
//! time, alternately `GET /v1/threads` and `POST /v1/runs` to the `bench` agent
//! with its event stream read to the end, for as long as the slow connections
//! stay open (the ordinary phase stops a second before the first deadline).
//! Then it waits for the slow connections' answers.
//!
//! `runs`, `p50_us`, `p99_us`, … and `errors` are the ordinary requests' (a 503
//! is an error). Besides:
//!
//! | field | meaning |
//! |---|---|
//! | `slow_connections`, `slow_addresses` | slow connections opened, and the addresses they came from |
//! | `slow_open_at_start`, `slow_open_at_end` | slow connections still waiting for an answer when the ordinary requests started and when they ended |
//! | `answered`, `refused_503` | ordinary requests answered as expected, and refused with 503 |
//! | `server_bodies_arriving`, `server_connections_open` | the node's gauges once every slow connection was seen (absent from nodes without them) |
//! | `server_rss_before_kb`, `server_rss_with_kb` | the node's resident set before the slow connections and with them open |
//! | `server_bytes_per_connection` | `(server_rss_with_kb - server_rss_before_kb) × 1024 / slow_open_at_start` |
//! | `server_peak_rss_kb` | the node's peak resident set (`VmHWM`) |
//! | `slow_408`, `slow_503`, `slow_other_status`, `slow_closed`, `slow_never_cut` | what became of the slow connections: answered 408, answered 503, another answer, closed without one, neither within the deadline and 15 s |
//! | `slow_408_after_ms_min`, `slow_408_after_ms_max` | how long after its head a slow connection got its 408 |
//!
//! `--server-exe` starts another `awaken` binary as the node (an earlier build,
//! to compare); the node's gauges are read from `/metrics`, and a node without
//! them still works: it is taken to have seen a slow connection once its
//! `awaken_http_requests_in_flight` counts it.

mod trickle;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::BenchOptions;
use super::child::ServeChild;
use super::driver::{RunSample, drive};
use super::http::one_run;
use super::report::{BenchReport, peak_rss_kb_of, rss_kb_of};
use crate::error::{GatewayError, Result};
use trickle::{Fate, Trickling, loopback};

/// The scenario's name in reports.
pub const NAME: &str = "slow-clients";

/// Ordinary requests before the measured ones, so the node's caches are warm.
const WARM_UP_REQUESTS: usize = 50;
/// How long the node may take to see every slow connection.
const SEEN_DEADLINE: Duration = Duration::from_secs(60);
/// How long before the first slow connection's deadline the ordinary requests stop.
const BEFORE_DEADLINE: Duration = Duration::from_secs(1);

/// The sizes of `awaken bench slow-clients`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlowClientsOptions {
    /// Slow connections from one address (127.0.0.2).
    pub one_address: usize,
    /// Slow connections spread over `addresses` more.
    pub spread: usize,
    /// Addresses the `spread` connections come from (127.0.0.3 …).
    pub addresses: usize,
    /// How often each slow connection sends a body byte.
    pub byte_every: Duration,
    /// The node's body deadline (`server.body_read_timeout_secs`), whole seconds.
    pub body_timeout: Duration,
    /// Ordinary requests to send while the slow connections are open.
    pub requests: usize,
    /// Ordinary requests at once.
    pub concurrency: usize,
    /// The `awaken` binary to start as the node; this one when unset.
    pub server_exe: Option<PathBuf>,
    /// Whether to print progress on stderr.
    pub progress: bool,
}

impl Default for SlowClientsOptions {
    fn default() -> Self {
        Self {
            one_address: 100,
            spread: 1_000,
            addresses: 10,
            byte_every: Duration::from_secs(2),
            body_timeout: Duration::from_secs(20),
            requests: 2_000,
            concurrency: 4,
            server_exe: None,
            progress: true,
        }
    }
}

fn bench_error(error: impl std::fmt::Display) -> GatewayError {
    GatewayError::Bench(error.to_string())
}

/// Runs the scenario.
pub async fn run(options: &SlowClientsOptions) -> Result<BenchReport> {
    let exe = match &options.server_exe {
        Some(exe) => exe.clone(),
        None => std::env::current_exe()?,
    };
    let body_timeout = options.body_timeout.as_secs().max(1);
    let timeout_env = body_timeout.to_string();
    let server = ServeChild::start(
        &exe,
        &[(
            "AWAKEN_SERVER__BODY_READ_TIMEOUT_SECS",
            timeout_env.as_str(),
        )],
    )
    .await?;
    let measured = measure(&server, options, Duration::from_secs(body_timeout)).await;
    server.stop().await;
    measured
}

async fn measure(
    server: &ServeChild,
    options: &SlowClientsOptions,
    body_timeout: Duration,
) -> Result<BenchReport> {
    let pid = server
        .pid()
        .ok_or_else(|| bench_error("the node is not running"))?;
    let address: SocketAddr = server
        .base
        .trim_start_matches("http://")
        .parse()
        .map_err(bench_error)?;
    let client = reqwest::Client::builder()
        .local_address(IpAddr::from([127, 0, 0, 1]))
        .pool_max_idle_per_host(options.concurrency)
        .tcp_nodelay(true)
        .build()
        .map_err(bench_error)?;
    let base = server.base.clone();
    let refused = Arc::new(AtomicU64::new(0));
    let job = {
        let client = client.clone();
        let base = base.clone();
        let refused = Arc::clone(&refused);
        move |index| ordinary(client.clone(), base.clone(), index, Arc::clone(&refused))
    };
    let quiet = BenchOptions {
        progress: false,
        ..BenchOptions::default()
    };
    let warmed = drive(
        NAME,
        WARM_UP_REQUESTS,
        options.concurrency,
        &quiet,
        job.clone(),
    )
    .await?;
    if let Some(error) = warmed.first_error {
        return Err(bench_error(format!("warm-up request failed: {error}")));
    }
    refused.store(0, Ordering::Relaxed);
    let rss_before = rss_kb_of(pid);

    let mut sources = vec![(loopback(0)?, options.one_address)];
    let addresses = options.addresses.max(1);
    for index in 0..addresses {
        let share = options.spread / addresses + usize::from(index < options.spread % addresses);
        sources.push((loopback(index + 1)?, share));
    }
    if options.progress {
        eprintln!(
            "{NAME}: opening {} slow connections",
            options.one_address + options.spread
        );
    }
    let slow = Trickling::open(address, &sources, options.byte_every, body_timeout).await?;
    let seen = seen_by_node(&client, &base, &slow).await?;
    let rss_with = rss_kb_of(pid);
    let open_at_start = slow.opened - slow.ended();

    let left = (slow.first_opened + body_timeout).saturating_duration_since(Instant::now());
    let during = BenchOptions {
        timeout: left.saturating_sub(BEFORE_DEADLINE),
        progress: options.progress,
        ..BenchOptions::default()
    };
    if options.progress {
        eprintln!(
            "{NAME}: {open_at_start} slow connections open; ordinary requests for at most {:.1} s",
            during.timeout.as_secs_f64()
        );
    }
    let driven = drive(NAME, options.requests, options.concurrency, &during, job).await?;
    let open_at_end = slow.opened - slow.ended();
    let refused = refused.load(Ordering::Relaxed);
    if options.progress {
        eprintln!("{NAME}: waiting for the slow connections' answers");
    }
    let opened = slow.opened;
    let fates = Fates::of(&slow.fates().await?);

    let grown_kb = rss_with.saturating_sub(rss_before);
    let per_connection = (grown_kb * 1024) / u64::try_from(open_at_start.max(1)).unwrap_or(1);
    let mut report = driven
        .report(NAME, options.concurrency)
        .with("url", base)
        .with("slow_connections", opened)
        .with("slow_addresses", sources.len())
        .with("body_timeout_s", body_timeout.as_secs())
        .with(
            "byte_every_ms",
            u64::try_from(options.byte_every.as_millis()).unwrap_or(u64::MAX),
        )
        .with("slow_open_at_start", open_at_start)
        .with("slow_open_at_end", open_at_end)
        .with("answered", driven.completed - driven.errors)
        .with("refused_503", refused)
        .with("server_rss_before_kb", rss_before)
        .with("server_rss_with_kb", rss_with)
        .with("server_bytes_per_connection", per_connection)
        .with("server_peak_rss_kb", peak_rss_kb_of(pid))
        .with("slow_408", fates.timed_out)
        .with("slow_503", fates.refused)
        .with("slow_other_status", fates.other)
        .with("slow_closed", fates.closed)
        .with("slow_never_cut", fates.never_cut)
        .with("slow_408_after_ms_min", fates.timed_out_after_ms.0)
        .with("slow_408_after_ms_max", fates.timed_out_after_ms.1);
    if let Some(bodies) = seen.bodies_arriving {
        report = report.with("server_bodies_arriving", bodies);
    }
    if let Some(connections) = seen.connections_open {
        report = report.with("server_connections_open", connections);
    }
    Ok(report)
}

/// One ordinary request: `GET /v1/threads` for even indexes, a `bench` run with
/// its stream read to the end for odd ones. A 503 is counted in `refused`.
async fn ordinary(
    client: reqwest::Client,
    base: String,
    index: usize,
    refused: Arc<AtomicU64>,
) -> Result<RunSample, String> {
    let outcome = if index.is_multiple_of(2) {
        list_threads(&client, &base).await
    } else {
        one_run(client, format!("{base}/v1/runs")).await
    };
    if let Err(error) = &outcome
        && error.starts_with("503")
    {
        refused.fetch_add(1, Ordering::Relaxed);
    }
    outcome
}

async fn list_threads(client: &reqwest::Client, base: &str) -> Result<RunSample, String> {
    let response = client
        .get(format!("{base}/v1/threads"))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status();
    let text = response.text().await.map_err(|e| e.to_string())?;
    if status.is_success() {
        Ok(RunSample::default())
    } else {
        Err(format!("{status}: {text}"))
    }
}

/// The node's gauges once it has seen every slow connection.
#[derive(Debug, Default)]
struct Seen {
    bodies_arriving: Option<f64>,
    connections_open: Option<f64>,
}

/// Waits until the node counts every slow connection that is still open among
/// its requests in flight (the scrape itself is one of them).
async fn seen_by_node(client: &reqwest::Client, base: &str, slow: &Trickling) -> Result<Seen> {
    let deadline = Instant::now() + SEEN_DEADLINE;
    loop {
        let text = client
            .get(format!("{base}/metrics"))
            .send()
            .await
            .map_err(bench_error)?
            .text()
            .await
            .map_err(bench_error)?;
        let in_flight = gauge(&text, "awaken_http_requests_in_flight").unwrap_or(0.0);
        let waiting = (slow.opened - slow.ended()) as f64;
        if in_flight - 1.0 >= waiting {
            return Ok(Seen {
                bodies_arriving: gauge(&text, "awaken_http_request_bodies_arriving"),
                connections_open: gauge(&text, "awaken_http_connections_open"),
            });
        }
        if Instant::now() >= deadline {
            return Err(bench_error(format!(
                "the node saw {in_flight} requests in flight, not the {waiting} slow ones"
            )));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// An unlabelled metric of a `/metrics` text.
fn gauge(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse().ok())
}

/// The slow connections' fates, counted.
#[derive(Debug, Default, PartialEq, Eq)]
struct Fates {
    timed_out: u64,
    refused: u64,
    other: u64,
    closed: u64,
    never_cut: u64,
    /// The soonest and the latest 408, milliseconds after the head.
    timed_out_after_ms: (u64, u64),
}

impl Fates {
    fn of(fates: &[Fate]) -> Self {
        let mut counted = Self::default();
        let mut soonest = u64::MAX;
        let mut latest = 0;
        for fate in fates {
            match *fate {
                Fate::Answered { status: 408, after } => {
                    counted.timed_out += 1;
                    let ms = u64::try_from(after.as_millis()).unwrap_or(u64::MAX);
                    soonest = soonest.min(ms);
                    latest = latest.max(ms);
                }
                Fate::Answered { status: 503, .. } => counted.refused += 1,
                Fate::Answered { .. } => counted.other += 1,
                Fate::Closed { .. } => counted.closed += 1,
                Fate::NeverCut => counted.never_cut += 1,
            }
        }
        if counted.timed_out > 0 {
            counted.timed_out_after_ms = (soonest, latest);
        }
        counted
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn fates_are_counted_by_what_the_server_did() {
        let after = |ms| Duration::from_millis(ms);
        let fates = Fates::of(&[
            Fate::Answered {
                status: 408,
                after: after(20_100),
            },
            Fate::Answered {
                status: 408,
                after: after(19_900),
            },
            Fate::Answered {
                status: 503,
                after: after(3),
            },
            Fate::Answered {
                status: 200,
                after: after(3),
            },
            Fate::Closed { after: after(1) },
            Fate::NeverCut,
        ]);
        assert_eq!(
            fates,
            Fates {
                timed_out: 2,
                refused: 1,
                other: 1,
                closed: 1,
                never_cut: 1,
                timed_out_after_ms: (19_900, 20_100),
            }
        );
        assert_eq!(Fates::of(&[]), Fates::default());
    }

    #[test]
    fn gauges_are_read_by_their_whole_name() {
        let text = "# TYPE awaken_http_connections_open gauge\n\
                    awaken_http_connections_open 1101\n\
                    awaken_http_connections_open_total 3\n";
        assert_eq!(gauge(text, "awaken_http_connections_open"), Some(1101.0));
        assert_eq!(gauge(text, "awaken_http_request_bodies_arriving"), None);
    }
}
