//! What every node is assembled from, whether its mailbox and events live in
//! memory (`LocalNode`) or on NATS (`ClusterNode`): the runtime with the node's
//! event hub and fence, the mailbox worker claiming its dispatches, and the
//! thread host answering thread calls. The two nodes differ only in what they
//! hand in and in what they add around these (for a cluster member: leases,
//! membership, the decision bus, the call server).

use std::sync::Arc;

use awaken_actors::mailbox::{Claimant, MailboxConfig, MailboxStore, MailboxWorker, RunInbox};
use awaken_actors::runtime::{AgentRuntime, AgentRuntimeBuilder};
use awaken_actors::thread::EventHub;

use crate::delegation::{NodeChildRuns, Reach};
use crate::error::ClusterError;
use crate::events::ReplayBuffers;
use crate::routing::ThreadHost;
use crate::shards::ShardedFence;

/// What a node hands in to be assembled, around its runtime.
pub(crate) struct Parts {
    /// The hub's replay buffers, which thread calls replay from.
    pub(crate) buffers: Arc<ReplayBuffers>,
    /// The shard fence of a cluster member; `None` for a node alone, which owns
    /// every thread.
    pub(crate) fence: Option<ShardedFence>,
    /// The mailbox and the accepted runs' input the worker claims from.
    pub(crate) mailbox: Arc<dyn MailboxStore>,
    pub(crate) inbox: Arc<dyn RunInbox>,
    pub(crate) mailbox_config: MailboxConfig,
    /// Who the worker claims as.
    pub(crate) claimant: Claimant,
}

/// A node's engine, assembled.
pub(crate) struct Assembly {
    pub(crate) runtime: AgentRuntime,
    pub(crate) worker: Arc<MailboxWorker>,
    pub(crate) host: ThreadHost,
    mailbox: Arc<dyn MailboxStore>,
    inbox: Arc<dyn RunInbox>,
}

impl Assembly {
    /// The runtime on the node's event hub (and shard fence): built before the
    /// mailbox, the membership and the worker, so a node whose agents do not
    /// build fails before it joins the cluster.
    pub(crate) fn runtime(
        builder: AgentRuntimeBuilder,
        hub: Arc<dyn EventHub>,
        fence: Option<&ShardedFence>,
    ) -> Result<AgentRuntime, ClusterError> {
        let mut builder = builder.with_event_hub(hub);
        if let Some(fence) = fence {
            builder = builder.with_fence_source(Arc::new(fence.clone()));
        }
        Ok(builder.build()?)
    }

    /// Starts `runtime`'s mailbox worker and thread host.
    pub(crate) async fn assemble(
        runtime: AgentRuntime,
        parts: Parts,
    ) -> Result<Self, ClusterError> {
        // Publishing, and catching up with what an earlier process left owed.
        runtime.approval_feed().start();
        let worker = Arc::new(
            MailboxWorker::start(
                runtime.clone(),
                Arc::clone(&parts.mailbox),
                Arc::clone(&parts.inbox),
                parts.mailbox_config,
                parts.claimant,
            )
            .await?,
        );
        let host = match parts.fence {
            Some(fence) => ThreadHost::new(runtime.clone(), fence, parts.buffers),
            None => ThreadHost::single_node(runtime.clone(), parts.buffers),
        };
        Ok(Self {
            runtime,
            worker,
            host,
            mailbox: parts.mailbox,
            inbox: parts.inbox,
        })
    }

    /// Lets the runtime's delegate calls submit child runs through this node's
    /// mailbox, and reach them as `reach` says (in place, or over NATS).
    pub(crate) fn deliver_child_runs(&self, reach: Reach) {
        self.runtime.set_child_runs(Arc::new(NodeChildRuns::new(
            Arc::clone(self.runtime.store()),
            Arc::clone(&self.mailbox),
            Arc::clone(&self.inbox),
            reach,
        )));
    }
}
