//! The gateway's error type and the process exit codes it maps to.

use awaken_actors::thread::ControlError;
use awaken_actors::{BuildError, IdError, RuntimeError};

/// Why a gateway command failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GatewayError {
    /// The command names an agent the runtime does not know.
    #[error("unknown agent `{agent}` (available: {available})")]
    UnknownAgent {
        /// The requested id.
        agent: String,
        /// The ids that exist, comma-separated.
        available: String,
    },
    /// An id given on the command line is malformed.
    #[error("invalid {what} `{value}`: {source}")]
    InvalidId {
        /// Which id (`agent`, `thread`).
        what: &'static str,
        /// The text given.
        value: String,
        /// Why it was refused.
        #[source]
        source: IdError,
    },
    /// The embedded runtime could not be assembled.
    #[error("cannot build the embedded runtime: {0}")]
    Build(#[from] BuildError),
    /// The engine refused or lost a run.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// A control request (start, decide) was refused.
    #[error(transparent)]
    Control(#[from] ControlError),
    /// Reading the terminal or writing the output failed.
    #[error("terminal i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The runtime answered in a way the command did not expect.
    #[error("unexpected runtime answer: {0}")]
    Unexpected(String),
    /// A flag or setting is invalid.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The cluster could not be joined or left.
    #[error("cluster: {0}")]
    Cluster(String),
    /// A benchmark could not complete.
    #[error("benchmark failed: {0}")]
    Bench(String),
}

impl GatewayError {
    /// The process exit code for this error: 2 for bad command-line input, else 1.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::UnknownAgent { .. } | Self::InvalidId { .. } | Self::Config(_) => 2,
            _ => 1,
        }
    }
}

/// Results of gateway operations.
pub type Result<T, E = GatewayError> = std::result::Result<T, E>;
