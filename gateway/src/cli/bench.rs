//! `awaken bench local`, `cluster`, `http` and `slow-clients`.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use awaken_cluster::RunInputPlacement;
use clap::{Args, Subcommand, ValueEnum};

use crate::bench::http::HttpStore;
use crate::bench::slow_clients::SlowClientsOptions;
use crate::bench::{self, BenchOptions, BenchStore, Scenario};
use crate::error::{GatewayError, Result};

/// Flags of `awaken bench`.
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// Where the load runs.
    #[command(subcommand)]
    pub target: BenchTarget,
}

/// Where `awaken bench` generates load.
#[derive(Debug, Clone, Subcommand)]
pub enum BenchTarget {
    /// On an embedded single-node runtime in this process.
    Local(LocalArgs),
    /// Against a NATS server: the cluster's building blocks.
    Cluster(ClusterArgs),
    /// Workload W over the HTTP API (`POST /v1/runs`, SSE read to the end).
    Http(HttpArgs),
    /// Ordinary API requests while slow clients trickle request bodies on
    /// many connections from several addresses (`awaken serve` as a child).
    SlowClients(SlowClientsArgs),
}

/// Flags of `awaken bench slow-clients`.
#[derive(Debug, Clone, Args)]
pub struct SlowClientsArgs {
    /// Slow connections from one address (127.0.0.2).
    #[arg(long, default_value_t = SlowClientsOptions::default().one_address, value_name = "N")]
    pub one_address: usize,
    /// Slow connections spread over `--addresses` more (127.0.0.3 …).
    #[arg(long, default_value_t = SlowClientsOptions::default().spread, value_name = "N")]
    pub spread: usize,
    /// Addresses the `--spread` connections come from.
    #[arg(long, default_value_t = SlowClientsOptions::default().addresses, value_name = "N",
          value_parser = at_least_one)]
    pub addresses: usize,
    /// Milliseconds between two body bytes of a slow connection.
    #[arg(long, default_value_t = 2_000, value_name = "MS", value_parser = at_least_one_u64)]
    pub byte_every_ms: u64,
    /// The node's body deadline, seconds (`server.body_read_timeout_secs`); the
    /// ordinary requests are sent before it.
    #[arg(long, default_value_t = SlowClientsOptions::default().body_timeout.as_secs(),
          value_name = "S", value_parser = at_least_one_u64)]
    pub body_timeout_s: u64,
    /// Ordinary requests to send while the slow connections are open.
    #[arg(long, default_value_t = SlowClientsOptions::default().requests, value_name = "N",
          value_parser = at_least_one)]
    pub requests: usize,
    /// Ordinary requests at once, each on its own connection.
    #[arg(long, default_value_t = SlowClientsOptions::default().concurrency, value_name = "C",
          value_parser = at_least_one)]
    pub concurrency: usize,
    /// The `awaken` binary to start as the node (an earlier build, to compare);
    /// this one by default.
    #[arg(long, value_name = "PATH")]
    pub server_exe: Option<PathBuf>,
    /// Print no progress on stderr.
    #[arg(long, short)]
    pub quiet: bool,
}

impl SlowClientsArgs {
    /// The sizes these flags ask for.
    pub fn options(&self) -> SlowClientsOptions {
        SlowClientsOptions {
            one_address: self.one_address,
            spread: self.spread,
            addresses: self.addresses,
            byte_every: Duration::from_millis(self.byte_every_ms),
            body_timeout: Duration::from_secs(self.body_timeout_s),
            requests: self.requests,
            concurrency: self.concurrency,
            server_exe: self.server_exe.clone(),
            progress: !self.quiet,
        }
    }
}

/// Flags of `awaken bench http`.
#[derive(Debug, Clone, Args)]
pub struct HttpArgs {
    /// A running server to measure; without it, `awaken serve` is started as a
    /// child process and its CPU per run is reported.
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// Runs to measure (after 200 warm-up runs).
    #[arg(long, default_value_t = BenchOptions::default().runs, value_name = "N",
          value_parser = at_least_one)]
    pub runs: usize,
    /// Concurrent clients, each with its own connection.
    #[arg(long, default_value_t = 64, value_name = "C", value_parser = at_least_one)]
    pub concurrency: usize,
    /// Time limit, seconds; no run starts after it.
    #[arg(long, default_value_t = BenchOptions::default().timeout.as_secs(), value_name = "S")]
    pub timeout_s: u64,
    /// Time limit of each run, seconds; a slower run counts as an error.
    #[arg(long, default_value_t = BenchOptions::default().run_timeout.as_secs(), value_name = "S")]
    pub run_timeout_s: u64,
    /// Print no progress on stderr.
    #[arg(long, short)]
    pub quiet: bool,
    /// The store of the server the benchmark starts. `postgres` also measures the
    /// database's reference (single-row upserts) and counts the store's
    /// checkpoints, statements and round trips per run.
    #[arg(long, value_enum, default_value_t = HttpStoreKind::Memory)]
    pub store: HttpStoreKind,
    /// The database for `--store postgres`; the benchmark works in a schema of its
    /// own there and drops it after.
    #[arg(long, value_name = "URL", required_if_eq("store", "postgres"))]
    pub postgres_url: Option<String>,
}

/// The stores `awaken bench http --store` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum HttpStoreKind {
    /// Threads in memory (the embedded default).
    Memory,
    /// PostgreSQL (`--postgres-url`).
    Postgres,
}

impl HttpArgs {
    /// The store these flags ask for.
    pub fn store(&self) -> HttpStore {
        match (self.store, &self.postgres_url) {
            (HttpStoreKind::Postgres, Some(url)) => HttpStore::Postgres(url.clone()),
            _ => HttpStore::Memory,
        }
    }

    /// The sizes and limits these flags ask for.
    pub fn options(&self) -> BenchOptions {
        BenchOptions {
            runs: self.runs,
            concurrency: self.concurrency,
            timeout: Duration::from_secs(self.timeout_s),
            run_timeout: Duration::from_secs(self.run_timeout_s),
            progress: !self.quiet,
            ..BenchOptions::default()
        }
    }
}

/// Flags of `awaken bench cluster`.
#[derive(Debug, Clone, Args)]
pub struct ClusterArgs {
    /// The scenario to run.
    #[arg(long, value_enum, default_value = "dispatch", value_name = "NAME")]
    pub scenario: ClusterScenarioArg,
    /// The NATS server (JetStream enabled) to measure against.
    #[arg(long, default_value = "nats://127.0.0.1:4222", value_name = "URL")]
    pub nats_url: String,
    /// Dispatch cycles (and raw publishes) to measure.
    #[arg(long, default_value_t = 20_000, value_name = "N", value_parser = at_least_one)]
    pub runs: usize,
    /// Cycles in flight at once.
    #[arg(long, default_value_t = BenchOptions::default().concurrency, value_name = "C",
          value_parser = at_least_one)]
    pub concurrency: usize,
    /// Time limit of each half, seconds.
    #[arg(long, default_value_t = BenchOptions::default().timeout.as_secs(), value_name = "S")]
    pub timeout_s: u64,
    /// Nodes in this process (`workload-w` only).
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = at_least_one)]
    pub nodes: usize,
    /// Where the nodes keep runs' input: `auto`, `inbox` or `ledger`
    /// (`workload-w`, `hitl-remote`; as `cluster.run_input`).
    #[arg(long, default_value = "auto", value_name = "WHERE")]
    pub run_input: RunInputPlacement,
    /// The nodes' shared thread store (`failover` only; use a scratch database).
    #[arg(long, value_name = "URL", env = "AWAKEN_POSTGRES_URL")]
    pub postgres_url: Option<String>,
    /// Print no progress on stderr.
    #[arg(long, short)]
    pub quiet: bool,
}

/// A cluster scenario on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ClusterScenarioArg {
    /// Mailbox enqueue → claim → ack beside raw JetStream publishes.
    Dispatch,
    /// A decision published on NATS by another client resumes a waiting run.
    HitlRemote,
    /// The owner of a waiting run is killed; the decision resumes it elsewhere
    /// (two `awaken node` processes; needs `--postgres-url`).
    Failover,
    /// Workload W submitted through the mailbox, run by the threads' owners on
    /// `--nodes` nodes in this process.
    WorkloadW,
    /// A delegate call's overhead with the parent on one node and the child on
    /// another (two nodes in this process).
    Delegation,
}

impl ClusterArgs {
    /// The sizes and limits these flags ask for.
    pub fn options(&self) -> BenchOptions {
        BenchOptions {
            runs: self.runs,
            concurrency: self.concurrency,
            timeout: Duration::from_secs(self.timeout_s),
            progress: !self.quiet,
            ..BenchOptions::default()
        }
    }
}

/// Flags of `awaken bench local`.
#[derive(Debug, Clone, Args)]
pub struct LocalArgs {
    /// The thread store of workload-w, sequential and hitl: in memory, files in a
    /// temporary directory, or PostgreSQL (`--postgres-url`; the benchmark works in
    /// a schema of its own there, drops it after, and also measures the database's
    /// reference and the store's statements per run).
    #[arg(long, value_enum, default_value_t = LocalStoreKind::Memory)]
    pub store: LocalStoreKind,
    /// The database for `--store postgres`.
    #[arg(long, value_name = "URL", required_if_eq("store", "postgres"))]
    pub postgres_url: Option<String>,
    /// The scenario to run; repeat the flag for several, or say `all`.
    #[arg(long, value_enum, default_value = "workload-w", value_name = "NAME")]
    pub scenario: Vec<ScenarioArg>,
    /// Runs per scenario (workload-w, sequential, hitl).
    #[arg(long, default_value_t = BenchOptions::default().runs, value_name = "N",
          value_parser = at_least_one)]
    pub runs: usize,
    /// Runs in flight at once (sequential always uses 1).
    #[arg(long, default_value_t = BenchOptions::default().concurrency, value_name = "C",
          value_parser = at_least_one)]
    pub concurrency: usize,
    /// Threads per phase of idle-threads; runs per phase of mailbox-memory.
    #[arg(long, default_value_t = BenchOptions::default().threads, value_name = "N",
          value_parser = at_least_one)]
    pub threads: usize,
    /// Time limit of each scenario, seconds; no run starts after it.
    #[arg(long, default_value_t = BenchOptions::default().timeout.as_secs(), value_name = "S")]
    pub timeout_s: u64,
    /// Time limit of each run, seconds; a slower run counts as an error.
    #[arg(long, default_value_t = BenchOptions::default().run_timeout.as_secs(), value_name = "S")]
    pub run_timeout_s: u64,
    /// Print no progress on stderr.
    #[arg(long, short)]
    pub quiet: bool,
}

/// The stores `awaken bench local --store` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LocalStoreKind {
    /// Threads in memory (the embedded default).
    Memory,
    /// Files in a temporary directory.
    File,
    /// PostgreSQL (`--postgres-url`).
    Postgres,
}

/// A scenario name on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ScenarioArg {
    /// Workload W: new thread, inference → tool → inference → text.
    WorkloadW,
    /// Workload W, one run at a time.
    Sequential,
    /// Workload W with an approval per run (decision latency).
    Hitl,
    /// Memory per idle thread, live and passivated.
    IdleThreads,
    /// A delegate call's overhead (parent call → child run → result), one run at a time.
    Delegation,
    /// Memory per queued input and per settled dispatch in the mailbox.
    MailboxMemory,
    /// Every scenario above, in that order.
    All,
}

impl LocalArgs {
    /// The scenarios to run, in order, each once.
    pub fn scenarios(&self) -> Vec<Scenario> {
        let mut chosen = Vec::new();
        for arg in &self.scenario {
            let add: &[Scenario] = match arg {
                ScenarioArg::WorkloadW => &[Scenario::WorkloadW],
                ScenarioArg::Sequential => &[Scenario::Sequential],
                ScenarioArg::Hitl => &[Scenario::Hitl],
                ScenarioArg::IdleThreads => &[Scenario::IdleThreads],
                ScenarioArg::Delegation => &[Scenario::Delegation],
                ScenarioArg::MailboxMemory => &[Scenario::MailboxMemory],
                ScenarioArg::All => &Scenario::ALL,
            };
            let store = self.options().store;
            for scenario in add {
                // `all` on another store than memory means every scenario it serves.
                let skipped = *arg == ScenarioArg::All && !store.serves(*scenario);
                if !skipped && !chosen.contains(scenario) {
                    chosen.push(*scenario);
                }
            }
        }
        chosen
    }

    /// The sizes and limits these flags ask for.
    pub fn options(&self) -> BenchOptions {
        BenchOptions {
            runs: self.runs,
            concurrency: self.concurrency,
            threads: self.threads,
            timeout: Duration::from_secs(self.timeout_s),
            run_timeout: Duration::from_secs(self.run_timeout_s),
            progress: !self.quiet,
            store: match (self.store, &self.postgres_url) {
                (LocalStoreKind::File, _) => BenchStore::File,
                (LocalStoreKind::Postgres, Some(url)) => BenchStore::Postgres(url.clone()),
                _ => BenchStore::Memory,
            },
        }
    }
}

/// Parses a whole number that must be at least 1.
fn at_least_one_u64(text: &str) -> Result<u64, String> {
    match text.parse::<u64>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// Parses a count that must be at least 1.
fn at_least_one(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// Runs the chosen scenarios, printing each report as soon as it is ready; 1 when
/// any run failed.
pub(super) async fn execute(args: BenchArgs) -> Result<u8> {
    let local = match args.target {
        BenchTarget::Local(local) => local,
        BenchTarget::Cluster(cluster) => return execute_cluster(cluster).await,
        BenchTarget::Http(http) => {
            let report =
                bench::http::run(http.url.as_deref(), &http.store(), &http.options()).await?;
            let mut stdout = std::io::stdout().lock();
            writeln!(stdout, "{}", report.to_json_line())?;
            stdout.flush()?;
            return Ok(u8::from(report.errors > 0));
        }
        BenchTarget::SlowClients(slow) => {
            let report = bench::slow_clients::run(&slow.options()).await?;
            let mut stdout = std::io::stdout().lock();
            writeln!(stdout, "{}", report.to_json_line())?;
            stdout.flush()?;
            return Ok(u8::from(report.errors > 0));
        }
    };
    let options = local.options();
    let mut failed = false;
    for scenario in local.scenarios() {
        if options.progress {
            eprintln!("{}: starting", scenario.name());
        }
        let report = bench::run(scenario, &options).await?;
        failed |= report.errors > 0;
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "{}", report.to_json_line())?;
        stdout.flush()?;
    }
    Ok(u8::from(failed))
}

async fn execute_cluster(args: ClusterArgs) -> Result<u8> {
    let options = args.options();
    let report = match args.scenario {
        ClusterScenarioArg::Dispatch => bench::dispatch::run(&args.nats_url, &options).await?,
        ClusterScenarioArg::HitlRemote => {
            bench::hitl_remote::run(&args.nats_url, args.run_input, &options).await?
        }
        ClusterScenarioArg::WorkloadW => {
            Box::pin(bench::cluster_w::run(
                &args.nats_url,
                args.nodes,
                args.run_input,
                &options,
            ))
            .await?
        }
        ClusterScenarioArg::Delegation => {
            Box::pin(bench::delegation::run_cluster(&args.nats_url, &options)).await?
        }
        ClusterScenarioArg::Failover => {
            let postgres_url = args.postgres_url.as_deref().ok_or_else(|| {
                GatewayError::Config("--scenario failover needs --postgres-url".into())
            })?;
            {
                let exe = std::env::current_exe()?;
                Box::pin(bench::failover::run(
                    &args.nats_url,
                    postgres_url,
                    &exe,
                    &options,
                ))
                .await?
            }
        }
    };
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{}", report.to_json_line())?;
    stdout.flush()?;
    Ok(u8::from(report.errors > 0))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn local(args: &[&str]) -> LocalArgs {
        let cli = Cli::try_parse_from(["awaken", "bench", "local"].iter().chain(args)).unwrap();
        let Command::Bench(BenchArgs {
            target: BenchTarget::Local(local),
        }) = cli.command
        else {
            panic!("not bench local");
        };
        local
    }

    #[test]
    fn cluster_defaults_to_dispatch_on_the_local_server() {
        let cli = Cli::try_parse_from(["awaken", "bench", "cluster", "--runs", "5"]).unwrap();
        let Command::Bench(BenchArgs {
            target: BenchTarget::Cluster(cluster),
        }) = cli.command
        else {
            panic!("not bench cluster");
        };
        assert_eq!(cluster.scenario, ClusterScenarioArg::Dispatch);
        assert_eq!(cluster.nats_url, "nats://127.0.0.1:4222");
        assert_eq!(cluster.options().runs, 5);
        assert_eq!(cluster.run_input, RunInputPlacement::Auto);
        assert!(Cli::try_parse_from(["awaken", "bench", "cluster", "--runs", "0"]).is_err());
        let Err(refused) = Cli::try_parse_from(["awaken", "bench", "cluster", "--run-input", "kv"])
        else {
            panic!("--run-input kv was accepted");
        };
        assert!(refused.to_string().contains("\"kv\""), "{refused}");
    }

    #[test]
    fn the_store_of_bench_local_is_chosen_and_all_means_what_it_serves() {
        let files = local(&["--store", "file", "--scenario", "all"]);
        assert_eq!(files.options().store, BenchStore::File);
        assert_eq!(
            files.scenarios(),
            [Scenario::WorkloadW, Scenario::Sequential, Scenario::Hitl]
        );
        let postgres = local(&["--store", "postgres", "--postgres-url", "postgres://db/x"]);
        assert_eq!(
            postgres.options().store,
            BenchStore::Postgres("postgres://db/x".into())
        );
        let named = local(&["--store", "file", "--scenario", "idle-threads"]);
        assert_eq!(
            named.scenarios(),
            [Scenario::IdleThreads],
            "refused when run"
        );
        assert!(!BenchStore::File.serves(Scenario::IdleThreads));
        assert!(Cli::try_parse_from(["awaken", "bench", "local", "--store", "postgres"]).is_err());
        assert!(Cli::try_parse_from(["awaken", "bench", "local", "--store", "redis"]).is_err());
    }

    #[test]
    fn defaults_to_workload_w() {
        let args = local(&[]);
        assert_eq!(args.scenarios(), [Scenario::WorkloadW]);
        assert_eq!(args.options(), BenchOptions::default());
    }

    #[test]
    fn all_and_repeats_run_each_scenario_once() {
        let args = local(&[
            "--scenario",
            "hitl",
            "--scenario",
            "all",
            "--runs",
            "7",
            "-q",
        ]);
        assert_eq!(
            args.scenarios(),
            [
                Scenario::Hitl,
                Scenario::WorkloadW,
                Scenario::Sequential,
                Scenario::IdleThreads,
                Scenario::Delegation,
                Scenario::MailboxMemory
            ]
        );
        assert_eq!(args.options().runs, 7);
        assert!(!args.options().progress);
        assert!(Cli::try_parse_from(["awaken", "bench", "local", "--concurrency", "0"]).is_err());
    }
}
