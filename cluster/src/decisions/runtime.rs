//! Applying bus decisions to the threads of this node's runtime.

use async_trait::async_trait;
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

#[async_trait]
impl DecisionTarget for RuntimeDecisions {
    async fn deliver(&self, decision: Decision) -> Delivery {
        if let Some(ownership) = &self.ownership
            && !ownership.owns(&decision.thread_id)
        {
            return Delivery::Retry(format!("not the owner of thread {}", decision.thread_id));
        }
        if let Some(run_id) = &decision.run_id {
            match self.runtime.active_run(&decision.thread_id).await {
                Ok(Some(run)) if &run.run_id == run_id => {}
                Ok(_) => {
                    return Delivery::Refused(
                        ControlError::RunNotActive {
                            run_id: run_id.clone(),
                        }
                        .to_string(),
                    );
                }
                Err(error) => return Delivery::Retry(error.to_string()),
            }
        }
        match self
            .runtime
            .decide(&decision.thread_id, decision.call_id, decision.resume, None)
            .await
        {
            Ok(ack) => Delivery::Applied {
                duplicate: ack.duplicate,
            },
            Err(ControlError::Unavailable(reason)) => Delivery::Retry(reason),
            Err(refused) => Delivery::Refused(refused.to_string()),
        }
    }
}
