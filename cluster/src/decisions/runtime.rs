//! Applying bus decisions to the threads of this node's runtime.

use async_trait::async_trait;
use awaken_actors::ThreadId;
use awaken_actors::runtime::AgentRuntime;
use awaken_actors::thread::ControlError;

use super::{Decision, DecisionTarget, Delivery};
use crate::shards::ShardedFence;

/// Applies decisions with an [`AgentRuntime`]; in a cluster, only to threads whose
/// shard this node owns (others are given back for their owner).
#[derive(Debug, Clone)]
pub struct RuntimeDecisions {
    runtime: AgentRuntime,
    ownership: Option<ShardedFence>,
}

impl RuntimeDecisions {
    /// Applies decisions to every thread (a single node).
    pub fn single_node(runtime: AgentRuntime) -> Self {
        Self {
            runtime,
            ownership: None,
        }
    }

    /// Applies decisions to the threads of shards this node owns.
    pub fn owned_by(runtime: AgentRuntime, ownership: ShardedFence) -> Self {
        Self {
            runtime,
            ownership: Some(ownership),
        }
    }
}

impl RuntimeDecisions {
    /// Refuses `decision` for `why` — unless its run applied it before (the run
    /// has moved on or ended since): then it is a duplicate, answered as applied,
    /// so a retry after a timeout or a lost answer never looks refused.
    async fn refused(&self, decision: &Decision, why: ControlError) -> Delivery {
        let store = self.runtime.store();
        let record = match &decision.run_id {
            Some(run_id) => store.load_run(run_id).await,
            None => store.latest_run(&decision.thread_id).await,
        };
        let applied = match record {
            Ok(Some(record)) => {
                record.thread_id == decision.thread_id
                    && record
                        .applied_decision(&decision.resume.decision_id)
                        .is_some_and(|applied| applied.call_id == decision.call_id)
            }
            Ok(None) => false,
            Err(error) => return Delivery::Retry(error.to_string()),
        };
        if applied {
            Delivery::Applied { duplicate: true }
        } else {
            Delivery::Refused(why.to_string())
        }
    }

    /// Resolves once this node no longer owns the thread (never on a single node):
    /// the resumed run was evicted, so the decision must go to the next owner.
    async fn moved_away(&self, thread_id: &ThreadId) {
        match &self.ownership {
            Some(ownership) => ownership.moved_away(thread_id).await,
            None => std::future::pending().await,
        }
    }
}

#[async_trait]
impl DecisionTarget for RuntimeDecisions {
    /// Applies the decision, then holds it until the run it resumed finishes or
    /// waits again: if this node dies meanwhile, the decision is redelivered to the
    /// thread's next owner, which applies it (or, when the checkpoint already has
    /// it, finds it a duplicate and sees the run continue) — never lost, never twice.
    ///
    /// One message to the thread does it all (`decide_and_follow`): the thread
    /// checks the run, applies the decision and attaches the follower; the store
    /// is read only to tell a refused decision from one applied before.
    async fn deliver(&self, decision: Decision) -> Delivery {
        if let Some(ownership) = &self.ownership
            && !ownership.owns(&decision.thread_id)
        {
            return Delivery::Retry(format!("not the owner of thread {}", decision.thread_id));
        }
        let decided = self
            .runtime
            .decide_and_follow(
                &decision.thread_id,
                decision.run_id.clone(),
                decision.call_id.clone(),
                decision.resume.clone(),
            )
            .await;
        let (ack, ending) = match decided {
            Ok(decided) => decided,
            Err(ControlError::Unavailable(reason)) => return Delivery::Retry(reason),
            Err(refused) => return self.refused(&decision, refused).await,
        };
        let applied = Delivery::Applied {
            duplicate: ack.duplicate,
        };
        let Some(ending) = ending else {
            return applied;
        };
        let moved = self.moved_away(&decision.thread_id);
        tokio::select! {
            end = ending.ended() => match end {
                Some(_) => applied,
                None => Delivery::Retry("the runtime stopped".into()),
            },
            () = moved => Delivery::Retry("the thread moved to another node".into()),
        }
    }
}
