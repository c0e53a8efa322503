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
//!
//! Nodes of earlier versions look in the KV inbox only, so by default
//! ([`RunInputPlacement::Auto`]) a node carries inputs in the ledger only while
//! every member's record lists [`RUN_INPUT_IN_LEDGER`]: during a rolling update
//! from such a version, inputs go to the KV inbox until the last old node left.

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
use crate::membership::MemberFeatures;

/// Largest input (encoded) carried in the ledger; larger ones go to the KV inbox.
pub const LEDGER_INPUT_LIMIT: usize = 16 * 1024;

/// The membership feature of nodes that read inputs carried in the ledger.
pub const RUN_INPUT_IN_LEDGER: &str = "run_input_in_ledger";

/// Where a node puts the input of the runs it accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunInputPlacement {
    /// In the ledger while every member reads it there, else in the KV inbox.
    #[default]
    Auto,
    /// In the KV inbox: one put, read and purge per run; what every version reads.
    Inbox,
    /// With the dispatch in the mailbox ledger (up to [`LEDGER_INPUT_LIMIT`]),
    /// whoever else is in the cluster: nodes of earlier versions cannot read it.
    Ledger,
}

impl RunInputPlacement {
    /// The setting's name in configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Inbox => "inbox",
            Self::Ledger => "ledger",
        }
    }
}

impl FromStr for RunInputPlacement {
    type Err = String;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        match value {
            "auto" => Ok(Self::Auto),
            "inbox" => Ok(Self::Inbox),
            "ledger" => Ok(Self::Ledger),
            other => Err(format!(
                "unknown run input placement {other:?}: use \"auto\", \"inbox\" or \"ledger\""
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
    members: Option<MemberFeatures>,
}

impl ClusterRunInbox {
    /// Puts new inputs where `placement` says; reads from both. Without
    /// [`Self::with_members`], `Auto` keeps inputs in the KV inbox.
    pub fn new(placement: RunInputPlacement, ledger: Arc<LedgerMailbox>, kv: KvRunInbox) -> Self {
        Self {
            placement,
            ledger,
            kv,
            members: None,
        }
    }

    /// Lets `Auto` carry inputs in the ledger while all of `members` read them there.
    #[must_use]
    pub fn with_members(mut self, members: MemberFeatures) -> Self {
        self.members = Some(members);
        self
    }

    /// Whether a new input goes in the ledger (if small enough).
    fn carries(&self) -> bool {
        match self.placement {
            RunInputPlacement::Ledger => true,
            RunInputPlacement::Inbox => false,
            RunInputPlacement::Auto => self
                .members
                .as_ref()
                .is_some_and(|members| members.everyone_has(RUN_INPUT_IN_LEDGER)),
        }
    }
}

fn unavailable(error: impl std::fmt::Display) -> MailboxError {
    MailboxError::Unavailable(error.to_string())
}

#[async_trait]
impl RunInbox for ClusterRunInbox {
    async fn put(&self, run_id: &RunId, request: &RunRequest) -> Result<(), MailboxError> {
        if self.carries() {
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
        for placement in [
            RunInputPlacement::Auto,
            RunInputPlacement::Inbox,
            RunInputPlacement::Ledger,
        ] {
            assert_eq!(placement.as_str().parse(), Ok(placement));
        }
        let refused = "kv".parse::<RunInputPlacement>().unwrap_err();
        assert!(refused.contains("\"kv\""), "{refused}");
        assert!("Ledger".parse::<RunInputPlacement>().is_err());
    }
}
