//! Stop conditions: when a run ends even though the model would go on.
//!
//! # The pieces
//!
//! A [`StopPolicy`] looks at [`StopPolicyStats`] — steps done, tokens used, time spent,
//! failed tool calls in a row, the last response's tool calls and text, the most
//! recent tool-call signatures — and returns a [`StopDecision`]. Policies are plain
//! synchronous values; seven are built in, one per
//! [`StopConditionSpec`](crate::contract::StopConditionSpec) variant:
//!
//! | policy | stops when | disabled by |
//! |---|---|---|
//! | [`MaxRoundsPolicy`] | `step_count >= max_rounds` | 0 |
//! | [`TokenBudgetPolicy`] | input + output tokens `> max_total` | 0 |
//! | [`TimeoutPolicy`] | `elapsed_ms > max_ms` (the spec's `timeout` is in seconds) | 0 |
//! | [`ConsecutiveErrorsPolicy`] | `max` tool calls failed in a row | 0 |
//! | [`StopOnToolPolicy`] | the last response called the named tool | — |
//! | [`ContentMatchPolicy`] | the regex is found in the last response's text | — |
//! | [`LoopDetectionPolicy`] | one call (name + canonical JSON args) twice among the last `window` calls | 0 |
//!
//! # Wiring
//!
//! [`StopConditionPlugin`] keeps the statistics in a run-scoped state key
//! ([`StopConditionStatsKey`]) fed by RunStart, AfterInference and AfterToolExecute
//! hooks. At StepEnd it evaluates the policies in order; the first `Stop` is written
//! into [`StopRequest`], and the run loop ends the run after the step with
//! `TerminationReason::Stopped { code, detail }`.
//!
//! The resolver installs exactly one stop plugin per agent (it is runtime-required,
//! so a hook filter cannot switch it off), built by [`StopConditionPlugin::for_agent`]
//! from the agent's `max_rounds` followed by its `stop_conditions` section:
//!
//! ```yaml
//! id: researcher
//! max_rounds: 25
//! sections:
//!   stop_conditions:
//!     - type: token_budget
//!       max_total: 200000
//!     - type: stop_on_tool
//!       tool_name: finish
//!     - type: content_match
//!       pattern: "(?m)^FINAL ANSWER"
//!     - type: loop_detection
//!       window: 6
//! ```
//!
//! [`policies_from_specs`] implements every variant and refuses an invalid one (a
//! regex that does not compile, an empty tool name) instead of skipping it; at
//! resolve time that is `ResolveError::InvalidPluginConfig`.
//!
//! Hosts that build plugins by hand can use [`StopConditionPlugin::new`] with any
//! policies, custom ones included, or [`MaxRoundsPlugin`] for the round limit alone.
//! Both register the same keys, so only one stop plugin fits in an agent.

mod builtin;
mod max_rounds;
mod plugin;
mod policy;
mod spec;

pub use crate::clock::{Clock, SystemClock};
pub use builtin::{
    ConsecutiveErrorsPolicy, ContentMatchPolicy, LoopDetectionPolicy, MaxRoundsPolicy,
    StopOnToolPolicy, TimeoutPolicy, TokenBudgetPolicy,
};
pub use max_rounds::MaxRoundsPlugin;
pub use plugin::{
    MAX_TOOL_CALL_HISTORY, StopConditionPlugin, StopConditionStats, StopConditionStatsKey,
    StopConditionStatsUpdate,
};
pub use policy::{StopDecision, StopPolicy, StopPolicyStats, ToolCallSignature};
pub use spec::{PolicyError, StopConditionsConfigKey, policies_from_specs, policy_from_spec};

use crate::contract::StoppedReason;
use crate::state::StateKey;

/// State key: the first stop condition that fired in this run, if any.
#[derive(Debug)]
pub struct StopRequest;

impl StateKey for StopRequest {
    const KEY: &'static str = "__runtime.stop_request";
    type Value = Option<StoppedReason>;
    type Update = StoppedReason;

    /// The first request wins; later ones are ignored.
    fn apply(value: &mut Option<StoppedReason>, update: StoppedReason) {
        value.get_or_insert(update);
    }
}
