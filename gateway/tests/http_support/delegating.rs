//! Service A of the remote-delegate suites: `boss` hands one prompt to
//! `remote-demo` (an agent of another service), then reports its answer.

use std::sync::Arc;
use std::time::Duration;

use awaken_actors::AgentId;
use awaken_actors::contract::{AgentEvent, AgentSpec, ModelSpec, StreamEvent};
use awaken_actors::delegation::delegate_tool_name;
use awaken_actors::llm::{ScriptSpec, ScriptStep, ScriptedExecutor};
use awaken_actors::permission::{PermissionBehavior, PermissionRules};
use awaken_actors::runtime::AgentRuntimeBuilder;
use awaken_actors::thread::ThreadConfig;
use awaken_cluster::local::{LocalNode, LocalNodeConfig};
use awaken_gateway::base::runtime_base;
use awaken_gateway::demo::{self, FakeFiles, Journal};
use awaken_gateway::server::ServerConfig;
use reqwest::StatusCode;
use serde_json::{Value, json};

use super::{EventReader, TestServer, user};

/// The remote delegate's local id.
pub const REMOTE: &str = "remote-demo";
/// The delegating agent.
pub const BOSS: &str = "boss";
/// The longest a `boss` run may take.
const RUN_DEADLINE: Duration = Duration::from_secs(60);

/// Service A's runtime (with the demo tools): `boss` asks `remote` to do
/// `prompt`, then says `B reports: <the call's result>`.
pub fn service_a(remote: AgentSpec, prompt: &str) -> AgentRuntimeBuilder {
    let script = ScriptSpec::new(vec![
        ScriptStep::tool_call(delegate_tool_name(REMOTE), json!({"prompt": prompt})),
        ScriptStep::text("B reports: {last_tool_result}"),
    ]);
    let mut boss = AgentSpec::new(AgentId::new(BOSS).unwrap())
        .with_system_prompt("You hand work to another service.")
        .with_delegate(REMOTE)
        .with_model(BOSS);
    boss.allowed_tools = Some(vec![delegate_tool_name(REMOTE)]);
    demo::with_demo_tools(
        runtime_base(
            ThreadConfig::default(),
            PermissionRules::new(PermissionBehavior::Allow),
        ),
        Arc::new(FakeFiles::with_demo_files()),
        Journal::default(),
    )
    .with_remote_agents([remote])
    .with_model(BOSS, ModelSpec::new(BOSS, BOSS, "scripted"))
    .with_provider(BOSS, Arc::new(ScriptedExecutor::new(script).unwrap()))
    .with_agent_spec(boss)
}

/// Serves service A after discovering its remote agents.
pub async fn serve_a(builder: AgentRuntimeBuilder) -> TestServer {
    let builder = builder.discover_remote_agents().await.unwrap();
    let node = LocalNode::start(builder, LocalNodeConfig::default())
        .await
        .unwrap();
    TestServer::serve(Arc::new(node), ServerConfig::default()).await
}

/// Starts a `boss` run on A: its event stream.
pub async fn start_boss_run(a: &TestServer) -> EventReader {
    let response = a
        .post(
            "/v1/runs",
            json!({"agentId": BOSS, "messages": user("please see to it")}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    EventReader::new(response)
}

/// Starts a `boss` run on A and reads it to its end.
pub async fn boss_run(a: &TestServer) -> Vec<StreamEvent> {
    tokio::time::timeout(RUN_DEADLINE, start_boss_run(a).await.rest())
        .await
        .expect("the boss run ends in time")
}

/// The suspended delegate call: its id and ticket.
pub fn remote_ticket(events: &[StreamEvent]) -> (String, Value) {
    events
        .iter()
        .find_map(|event| match &event.event {
            AgentEvent::ToolCallDone { id, result, .. } => {
                let ticket = result.suspension.as_ref()?;
                Some((id.to_string(), serde_json::to_value(ticket).unwrap()))
            }
            _ => None,
        })
        .expect("a suspended call")
}

/// The text the run's model gave.
pub fn answer(events: &[StreamEvent]) -> String {
    events
        .iter()
        .filter_map(|event| match &event.event {
            AgentEvent::TextDelta { delta } => Some(delta.as_str()),
            _ => None,
        })
        .collect()
}

/// The A2A task at `url` (`…/tasks/{id}` of the remote service), which must be there.
pub async fn remote_task(client: &reqwest::Client, url: &str) -> Value {
    let response = client
        .get(url)
        .header("A2A-Version", "1.0")
        .send()
        .await
        .unwrap();
    let (status, task) = super::json(response).await;
    assert_eq!(status, StatusCode::OK, "{task}");
    task
}
