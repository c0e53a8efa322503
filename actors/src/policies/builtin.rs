//! The built-in stop policies, one per [`StopConditionSpec`](crate::contract::StopConditionSpec)
//! variant. A limit of 0 disables the policy that carries it.

use std::collections::HashSet;

use regex::Regex;

use super::PolicyError;
use super::policy::{StopDecision, StopPolicy, StopPolicyStats};

/// Stops once `max_rounds` steps have completed.
#[derive(Debug, Clone, Copy)]
pub struct MaxRoundsPolicy {
    max_rounds: u32,
}

impl MaxRoundsPolicy {
    /// The policy's id and stop code.
    pub const ID: &'static str = "max_rounds";

    /// Allows `max_rounds` steps per run; 0 disables the limit.
    pub fn new(max_rounds: u32) -> Self {
        Self { max_rounds }
    }
}

impl StopPolicy for MaxRoundsPolicy {
    fn id(&self) -> &str {
        Self::ID
    }

    fn evaluate(&self, stats: &StopPolicyStats) -> StopDecision {
        if self.max_rounds > 0 && stats.step_count >= self.max_rounds {
            StopDecision::stop(
                Self::ID,
                format!("reached the limit of {} rounds", self.max_rounds),
            )
        } else {
            StopDecision::Continue
        }
    }
}

/// Stops once input plus output tokens exceed a budget.
#[derive(Debug, Clone, Copy)]
pub struct TokenBudgetPolicy {
    max_total: u64,
}

impl TokenBudgetPolicy {
    /// The policy's id and stop code.
    pub const ID: &'static str = "token_budget";

    /// A budget of `max_total` tokens per run; 0 disables it.
    pub fn new(max_total: u64) -> Self {
        Self { max_total }
    }
}

impl StopPolicy for TokenBudgetPolicy {
    fn id(&self) -> &str {
        Self::ID
    }

    fn evaluate(&self, stats: &StopPolicyStats) -> StopDecision {
        let used = stats.total_tokens();
        if self.max_total > 0 && used > self.max_total {
            StopDecision::stop(
                Self::ID,
                format!("used {used} tokens, over the budget of {}", self.max_total),
            )
        } else {
            StopDecision::Continue
        }
    }
}

/// Stops once the run has taken longer than a wall-clock limit.
#[derive(Debug, Clone, Copy)]
pub struct TimeoutPolicy {
    max_ms: u64,
}

impl TimeoutPolicy {
    /// The policy's id and stop code.
    pub const ID: &'static str = "timeout";

    /// A limit of `max_ms` **milliseconds** (the spec's `Timeout` takes seconds); 0
    /// disables it.
    pub fn new(max_ms: u64) -> Self {
        Self { max_ms }
    }
}

impl StopPolicy for TimeoutPolicy {
    fn id(&self) -> &str {
        Self::ID
    }

    fn evaluate(&self, stats: &StopPolicyStats) -> StopDecision {
        if self.max_ms > 0 && stats.elapsed_ms > self.max_ms {
            StopDecision::stop(
                Self::ID,
                format!(
                    "ran for {} ms, over the limit of {} ms",
                    stats.elapsed_ms, self.max_ms
                ),
            )
        } else {
            StopDecision::Continue
        }
    }
}

/// Stops once `max` tool calls in a row have failed.
#[derive(Debug, Clone, Copy)]
pub struct ConsecutiveErrorsPolicy {
    max: u32,
}

impl ConsecutiveErrorsPolicy {
    /// The policy's id and stop code.
    pub const ID: &'static str = "consecutive_errors";

    /// Tolerates fewer than `max` failures in a row; 0 disables it.
    pub fn new(max: u32) -> Self {
        Self { max }
    }
}

impl StopPolicy for ConsecutiveErrorsPolicy {
    fn id(&self) -> &str {
        Self::ID
    }

    fn evaluate(&self, stats: &StopPolicyStats) -> StopDecision {
        if self.max > 0 && stats.consecutive_errors >= self.max {
            StopDecision::stop(
                Self::ID,
                format!("{} tool calls failed in a row", stats.consecutive_errors),
            )
        } else {
            StopDecision::Continue
        }
    }
}

/// Stops after a response that called a given tool (e.g. a `finish` tool).
#[derive(Debug, Clone)]
pub struct StopOnToolPolicy {
    tool_name: String,
}

impl StopOnToolPolicy {
    /// The policy's id and stop code.
    pub const ID: &'static str = "stop_on_tool";

    /// Stops when the last response called `tool_name` (exact name); an empty name is
    /// refused.
    pub fn new(tool_name: impl Into<String>) -> Result<Self, PolicyError> {
        let tool_name = tool_name.into();
        if tool_name.is_empty() {
            return Err(PolicyError::Empty {
                policy: Self::ID,
                field: "tool_name",
            });
        }
        Ok(Self { tool_name })
    }
}

impl StopPolicy for StopOnToolPolicy {
    fn id(&self) -> &str {
        Self::ID
    }

    fn evaluate(&self, stats: &StopPolicyStats) -> StopDecision {
        if stats.last_tool_names.contains(&self.tool_name) {
            StopDecision::stop(Self::ID, format!("tool `{}` was called", self.tool_name))
        } else {
            StopDecision::Continue
        }
    }
}

/// Stops when the last response's text matches a regular expression.
///
/// The pattern is searched anywhere in the text (anchor it with `^`/`$` to match
/// whole lines or the whole text) and compiled once, at construction.
#[derive(Debug, Clone)]
pub struct ContentMatchPolicy {
    regex: Regex,
}

impl ContentMatchPolicy {
    /// The policy's id and stop code.
    pub const ID: &'static str = "content_match";

    /// Compiles `pattern`; an invalid or empty pattern is an error.
    pub fn new(pattern: &str) -> Result<Self, PolicyError> {
        if pattern.is_empty() {
            return Err(PolicyError::Empty {
                policy: Self::ID,
                field: "pattern",
            });
        }
        let regex = Regex::new(pattern).map_err(|source| PolicyError::InvalidPattern {
            pattern: pattern.to_owned(),
            source,
        })?;
        Ok(Self { regex })
    }
}

impl StopPolicy for ContentMatchPolicy {
    fn id(&self) -> &str {
        Self::ID
    }

    fn evaluate(&self, stats: &StopPolicyStats) -> StopDecision {
        if self.regex.is_match(&stats.last_response_text) {
            StopDecision::stop(
                Self::ID,
                format!("response matched `{}`", self.regex.as_str()),
            )
        } else {
            StopDecision::Continue
        }
    }
}

/// Stops when the same tool call (same name, same arguments up to key order) occurs
/// twice among the last `window` tool calls of the run.
///
/// Calls are counted across steps, so a model that repeats one call per step is
/// caught as well as one that repeats it within a step. A window below 2 cannot hold
/// a repetition; 0 disables the policy explicitly.
#[derive(Debug, Clone, Copy)]
pub struct LoopDetectionPolicy {
    window: usize,
}

impl LoopDetectionPolicy {
    /// The policy's id and stop code.
    pub const ID: &'static str = "loop_detection";

    /// Looks for repeats among the last `window` tool calls; 0 disables it.
    pub fn new(window: u32) -> Self {
        Self {
            window: usize::try_from(window).unwrap_or(usize::MAX),
        }
    }
}

impl StopPolicy for LoopDetectionPolicy {
    fn id(&self) -> &str {
        Self::ID
    }

    fn evaluate(&self, stats: &StopPolicyStats) -> StopDecision {
        if self.window < 2 {
            return StopDecision::Continue;
        }
        let calls = &stats.recent_tool_calls;
        let start = calls.len().saturating_sub(self.window);
        let mut seen = HashSet::with_capacity(calls.len() - start);
        for call in &calls[start..] {
            if !seen.insert(call) {
                return StopDecision::stop(
                    Self::ID,
                    format!(
                        "tool `{}` was called twice with the same arguments within {} calls",
                        call.name, self.window
                    ),
                );
            }
        }
        StopDecision::Continue
    }

    fn tool_call_history(&self) -> usize {
        self.window
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::policies::ToolCallSignature;

    fn stats() -> StopPolicyStats {
        StopPolicyStats::default()
    }

    #[test]
    fn limits_fire_at_their_threshold_and_zero_disables() {
        let at = |step_count| StopPolicyStats {
            step_count,
            ..stats()
        };
        assert!(!MaxRoundsPolicy::new(3).evaluate(&at(2)).is_stop());
        assert!(MaxRoundsPolicy::new(3).evaluate(&at(3)).is_stop());
        assert!(!MaxRoundsPolicy::new(0).evaluate(&at(1000)).is_stop());

        let tokens = |i, o| StopPolicyStats {
            total_input_tokens: i,
            total_output_tokens: o,
            ..stats()
        };
        assert!(
            !TokenBudgetPolicy::new(100)
                .evaluate(&tokens(60, 40))
                .is_stop()
        );
        assert!(
            TokenBudgetPolicy::new(100)
                .evaluate(&tokens(60, 41))
                .is_stop()
        );
        assert!(
            !TokenBudgetPolicy::new(0)
                .evaluate(&tokens(u64::MAX, 1))
                .is_stop()
        );

        let elapsed = |elapsed_ms| StopPolicyStats {
            elapsed_ms,
            ..stats()
        };
        assert!(!TimeoutPolicy::new(1000).evaluate(&elapsed(1000)).is_stop());
        assert!(TimeoutPolicy::new(1000).evaluate(&elapsed(1001)).is_stop());
        assert!(!TimeoutPolicy::new(0).evaluate(&elapsed(u64::MAX)).is_stop());

        let errors = |consecutive_errors| StopPolicyStats {
            consecutive_errors,
            ..stats()
        };
        assert!(
            !ConsecutiveErrorsPolicy::new(3)
                .evaluate(&errors(2))
                .is_stop()
        );
        assert!(
            ConsecutiveErrorsPolicy::new(3)
                .evaluate(&errors(3))
                .is_stop()
        );
        assert!(
            !ConsecutiveErrorsPolicy::new(0)
                .evaluate(&errors(99))
                .is_stop()
        );
    }

    #[test]
    fn stop_on_tool_needs_an_exact_name() {
        let policy = StopOnToolPolicy::new("finish").unwrap();
        let called = |names: &[&str]| StopPolicyStats {
            last_tool_names: names.iter().map(|n| (*n).to_owned()).collect(),
            ..stats()
        };
        assert!(policy.evaluate(&called(&["search", "finish"])).is_stop());
        assert!(
            !policy
                .evaluate(&called(&["finish_line", "search"]))
                .is_stop()
        );
        assert!(matches!(
            StopOnToolPolicy::new(""),
            Err(PolicyError::Empty {
                field: "tool_name",
                ..
            })
        ));
    }

    #[test]
    fn content_match_searches_and_refuses_bad_patterns() {
        let policy = ContentMatchPolicy::new(r"(?m)^DONE$").unwrap();
        let text = |t: &str| StopPolicyStats {
            last_response_text: t.to_owned(),
            ..stats()
        };
        assert_eq!(
            policy.evaluate(&text("work\nDONE\n")),
            StopDecision::stop("content_match", "response matched `(?m)^DONE$`")
        );
        assert!(!policy.evaluate(&text("NOT DONE YET")).is_stop());
        let err = ContentMatchPolicy::new("(unclosed").unwrap_err();
        assert!(
            err.to_string().contains("(unclosed"),
            "the error names the pattern: {err}"
        );
        assert!(ContentMatchPolicy::new("").is_err());
    }

    #[test]
    fn loop_detection_looks_inside_the_window_only() {
        let call = |n: &str, q: i64| ToolCallSignature::new(n, &json!({"q": q}));
        let history = |calls: Vec<ToolCallSignature>| StopPolicyStats {
            recent_tool_calls: calls,
            ..stats()
        };
        let policy = LoopDetectionPolicy::new(3);
        assert_eq!(policy.tool_call_history(), 3);
        // a, b, a: the repeat is within 3 calls.
        assert!(
            policy
                .evaluate(&history(vec![call("a", 1), call("b", 1), call("a", 1)]))
                .is_stop()
        );
        // a, b, c, a: the first `a` has left the window.
        assert!(
            !policy
                .evaluate(&history(vec![
                    call("a", 1),
                    call("b", 1),
                    call("c", 1),
                    call("a", 1)
                ]))
                .is_stop()
        );
        // Same tool, different arguments is not a loop.
        assert!(
            !policy
                .evaluate(&history(vec![call("a", 1), call("a", 2)]))
                .is_stop()
        );
        let repeated = history(vec![call("a", 1), call("a", 1)]);
        assert!(!LoopDetectionPolicy::new(0).evaluate(&repeated).is_stop());
        assert!(!LoopDetectionPolicy::new(1).evaluate(&repeated).is_stop());
        assert!(LoopDetectionPolicy::new(2).evaluate(&repeated).is_stop());
    }
}
