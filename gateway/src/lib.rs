//! The `awaken` binary's library: the embedded single-node runtime ([`demo`]), the
//! `run` command ([`run_cmd`]), the load generator ([`bench`](mod@bench)) and the command line
//! that dispatches to them ([`cli`]).
//!
//! Everything the binary does is reachable from here, so tests drive the commands
//! without a process; `main.rs` only builds the async runtime and maps errors to exit
//! codes.

mod api;
pub mod base;
pub mod bench;
pub mod cli;
pub mod compose;
pub mod config;
pub mod demo;
pub mod error;
pub mod open_files;
pub mod protocols;
pub mod run_cmd;
pub mod runs;
pub mod runtime_config;
pub mod secret;
pub mod server;
pub mod telemetry;

pub use error::{GatewayError, Result};
