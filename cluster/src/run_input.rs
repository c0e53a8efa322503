//! Where a cluster node keeps accepted runs' input (decision 0078): in the
//! mailbox ledger, carried by the run's enqueue, or in the KV inbox.
//!
//! Carried in the ledger, an input costs no JetStream request of its own: it is
//! written with the dispatch (one batch carries both), every node's replica has
//! it when the dispatch arrives, and it goes when the dispatch settles — no put,
//! no read and no purge per run. Inputs larger than [`LEDGER_INPUT_LIMIT`] still
//! go to the KV inbox, so replicas and snapshots stay small. Whichever way a run
//! came in, a node finds its input: it looks in its replica first, then in the
//! KV inbox.

use std::str::FromStr;
use std::sync::Arc;

use async_trait::async_trait;
use awaken_actors::RunId;
use awaken_actors::mailbox::{MailboxError, RunInbox};
use awaken_actors::thread::RunRequest;
use serde::{Deserialize, Serialize};

use crate::codec;
use crate::inbox::KvRunInbox;
use crate::ledger::LedgerMailbox;

/// Largest input (encoded) carried in the ledger; larger ones go to the KV inbox.
pub const LEDGER_INPUT_LIMIT: usize = 16 * 1024;

/// Where a node puts the input of the runs it accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunInputPlacement {
    /// In the KV inbox: one put, read and purge per run. What every version
    /// reads, so the setting while nodes of earlier versions are in the cluster.
    #[default]
    Inbox,
    /// With the dispatch in the mailbox ledger (up to [`LEDGER_INPUT_LIMIT`]).
    /// Nodes of versions before it cannot read such inputs.
    Ledger,
}

impl RunInputPlacement {
    /// The setting's name in configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Inbox => "inbox",
            Self::Ledger => "ledger",
        }
    }
}

impl FromStr for RunInputPlacement {
    type Err = String;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        match value {
            "inbox" => Ok(Self::Inbox),
            "ledger" => Ok(Self::Ledger),
            other => Err(format!(
                "unknown run input placement {other:?}: use \"inbox\" or \"ledger\""
            )),
        }
    }
}

/// A node's [`RunInbox`]: the ledger or the KV inbox, as placed.
#[derive(Debug, Clone)]
pub struct ClusterRunInbox {
    placement: RunInputPlacement,
    ledger: Arc<LedgerMailbox>,
    kv: KvRunInbox,
}

impl ClusterRunInbox {
    /// Puts new inputs where `placement` says; reads from both.
    pub fn new(placement: RunInputPlacement, ledger: Arc<LedgerMailbox>, kv: KvRunInbox) -> Self {
        Self {
            placement,
            ledger,
            kv,
        }
    }
}

fn unavailable(error: impl std::fmt::Display) -> MailboxError {
    MailboxError::Unavailable(error.to_string())
}

#[async_trait]
impl RunInbox for ClusterRunInbox {
    async fn put(&self, run_id: &RunId, request: &RunRequest) -> Result<(), MailboxError> {
        if self.placement == RunInputPlacement::Ledger {
            let size = codec::encode(request).map_err(unavailable)?.len();
            if size <= LEDGER_INPUT_LIMIT {
                self.ledger.carry_input(run_id.clone(), request.clone());
                return Ok(());
            }
        }
        self.kv.put(run_id, request).await
    }

    async fn get(&self, run_id: &RunId) -> Result<Option<RunRequest>, MailboxError> {
        match self.ledger.carried_input(run_id) {
            Some(input) => Ok(Some(input)),
            None => self.kv.get(run_id).await,
        }
    }

    async fn remove(&self, run_id: &RunId) -> Result<(), MailboxError> {
        if self.ledger.holds_carried_input(run_id) || self.ledger.drop_carried_input(run_id) {
            return Ok(());
        }
        self.kv.remove(run_id).await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn placements_parse_from_their_names_and_nothing_else() {
        for placement in [RunInputPlacement::Inbox, RunInputPlacement::Ledger] {
            assert_eq!(placement.as_str().parse(), Ok(placement));
        }
        let refused = "kv".parse::<RunInputPlacement>().unwrap_err();
        assert!(refused.contains("\"kv\""), "{refused}");
        assert!("Ledger".parse::<RunInputPlacement>().is_err());
    }
}
