//! `StopConditionPlugin`: keeps run statistics and evaluates stop policies at StepEnd.

use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::StopRequest;
use super::builtin::MaxRoundsPolicy;
use super::policy::{StopDecision, StopPolicy, StopPolicyStats, ToolCallSignature};
use super::spec::{PolicyError, policies_from_specs};
use crate::clock::{Clock, SystemClock};
use crate::contract::{StopConditionSpec, StoppedReason, TokenUsage};
use crate::error::StateError;
use crate::phase::{Phase, PhaseContext};
use crate::plugin::{PhaseHook, Plugin, PluginDescriptor, PluginRegistrar};
use crate::state::{StateCommand, StateKey, StateKeyOptions};

/// The most tool-call signatures the statistics keep, whatever policies ask for.
pub const MAX_TOOL_CALL_HISTORY: usize = 1024;

/// What [`StopConditionStatsKey`] holds: the policy statistics plus the run's start.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StopConditionStats {
    /// When the run started, unix millis; `None` until the first hook saw the run.
    pub started_at_ms: Option<u64>,
    /// Everything but `elapsed_ms`, which is computed when policies are evaluated.
    pub stats: StopPolicyStats,
}

/// Changes to [`StopConditionStats`], one per hook that feeds it.
#[derive(Debug)]
pub enum StopConditionStatsUpdate {
    /// The run started at `at_ms`.
    RunStarted {
        /// Unix millis.
        at_ms: u64,
    },
    /// An inference response arrived.
    Inference {
        /// The usage the provider reported, if any.
        usage: Option<TokenUsage>,
        /// The requested tool calls, in order.
        tool_calls: Vec<ToolCallSignature>,
        /// The response text.
        text: String,
        /// How many signatures to keep in `recent_tool_calls`.
        history: usize,
    },
    /// A tool call produced a result.
    ToolOutcome {
        /// Whether the result was an error.
        failed: bool,
    },
    /// A step ended.
    StepEnded {
        /// Its 1-based number.
        step: u32,
    },
}

/// Run-scoped state key: the statistics stop policies are evaluated against.
///
/// [`StopConditionPlugin`] and [`MaxRoundsPlugin`](super::MaxRoundsPlugin) both
/// register it, so only one of them can be installed per agent.
#[derive(Debug)]
pub struct StopConditionStatsKey;

impl StateKey for StopConditionStatsKey {
    const KEY: &'static str = "__runtime.stop_condition_stats";
    type Value = StopConditionStats;
    type Update = StopConditionStatsUpdate;

    fn apply(value: &mut StopConditionStats, update: StopConditionStatsUpdate) {
        let stats = &mut value.stats;
        match update {
            StopConditionStatsUpdate::RunStarted { at_ms } => {
                value.started_at_ms.get_or_insert(at_ms);
            }
            StopConditionStatsUpdate::Inference {
                usage,
                tool_calls,
                text,
                history,
            } => {
                if let Some(usage) = usage {
                    let (input, output) = split_usage(&usage);
                    stats.total_input_tokens = stats.total_input_tokens.saturating_add(input);
                    stats.total_output_tokens = stats.total_output_tokens.saturating_add(output);
                }
                stats.last_tool_names = tool_calls.iter().map(|c| c.name.clone()).collect();
                stats.last_response_text = text;
                stats.recent_tool_calls.extend(tool_calls);
                let history = history.min(MAX_TOOL_CALL_HISTORY);
                let excess = stats.recent_tool_calls.len().saturating_sub(history);
                stats.recent_tool_calls.drain(..excess);
            }
            StopConditionStatsUpdate::ToolOutcome { failed: true } => {
                stats.consecutive_errors = stats.consecutive_errors.saturating_add(1);
            }
            StopConditionStatsUpdate::ToolOutcome { failed: false } => {
                stats.consecutive_errors = 0;
            }
            StopConditionStatsUpdate::StepEnded { step } => stats.step_count = step,
        }
    }
}

/// `(input, output)` tokens of one inference. A provider that reports only a total
/// has it counted as input, so token budgets still bind.
fn split_usage(usage: &TokenUsage) -> (u64, u64) {
    match (usage.prompt_tokens, usage.completion_tokens) {
        (None, None) => (usage.total_tokens.unwrap_or(0), 0),
        (input, output) => (input.unwrap_or(0), output.unwrap_or(0)),
    }
}

/// Ends runs when one of its [`StopPolicy`]s says so (book: "Configure Stop Policies").
///
/// Hooks: RunStart records the start time; AfterInference adds token usage and
/// records the response's tool calls and text; AfterToolExecute counts failed tool
/// calls in a row; StepEnd evaluates the policies in order and writes the first
/// `Stop` into [`StopRequest`]. The resolver installs exactly one, built from the
/// agent's `max_rounds` and `stop_conditions` section.
#[derive(Clone)]
pub struct StopConditionPlugin {
    policies: Arc<[Arc<dyn StopPolicy>]>,
    clock: Arc<dyn Clock>,
    history: usize,
}

impl std::fmt::Debug for StopConditionPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StopConditionPlugin")
            .field("policies", &self.policies)
            .field("history", &self.history)
            .finish()
    }
}

impl StopConditionPlugin {
    /// The id the resolver installs it under.
    pub const ID: &'static str = "stop-condition";

    /// A plugin evaluating `policies` in order, on the system clock.
    pub fn new(policies: Vec<Arc<dyn StopPolicy>>) -> Self {
        let history = policies
            .iter()
            .map(|p| p.tool_call_history())
            .max()
            .unwrap_or(0)
            .min(MAX_TOOL_CALL_HISTORY);
        Self {
            policies: policies.into(),
            clock: Arc::new(SystemClock),
            history,
        }
    }

    /// The plugin an agent gets: `max_rounds` first (0 disables it), then one policy
    /// per spec, in order.
    pub fn for_agent(max_rounds: u32, specs: &[StopConditionSpec]) -> Result<Self, PolicyError> {
        let mut policies: Vec<Arc<dyn StopPolicy>> =
            vec![Arc::new(MaxRoundsPolicy::new(max_rounds))];
        policies.extend(policies_from_specs(specs)?);
        Ok(Self::new(policies))
    }

    /// The same plugin evaluating `more` after its own policies.
    pub fn and_policies(self, more: &[Arc<dyn StopPolicy>]) -> Self {
        if more.is_empty() {
            return self;
        }
        let mut policies = self.policies.to_vec();
        policies.extend(more.iter().cloned());
        Self::new(policies).with_clock(self.clock)
    }

    /// Reads time from `clock` instead of the system clock.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The policies, in evaluation order.
    pub fn policies(&self) -> &[Arc<dyn StopPolicy>] {
        &self.policies
    }
}

impl Plugin for StopConditionPlugin {
    fn descriptor(&self) -> PluginDescriptor {
        PluginDescriptor::new(Self::ID, "Ends the run when a stop policy fires")
    }

    fn register(&self, r: &mut PluginRegistrar) -> Result<(), StateError> {
        r.register_key::<StopRequest>(StateKeyOptions::default())?;
        r.register_key::<StopConditionStatsKey>(StateKeyOptions::default())?;
        r.register_phase_hook(
            "stop_stats_run_start",
            Phase::RunStart,
            RunStartHook {
                clock: Arc::clone(&self.clock),
            },
        )?;
        r.register_phase_hook(
            "stop_stats_inference",
            Phase::AfterInference,
            InferenceHook {
                history: self.history,
            },
        )?;
        r.register_phase_hook("stop_stats_tool", Phase::AfterToolExecute, ToolHook)?;
        r.register_phase_hook(
            "stop_conditions",
            Phase::StepEnd,
            StepEndHook {
                policies: Arc::clone(&self.policies),
                clock: Arc::clone(&self.clock),
            },
        )
    }
}

struct RunStartHook {
    clock: Arc<dyn Clock>,
}

#[async_trait]
impl PhaseHook for RunStartHook {
    async fn run(&self, _ctx: &PhaseContext) -> Result<StateCommand, StateError> {
        let mut command = StateCommand::new();
        command.update::<StopConditionStatsKey>(StopConditionStatsUpdate::RunStarted {
            at_ms: self.clock.now_ms(),
        });
        Ok(command)
    }
}

struct InferenceHook {
    history: usize,
}

#[async_trait]
impl PhaseHook for InferenceHook {
    async fn run(&self, ctx: &PhaseContext) -> Result<StateCommand, StateError> {
        let mut command = StateCommand::new();
        if let Some(response) = &ctx.inference {
            command.update::<StopConditionStatsKey>(StopConditionStatsUpdate::Inference {
                usage: response.usage,
                tool_calls: response
                    .tool_calls
                    .iter()
                    .map(|call| ToolCallSignature::new(call.name.as_str(), &call.arguments))
                    .collect(),
                text: response.text(),
                history: self.history,
            });
        }
        Ok(command)
    }
}

struct ToolHook;

#[async_trait]
impl PhaseHook for ToolHook {
    async fn run(&self, ctx: &PhaseContext) -> Result<StateCommand, StateError> {
        let mut command = StateCommand::new();
        let result = ctx.tool_call.as_ref().and_then(|call| call.result.as_ref());
        // A suspended call has neither failed nor succeeded yet: the streak stands.
        if let Some(result) = result.filter(|r| !r.is_pending()) {
            command.update::<StopConditionStatsKey>(StopConditionStatsUpdate::ToolOutcome {
                failed: result.is_error(),
            });
        }
        Ok(command)
    }
}

struct StepEndHook {
    policies: Arc<[Arc<dyn StopPolicy>]>,
    clock: Arc<dyn Clock>,
}

#[async_trait]
impl PhaseHook for StepEndHook {
    async fn run(&self, ctx: &PhaseContext) -> Result<StateCommand, StateError> {
        let mut command = StateCommand::new();
        let now = self.clock.now_ms();
        let recorded = ctx.state::<StopConditionStatsKey>();
        let started = match recorded.and_then(|s| s.started_at_ms) {
            Some(at) => at,
            None => {
                // Installed mid-run: measure from here.
                command.update::<StopConditionStatsKey>(StopConditionStatsUpdate::RunStarted {
                    at_ms: now,
                });
                now
            }
        };
        let mut stats = recorded.map(|s| s.stats.clone()).unwrap_or_default();
        stats.step_count = ctx.step;
        stats.elapsed_ms = now.saturating_sub(started);
        command.update::<StopConditionStatsKey>(StopConditionStatsUpdate::StepEnded {
            step: ctx.step,
        });

        let first_stop = self
            .policies
            .iter()
            .map(|policy| (policy, policy.evaluate(&stats)))
            .find(|(_, decision)| decision.is_stop());
        if let Some((policy, StopDecision::Stop { code, detail })) = first_stop {
            tracing::info!(policy = policy.id(), %code, step = ctx.step, "stop condition fired");
            command.update::<StopRequest>(StoppedReason {
                code,
                detail: Some(detail),
            });
        }
        Ok(command)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply(value: &mut StopConditionStats, update: StopConditionStatsUpdate) {
        StopConditionStatsKey::apply(value, update);
    }

    fn inference(calls: &[&str], history: usize) -> StopConditionStatsUpdate {
        StopConditionStatsUpdate::Inference {
            usage: Some(TokenUsage::new(10, 5)),
            tool_calls: calls
                .iter()
                .map(|n| ToolCallSignature::new(*n, &serde_json::Value::Null))
                .collect(),
            text: "t".into(),
            history,
        }
    }

    #[test]
    fn history_is_trimmed_to_what_policies_need() {
        let mut value = StopConditionStats::default();
        apply(&mut value, inference(&["a", "b"], 3));
        apply(&mut value, inference(&["c", "d"], 3));
        let names: Vec<&str> = value
            .stats
            .recent_tool_calls
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(names, ["b", "c", "d"]);
        assert_eq!(value.stats.last_tool_names, ["c", "d"]);
        assert_eq!(value.stats.total_input_tokens, 20);
        assert_eq!(value.stats.total_output_tokens, 10);

        apply(&mut value, inference(&["e"], 0));
        assert!(value.stats.recent_tool_calls.is_empty());
    }

    #[test]
    fn usage_with_only_a_total_counts_as_input() {
        let total_only = TokenUsage {
            total_tokens: Some(7),
            ..TokenUsage::default()
        };
        assert_eq!(split_usage(&total_only), (7, 0));
        assert_eq!(split_usage(&TokenUsage::new(3, 4)), (3, 4));
        assert_eq!(split_usage(&TokenUsage::default()), (0, 0));
    }

    #[test]
    fn errors_streak_resets_on_success_and_start_is_kept() {
        let mut value = StopConditionStats::default();
        for failed in [true, true, false, true] {
            apply(&mut value, StopConditionStatsUpdate::ToolOutcome { failed });
        }
        assert_eq!(value.stats.consecutive_errors, 1);
        apply(
            &mut value,
            StopConditionStatsUpdate::RunStarted { at_ms: 5 },
        );
        apply(
            &mut value,
            StopConditionStatsUpdate::RunStarted { at_ms: 9 },
        );
        assert_eq!(value.started_at_ms, Some(5));
    }
}
