//! Agent resolution and the runtime builder: every stage, every error variant.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use awaken_actors::contract::{
    AgentSpec, ContentBlock, Message, ModelSpec, PluginConfigKey, RemoteEndpoint, ToolDescriptor,
    ToolResult,
};
use awaken_actors::delegation::{
    RemoteAgentCard, RemoteBackend, RemoteCall, RemoteError, RemoteOutcome, RemoteTask,
};
use awaken_actors::llm::{InferenceRequest, LlmExecutor, StreamResult};
use awaken_actors::plugin::{ConfigSchema, Plugin, PluginDescriptor, PluginRegistrar};
use awaken_actors::runtime::{AgentRuntimeBuilder, ValidatedRegistries};
use awaken_actors::state::{StateKey, StateKeyOptions};
use awaken_actors::tool::{Tool, ToolCallContext, ToolOutput};
use awaken_actors::{
    AgentId, BuildError, InferenceExecutionError, JsonValue, ResolveError, StateError, ToolError,
};
use serde::{Deserialize, Serialize};

/// Fails the first `failures` calls, then answers "ok".
struct Scripted {
    failures: Mutex<u32>,
}

impl Scripted {
    fn ok() -> Arc<dyn LlmExecutor> {
        Self::failing(0)
    }
    fn failing(failures: u32) -> Arc<dyn LlmExecutor> {
        Arc::new(Self {
            failures: Mutex::new(failures),
        })
    }
}

#[async_trait]
impl LlmExecutor for Scripted {
    async fn execute(
        &self,
        _request: InferenceRequest,
    ) -> Result<StreamResult, InferenceExecutionError> {
        let mut failures = self.failures.lock().unwrap();
        if *failures > 0 {
            *failures -= 1;
            return Err(InferenceExecutionError::provider("503"));
        }
        Ok(StreamResult {
            content: vec![ContentBlock::text("ok")],
            ..StreamResult::default()
        })
    }
    fn name(&self) -> &str {
        "scripted"
    }
}

struct NamedTool(&'static str);
#[async_trait]
impl Tool for NamedTool {
    fn descriptor(&self) -> ToolDescriptor {
        ToolDescriptor::new(self.0, self.0, "test tool")
    }
    async fn execute(
        &self,
        _args: JsonValue,
        _ctx: &ToolCallContext,
    ) -> Result<ToolOutput, ToolError> {
        Ok(ToolResult::success(self.0, JsonValue::Null).into())
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct RateLimitConfig {
    max_calls_per_step: u32,
}

struct RateLimitKey;
impl PluginConfigKey for RateLimitKey {
    const KEY: &'static str = "rate_limit";
    type Config = RateLimitConfig;
}

struct Shared;
impl StateKey for Shared {
    const KEY: &'static str = "test.shared";
    type Value = u32;
    type Update = u32;
    fn apply(value: &mut u32, update: u32) {
        *value = update;
    }
}

/// A plugin that may claim the `rate_limit` section, contribute a tool, or
/// register the `Shared` key.
#[derive(Default)]
struct TestPlugin {
    schema: bool,
    tool: Option<&'static str>,
    shared_key: bool,
}

impl Plugin for TestPlugin {
    fn descriptor(&self) -> PluginDescriptor {
        PluginDescriptor::new("test", "test")
    }
    fn register(&self, r: &mut PluginRegistrar) -> Result<(), StateError> {
        if let Some(tool) = self.tool {
            r.register_tool(tool, Arc::new(NamedTool(tool)))?;
        }
        if self.shared_key {
            r.register_key::<Shared>(StateKeyOptions::default())?;
        }
        Ok(())
    }
    fn config_schemas(&self) -> Vec<ConfigSchema> {
        if self.schema {
            vec![ConfigSchema::of::<RateLimitKey>()]
        } else {
            Vec::new()
        }
    }
}

fn id(s: &str) -> AgentId {
    AgentId::new(s).unwrap()
}

fn agent(name: &str) -> AgentSpec {
    AgentSpec::new(id(name)).with_model("m")
}

fn model() -> ModelSpec {
    ModelSpec {
        id: "m".into(),
        provider: "p".into(),
        model: "upstream-m".into(),
    }
}

fn base() -> AgentRuntimeBuilder {
    AgentRuntimeBuilder::new()
        .with_model("m", model())
        .with_provider("p", Scripted::ok())
}

fn resolve_err(builder: AgentRuntimeBuilder, agent: &str) -> ResolveError {
    builder
        .build_unchecked()
        .unwrap()
        .resolve(agent)
        .unwrap_err()
}

#[test]
fn resolves_model_provider_and_tools() {
    let runtime = base()
        .with_agent_spec(agent("a"))
        .with_tool("search", Arc::new(NamedTool("search")))
        .build()
        .unwrap();
    let resolved = runtime.resolve("a").unwrap();
    assert_eq!(resolved.model.model, "upstream-m");
    assert_eq!(resolved.executor.name(), "scripted");
    assert_eq!(resolved.tools.keys().collect::<Vec<_>>(), ["search"]);
    assert!(resolved.warnings.is_empty());
    // The runtime's required plugins are always there.
    let ids: Vec<&str> = resolved
        .env
        .plugins()
        .iter()
        .map(|p| p.id.as_str())
        .collect();
    assert_eq!(ids, ["__runtime.loop_actions", "stop-condition"]);
}

#[test]
fn each_lookup_failure_has_its_error() {
    assert_eq!(
        resolve_err(base(), "ghost"),
        ResolveError::AgentNotFound("ghost".into())
    );
    assert_eq!(
        resolve_err(base().with_agent_spec(agent("a").with_model("nope")), "a"),
        ResolveError::ModelNotFound("nope".into())
    );
    assert_eq!(
        resolve_err(
            AgentRuntimeBuilder::new()
                .with_model("m", model())
                .with_agent_spec(agent("a")),
            "a"
        ),
        ResolveError::ProviderNotFound("p".into())
    );
    assert_eq!(
        resolve_err(
            base().with_agent_spec(agent("a").with_plugin("missing")),
            "a"
        ),
        ResolveError::PluginNotFound("missing".into())
    );
    assert_eq!(
        resolve_err(
            base().with_agent_spec(agent("a").with_hook_filter("unregistered")),
            "a"
        ),
        ResolveError::PluginNotFound("unregistered".into())
    );
}

#[test]
fn remote_agents_are_not_directly_runnable() {
    let remote: RemoteEndpoint = serde_json::from_value(serde_json::json!({
        "backend": "a2a",
        "base_url": "https://analyst.example.com/v1/a2a"
    }))
    .unwrap();
    let builder = base().with_agent_spec(agent("remote").with_endpoint(remote));
    assert_eq!(
        resolve_err(builder, "remote"),
        ResolveError::RemoteAgentNotDirectlyRunnable("remote".into())
    );
}

#[test]
fn config_sections_are_validated_and_unclaimed_ones_warned() {
    let plugin = Arc::new(TestPlugin {
        schema: true,
        ..TestPlugin::default()
    });
    let good = agent("good")
        .with_plugin("rl")
        .with_section("rate_limit", serde_json::json!({"max_calls_per_step": 3}))
        .with_section("typo_section", serde_json::json!({}));
    let bad = agent("bad").with_plugin("rl").with_section(
        "rate_limit",
        serde_json::json!({"max_calls_per_step": "three"}),
    );
    let runtime = base()
        .with_plugin("rl", plugin)
        .with_agent_spec(good)
        .with_agent_spec(bad)
        .build_unchecked()
        .unwrap();
    let resolved = runtime.resolve("good").unwrap();
    assert_eq!(
        resolved.warnings,
        ["config section `typo_section` is not claimed by any plugin"]
    );
    match runtime.resolve("bad").unwrap_err() {
        ResolveError::InvalidPluginConfig {
            plugin,
            key,
            message,
        } => {
            assert_eq!((plugin.as_str(), key.as_str()), ("rl", "rate_limit"));
            assert!(message.contains("max_calls_per_step"), "{message}");
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn retry_section_wraps_the_executor() {
    let retrying = agent("retrying").with_section(
        "retry",
        serde_json::json!({"max_retries": 2, "backoff_base_ms": 0}),
    );
    let runtime = AgentRuntimeBuilder::new()
        .with_model("m", model())
        .with_provider("p", Scripted::failing(2))
        .with_agent_spec(retrying)
        .build()
        .unwrap();
    let request = InferenceRequest::new("upstream-m", vec![Message::user("hi")]);
    let result = runtime
        .resolve("retrying")
        .unwrap()
        .executor
        .execute(request)
        .await;
    assert_eq!(result.unwrap().text(), "ok");

    let plain = AgentRuntimeBuilder::new()
        .with_model("m", model())
        .with_provider("p", Scripted::failing(1))
        .with_agent_spec(agent("plain"))
        .build()
        .unwrap();
    let request = InferenceRequest::new("upstream-m", vec![Message::user("hi")]);
    assert!(
        plain
            .resolve("plain")
            .unwrap()
            .executor
            .execute(request)
            .await
            .is_err()
    );

    let invalid = agent("bad").with_section("retry", serde_json::json!({"max_retries": -1}));
    assert!(matches!(
        resolve_err(base().with_agent_spec(invalid), "bad"),
        ResolveError::InvalidPluginConfig { ref key, .. } if key == "retry"
    ));
}

#[test]
fn plugin_tools_merge_and_conflict_with_global_tools() {
    let tooling = Arc::new(TestPlugin {
        tool: Some("fetch"),
        ..TestPlugin::default()
    });
    let runtime = base()
        .with_plugin("web", tooling.clone())
        .with_tool("search", Arc::new(NamedTool("search")))
        .with_agent_spec(agent("a").with_plugin("web"))
        .build()
        .unwrap();
    let tools: Vec<String> = runtime.resolve("a").unwrap().tools.into_keys().collect();
    assert_eq!(tools, ["fetch", "search"]);

    let clash = base()
        .with_plugin("web", tooling)
        .with_tool("fetch", Arc::new(NamedTool("fetch")))
        .with_agent_spec(agent("a").with_plugin("web"));
    assert_eq!(
        resolve_err(clash, "a"),
        ResolveError::ToolIdConflict {
            tool_id: "fetch".into(),
            source_a: "global tools".into(),
            source_b: "plugin `web`".into(),
        }
    );
}

#[test]
fn allowed_and_excluded_filters() {
    let mut spec = agent("a");
    spec.allowed_tools = Some(vec!["a".into(), "b".into()]);
    spec.excluded_tools = Some(vec!["b".into()]);
    let runtime = base()
        .with_tool("a", Arc::new(NamedTool("a")))
        .with_tool("b", Arc::new(NamedTool("b")))
        .with_tool("c", Arc::new(NamedTool("c")))
        .with_agent_spec(spec)
        .build()
        .unwrap();
    let tools: Vec<String> = runtime.resolve("a").unwrap().tools.into_keys().collect();
    assert_eq!(tools, ["a"], "excluded wins over allowed");
}

#[test]
fn plugin_registration_clash_is_an_env_build_error() {
    let keyed = || {
        Arc::new(TestPlugin {
            shared_key: true,
            ..TestPlugin::default()
        })
    };
    let builder = base()
        .with_plugin("one", keyed())
        .with_plugin("two", keyed())
        .with_agent_spec(agent("a").with_plugin("one").with_plugin("two"));
    assert_eq!(
        resolve_err(builder, "a"),
        ResolveError::EnvBuild(StateError::KeyAlreadyRegistered {
            key: "test.shared".into()
        })
    );
}

#[test]
fn delegates_must_exist() {
    let builder = base().with_agent_spec(agent("boss").with_delegate("ghost"));
    assert_eq!(
        resolve_err(builder, "boss"),
        ResolveError::AgentNotFound("ghost".into())
    );
}

#[test]
fn local_delegates_become_agent_run_tools() {
    let runtime = base()
        .with_agent_spec(agent("helper").with_system_prompt("You help with sums."))
        .with_agent_spec(agent("boss").with_delegate("helper"))
        .build()
        .unwrap();
    let boss = runtime.resolve("boss").unwrap();
    let ids: Vec<&str> = boss.tools.keys().map(String::as_str).collect();
    assert_eq!(ids, ["agent_run_helper"]);
    let descriptor = &boss.tool_descriptors[0];
    assert!(
        descriptor.description.contains("You help with sums."),
        "{descriptor:?}"
    );
    assert_eq!(
        descriptor.parameters["required"],
        serde_json::json!(["prompt"])
    );
    let tool = &boss.tools["agent_run_helper"];
    for bad in [
        serde_json::json!({}),
        serde_json::json!({"prompt": " "}),
        serde_json::json!({"prompt": 3}),
    ] {
        assert!(
            matches!(
                tool.validate_args(&bad),
                Err(ToolError::InvalidArguments(_))
            ),
            "{bad}"
        );
    }
    assert!(
        tool.validate_args(&serde_json::json!({"prompt": "add 2 and 2"}))
            .is_ok()
    );
}

/// A backend that only describes agents (resolution never runs them).
#[derive(Debug)]
struct CardBackend;

#[async_trait]
impl RemoteBackend for CardBackend {
    fn check_endpoint(&self, endpoint: &RemoteEndpoint) -> Result<(), RemoteError> {
        if endpoint.base_url.starts_with("http") {
            Ok(())
        } else {
            Err(RemoteError::Config("base_url must be http(s)".into()))
        }
    }

    async fn discover(
        &self,
        agent: &AgentId,
        _endpoint: &RemoteEndpoint,
    ) -> Result<RemoteAgentCard, RemoteError> {
        Ok(RemoteAgentCard {
            name: agent.to_string(),
            description: "I analyse markets.".into(),
            streaming: true,
        })
    }

    async fn execute(&self, _call: RemoteCall<'_>) -> Result<RemoteOutcome, RemoteError> {
        Err(RemoteError::Unreachable("not in this test".into()))
    }

    async fn cancel(&self, _: &RemoteEndpoint, _: &RemoteTask) -> Result<(), RemoteError> {
        Ok(())
    }
}

fn remote_boss(base_url: &str) -> AgentRuntimeBuilder {
    base()
        .with_remote_agents([
            AgentSpec::new(id("far")).with_endpoint(RemoteEndpoint::new("a2a", base_url))
        ])
        .with_agent_spec(agent("boss").with_delegate("far"))
}

#[tokio::test]
async fn remote_delegates_need_their_backend_and_become_tools_described_by_their_card() {
    let missing = remote_boss("http://far.example/v1/a2a").build().err();
    assert!(
        matches!(&missing, Some(BuildError::ValidationFailed(m)) if m.contains("needs backend `a2a`")),
        "{missing:?}"
    );
    let refused = remote_boss("ftp://far.example")
        .with_remote_backend("a2a", Arc::new(CardBackend))
        .build()
        .err();
    assert!(
        matches!(&refused, Some(BuildError::ValidationFailed(m)) if m.contains("base_url must be http(s)")),
        "{refused:?}"
    );

    let runtime = remote_boss("http://far.example/v1/a2a")
        .with_remote_backend("a2a", Arc::new(CardBackend))
        .build_and_discover()
        .await
        .unwrap();
    let boss = runtime.resolve("boss").unwrap();
    let ids: Vec<&str> = boss.tools.keys().map(String::as_str).collect();
    assert_eq!(ids, ["agent_run_far"]);
    assert!(
        boss.tool_descriptors[0]
            .description
            .contains("I analyse markets."),
        "{:?}",
        boss.tool_descriptors[0]
    );
    assert_eq!(
        runtime.resolve("far").err(),
        Some(ResolveError::RemoteAgentNotDirectlyRunnable("far".into()))
    );
}

#[test]
fn remote_agents_need_an_endpoint_and_backends_a_unique_name() {
    let no_endpoint = base().with_remote_agents([agent("near")]).build().err();
    assert!(
        matches!(&no_endpoint, Some(BuildError::ValidationFailed(m)) if m.contains("`near` has no endpoint")),
        "{no_endpoint:?}"
    );
    let twice = base()
        .with_remote_backend("a2a", Arc::new(CardBackend))
        .with_remote_backend("a2a", Arc::new(CardBackend))
        .build()
        .err();
    assert_eq!(twice, Some(BuildError::RemoteBackendConflict("a2a".into())));
}

#[test]
fn a_delegate_tool_clashing_with_a_global_tool_is_refused() {
    let builder = base()
        .with_tool("agent_run_helper", Arc::new(NamedTool("agent_run_helper")))
        .with_agent_spec(agent("helper"))
        .with_agent_spec(agent("boss").with_delegate("helper"));
    assert!(matches!(
        resolve_err(builder, "boss"),
        ResolveError::ToolIdConflict { tool_id, .. } if tool_id == "agent_run_helper"
    ));
}

#[test]
fn the_delegation_section_is_validated() {
    for bad in [
        serde_json::json!({"timeout_ms": "soon"}),
        serde_json::json!({"timeout_ms": 0}),
        serde_json::json!({"unknown": true}),
    ] {
        let builder = base().with_agent_spec(agent("helper")).with_agent_spec(
            agent("boss")
                .with_delegate("helper")
                .with_section("delegation", bad.clone()),
        );
        assert!(
            matches!(
                resolve_err(builder, "boss"),
                ResolveError::InvalidPluginConfig { key, .. } if key == "delegation"
            ),
            "{bad}"
        );
    }
    let good = base()
        .with_agent_spec(agent("helper"))
        .with_agent_spec(
            agent("boss")
                .with_delegate("helper")
                .with_section("delegation", serde_json::json!({"timeout_ms": 5000})),
        )
        .build()
        .unwrap();
    assert!(good.resolve("boss").unwrap().warnings.is_empty());
}

#[test]
fn builder_reports_every_conflict_kind() {
    let dup = |b: AgentRuntimeBuilder| b.build().unwrap_err();
    assert_eq!(
        dup(base()
            .with_agent_spec(agent("a"))
            .with_agent_spec(agent("a"))),
        BuildError::AgentRegistryConflict("a".into())
    );
    assert_eq!(
        dup(base()
            .with_tool("t", Arc::new(NamedTool("t")))
            .with_tool("t", Arc::new(NamedTool("t")))),
        BuildError::ToolRegistryConflict("t".into())
    );
    assert_eq!(
        dup(base().with_model("m", model())),
        BuildError::ModelRegistryConflict("m".into())
    );
    assert_eq!(
        dup(base().with_provider("p", Scripted::ok())),
        BuildError::ProviderRegistryConflict("p".into())
    );
    let empty = || Arc::new(TestPlugin::default());
    assert_eq!(
        dup(base().with_plugin("x", empty()).with_plugin("x", empty())),
        BuildError::PluginRegistryConflict("x".into())
    );
    assert!(matches!(
        dup(base().with_tool("alias", Arc::new(NamedTool("real")))),
        BuildError::ValidationFailed(ref m) if m.contains("alias")
    ));
}

#[test]
fn build_dry_runs_every_local_agent() {
    let err = base()
        .with_agent_spec(agent("a").with_model("nope"))
        .build()
        .unwrap_err();
    assert_eq!(
        err,
        BuildError::ValidationFailed("agent `a`: model `nope` not found".into())
    );
    // build_unchecked defers the failure to the first resolve.
    let runtime = base()
        .with_agent_spec(agent("a").with_model("nope"))
        .build_unchecked()
        .unwrap();
    assert!(runtime.resolve("a").is_err());

    let keyed = || {
        Arc::new(TestPlugin {
            shared_key: true,
            ..TestPlugin::default()
        })
    };
    let err = base()
        .with_plugin("one", keyed())
        .with_plugin("two", keyed())
        .with_agent_spec(agent("a").with_plugin("one").with_plugin("two"))
        .build()
        .unwrap_err();
    assert_eq!(
        err,
        BuildError::State(StateError::KeyAlreadyRegistered {
            key: "test.shared".into()
        })
    );
}

#[test]
fn replacing_registries_reaches_every_clone_and_broken_sets_are_not_valid() {
    let runtime = base().with_agent_spec(agent("a")).build().unwrap();
    let clone = runtime.clone();
    let resolver = runtime.resolver();
    assert!(matches!(
        resolver.resolve("b"),
        Err(ResolveError::AgentNotFound(_))
    ));

    let mut next = (*runtime.registries()).clone();
    next.agents
        .upsert("b", Arc::new(agent("b").with_system_prompt("new")));
    runtime.replace_registries(ValidatedRegistries::new(next).unwrap());
    assert_eq!(resolver.resolve("b").unwrap().spec.system_prompt, "new");
    assert!(clone.registries().agents.contains("b"));

    // A set in which an agent cannot resolve cannot be installed.
    let mut broken = (*runtime.registries()).clone();
    broken.models.remove("m");
    let err = ValidatedRegistries::new(broken).unwrap_err();
    assert_eq!(
        err,
        BuildError::ValidationFailed("agent `a`: model `m` not found".into())
    );
    assert!(resolver.resolve("a").is_ok());
    assert!(clone.registries().models.contains("m"));
}

#[test]
fn context_policy_adds_the_context_transform() {
    let mut spec = agent("windowed");
    spec.context_policy = Some(awaken_actors::contract::ContextWindowPolicy {
        max_context_tokens: 300,
        max_output_tokens: 0,
        min_recent_messages: 1,
        ..Default::default()
    });
    let runtime = base()
        .with_agent_spec(spec)
        .with_agent_spec(agent("plain"))
        .build()
        .unwrap();
    let windowed = runtime.resolve("windowed").unwrap();
    assert!(
        windowed
            .env
            .plugins()
            .iter()
            .any(|p| p.id == "__runtime.context_transform")
    );
    let mut request = InferenceRequest::new(
        "upstream-m",
        (0..10)
            .map(|i| Message::user(format!("{i}{}", "x".repeat(399))))
            .collect(),
    );
    windowed
        .env
        .apply_request_transforms(&mut request, &Default::default());
    assert!(request.messages.len() < 10);
    assert!(request.messages.last().unwrap().text().starts_with('9'));

    let plain = runtime.resolve("plain").unwrap();
    assert!(plain.env.request_transforms().is_empty());
}

#[test]
fn compaction_section_is_claimed_and_validated_with_a_context_policy() {
    let policy = awaken_actors::contract::ContextWindowPolicy::default();
    let mut good =
        agent("good").with_section("compaction", serde_json::json!({"min_savings_ratio": 0.5}));
    good.context_policy = Some(policy.clone());
    let mut bad = agent("bad").with_section(
        "compaction",
        serde_json::json!({"min_savings_ratio": "high"}),
    );
    bad.context_policy = Some(policy);
    let runtime = base()
        .with_agent_spec(good)
        .with_agent_spec(bad)
        .build_unchecked()
        .unwrap();
    let resolved = runtime.resolve("good").unwrap();
    assert!(resolved.warnings.is_empty(), "{:?}", resolved.warnings);
    assert!(
        resolved
            .env
            .plugins()
            .iter()
            .any(|p| p.id == "__runtime.compaction")
    );
    assert!(matches!(
        runtime.resolve("bad").unwrap_err(),
        ResolveError::InvalidPluginConfig { ref key, .. } if key == "compaction"
    ));
}

/// Runs AfterInference (calling `tool`) and StepEnd of `step` through a resolved env.
async fn step_calling(
    env: &awaken_actors::plugin::ExecutionEnv,
    store: &mut awaken_actors::state::StateStore,
    step: u32,
    tool: &str,
) -> Option<String> {
    use awaken_actors::contract::ToolCall;
    use awaken_actors::phase::{PhaseContext, PhaseRuntime};
    use awaken_actors::policies::StopRequest;
    use awaken_actors::{Phase, ToolCallId};

    let response = StreamResult {
        tool_calls: vec![ToolCall::new(
            ToolCallId::new(format!("c{step}")).unwrap(),
            tool,
            serde_json::json!({"step": step}),
        )],
        ..StreamResult::default()
    };
    let runtime = PhaseRuntime::new();
    let base = PhaseContext::test_default().with_step(step);
    runtime
        .run_phase(
            env,
            store,
            base.clone()
                .with_phase(Phase::AfterInference)
                .with_inference(Arc::new(response)),
        )
        .await
        .unwrap();
    runtime
        .run_phase(env, store, base.with_phase(Phase::StepEnd))
        .await
        .unwrap();
    store.read::<StopRequest>().flatten().map(|s| s.code)
}

#[tokio::test]
async fn stop_conditions_section_joins_max_rounds_in_one_plugin() {
    let spec = agent("a").with_max_rounds(3).with_section(
        "stop_conditions",
        serde_json::json!([{"type": "stop_on_tool", "tool_name": "finish"}]),
    );
    let runtime = base().with_agent_spec(spec).build().unwrap();
    let resolved = runtime.resolve("a").unwrap();
    assert!(resolved.warnings.is_empty(), "{:?}", resolved.warnings);
    let stop_plugins = resolved
        .env
        .plugins()
        .iter()
        .filter(|p| p.id.starts_with("stop-condition"))
        .count();
    assert_eq!(stop_plugins, 1);

    // The section's policy fires...
    let mut store = awaken_actors::state::StateStore::new();
    resolved.env.install(&mut store).unwrap();
    assert_eq!(
        step_calling(&resolved.env, &mut store, 1, "search").await,
        None
    );
    assert_eq!(
        step_calling(&resolved.env, &mut store, 2, "finish").await,
        Some("stop_on_tool".to_owned())
    );
    // ...and so does max_rounds, evaluated first.
    store.begin_run();
    for step in 1..3 {
        assert_eq!(
            step_calling(&resolved.env, &mut store, step, "search").await,
            None
        );
    }
    assert_eq!(
        step_calling(&resolved.env, &mut store, 3, "finish").await,
        Some("max_rounds".to_owned())
    );
}

#[test]
fn invalid_stop_conditions_are_config_errors() {
    let bad_regex = agent("regex").with_section(
        "stop_conditions",
        serde_json::json!([{"type": "content_match", "pattern": "(unclosed"}]),
    );
    let bad_shape = agent("shape").with_section(
        "stop_conditions",
        serde_json::json!([{"type": "stop_when_bored"}]),
    );
    let runtime = base()
        .with_agent_spec(bad_regex)
        .with_agent_spec(bad_shape)
        .build_unchecked()
        .unwrap();
    match runtime.resolve("regex").unwrap_err() {
        ResolveError::InvalidPluginConfig {
            plugin,
            key,
            message,
        } => {
            assert_eq!(
                (plugin.as_str(), key.as_str()),
                ("stop-condition", "stop_conditions")
            );
            assert!(message.contains("(unclosed"), "{message}");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(matches!(
        runtime.resolve("shape").unwrap_err(),
        ResolveError::InvalidPluginConfig { ref key, .. } if key == "stop_conditions"
    ));
}

#[test]
fn a_second_stop_plugin_is_refused() {
    use awaken_actors::policies::StopConditionPlugin;

    let builder = base()
        .with_plugin("my-stops", Arc::new(StopConditionPlugin::new(Vec::new())))
        .with_agent_spec(agent("a").with_plugin("my-stops"));
    assert_eq!(
        resolve_err(builder, "a"),
        ResolveError::EnvBuild(StateError::KeyAlreadyRegistered {
            key: "__runtime.stop_request".into()
        })
    );
}

#[test]
fn permission_sections_are_validated_at_resolve() {
    use awaken_actors::permission::PermissionPlugin;

    let section =
        |rules: serde_json::Value| serde_json::json!({ "default_behavior": "ask", "rules": rules });
    let good = agent("good").with_plugin("permission").with_section(
        "permission",
        section(serde_json::json!([{"tool": "Bash(npm *)", "behavior": "allow"}])),
    );
    let bad_pattern = agent("pattern").with_plugin("permission").with_section(
        "permission",
        section(serde_json::json!([{"tool": "Bash(npm *", "behavior": "allow"}])),
    );
    let bad_shape = agent("shape").with_plugin("permission").with_section(
        "permission",
        section(serde_json::json!([{"tool": "ls", "behavior": "maybe"}])),
    );
    let runtime = base()
        .with_plugin("permission", Arc::new(PermissionPlugin::default()))
        .with_agent_spec(good)
        .with_agent_spec(bad_pattern)
        .with_agent_spec(bad_shape)
        .build_unchecked()
        .unwrap();
    let resolved = runtime.resolve("good").unwrap();
    assert!(resolved.warnings.is_empty(), "{:?}", resolved.warnings);
    match runtime.resolve("pattern").unwrap_err() {
        ResolveError::InvalidPluginConfig {
            plugin,
            key,
            message,
        } => {
            assert_eq!(
                (plugin.as_str(), key.as_str()),
                ("permission", "permission")
            );
            assert!(message.contains("`Bash(npm *`"), "{message}");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(matches!(
        runtime.resolve("shape").unwrap_err(),
        ResolveError::InvalidPluginConfig { ref key, .. } if key == "permission"
    ));
}

#[tokio::test]
async fn circuit_breaker_section_is_shared_across_resolutions() {
    let spec = agent("guarded").with_section(
        "circuit_breaker",
        serde_json::json!({"failure_threshold": 1, "cooldown_ms": 600000, "half_open_max": 1}),
    );
    let runtime = AgentRuntimeBuilder::new()
        .with_model("m", model())
        .with_provider("p", Scripted::failing(5))
        .with_agent_spec(spec)
        .build()
        .unwrap();
    let request = || InferenceRequest::new("upstream-m", vec![Message::user("hi")]);
    let first = runtime.resolve("guarded").unwrap();
    assert!(matches!(
        first.executor.execute(request()).await.unwrap_err(),
        InferenceExecutionError::Provider { .. }
    ));
    // A fresh resolution (a new run) sees the same open circuit.
    let second = runtime.resolve("guarded").unwrap();
    assert!(matches!(
        second.executor.execute(request()).await.unwrap_err(),
        InferenceExecutionError::CircuitOpen { .. }
    ));

    let invalid = agent("bad").with_section(
        "circuit_breaker",
        serde_json::json!({"failure_threshold": "x"}),
    );
    assert!(matches!(
        resolve_err(base().with_agent_spec(invalid), "bad"),
        ResolveError::InvalidPluginConfig { ref key, .. } if key == "circuit_breaker"
    ));
}
