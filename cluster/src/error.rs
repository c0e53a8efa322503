//! `ClusterError`: what can go wrong talking to NATS.
//!
//! Modelled on the NATS client's own errors: the variant says what kind of
//! failure it was (so callers can retry or refuse on it), and the failure that
//! caused it stays attached as its `source`, not flattened into a string.

use std::time::Duration;

use awaken_actors::error::{BuildError, StorageError};
use awaken_actors::mailbox::MailboxError;

/// A failure from below the cluster (the NATS client, a codec), kept whole.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a cluster operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The NATS server could not be reached, refused the request or timed out.
    #[error("nats: {0}")]
    Nats(#[source] BoxError),
    /// NATS answered, but not as this node needs: a scan that stalled or ended
    /// early, a snapshot part missing, a stream that starts after its snapshot.
    #[error("nats: {0}")]
    Unexpected(String),
    /// A payload could not be encoded or decoded.
    #[error("codec: {0}")]
    Codec(#[source] BoxError),
    /// The request itself is invalid.
    #[error("invalid: {0}")]
    InvalidInput(String),
    /// A compare-and-set lost: someone else wrote first.
    #[error("conflict on {key}: another writer won")]
    Conflict {
        /// The contested key.
        key: String,
    },
    /// The node's runtime could not be built from its configuration.
    #[error("invalid: {0}")]
    Build(#[from] BuildError),
    /// The thread and run store refused or could not answer.
    #[error("store: {0}")]
    Store(#[from] StorageError),
    /// The mailbox refused or could not answer.
    #[error("mailbox: {0}")]
    Mailbox(#[from] MailboxError),
    /// A task of the cluster's own failed (panicked or was cancelled).
    #[error("a cluster task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
    /// Something the node waited for did not finish in time.
    #[error("{doing} did not finish within {after:?}")]
    TimedOut {
        /// What was waited for.
        doing: &'static str,
        /// How long.
        after: Duration,
    },
    /// A failure, with what was being done when it happened.
    #[error("{doing}: {source}")]
    During {
        /// What was being done ("opening the mailbox ledger").
        doing: &'static str,
        /// The failure.
        #[source]
        source: Box<ClusterError>,
    },
}

impl ClusterError {
    /// Wraps a NATS client error, keeping it as the source.
    pub(crate) fn nats(error: impl Into<BoxError>) -> Self {
        Self::Nats(error.into())
    }

    /// Wraps an encoding or decoding error, keeping it as the source.
    pub(crate) fn codec(error: impl Into<BoxError>) -> Self {
        Self::Codec(error.into())
    }

    /// The same error, saying what was being done (`doing`: "opening the
    /// mailbox"); a lost compare-and-set stays as it is, for callers that retry
    /// on it.
    pub(crate) fn during(self, doing: &'static str) -> Self {
        match self {
            conflict @ Self::Conflict { .. } => conflict,
            other => Self::During {
                doing,
                source: Box::new(other),
            },
        }
    }

    /// Whether NATS failed or answered unexpectedly, as it does for a moment
    /// while a stream's leader is elected: worth trying again.
    pub(crate) fn is_transient(&self) -> bool {
        matches!(self, Self::Nats(_) | Self::Unexpected(_))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::error::Error as _;

    use super::*;

    #[test]
    fn the_cause_stays_attached_under_the_context() {
        let cause = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let error = ClusterError::nats(cause).during("opening the mailbox ledger");
        assert_eq!(
            error.to_string(),
            "opening the mailbox ledger: nats: refused"
        );
        let nats = error.source().unwrap();
        assert_eq!(nats.to_string(), "nats: refused");
        let io = nats.source().unwrap().downcast_ref::<std::io::Error>();
        assert_eq!(io.unwrap().kind(), std::io::ErrorKind::ConnectionRefused);
    }

    #[test]
    fn a_lost_compare_and_set_keeps_its_kind_under_a_context() {
        let conflict = ClusterError::Conflict { key: "k".into() }.during("writing");
        assert!(matches!(conflict, ClusterError::Conflict { .. }));
    }

    #[test]
    fn only_nats_failures_are_transient() {
        assert!(ClusterError::Unexpected("scan stalled".into()).is_transient());
        assert!(ClusterError::nats(std::io::Error::other("down")).is_transient());
        assert!(!ClusterError::InvalidInput("bad".into()).is_transient());
        assert!(!ClusterError::codec(std::io::Error::other("garbage")).is_transient());
    }
}
