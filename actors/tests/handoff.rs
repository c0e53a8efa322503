//! Handoff: a thread switches between variants of its agent at step boundaries, keeps
//! the variant across runs (and passivation), and refuses variants it does not have.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

mod support;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use awaken_actors::contract::{
    AgentEvent, AgentOverlay, HandoffState, ModelSpec, TerminationReason, ToolDescriptor,
    ToolExecutionMode, ToolResult,
};
use awaken_actors::handoff::{
    ActiveAgentKey, HANDOFF_PLUGIN_ID, HandoffPlugin, activate_handoff, clear_handoff,
    request_handoff,
};
use awaken_actors::llm::InferenceRequest;
use awaken_actors::plugin::Plugin;
use awaken_actors::runtime::AgentRuntime;
use awaken_actors::state::{StateCommand, StateKey};
use awaken_actors::thread::ThreadConfig;
use awaken_actors::tool::{Tool, ToolCallContext, ToolOutput};
use awaken_actors::{BuildError, JsonValue, ToolError};
use serde_json::json;
use support::*;

const BASE_PROMPT: &str = "You are a test agent.";
const RESEARCH_PROMPT: &str = "You research, citing sources.";

/// Changes the thread's handoff state the way the book's tools do: `{"request": v}`,
/// `{"activate": v}` or `{"clear": true}`.
struct Switch;

#[async_trait]
impl Tool for Switch {
    fn descriptor(&self) -> ToolDescriptor {
        ToolDescriptor::new("switch", "switch", "switches the agent variant")
    }

    async fn execute(
        &self,
        args: JsonValue,
        _ctx: &ToolCallContext,
    ) -> Result<ToolOutput, ToolError> {
        let action = if let Some(variant) = args["request"].as_str() {
            request_handoff(variant)
        } else if let Some(variant) = args["activate"].as_str() {
            activate_handoff(variant)
        } else {
            clear_handoff()
        };
        let mut command = StateCommand::new();
        command.update::<ActiveAgentKey>(action);
        Ok(ToolOutput::with_command(
            ToolResult::success("switch", args),
            command,
        ))
    }
}

/// Two scripted models: `m` (the base agent's) and `m2` (the researcher's).
struct Fixture {
    rt: AgentRuntime,
    base: Arc<ScriptedLlm>,
    research: Arc<ScriptedLlm>,
}

fn overlays() -> HashMap<String, AgentOverlay> {
    HashMap::from([
        (
            "researcher".to_owned(),
            AgentOverlay {
                system_prompt: Some(RESEARCH_PROMPT.into()),
                model: Some("m2".into()),
                allowed_tools: Some(vec!["switch".into()]),
                excluded_tools: None,
            },
        ),
        (
            "writer".to_owned(),
            AgentOverlay {
                excluded_tools: Some(vec!["echo".into()]),
                ..AgentOverlay::default()
            },
        ),
    ])
}

fn fixture(base: Vec<Turn>, research: Vec<Turn>, config: ThreadConfig) -> Fixture {
    let base = ScriptedLlm::new(base);
    let research = ScriptedLlm::new(research);
    let spec = agent_spec(ToolExecutionMode::Sequential).with_plugin(HANDOFF_PLUGIN_ID);
    let rt = scripted_builder(base.clone())
        .with_model(
            "m2",
            ModelSpec {
                id: "m2".into(),
                provider: "research".into(),
                model: "research-model".into(),
            },
        )
        .with_provider("research", research.clone())
        .with_plugin(HANDOFF_PLUGIN_ID, Arc::new(HandoffPlugin::new(overlays())))
        .with_tool("switch", Arc::new(Switch))
        .with_tool("echo", Arc::new(Echo::default()))
        .with_thread_config(config)
        .with_agent_spec(spec)
        .build()
        .unwrap();
    Fixture { rt, base, research }
}

fn system_prompt(request: &InferenceRequest) -> String {
    request.messages[0].text()
}

fn tool_ids(request: &InferenceRequest) -> Vec<String> {
    request.tools.iter().map(|t| t.id.clone()).collect()
}

fn requests(llm: &ScriptedLlm) -> Vec<InferenceRequest> {
    llm.requests.lock().unwrap().clone()
}

/// The handoff state of the thread's last checkpoint (absent: the default).
async fn persisted_handoff(rt: &AgentRuntime, thread: &str) -> HandoffState {
    let snapshot = rt
        .store()
        .load_thread_snapshot(&tid(thread))
        .await
        .unwrap()
        .unwrap();
    let state = snapshot.state.expect("the thread was checkpointed");
    state
        .extensions
        .get(ActiveAgentKey::KEY)
        .map(|value| value.decode().unwrap())
        .unwrap_or_default()
}

fn errors(events: &[AgentEvent]) -> Vec<(String, Option<String>)> {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::Error { message, code } => Some((message.clone(), code.clone())),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_requested_variant_runs_the_next_step_with_its_overlay() {
    let f = fixture(
        vec![Turn::Calls(vec![(
            "switch",
            json!({"request": "researcher"}),
        )])],
        vec![Turn::Text("unused"), Turn::Text("found three sources")],
        ThreadConfig::default(),
    );
    let (result, events) = run_once(&f.rt, "t-next-step", "find sources").await;
    assert_eq!(result.termination, TerminationReason::NaturalEnd);
    assert_eq!(result.response, "found three sources");
    assert_well_formed(&events);

    let base = requests(&f.base);
    assert_eq!(base.len(), 1, "the base model ran the first step only");
    assert_eq!(system_prompt(&base[0]), BASE_PROMPT);
    assert_eq!(tool_ids(&base[0]), ["echo", "switch"]);

    let research = requests(&f.research);
    assert_eq!(research.len(), 1, "the variant's model ran the second step");
    assert_eq!(system_prompt(&research[0]), RESEARCH_PROMPT);
    assert_eq!(research[0].model, "research-model");
    assert_eq!(tool_ids(&research[0]), ["switch"], "allowed_tools applied");
    // The variant sees the whole conversation.
    assert!(
        research[0]
            .messages
            .iter()
            .any(|m| m.text() == "find sources")
    );

    let models: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::InferenceComplete { model, .. } => Some(model.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(models, ["scripted-model", "research-model"]);
    let state = persisted_handoff(&f.rt, "t-next-step").await;
    assert_eq!(state.active_agent.as_deref(), Some("researcher"));
    assert_eq!(state.requested_agent, None);
}

#[tokio::test]
async fn the_active_variant_carries_over_to_the_next_run_even_after_passivation() {
    let config = ThreadConfig {
        idle_passivation: Duration::ZERO,
        ..ThreadConfig::default()
    };
    let f = fixture(
        vec![Turn::Calls(vec![(
            "switch",
            json!({"request": "researcher"}),
        )])],
        vec![Turn::Text("next run, still researching"), Turn::Text("ok")],
        config,
    );
    let (first, _) = run_once(&f.rt, "t-next-run", "switch please").await;
    assert_eq!(first.response, "ok");
    let base_calls = requests(&f.base).len();

    // Nothing of the thread is left in memory: the next run reads the store.
    let (second, events) = run_once(&f.rt, "t-next-run", "and now?").await;
    assert_eq!(second.response, "next run, still researching");
    assert!(errors(&events).is_empty(), "{events:#?}");
    assert_eq!(
        requests(&f.base).len(),
        base_calls,
        "the base model is not asked"
    );
    let last = requests(&f.research).pop().unwrap();
    assert_eq!(system_prompt(&last), RESEARCH_PROMPT);
}

#[tokio::test]
async fn clearing_returns_to_the_base_agent_at_the_next_step() {
    let f = fixture(
        vec![
            Turn::Calls(vec![("switch", json!({"request": "researcher"}))]),
            Turn::Text("unused"),
            Turn::Text("back to base"),
        ],
        vec![
            Turn::Text("unused"),
            Turn::Calls(vec![("switch", json!({"clear": true}))]),
        ],
        ThreadConfig::default(),
    );
    let (result, events) = run_once(&f.rt, "t-clear", "go").await;
    assert_eq!(result.response, "back to base");
    assert!(errors(&events).is_empty(), "{events:#?}");
    let base = requests(&f.base);
    assert_eq!(base.len(), 2);
    assert_eq!(system_prompt(&base[1]), BASE_PROMPT);
    assert_eq!(tool_ids(&base[1]), ["echo", "switch"]);
    assert_eq!(
        persisted_handoff(&f.rt, "t-clear").await,
        HandoffState::default()
    );
}

#[tokio::test]
async fn a_variant_without_a_model_keeps_the_base_model_and_filters_tools() {
    let f = fixture(
        vec![
            Turn::Calls(vec![("switch", json!({"activate": "writer"}))]),
            Turn::Text("written"),
        ],
        vec![],
        ThreadConfig::default(),
    );
    let (result, _) = run_once(&f.rt, "t-writer", "write").await;
    assert_eq!(result.response, "written");
    let base = requests(&f.base);
    assert_eq!(
        system_prompt(&base[1]),
        BASE_PROMPT,
        "the prompt is inherited"
    );
    assert_eq!(tool_ids(&base[1]), ["switch"], "excluded_tools applied");
    assert!(requests(&f.research).is_empty());
}

#[tokio::test]
async fn an_unknown_requested_variant_is_refused_with_an_error_event() {
    let f = fixture(
        vec![
            Turn::Calls(vec![("switch", json!({"request": "researcher"}))]),
            Turn::Text("unused"),
            Turn::Text("unused"),
        ],
        vec![
            Turn::Text("unused"),
            Turn::Calls(vec![("switch", json!({"request": "nobody"}))]),
            Turn::Text("still the researcher"),
        ],
        ThreadConfig::default(),
    );
    let (result, events) = run_once(&f.rt, "t-unknown", "go").await;
    assert_eq!(result.termination, TerminationReason::NaturalEnd);
    assert_eq!(result.response, "still the researcher");
    let errors = errors(&events);
    assert_eq!(errors.len(), 1, "{events:#?}");
    assert_eq!(errors[0].1.as_deref(), Some("handoff_unknown_variant"));
    assert!(errors[0].0.contains("nobody"), "{}", errors[0].0);
    let state = persisted_handoff(&f.rt, "t-unknown").await;
    assert_eq!(state.active_agent.as_deref(), Some("researcher"));
    assert_eq!(state.requested_agent, None, "the request was withdrawn");
}

#[tokio::test]
async fn an_unknown_activated_variant_is_refused_and_the_base_agent_stays() {
    let f = fixture(
        vec![
            Turn::Calls(vec![("switch", json!({"activate": "nobody"}))]),
            Turn::Text("base again"),
        ],
        vec![],
        ThreadConfig::default(),
    );
    let (result, events) = run_once(&f.rt, "t-unknown-active", "go").await;
    assert_eq!(result.response, "base again");
    assert_eq!(
        errors(&events)
            .iter()
            .map(|(_, code)| code.as_deref())
            .collect::<Vec<_>>(),
        [Some("handoff_unknown_variant")]
    );
    assert_eq!(system_prompt(&requests(&f.base)[1]), BASE_PROMPT);
    assert_eq!(
        persisted_handoff(&f.rt, "t-unknown-active").await,
        HandoffState::default()
    );
}

#[test]
fn a_variant_whose_model_is_not_registered_fails_the_build() {
    let broken = HashMap::from([(
        "broken".to_owned(),
        AgentOverlay {
            model: Some("no-such-model".into()),
            ..AgentOverlay::default()
        },
    )]);
    let err = scripted_builder(ScriptedLlm::new(vec![]))
        .with_plugin(HANDOFF_PLUGIN_ID, Arc::new(HandoffPlugin::new(broken)))
        .with_agent_spec(agent_spec(ToolExecutionMode::Sequential).with_plugin(HANDOFF_PLUGIN_ID))
        .build()
        .unwrap_err();
    assert!(
        matches!(&err, BuildError::ValidationFailed(m) if m.contains("no-such-model")),
        "{err}"
    );
}

#[test]
fn two_handoff_plugins_on_one_agent_are_refused() {
    let plugin: Arc<dyn Plugin> = Arc::new(HandoffPlugin::new(overlays()));
    let err = scripted_builder(ScriptedLlm::new(vec![]))
        .with_plugin(HANDOFF_PLUGIN_ID, Arc::clone(&plugin))
        .with_plugin("second_handoff", plugin)
        .with_agent_spec(
            agent_spec(ToolExecutionMode::Sequential)
                .with_plugin(HANDOFF_PLUGIN_ID)
                .with_plugin("second_handoff"),
        )
        .build()
        .unwrap_err();
    assert!(err.to_string().contains(ActiveAgentKey::KEY), "{err}");
}
