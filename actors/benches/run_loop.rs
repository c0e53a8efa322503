//! The whole run loop on thread actors: workload W (new thread, inference → one tool
//! call → inference → final text) with the scripted model and the memory store.

#![allow(clippy::unwrap_used, missing_docs)]

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use awaken_actors::contract::{AgentSpec, Message, ModelSpec, ToolDescriptor, ToolResult};
use awaken_actors::event_sink::VecEventSink;
use awaken_actors::llm::{ScriptSpec, ScriptStep, ScriptedExecutor};
use awaken_actors::runtime::{AgentRuntime, AgentRuntimeBuilder};
use awaken_actors::thread::RunRequest;
use awaken_actors::tool::{Tool, ToolCallContext, ToolOutput};
use awaken_actors::{AgentId, JsonValue, ThreadId, ToolError};
use criterion::{Criterion, criterion_group, criterion_main};

// The allocator production binaries use; glibc malloc dominates profiles otherwise.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

struct Lookup;

#[async_trait]
impl Tool for Lookup {
    fn descriptor(&self) -> ToolDescriptor {
        ToolDescriptor::new("lookup", "lookup", "looks something up")
    }
    async fn execute(
        &self,
        args: JsonValue,
        _ctx: &ToolCallContext,
    ) -> Result<ToolOutput, ToolError> {
        Ok(ToolResult::success("lookup", args).into())
    }
}

fn runtime() -> AgentRuntime {
    let script = ScriptSpec::new(vec![
        ScriptStep::tool_call("lookup", serde_json::json!({"q": "weather"})),
        ScriptStep::text("It is sunny."),
    ]);
    AgentRuntimeBuilder::new()
        .with_model(
            "m",
            ModelSpec {
                id: "m".into(),
                provider: "scripted".into(),
                model: "scripted".into(),
            },
        )
        .with_provider("scripted", Arc::new(ScriptedExecutor::new(script).unwrap()))
        .with_tool("lookup", Arc::new(Lookup))
        .with_agent_spec(AgentSpec::new(AgentId::new("w").unwrap()).with_model("m"))
        .build()
        .unwrap()
}

fn bench(c: &mut Criterion) {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let runtime = runtime();
    let counter = AtomicU64::new(0);
    c.bench_function("workload_w_sequential", |b| {
        b.iter_custom(|iters| {
            tokio.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    let n = counter.fetch_add(1, Ordering::Relaxed);
                    let thread = ThreadId::new(format!("bench-{n}")).unwrap();
                    let request = RunRequest::new(thread, vec![Message::user("weather?")]);
                    let result = runtime
                        .run(request, Arc::new(VecEventSink::new()))
                        .await
                        .unwrap();
                    black_box(result);
                }
                let elapsed: Duration = start.elapsed();
                elapsed
            })
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
