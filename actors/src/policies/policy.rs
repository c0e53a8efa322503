//! The `StopPolicy` trait and the values it works on.

use serde::{Deserialize, Serialize};

/// A stop condition: looks at the run's statistics after a step and says whether the
/// run should go on.
///
/// Evaluation is synchronous and pure: everything a policy may look at is in
/// [`StopPolicyStats`], which the [`StopConditionPlugin`](super::StopConditionPlugin)
/// keeps up to date.
pub trait StopPolicy: Send + Sync + 'static {
    /// A stable identifier, used in logs and as the default stop code.
    fn id(&self) -> &str;

    /// Decides, from the statistics after a step, whether the run continues.
    fn evaluate(&self, stats: &StopPolicyStats) -> StopDecision;

    /// How many of the most recent tool calls this policy needs in
    /// [`StopPolicyStats::recent_tool_calls`]; the plugin keeps the largest request.
    fn tool_call_history(&self) -> usize {
        0
    }
}

impl std::fmt::Debug for dyn StopPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StopPolicy")
            .field("id", &self.id())
            .finish()
    }
}

/// What a policy decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopDecision {
    /// Keep running.
    Continue,
    /// End the run with `TerminationReason::Stopped`.
    Stop {
        /// Machine-readable code, e.g. `max_rounds`.
        code: String,
        /// Human-readable explanation.
        detail: String,
    },
}

impl StopDecision {
    /// A stop with a code and a detail.
    pub fn stop(code: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::Stop {
            code: code.into(),
            detail: detail.into(),
        }
    }

    /// Whether the decision ends the run.
    pub fn is_stop(&self) -> bool {
        matches!(self, Self::Stop { .. })
    }
}

/// One tool call reduced to what loop detection compares: the tool name and a hash of
/// its arguments in canonical JSON (object keys sorted, no whitespace).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ToolCallSignature {
    /// The tool's name.
    pub name: String,
    /// 64-bit FNV-1a hash of the canonical JSON of the arguments.
    pub args_hash: u64,
}

impl ToolCallSignature {
    /// The signature of a call to `name` with `arguments`.
    pub fn new(name: impl Into<String>, arguments: &serde_json::Value) -> Self {
        let mut hasher = Fnv1a::default();
        hasher.write(crate::codec::canonical_json(arguments).as_bytes());
        Self {
            name: name.into(),
            args_hash: hasher.finish(),
        }
    }
}

/// The run statistics every policy is evaluated against.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StopPolicyStats {
    /// Steps completed so far (the 1-based number of the step that just ended).
    pub step_count: u32,
    /// Prompt tokens over all inferences of the run.
    pub total_input_tokens: u64,
    /// Completion tokens over all inferences of the run.
    pub total_output_tokens: u64,
    /// Wall time since the run started, in milliseconds.
    pub elapsed_ms: u64,
    /// Tool calls that failed in a row; a successful call resets it.
    pub consecutive_errors: u32,
    /// Tool names called in the most recent inference response.
    pub last_tool_names: Vec<String>,
    /// Text of the most recent inference response.
    pub last_response_text: String,
    /// The most recent tool calls of the run, oldest first, as many as the
    /// installed policies asked for through [`StopPolicy::tool_call_history`].
    pub recent_tool_calls: Vec<ToolCallSignature>,
}

impl StopPolicyStats {
    /// Input plus output tokens.
    pub fn total_tokens(&self) -> u64 {
        self.total_input_tokens
            .saturating_add(self.total_output_tokens)
    }
}

/// FNV-1a, 64 bits: tiny, stable across Rust versions and platforms (unlike the std
/// hasher), which matters because signatures are checkpointed with the run state.
struct Fnv1a(u64);

impl Default for Fnv1a {
    fn default() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv1a {
    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 ^= u64::from(*byte);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn signatures_ignore_key_order_but_not_values() {
        let a = ToolCallSignature::new(
            "search",
            &json!({"q": "rust", "n": 3, "o": {"x": 1, "y": [1, 2]}}),
        );
        let b = ToolCallSignature::new(
            "search",
            &json!({"o": {"y": [1, 2], "x": 1}, "n": 3, "q": "rust"}),
        );
        assert_eq!(a, b);
        assert_ne!(
            a,
            ToolCallSignature::new("search", &json!({"q": "rust", "n": 4}))
        );
        assert_ne!(
            a,
            ToolCallSignature::new(
                "fetch",
                &json!({"q": "rust", "n": 3, "o": {"x": 1, "y": [1, 2]}})
            )
        );
        assert_ne!(
            ToolCallSignature::new("t", &json!({"a": "b,\"c\":1"})),
            ToolCallSignature::new("t", &json!({"a": "b", "c": 1}))
        );
        assert_ne!(
            ToolCallSignature::new("t", &json!([1, 2])),
            ToolCallSignature::new("t", &json!([12]))
        );
    }

    #[test]
    fn stop_decision_helpers() {
        assert!(StopDecision::stop("x", "y").is_stop());
        assert!(!StopDecision::Continue.is_stop());
    }
}
