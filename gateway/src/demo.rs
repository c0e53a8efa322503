//! The embedded defaults: a single-node runtime that needs no external service.
//!
//! [`runtime`] builds an [`AgentRuntime`] with the in-memory store, scripted models
//! ([`ScriptedExecutor`]) and these agents:
//!
//! | agent | script | tools | permission |
//! |---|---|---|---|
//! | [`DEMO_AGENT`] | call `delete_file {"path": "notes.txt"}`, then report the tool's answer | `delete_file` | `delete_file` asks |
//! | [`BENCH_AGENT`] | workload W: call `echo`, then answer with text | `echo` | none |
//! | [`BENCH_HITL_AGENT`] | workload W, but `echo` asks for approval | `echo` | `echo` asks |
//! | [`BENCH_TEXT_AGENT`] | one inference answering with text | none | none |
//! | [`SLOW_AGENT`] | call `sleep {"ms": 1500}`, then answer `slept` | `sleep` | none |
//! | [`ORCHESTRATOR_AGENT`] | delegate to `demo` (`agent_run_demo`), then report its answer | `agent_run_demo` | none (the child asks) |
//! | [`BENCH_DELEGATE_AGENT`] | delegate to `bench-text`, then answer with text | `agent_run_bench-text` | none |
//!
//! With a [`Journal`], `echo` and `sleep` append one line per execution to a file
//! (`<tool> <idempotency key>`): the failover tests read it to count executions
//! across node processes.
//!
//! The `delete_file` tool is real code with a fake disk: it removes names from an
//! in-memory set of files ([`FakeFiles`]) and reports what it did, so trying the
//! approval flow never touches the real file system.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use awaken_actors::contract::{AgentSpec, ModelSpec, ToolDescriptor, ToolResult};
use awaken_actors::delegation::delegate_tool_name;
use awaken_actors::llm::{ScriptError, ScriptSpec, ScriptStep, ScriptedExecutor};
use awaken_actors::permission::{
    PermissionBehavior, PermissionConfigKey, PermissionPlugin, PermissionRuleEntry,
    PermissionRules, PermissionRulesConfig,
};
use awaken_actors::runtime::{AgentRuntime, AgentRuntimeBuilder};
use awaken_actors::thread::ThreadConfig;
use awaken_actors::tool::{Tool, ToolCallContext, ToolOutput};
use awaken_actors::{AgentId, BuildError, JsonValue, ToolError};
use serde_json::json;

use crate::base::runtime_base;

/// The interactive demo agent: deletes `notes.txt` after asking for approval.
pub const DEMO_AGENT: &str = "demo";
/// Workload W without approvals: inference → `echo` → inference → final text.
pub const BENCH_AGENT: &str = "bench";
/// Workload W whose tool call suspends for approval.
pub const BENCH_HITL_AGENT: &str = "bench-hitl";
/// One inference answering with text: the shortest possible run.
pub const BENCH_TEXT_AGENT: &str = "bench-text";
/// A run whose one tool call takes 1.5 s: long enough to kill its node mid-call.
pub const SLOW_AGENT: &str = "slow";

/// Delegates to the demo agent: its approval surfaces on the orchestrator's call.
pub const ORCHESTRATOR_AGENT: &str = "orchestrator";
/// Workload W with a delegate call instead of `echo`: the delegation benchmark.
pub const BENCH_DELEGATE_AGENT: &str = "bench-delegate";

/// The final text of the W agents; benchmarks check every run ends with it.
pub const BENCH_ANSWER_PREFIX: &str = "echoed: ";

/// The files [`FakeFiles`] starts with.
pub const DEMO_FILES: [&str; 3] = ["draft.md", "notes.txt", "todo.md"];

/// Builds the embedded runtime with `config` for its thread actors.
pub fn runtime(config: ThreadConfig) -> Result<AgentRuntime, BuildError> {
    runtime_with_files(config, Arc::new(FakeFiles::with_demo_files()))
}

/// Builds the embedded runtime whose `delete_file` tool works on `files`.
pub fn runtime_with_files(
    config: ThreadConfig,
    files: Arc<FakeFiles>,
) -> Result<AgentRuntime, BuildError> {
    builder(config, files, Journal::default())?.build()
}

/// The embedded agents, models and tools, ready for more services (a cluster node
/// adds its store and fence).
pub fn builder(
    config: ThreadConfig,
    files: Arc<FakeFiles>,
    journal: Journal,
) -> Result<AgentRuntimeBuilder, BuildError> {
    let base = runtime_base(config, PermissionRules::new(PermissionBehavior::Allow));
    with_demo_agents(with_demo_tools(base, files, journal))
}

/// Adds the embedded tools: `delete_file` on `files`, and `echo` and `sleep`
/// writing to `journal`.
pub fn with_demo_tools(
    builder: AgentRuntimeBuilder,
    files: Arc<FakeFiles>,
    journal: Journal,
) -> AgentRuntimeBuilder {
    builder
        .with_tool(DeleteFileTool::ID, Arc::new(DeleteFileTool { files }))
        .with_tool(
            EchoTool::ID,
            Arc::new(EchoTool {
                journal: journal.clone(),
            }),
        )
        .with_tool(SleepTool::ID, Arc::new(SleepTool { journal }))
}

/// Adds the embedded agents of the table above, each with its scripted model.
pub fn with_demo_agents(builder: AgentRuntimeBuilder) -> Result<AgentRuntimeBuilder, BuildError> {
    let builder = with_scripted_agent(builder, demo_spec()?, demo_script())?;
    let builder = with_scripted_agent(builder, bench_spec(BENCH_AGENT, false)?, w_script())?;
    let builder = with_scripted_agent(builder, bench_spec(BENCH_HITL_AGENT, true)?, w_script())?;
    let builder = with_scripted_agent(
        builder,
        only_tools(bench_spec(BENCH_TEXT_AGENT, false)?, &[]),
        ScriptSpec::new(vec![ScriptStep::text("ok")]),
    )?;
    let slow = AgentSpec::new(agent_id(SLOW_AGENT)?).with_system_prompt("You take your time.");
    let builder = with_scripted_agent(
        builder,
        only_tools(slow, &[SleepTool::ID]),
        ScriptSpec::new(vec![
            ScriptStep::tool_call(SleepTool::ID, json!({"ms": 1500})),
            ScriptStep::text("slept"),
        ]),
    )?;
    let builder = with_scripted_agent(
        builder,
        delegating(
            ORCHESTRATOR_AGENT,
            DEMO_AGENT,
            "You hand file chores to the demo agent.",
        )?,
        ScriptSpec::new(vec![
            delegate_step(DEMO_AGENT, "Tidy up: delete notes.txt."),
            ScriptStep::text("The demo agent reports: {last_tool_result}"),
        ]),
    )?;
    with_scripted_agent(
        builder,
        delegating(
            BENCH_DELEGATE_AGENT,
            BENCH_TEXT_AGENT,
            "You are a benchmark agent.",
        )?,
        ScriptSpec::new(vec![
            delegate_step(BENCH_TEXT_AGENT, "answer"),
            ScriptStep::text("delegated: {last_tool_result}"),
        ]),
    )
}

/// An agent whose only tool is delegating to `delegate`.
fn delegating(id: &str, delegate: &str, prompt: &str) -> Result<AgentSpec, BuildError> {
    let spec = AgentSpec::new(agent_id(id)?)
        .with_system_prompt(prompt)
        .with_delegate(delegate);
    Ok(only_tools(spec, &[&delegate_tool_name(delegate)]))
}

/// A script step calling delegate `agent` with `prompt`.
fn delegate_step(agent: &str, prompt: &str) -> ScriptStep {
    ScriptStep::tool_call(delegate_tool_name(agent), json!({"prompt": prompt}))
}

/// Ids of the agents [`runtime`] knows, sorted.
pub fn agent_ids(runtime: &AgentRuntime) -> Vec<String> {
    let mut ids: Vec<String> = runtime
        .registries()
        .agents
        .ids()
        .map(str::to_owned)
        .collect();
    ids.sort();
    ids
}

/// Registers `spec` with a scripted model and provider of its own, named after it.
fn with_scripted_agent(
    builder: AgentRuntimeBuilder,
    spec: AgentSpec,
    script: ScriptSpec,
) -> Result<AgentRuntimeBuilder, BuildError> {
    let id = spec.id.to_string();
    let executor = ScriptedExecutor::new(script).map_err(script_error)?;
    Ok(builder
        .with_model(
            id.clone(),
            ModelSpec::new(id.clone(), id.clone(), "scripted"),
        )
        .with_provider(id.clone(), Arc::new(executor))
        .with_agent_spec(spec.with_model(id)))
}

fn script_error(error: ScriptError) -> BuildError {
    BuildError::ValidationFailed(format!("embedded script: {error}"))
}

fn agent_id(id: &str) -> Result<AgentId, BuildError> {
    AgentId::new(id).map_err(|e| BuildError::ValidationFailed(e.to_string()))
}

/// Adds the permission plugin to `spec`, asking before every call of `tool`.
fn ask_before(spec: AgentSpec, tool: &str) -> Result<AgentSpec, BuildError> {
    let rules = PermissionRulesConfig {
        default_behavior: None,
        rules: vec![PermissionRuleEntry::new(tool, PermissionBehavior::Ask)],
    };
    Ok(spec
        .with_plugin(PermissionPlugin::ID)
        .with_config::<PermissionConfigKey>(rules)?)
}

/// Offers the agent exactly `tools`.
fn only_tools(mut spec: AgentSpec, tools: &[&str]) -> AgentSpec {
    spec.allowed_tools = Some(tools.iter().map(|t| (*t).to_owned()).collect());
    spec
}

fn demo_spec() -> Result<AgentSpec, BuildError> {
    let spec = AgentSpec::new(agent_id(DEMO_AGENT)?)
        .with_system_prompt("You tidy up files. Always ask before deleting anything.");
    ask_before(only_tools(spec, &[DeleteFileTool::ID]), DeleteFileTool::ID)
}

fn demo_script() -> ScriptSpec {
    ScriptSpec::new(vec![
        ScriptStep::tool_call(DeleteFileTool::ID, json!({"path": "notes.txt"})),
        ScriptStep::text("Done. delete_file answered: {last_tool_result}"),
    ])
}

fn bench_spec(id: &str, hitl: bool) -> Result<AgentSpec, BuildError> {
    let spec = AgentSpec::new(agent_id(id)?).with_system_prompt("You are a benchmark agent.");
    let spec = only_tools(spec, &[EchoTool::ID]);
    if hitl {
        ask_before(spec, EchoTool::ID)
    } else {
        Ok(spec)
    }
}

/// Workload W: one tool call, then a final text that quotes the tool's answer.
fn w_script() -> ScriptSpec {
    ScriptSpec::new(vec![
        ScriptStep::tool_call(EchoTool::ID, json!({"value": 42})),
        ScriptStep::text(format!("{BENCH_ANSWER_PREFIX}{{last_tool_result}}")),
    ])
}

/// An in-memory stand-in for a directory: the names of the files it holds.
#[derive(Debug, Default)]
pub struct FakeFiles {
    names: Mutex<BTreeSet<String>>,
}

impl FakeFiles {
    /// A fake directory holding [`DEMO_FILES`].
    pub fn with_demo_files() -> Self {
        Self::with_files(DEMO_FILES)
    }

    /// A fake directory holding `names`.
    pub fn with_files<S: Into<String>>(names: impl IntoIterator<Item = S>) -> Self {
        Self {
            names: Mutex::new(names.into_iter().map(Into::into).collect()),
        }
    }

    /// The files present now, sorted.
    pub fn list(&self) -> Vec<String> {
        self.lock().iter().cloned().collect()
    }

    /// Removes `name`; `false` when there was no such file.
    pub fn remove(&self, name: &str) -> bool {
        self.lock().remove(name)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeSet<String>> {
        // Every critical section is one set operation: a poisoned set is still whole.
        self.names
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// `delete_file {"path": ...}`: deletes a file from [`FakeFiles`].
#[derive(Debug)]
pub struct DeleteFileTool {
    files: Arc<FakeFiles>,
}

impl DeleteFileTool {
    /// The tool's id and name.
    pub const ID: &'static str = "delete_file";

    /// A tool deleting from `files`.
    pub fn new(files: Arc<FakeFiles>) -> Self {
        Self { files }
    }
}

#[async_trait]
impl Tool for DeleteFileTool {
    fn descriptor(&self) -> ToolDescriptor {
        ToolDescriptor::new(Self::ID, Self::ID, "Deletes a file from the demo directory")
            .with_parameters(json!({
                "type": "object",
                "properties": {"path": {"type": "string", "description": "the file's name"}},
                "required": ["path"],
                "additionalProperties": false
            }))
    }

    fn validate_args(&self, args: &JsonValue) -> Result<(), ToolError> {
        match args.get("path").and_then(JsonValue::as_str) {
            Some(path) if !path.is_empty() => Ok(()),
            _ => Err(ToolError::InvalidArguments(
                "`path` must be a non-empty string".into(),
            )),
        }
    }

    async fn execute(
        &self,
        args: JsonValue,
        _ctx: &ToolCallContext,
    ) -> Result<ToolOutput, ToolError> {
        let path = args
            .get("path")
            .and_then(JsonValue::as_str)
            .unwrap_or_default();
        if !self.files.remove(path) {
            return Ok(ToolResult::error_with_code(
                Self::ID,
                "not_found",
                format!("no such file: {path}"),
            )
            .into());
        }
        let result = ToolResult::success_with_message(
            Self::ID,
            json!({"deleted": path, "remaining": self.files.list()}),
            format!("deleted {path}"),
        );
        Ok(result.into())
    }
}

/// Where `echo` and `sleep` record their executions, if anywhere.
#[derive(Debug, Clone, Default)]
pub struct Journal(Option<Arc<std::path::Path>>);

impl Journal {
    /// Appends to the file at `path` (created when missing).
    pub fn at(path: impl Into<std::path::PathBuf>) -> Self {
        Self(Some(Arc::from(path.into())))
    }

    async fn record(&self, tool: &str, ctx: &ToolCallContext) -> Result<(), ToolError> {
        let Some(path) = &self.0 else {
            return Ok(());
        };
        let line = format!("{tool} {}\n", ctx.idempotency_key());
        let path = Arc::clone(path);
        tokio::task::spawn_blocking(move || {
            use std::io::Write;
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .and_then(|mut file| file.write_all(line.as_bytes()))
        })
        .await
        .map_err(|e| ToolError::ExecutionFailed(e.to_string()))?
        .map_err(|e| ToolError::ExecutionFailed(format!("journal: {e}")))
    }
}

/// `sleep {"ms": N}`: waits N milliseconds (cancellable), then reports it.
#[derive(Debug, Clone, Default)]
pub struct SleepTool {
    journal: Journal,
}

impl SleepTool {
    /// The tool's id and name.
    pub const ID: &'static str = "sleep";
}

#[async_trait]
impl Tool for SleepTool {
    fn descriptor(&self) -> ToolDescriptor {
        ToolDescriptor::new(Self::ID, Self::ID, "Waits for a number of milliseconds")
            .with_parameters(json!({
                "type": "object",
                "properties": {"ms": {"type": "integer", "minimum": 0, "maximum": 60000}},
                "required": ["ms"],
                "additionalProperties": false
            }))
    }

    fn validate_args(&self, args: &JsonValue) -> Result<(), ToolError> {
        match args.get("ms").and_then(JsonValue::as_u64) {
            Some(ms) if ms <= 60_000 => Ok(()),
            _ => Err(ToolError::InvalidArguments(
                "`ms` must be an integer from 0 to 60000".into(),
            )),
        }
    }

    async fn execute(
        &self,
        args: JsonValue,
        ctx: &ToolCallContext,
    ) -> Result<ToolOutput, ToolError> {
        self.journal.record(Self::ID, ctx).await?;
        let ms = args.get("ms").and_then(JsonValue::as_u64).unwrap_or(0);
        tokio::select! {
            () = tokio::time::sleep(std::time::Duration::from_millis(ms)) => {
                Ok(ToolResult::success(Self::ID, json!({"slept_ms": ms})).into())
            }
            () = ctx.cancellation.cancelled() => {
                Err(ToolError::ExecutionFailed("cancelled while sleeping".into()))
            }
        }
    }
}

/// `echo`: answers with its arguments (the trivial tool of workload W).
#[derive(Debug, Clone, Default)]
pub struct EchoTool {
    journal: Journal,
}

impl EchoTool {
    /// The tool's id and name.
    pub const ID: &'static str = "echo";
}

#[async_trait]
impl Tool for EchoTool {
    fn descriptor(&self) -> ToolDescriptor {
        ToolDescriptor::new(Self::ID, Self::ID, "Answers with its arguments")
    }

    async fn execute(
        &self,
        args: JsonValue,
        ctx: &ToolCallContext,
    ) -> Result<ToolOutput, ToolError> {
        self.journal.record(Self::ID, ctx).await?;
        Ok(ToolResult::success(Self::ID, args).into())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn builds_with_every_agent() {
        let runtime = runtime(ThreadConfig::default()).unwrap();
        assert_eq!(
            agent_ids(&runtime),
            [
                BENCH_AGENT,
                BENCH_DELEGATE_AGENT,
                BENCH_HITL_AGENT,
                BENCH_TEXT_AGENT,
                DEMO_AGENT,
                ORCHESTRATOR_AGENT,
                SLOW_AGENT
            ]
        );
    }

    #[test]
    fn fake_files_forget_deleted_names() {
        let files = FakeFiles::with_demo_files();
        assert!(files.remove("notes.txt"));
        assert!(!files.remove("notes.txt"));
        assert_eq!(files.list(), ["draft.md", "todo.md"]);
    }

    #[test]
    fn delete_file_wants_a_path() {
        let tool = DeleteFileTool::new(Arc::new(FakeFiles::default()));
        assert!(tool.validate_args(&json!({"path": "a"})).is_ok());
        assert!(tool.validate_args(&json!({"path": ""})).is_err());
        assert!(tool.validate_args(&json!({})).is_err());
    }
}
