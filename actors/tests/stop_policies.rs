//! Stop policies driven through real phases: each built-in policy firing and not
//! firing, first-stop-wins order, zero limits, run scoping, and plugin exclusivity.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use awaken_actors::actions::LoopActionHandlersPlugin;
use awaken_actors::contract::{
    ContentBlock, StopConditionSpec, StoppedReason, TokenUsage, ToolCall, ToolResult,
};
use awaken_actors::llm::StreamResult;
use awaken_actors::phase::{PhaseContext, PhaseRuntime, ToolCallView};
use awaken_actors::plugin::{ExecutionEnv, PluginEntry};
use awaken_actors::policies::{
    Clock, ConsecutiveErrorsPolicy, ContentMatchPolicy, LoopDetectionPolicy, MaxRoundsPlugin,
    MaxRoundsPolicy, StopConditionPlugin, StopConditionStatsKey, StopOnToolPolicy, StopPolicy,
    StopRequest, TimeoutPolicy, TokenBudgetPolicy, policies_from_specs,
};
use awaken_actors::state::StateStore;
use awaken_actors::{JsonValue, Phase, StateError, ToolCallId};
use serde_json::json;

/// A clock the test moves by hand.
#[derive(Default)]
struct ManualClock(AtomicU64);

impl ManualClock {
    fn advance(&self, ms: u64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// One agent's worth of phases over a store, with a manual clock.
struct Harness {
    env: ExecutionEnv,
    store: StateStore,
    clock: Arc<ManualClock>,
    calls: u32,
}

impl Harness {
    fn new(policies: Vec<Arc<dyn StopPolicy>>) -> Self {
        let clock = Arc::new(ManualClock::default());
        let plugin = StopConditionPlugin::new(policies).with_clock(clock.clone());
        let env = ExecutionEnv::from_plugins(
            [
                PluginEntry::required(
                    LoopActionHandlersPlugin::ID,
                    Arc::new(LoopActionHandlersPlugin),
                ),
                PluginEntry::required(StopConditionPlugin::ID, Arc::new(plugin)),
            ],
            &BTreeSet::new(),
        )
        .unwrap();
        let mut store = StateStore::new();
        env.install(&mut store).unwrap();
        Self {
            env,
            store,
            clock,
            calls: 0,
        }
    }

    async fn run(&mut self, ctx: PhaseContext) {
        PhaseRuntime::new()
            .run_phase(&self.env, &mut self.store, ctx)
            .await
            .unwrap();
    }

    async fn run_start(&mut self) {
        self.run(PhaseContext::test_default().with_phase(Phase::RunStart))
            .await;
    }

    /// AfterInference of `step` with a response calling `tools` (name, args).
    async fn inference(
        &mut self,
        step: u32,
        text: &str,
        tools: &[(&str, JsonValue)],
        usage: Option<TokenUsage>,
    ) {
        let tool_calls = tools
            .iter()
            .map(|(name, args)| {
                self.calls += 1;
                ToolCall::new(
                    ToolCallId::new(format!("call-{}", self.calls)).unwrap(),
                    *name,
                    args.clone(),
                )
            })
            .collect();
        let response = StreamResult {
            content: vec![ContentBlock::text(text)],
            tool_calls,
            usage,
            ..StreamResult::default()
        };
        let ctx = PhaseContext::test_default()
            .with_phase(Phase::AfterInference)
            .with_step(step)
            .with_inference(Arc::new(response));
        self.run(ctx).await;
    }

    /// AfterToolExecute of `step` with `result`.
    async fn tool_result(&mut self, step: u32, result: ToolResult) {
        self.calls += 1;
        let call = ToolCallView {
            call_id: ToolCallId::new(format!("call-{}", self.calls)).unwrap(),
            tool_name: result.tool_name.clone(),
            arguments: json!({}),
            result: Some(result),
            decision: None,
        };
        let ctx = PhaseContext::test_default()
            .with_phase(Phase::AfterToolExecute)
            .with_step(step)
            .with_tool_call(call);
        self.run(ctx).await;
    }

    /// StepEnd of `step`; returns the stop request, if any.
    async fn step_end(&mut self, step: u32) -> Option<StoppedReason> {
        let ctx = PhaseContext::test_default()
            .with_phase(Phase::StepEnd)
            .with_step(step);
        self.run(ctx).await;
        self.stop()
    }

    fn stop(&self) -> Option<StoppedReason> {
        self.store.read::<StopRequest>().flatten()
    }

    fn stop_code(&self) -> Option<String> {
        self.stop().map(|s| s.code)
    }

    /// A plain step: one text-only inference, then StepEnd.
    async fn quiet_step(&mut self, step: u32) -> Option<StoppedReason> {
        self.inference(step, "thinking", &[], None).await;
        self.step_end(step).await
    }
}

#[tokio::test]
async fn max_rounds_fires_after_the_last_allowed_step() {
    let mut h = Harness::new(vec![Arc::new(MaxRoundsPolicy::new(3))]);
    h.run_start().await;
    assert_eq!(h.quiet_step(1).await, None);
    assert_eq!(h.quiet_step(2).await, None);
    let stop = h.quiet_step(3).await.unwrap();
    assert_eq!(stop.code, "max_rounds");
    assert_eq!(
        stop.detail.as_deref(),
        Some("reached the limit of 3 rounds")
    );
}

#[tokio::test]
async fn token_budget_accumulates_usage_across_steps() {
    let mut h = Harness::new(vec![Arc::new(TokenBudgetPolicy::new(100))]);
    h.run_start().await;
    h.inference(1, "a", &[], Some(TokenUsage::new(40, 10)))
        .await;
    assert_eq!(h.step_end(1).await, None);
    h.inference(2, "b", &[], Some(TokenUsage::new(40, 10)))
        .await;
    assert_eq!(h.step_end(2).await, None, "exactly at the budget is fine");
    h.inference(3, "c", &[], Some(TokenUsage::new(1, 0))).await;
    let stop = h.step_end(3).await.unwrap();
    assert_eq!(stop.code, "token_budget");
    assert_eq!(
        stop.detail.as_deref(),
        Some("used 101 tokens, over the budget of 100")
    );
    let stats = h.store.read::<StopConditionStatsKey>().unwrap().stats;
    assert_eq!(
        (stats.total_input_tokens, stats.total_output_tokens),
        (81, 20)
    );
}

#[tokio::test]
async fn timeout_measures_from_run_start() {
    let mut h = Harness::new(vec![Arc::new(TimeoutPolicy::new(1_000))]);
    h.clock.advance(50_000); // unrelated time before the run
    h.run_start().await;
    h.clock.advance(600);
    assert_eq!(h.quiet_step(1).await, None);
    h.clock.advance(400);
    assert_eq!(h.quiet_step(2).await, None, "1000 ms is not over 1000 ms");
    h.clock.advance(1);
    let stop = h.quiet_step(3).await.unwrap();
    assert_eq!(stop.code, "timeout");
    assert_eq!(
        stop.detail.as_deref(),
        Some("ran for 1001 ms, over the limit of 1000 ms")
    );
}

#[tokio::test]
async fn consecutive_errors_reset_on_success() {
    let mut h = Harness::new(vec![Arc::new(ConsecutiveErrorsPolicy::new(3))]);
    h.run_start().await;
    h.tool_result(1, ToolResult::error("t", "boom")).await;
    h.tool_result(1, ToolResult::error("t", "boom")).await;
    h.tool_result(1, ToolResult::success("t", json!(1))).await;
    h.tool_result(1, ToolResult::error("t", "boom")).await;
    assert_eq!(h.step_end(1).await, None, "the success broke the streak");
    h.tool_result(2, ToolResult::error("t", "boom")).await;
    h.tool_result(2, ToolResult::suspended("t", "waiting"))
        .await;
    assert_eq!(
        h.step_end(2).await,
        None,
        "a suspension neither adds nor resets"
    );
    h.tool_result(3, ToolResult::error("t", "boom")).await;
    let stop = h.step_end(3).await.unwrap();
    assert_eq!(stop.code, "consecutive_errors");
}

#[tokio::test]
async fn stop_on_tool_looks_at_the_last_response_only() {
    let mut h = Harness::new(vec![Arc::new(StopOnToolPolicy::new("finish").unwrap())]);
    h.run_start().await;
    h.inference(1, "", &[("search", json!({"q": "x"}))], None)
        .await;
    assert_eq!(h.step_end(1).await, None);
    h.inference(2, "", &[("search", json!({})), ("finish", json!({}))], None)
        .await;
    assert_eq!(h.step_end(2).await.unwrap().code, "stop_on_tool");

    // The tool called in an earlier response, but not the last one, does not count.
    let mut h = Harness::new(vec![Arc::new(StopOnToolPolicy::new("finish").unwrap())]);
    h.inference(1, "", &[("finish", json!({}))], None).await;
    h.inference(1, "retrying", &[("search", json!({}))], None)
        .await;
    assert_eq!(h.step_end(1).await, None);
}

#[tokio::test]
async fn content_match_reads_the_last_response_text() {
    let mut h = Harness::new(vec![Arc::new(
        ContentMatchPolicy::new(r"(?m)^FINAL ANSWER:").unwrap(),
    )]);
    h.run_start().await;
    h.inference(1, "the FINAL ANSWER: is not at line start", &[], None)
        .await;
    assert_eq!(h.step_end(1).await, None);
    h.inference(2, "done.\nFINAL ANSWER: 42", &[], None).await;
    assert_eq!(h.step_end(2).await.unwrap().code, "content_match");
}

#[tokio::test]
async fn loop_detection_spans_steps_within_the_window() {
    let mut h = Harness::new(vec![Arc::new(LoopDetectionPolicy::new(3))]);
    h.run_start().await;
    h.inference(1, "", &[("read", json!({"path": "a", "lines": 10}))], None)
        .await;
    assert_eq!(h.step_end(1).await, None);
    h.inference(2, "", &[("read", json!({"path": "b", "lines": 10}))], None)
        .await;
    assert_eq!(h.step_end(2).await, None, "other arguments, no loop");
    // Same call as step 1 with keys in another order: two calls back, inside the window.
    h.inference(3, "", &[("read", json!({"lines": 10, "path": "a"}))], None)
        .await;
    let stop = h.step_end(3).await.unwrap();
    assert_eq!(stop.code, "loop_detection");
    assert!(stop.detail.unwrap().contains("`read`"));
}

#[tokio::test]
async fn loop_detection_forgets_calls_that_left_the_window() {
    let mut h = Harness::new(vec![Arc::new(LoopDetectionPolicy::new(2))]);
    h.run_start().await;
    for (step, path) in [(1, "a"), (2, "b"), (3, "a"), (4, "b")] {
        h.inference(step, "", &[("read", json!({ "path": path }))], None)
            .await;
        assert_eq!(h.step_end(step).await, None, "step {step}");
    }
    let stats = h.store.read::<StopConditionStatsKey>().unwrap().stats;
    assert_eq!(
        stats.recent_tool_calls.len(),
        2,
        "history trimmed to the window"
    );
    h.inference(5, "", &[("read", json!({"path": "b"}))], None)
        .await;
    assert_eq!(h.step_end(5).await.unwrap().code, "loop_detection");
}

#[tokio::test]
async fn the_first_stop_in_policy_order_wins() {
    let finish = || -> Arc<dyn StopPolicy> { Arc::new(StopOnToolPolicy::new("finish").unwrap()) };
    let rounds = || -> Arc<dyn StopPolicy> { Arc::new(MaxRoundsPolicy::new(1)) };
    for (policies, expected) in [
        (vec![finish(), rounds()], "stop_on_tool"),
        (vec![rounds(), finish()], "max_rounds"),
    ] {
        let mut h = Harness::new(policies);
        h.run_start().await;
        h.inference(1, "", &[("finish", json!({}))], None).await;
        assert_eq!(h.step_end(1).await.unwrap().code, expected);
        // A later step does not replace the first request.
        h.inference(2, "", &[], None).await;
        assert_eq!(h.step_end(2).await.unwrap().code, expected);
    }
}

#[tokio::test]
async fn zero_limits_disable_their_policies() {
    let specs = [
        StopConditionSpec::MaxRounds { rounds: 0 },
        StopConditionSpec::Timeout { seconds: 0 },
        StopConditionSpec::TokenBudget { max_total: 0 },
        StopConditionSpec::ConsecutiveErrors { max: 0 },
        StopConditionSpec::LoopDetection { window: 0 },
    ];
    let mut h = Harness::new(policies_from_specs(&specs).unwrap());
    h.run_start().await;
    for step in 1..=50 {
        h.clock.advance(3_600_000);
        h.inference(
            step,
            "",
            &[("same", json!({}))],
            Some(TokenUsage::new(1_000_000, 1_000_000)),
        )
        .await;
        h.tool_result(step, ToolResult::error("same", "boom")).await;
        assert_eq!(h.step_end(step).await, None, "step {step}");
    }
    assert_eq!(h.stop_code(), None);
}

#[tokio::test]
async fn statistics_and_stop_requests_are_run_scoped() {
    let mut h = Harness::new(vec![Arc::new(MaxRoundsPolicy::new(2))]);
    h.run_start().await;
    h.inference(1, "", &[], Some(TokenUsage::new(5, 5))).await;
    h.step_end(1).await;
    assert_eq!(h.quiet_step(2).await.unwrap().code, "max_rounds");

    h.store.begin_run();
    assert_eq!(h.stop(), None);
    let stats = h.store.read::<StopConditionStatsKey>().unwrap();
    assert_eq!(stats.started_at_ms, None);
    assert_eq!(stats.stats.total_input_tokens, 0);
    h.run_start().await;
    assert_eq!(
        h.quiet_step(1).await,
        None,
        "a new run starts counting again"
    );
}

#[test]
fn only_one_stop_plugin_fits_in_an_agent() {
    let entries = [
        PluginEntry::required(
            StopConditionPlugin::ID,
            Arc::new(StopConditionPlugin::new(Vec::new())),
        ),
        PluginEntry::required(MaxRoundsPlugin::ID, Arc::new(MaxRoundsPlugin::new(10))),
    ];
    assert_eq!(
        ExecutionEnv::from_plugins(entries, &BTreeSet::new()).unwrap_err(),
        StateError::KeyAlreadyRegistered {
            key: "__runtime.stop_request".into()
        }
    );
}

#[tokio::test]
async fn max_rounds_plugin_is_a_stop_condition_plugin() {
    let env = ExecutionEnv::from_plugins(
        [PluginEntry::required(
            MaxRoundsPlugin::ID,
            Arc::new(MaxRoundsPlugin::new(1)),
        )],
        &BTreeSet::new(),
    )
    .unwrap();
    let mut store = StateStore::new();
    env.install(&mut store).unwrap();
    PhaseRuntime::new()
        .run_phase(
            &env,
            &mut store,
            PhaseContext::test_default()
                .with_phase(Phase::StepEnd)
                .with_step(1),
        )
        .await
        .unwrap();
    assert_eq!(
        store.read::<StopRequest>().flatten().map(|s| s.code),
        Some("max_rounds".to_owned())
    );
}
