//! The `awaken` binary: parses the command line, runs the command on a two-worker
//! tokio runtime, and turns failures into exit codes (2: bad input, 1: failure).

use std::process::ExitCode;

use anyhow::Context;
use awaken_gateway::GatewayError;
use awaken_gateway::cli::{self, Cli};
use awaken_gateway::telemetry::Telemetry;
use clap::Parser;

// mimalloc: glibc malloc dominated the run loop's profile under concurrency; the
// 2.x line, not the crate's default 3.x (decision 0038).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Overrides the number of async worker threads (default: one per core the
/// process may use, which inside a container is its CPU limit).
const WORKERS_VAR: &str = "AWAKEN_WORKER_THREADS";

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Logs go to stderr (stdout carries the commands' output); `RUST_LOG` filters,
    // warnings and errors by default. Spans are exported when `[telemetry]` or
    // the `OTEL_*` variables say so, which is known before anything logs.
    let prepared = match cli::prepare(cli) {
        Ok(prepared) => prepared,
        Err(error) => return fail(&error.into()),
    };
    let telemetry = match Telemetry::install(prepared.log_format, prepared.export.as_ref())
        .map_err(|e| GatewayError::Config(e.to_string()))
    {
        Ok(telemetry) => telemetry,
        Err(error) => return fail(&error.into()),
    };
    keep_the_heap_in_small_pages();
    awaken_gateway::open_files::raise_to_hard_limit();
    let outcome = run(prepared);
    // Flushes the spans still queued before the process ends.
    drop(telemetry);
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(error) => fail(&error),
    }
}

fn fail(error: &anyhow::Error) -> ExitCode {
    eprintln!("error: {error:#}");
    let code = error
        .downcast_ref::<GatewayError>()
        .map_or(1, GatewayError::exit_code);
    ExitCode::from(code)
}

/// Turns transparent huge pages off for this process (decision 0042): mimalloc
/// asks for them on its arenas, and a server whose heap churns then zeroes a
/// whole 2 MiB page where it needed a few KiB. Best effort: a kernel without the
/// switch just keeps its default.
fn keep_the_heap_in_small_pages() {
    #[cfg(target_os = "linux")]
    if let Err(error) = rustix::thread::disable_transparent_huge_pages(true) {
        tracing::debug!(%error, "transparent huge pages stay as the kernel set them");
    }
}

fn run(prepared: cli::Prepared) -> anyhow::Result<u8> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(worker_threads()?)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    Ok(runtime.block_on(cli::dispatch(prepared))?)
}

fn worker_threads() -> Result<usize, GatewayError> {
    let Some(value) = std::env::var_os(WORKERS_VAR) else {
        return Ok(std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get));
    };
    value
        .to_str()
        .and_then(|text| text.trim().parse::<usize>().ok())
        .filter(|&workers| (1..=1024).contains(&workers))
        .ok_or_else(|| {
            GatewayError::Config(format!(
                "{WORKERS_VAR} must be a whole number from 1 to 1024, got {value:?}"
            ))
        })
}
