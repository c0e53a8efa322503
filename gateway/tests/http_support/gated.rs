//! A node whose look-ups of queued runs wait at a gate: `GET /v1/runs/{id}` of an
//! unknown run then stays in flight (holding its request place) until the test
//! opens the gate, with no clock involved.

use std::sync::Arc;

use async_trait::async_trait;
use awaken_actors::contract::RunDispatch;
use awaken_actors::mailbox::{MailboxError, MailboxStore, SubmitOptions};
use awaken_actors::runtime::AgentRuntime;
use awaken_actors::store::ThreadRunStore;
use awaken_actors::thread::{RunRequest, ThreadConfig};
use awaken_actors::{RunId, ThreadId};
use awaken_cluster::RunControl;
use awaken_cluster::config_store::ConfigStore;
use awaken_cluster::control::{InterruptError, Interrupted};
use awaken_cluster::events::RunFollow;
use awaken_cluster::local::{LocalNode, LocalNodeConfig};
use awaken_cluster::routing::{Answer, RouteError, ThreadCall};
use awaken_gateway::demo::{self, FakeFiles, Journal};
use prometheus_client::registry::Registry;
use tokio::sync::watch;

/// The demo node, with a gate in front of `accepted_run`.
pub struct Gated {
    node: LocalNode,
    /// Closed (false) until the test opens it.
    open: watch::Receiver<bool>,
    /// How many look-ups are waiting at the gate.
    waiting: watch::Sender<usize>,
}

/// The test's side of the gate.
#[derive(Clone)]
pub struct Gate {
    open: Arc<watch::Sender<bool>>,
    waiting: watch::Receiver<usize>,
}

impl Gate {
    /// Waits until `count` look-ups wait at the gate.
    pub async fn until_waiting(&mut self, count: usize) {
        self.waiting
            .wait_for(|&waiting| waiting >= count)
            .await
            .unwrap();
    }

    /// Lets every look-up through, now and later.
    pub fn open(&self) {
        self.open.send_replace(true);
    }
}

impl Gated {
    /// The demo node on an in-memory store, its gate closed.
    pub async fn start() -> (Self, Gate) {
        let builder = demo::builder(
            ThreadConfig::default(),
            Arc::new(FakeFiles::with_demo_files()),
            Journal::default(),
        )
        .unwrap();
        let node = LocalNode::start(builder, LocalNodeConfig::default())
            .await
            .unwrap();
        let (opener, open) = watch::channel(false);
        let (waiting, watched) = watch::channel(0);
        let gate = Gate {
            open: Arc::new(opener),
            waiting: watched,
        };
        (
            Self {
                node,
                open,
                waiting,
            },
            gate,
        )
    }
}

#[async_trait]
impl RunControl for Gated {
    fn runtime(&self) -> &AgentRuntime {
        self.node.runtime()
    }

    fn mailbox(&self) -> Arc<dyn MailboxStore> {
        self.node.mailbox()
    }

    fn config_store(&self) -> Arc<dyn ConfigStore> {
        self.node.config_store()
    }

    fn register_metrics(&self, awaken: &mut Registry) {
        self.node.register_metrics(awaken);
    }

    async fn submit(
        &self,
        request: RunRequest,
        options: SubmitOptions,
    ) -> Result<RunDispatch, MailboxError> {
        self.node.submit(request, options).await
    }

    async fn accepted_run(&self, run_id: &RunId) -> Result<Option<RunRequest>, MailboxError> {
        self.waiting.send_modify(|waiting| *waiting += 1);
        let mut open = self.open.clone();
        let _ = open.wait_for(|&open| open).await;
        self.waiting.send_modify(|waiting| *waiting -= 1);
        self.node.accepted_run(run_id).await
    }

    async fn call(&self, call: ThreadCall) -> Result<Answer, RouteError> {
        self.node.call(call).await
    }

    async fn follow(
        &self,
        thread_id: &ThreadId,
        run_id: &RunId,
        after_seq: Option<u64>,
    ) -> Result<RunFollow, RouteError> {
        self.node.follow(thread_id, run_id, after_seq).await
    }

    async fn check_ready(&self) -> Result<(), String> {
        self.node.check_ready().await
    }

    fn store(&self) -> Arc<dyn ThreadRunStore> {
        self.node.store()
    }

    async fn interrupt_thread(&self, thread_id: &ThreadId) -> Result<Interrupted, InterruptError> {
        self.node.interrupt_thread(thread_id).await
    }
}
