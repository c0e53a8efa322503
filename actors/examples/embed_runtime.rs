//! Embedding the runtime in a program of your own: one agent on a scripted
//! model, a tool you write, and a plugin whose phase hook answers a call itself
//! instead of letting the tool run.
//!
//! ```sh
//! cargo run -p awaken-actors --example embed_runtime
//! ```
//!
//! Swap the scripted model for a real one with `with_provider(name,
//! Arc::new(GenaiExecutor::…))`; everything else stays.

use std::sync::Arc;

use async_trait::async_trait;
use awaken_actors::actions::{ToolInterceptAction, ToolInterceptPayload};
use awaken_actors::contract::{
    AgentEvent, AgentSpec, Message, ModelSpec, ToolDescriptor, ToolResult,
};
use awaken_actors::event_sink::VecEventSink;
use awaken_actors::llm::{ScriptSpec, ScriptStep, ScriptedExecutor};
use awaken_actors::phase::PhaseContext;
use awaken_actors::plugin::{PhaseHook, Plugin, PluginDescriptor, PluginRegistrar};
use awaken_actors::runtime::AgentRuntimeBuilder;
use awaken_actors::state::StateCommand;
use awaken_actors::thread::RunRequest;
use awaken_actors::tool::{Tool, ToolCallContext, ToolOutput};
use awaken_actors::{AgentId, JsonValue, Phase, StateError, ThreadId, ToolError};
use serde_json::json;

/// A tool: counts the words of its `text` argument.
struct WordCount;

#[async_trait]
impl Tool for WordCount {
    fn descriptor(&self) -> ToolDescriptor {
        ToolDescriptor::new("word_count", "word_count", "counts the words of `text`")
    }

    async fn execute(
        &self,
        args: JsonValue,
        _ctx: &ToolCallContext,
    ) -> Result<ToolOutput, ToolError> {
        let text = args["text"]
            .as_str()
            .ok_or_else(|| ToolError::InvalidArguments("`text` must be a string".into()))?;
        let words = text.split_whitespace().count();
        Ok(ToolResult::success("word_count", json!({ "words": words })).into())
    }
}

/// A plugin: before a tool runs, a call with empty `text` is answered by the
/// hook, and the tool never sees it.
struct SkipEmptyText;

impl Plugin for SkipEmptyText {
    fn descriptor(&self) -> PluginDescriptor {
        PluginDescriptor::new("skip-empty-text", "answers calls without text itself")
    }

    fn register(&self, registrar: &mut PluginRegistrar) -> Result<(), StateError> {
        registrar.register_phase_hook("skip-empty", Phase::BeforeToolExecute, SkipEmptyHook)
    }
}

struct SkipEmptyHook;

#[async_trait]
impl PhaseHook for SkipEmptyHook {
    async fn run(&self, ctx: &PhaseContext) -> Result<StateCommand, StateError> {
        let mut command = StateCommand::new();
        let Some(call) = &ctx.tool_call else {
            return Ok(command);
        };
        if call.arguments["text"].as_str().is_some_and(str::is_empty) {
            let answer = ToolResult::success(
                call.tool_name.as_str(),
                json!({ "words": 0, "answered_by": "skip-empty-text" }),
            );
            command
                .schedule_action::<ToolInterceptAction>(ToolInterceptPayload::SetResult(answer))?;
        }
        Ok(command)
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The model's answers, in order: two tool calls, then its reply.
    let model = ScriptedExecutor::new(ScriptSpec::new(vec![
        ScriptStep::tool_call("word_count", json!({ "text": "the quick brown fox" }))
            .with_tool_call("word_count", json!({ "text": "" })),
        ScriptStep::text("The first text has 4 words, the second none."),
    ]))?;
    let agent = AgentSpec::new(AgentId::new("counter")?)
        .with_model("scripted")
        .with_system_prompt("Count words with the word_count tool.")
        .with_plugin("skip-empty-text");
    let runtime = AgentRuntimeBuilder::new()
        .with_model(
            "scripted",
            ModelSpec {
                id: "scripted".into(),
                provider: "scripted".into(),
                model: "scripted-model".into(),
            },
        )
        .with_provider("scripted", Arc::new(model))
        .with_tool("word_count", Arc::new(WordCount))
        .with_plugin("skip-empty-text", Arc::new(SkipEmptyText))
        .with_agent_spec(agent)
        .build()?;

    let events = Arc::new(VecEventSink::new());
    let request = RunRequest::new(
        ThreadId::new("example-thread")?,
        vec![Message::user("How many words?")],
    );
    let result = runtime.run(request, events.clone()).await?;

    for event in events.take() {
        if let AgentEvent::ToolCallDone { result, .. } = event {
            println!("tool call done: {}", result.data);
        }
    }
    println!("{:?}: {}", result.termination, result.response);
    Ok(())
}
