//! The command line: clap definitions and dispatch.
//!
//! ```text
//! awaken run --agent ID [--thread ID] [--approve | --deny] MESSAGE
//! awaken node --postgres-url URL [--nats-url URL] [--node-id ID] [--shards N]
//!             [--lease-ttl-s S] [--claim-lease-ms MS] [--replicas N]
//!             [--drain-timeout-s S] [--tool-journal PATH]
//! awaken serve [--config PATH] [--address HOST:PORT] [--tool-journal PATH]
//! awaken bench local [--scenario NAME]... [--runs N] [--concurrency C] [--threads N]
//!                    [--timeout-s S] [--run-timeout-s S] [--quiet]
//! ```
//!
//! [`dispatch`] returns the process exit code for commands that completed; errors
//! carry their own ([`GatewayError::exit_code`](crate::GatewayError::exit_code)).

mod bench;
mod node;
mod run;
mod serve;

use clap::{Parser, Subcommand};

pub use bench::{BenchArgs, BenchTarget, LocalArgs, ScenarioArg};
pub use node::NodeArgs;
pub use run::RunArgs;
pub use serve::ServeArgs;

use crate::config::ServeConfig;
use crate::config::file::paths;
use crate::error::{GatewayError, Result};
use crate::telemetry::{
    ExportSettings, LogFormat, MetricsExportSettings, ProcessEnv, TelemetryConfig,
};

/// `awaken`: run agents on an embedded single-node runtime, and measure it.
#[derive(Debug, Parser)]
#[command(name = "awaken", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The `awaken` commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run an agent once on the embedded runtime and stream its events.
    Run(RunArgs),
    /// Generate load and print one JSON line per scenario.
    Bench(BenchArgs),
    /// Run one node of a cluster on NATS and PostgreSQL until SIGTERM.
    Node(NodeArgs),
    /// Serve the HTTP API (single node, or a cluster member) until SIGTERM.
    Serve(ServeArgs),
}

/// A parsed command with what is read before anything runs: `awaken serve`'s
/// configuration (read once, here), the log format and the trace export.
#[derive(Debug)]
pub struct Prepared {
    command: Ready,
    /// How log lines are written.
    pub log_format: LogFormat,
    /// Where spans go, if anywhere.
    pub export: Option<ExportSettings>,
    /// Where `awaken serve` and `awaken node` push their metrics, if anywhere.
    metric_push: Option<MetricsExportSettings>,
}

/// A command ready to run: `awaken serve` with its configuration read.
#[derive(Debug)]
enum Ready {
    Serve(ServeArgs, Box<ServeConfig>),
    Other(Command),
}

/// Reads what `cli`'s command needs before the subscriber is installed: `[log]`
/// and `[telemetry]` of `awaken serve`'s config (under the `OTEL_*` variables);
/// the variables alone for the other commands.
pub fn prepare(cli: Cli) -> Result<Prepared> {
    let (command, log_format, telemetry) = match cli.command {
        Command::Serve(args) => {
            let config = ServeConfig::load_files(&paths(&args.config), std::env::vars())
                .map_err(|e| GatewayError::Config(e.to_string()))?;
            let (format, telemetry) = (config.log.format, config.telemetry.clone());
            (Ready::Serve(args, Box::new(config)), format, telemetry)
        }
        other => (
            Ready::Other(other),
            log_format_from_env()?,
            TelemetryConfig::default(),
        ),
    };
    let export = telemetry
        .resolve(&ProcessEnv)
        .map_err(|e| GatewayError::Config(e.to_string()))?;
    let metric_push = telemetry
        .resolve_metrics(&ProcessEnv)
        .map_err(|e| GatewayError::Config(e.to_string()))?;
    Ok(Prepared {
        command,
        log_format,
        export,
        metric_push,
    })
}

/// Runs the prepared command; returns the exit code (0 when everything went well).
pub async fn dispatch(prepared: Prepared) -> Result<u8> {
    let push = prepared.metric_push.as_ref();
    match prepared.command {
        Ready::Serve(args, config) => Box::pin(serve::execute(args, *config, push)).await,
        Ready::Other(Command::Run(args)) => run::execute(args).await,
        Ready::Other(Command::Bench(args)) => bench::execute(args).await,
        Ready::Other(Command::Node(args)) => Box::pin(node::execute(args, push)).await,
        Ready::Other(Command::Serve(args)) => {
            let config = ServeConfig::load_files(&paths(&args.config), std::env::vars())
                .map_err(|e| GatewayError::Config(e.to_string()))?;
            Box::pin(serve::execute(args, config, push)).await
        }
    }
}

/// The variable that sets the log format of the commands without a config file.
const LOG_FORMAT_VAR: &str = "AWAKEN_LOG__FORMAT";

fn log_format_from_env() -> Result<LogFormat> {
    match std::env::var(LOG_FORMAT_VAR).ok().as_deref().map(str::trim) {
        None | Some("" | "text") => Ok(LogFormat::Text),
        Some("json") => Ok(LogFormat::Json),
        Some(other) => Err(GatewayError::Config(format!(
            "{LOG_FORMAT_VAR} = {other:?} is not valid: expected `text` or `json`"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }
}
