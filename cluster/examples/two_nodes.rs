//! A minimal two-node cluster: two `ClusterNode`s on one NATS server, sharing
//! one thread store. A run is accepted by whichever node is asked and executes
//! on the node that owns its thread's shard; its events can be followed from
//! either node.
//!
//! ```sh
//! nats-server -js &          # or any JetStream server you may create streams on
//! cargo run -p awaken-cluster --example two_nodes -- [--nats nats://127.0.0.1:4222]
//! ```
//!
//! Both nodes live in this one process so the example can share an in-memory
//! store between them; nodes in separate processes (what `awaken serve` with a
//! `[cluster]` section runs) share PostgreSQL instead. Everything else — shard
//! leases, the mailbox, thread calls, event replay — goes over NATS exactly as
//! between machines.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use awaken_actors::contract::{
    AgentEvent, AgentSpec, Message, ModelSpec, TerminationReason, ToolDescriptor, ToolResult,
};
use awaken_actors::llm::{ScriptSpec, ScriptStep, ScriptedExecutor};
use awaken_actors::mailbox::SubmitOptions;
use awaken_actors::runtime::AgentRuntimeBuilder;
use awaken_actors::store::{InMemoryStore, ThreadRunStore};
use awaken_actors::thread::RunRequest;
use awaken_actors::tool::{Tool, ToolCallContext, ToolOutput};
use awaken_actors::{AgentId, JsonValue, RunId, ThreadId, ToolError};
use awaken_cluster::membership::NodeId;
use awaken_cluster::node::{ClusterNode, NodeConfig};
use serde_json::json;

/// A tool that answers with the name of the node it executed on.
struct WhereAmI(&'static str);

#[async_trait]
impl Tool for WhereAmI {
    fn descriptor(&self) -> ToolDescriptor {
        ToolDescriptor::new(
            "where_am_i",
            "where_am_i",
            "names the node running the tool",
        )
    }

    async fn execute(
        &self,
        _args: JsonValue,
        _ctx: &ToolCallContext,
    ) -> Result<ToolOutput, ToolError> {
        Ok(ToolResult::success("where_am_i", json!(self.0)).into())
    }
}

/// What a node runs: agent `locator`, which calls `where_am_i` and reports it.
fn builder(
    node: &'static str,
    store: Arc<dyn ThreadRunStore>,
) -> Result<AgentRuntimeBuilder, Box<dyn std::error::Error>> {
    let model = ScriptedExecutor::new(ScriptSpec::new(vec![
        ScriptStep::tool_call("where_am_i", json!({})),
        ScriptStep::text("executed on node {last_tool_result}"),
    ]))?;
    Ok(AgentRuntimeBuilder::new()
        .with_thread_run_store(store)
        .with_model(
            "scripted",
            ModelSpec::new("scripted", "scripted", "scripted"),
        )
        .with_provider("scripted", Arc::new(model))
        .with_tool("where_am_i", Arc::new(WhereAmI(node)))
        .with_agent_spec(AgentSpec::new(AgentId::new("locator")?).with_model("scripted")))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let nats_url = match (args.next().as_deref(), args.next()) {
        (Some("--nats"), Some(url)) => url,
        (None, _) => "nats://127.0.0.1:4222".to_owned(),
        _ => return Err("usage: two_nodes [--nats URL]".into()),
    };

    let store: Arc<dyn ThreadRunStore> = Arc::new(InMemoryStore::new());
    let mut nodes = Vec::new();
    for name in ["a", "b"] {
        let client = async_nats::connect(&nats_url).await?;
        let config = NodeConfig::new(NodeId::new(name)?);
        let node = ClusterNode::start(client, builder(name, Arc::clone(&store))?, config).await?;
        nodes.push(node);
    }
    // The two split the shards between them once each sees the other.
    let members = [NodeId::new("a")?, NodeId::new("b")?].into();
    for node in &nodes {
        tokio::time::timeout(Duration::from_secs(30), node.fair_share_held(&members))
            .await
            .map_err(|_| "the nodes did not split the shards within 30 s")?;
    }
    let [a, b] = <[ClusterNode; 2]>::try_from(nodes).map_err(|_| "two nodes")?;

    // One thread each node owns; both runs are submitted to node `a`.
    let owned_by_a = thread_owned_by(&a)?;
    let owned_by_b = thread_owned_by(&b)?;
    for (thread, owner) in [(owned_by_a, "a"), (owned_by_b, "b")] {
        let run_id = RunId::generate();
        let request = RunRequest::new(thread.clone(), vec![Message::user("where?")])
            .with_agent_id(AgentId::new("locator")?)
            .with_run_id(run_id.clone());
        // Following first: no event is missed, wherever the run executes.
        let mut follow = a.follow_run(&thread, &run_id, None).await?;
        a.submit(request, SubmitOptions::default()).await?;
        let mut answer = None;
        while let Some(event) = tokio::time::timeout(Duration::from_secs(30), follow.next())
            .await
            .map_err(|_| "the run's events stopped coming")?
        {
            if let AgentEvent::RunFinish {
                result,
                termination,
                ..
            } = &event.event
            {
                if *termination != TerminationReason::NaturalEnd {
                    return Err(format!("run {run_id} ended with {termination:?}").into());
                }
                answer = result
                    .as_ref()
                    .and_then(|r| r["response"].as_str().map(str::to_owned));
            }
        }
        let answer = answer.ok_or("the run finished without an answer")?;
        println!("thread {thread} (owned by {owner}), submitted to a: {answer}");
    }

    for node in [a, b] {
        node.drain(Duration::from_secs(10)).await?;
    }
    Ok(())
}

/// The first of `thread-0`, `thread-1`, ... whose shard `node` owns.
fn thread_owned_by(node: &ClusterNode) -> Result<ThreadId, Box<dyn std::error::Error>> {
    for i in 0..10_000 {
        let thread = ThreadId::new(format!("thread-{i}"))?;
        if node.owns(&thread) {
            return Ok(thread);
        }
    }
    Err("the node owns no shard".into())
}
