//! `ClusterError`: what can go wrong talking to NATS.

/// Why a cluster operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The NATS server could not be reached or refused the request.
    #[error("nats: {0}")]
    Nats(String),
    /// A payload could not be encoded or decoded.
    #[error("codec: {0}")]
    Codec(String),
    /// The request itself is invalid.
    #[error("invalid: {0}")]
    InvalidInput(String),
    /// A compare-and-set lost: someone else wrote first.
    #[error("conflict on {key}: another writer won")]
    Conflict {
        /// The contested key.
        key: String,
    },
}

impl ClusterError {
    /// Wraps any NATS client error.
    pub(crate) fn nats(error: impl std::fmt::Display) -> Self {
        Self::Nats(error.to_string())
    }

    /// The same error, saying what was being done (`while`: "opening the mailbox").
    pub(crate) fn during(self, doing: &str) -> Self {
        match self {
            Self::Nats(message) => Self::Nats(format!("{doing}: {message}")),
            Self::Codec(message) => Self::Codec(format!("{doing}: {message}")),
            Self::InvalidInput(message) => Self::InvalidInput(format!("{doing}: {message}")),
            conflict @ Self::Conflict { .. } => conflict,
        }
    }
}
