//! Fixtures shared by the cluster's integration tests.

#![allow(clippy::unwrap_used)] // test helpers may panic

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use awaken_actors::contract::{AgentSpec, ModelSpec, ToolDescriptor, ToolResult};
use awaken_actors::llm::{ScriptSpec, ScriptStep, ScriptedExecutor};
use awaken_actors::permission::{
    PermissionBehavior, PermissionConfigKey, PermissionPlugin, PermissionRuleEntry,
    PermissionRules, PermissionRulesConfig,
};
use awaken_actors::runtime::AgentRuntimeBuilder;
use awaken_actors::tool::{Tool, ToolCallContext, ToolOutput};
use awaken_actors::{AgentId, JsonValue, ToolError};
use serde_json::json;

/// An `echo` tool that counts how often it really ran.
#[derive(Default)]
pub(crate) struct CountingEcho(pub(crate) AtomicUsize);

#[async_trait]
impl Tool for CountingEcho {
    fn descriptor(&self) -> ToolDescriptor {
        ToolDescriptor::new("echo", "echo", "Answers with its arguments")
    }

    async fn execute(
        &self,
        args: JsonValue,
        _ctx: &ToolCallContext,
    ) -> Result<ToolOutput, ToolError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(ToolResult::success("echo", args).into())
    }
}

/// A builder with agent `approver`: it calls `echo`, which asks for approval, then
/// answers with the tool's result.
pub(crate) fn approver_builder(echo: Arc<CountingEcho>) -> AgentRuntimeBuilder {
    let rules = PermissionRulesConfig {
        default_behavior: None,
        rules: vec![PermissionRuleEntry::new("echo", PermissionBehavior::Ask)],
    };
    let spec = AgentSpec::new(AgentId::new("approver").unwrap())
        .with_model("scripted")
        .with_plugin(PermissionPlugin::ID)
        .with_config::<PermissionConfigKey>(rules)
        .unwrap();
    let script = ScriptSpec::new(vec![
        ScriptStep::tool_call("echo", json!({"value": 42})),
        ScriptStep::text("done: {last_tool_result}"),
    ]);
    AgentRuntimeBuilder::new()
        .with_plugin(
            PermissionPlugin::ID,
            Arc::new(PermissionPlugin::new(PermissionRules::new(
                PermissionBehavior::Allow,
            ))),
        )
        .with_tool("echo", echo)
        .with_model(
            "scripted",
            ModelSpec::new("scripted", "scripted", "scripted"),
        )
        .with_provider("scripted", Arc::new(ScriptedExecutor::new(script).unwrap()))
        .with_agent_spec(spec)
}
