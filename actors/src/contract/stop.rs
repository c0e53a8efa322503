//! Declarative stop conditions, as written in agent configuration.
//!
//! Each [`StopConditionSpec`] is turned into a stop policy by the policies layer and
//! evaluated at `StepEnd`; when one fires the run ends with
//! `TerminationReason::Stopped`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One stop condition, tagged by `type` in JSON and YAML.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StopConditionSpec {
    /// Stop after this many inference rounds.
    MaxRounds {
        /// The round limit.
        rounds: u32,
    },
    /// Stop after this much wall-clock time.
    Timeout {
        /// The limit, in seconds.
        seconds: u64,
    },
    /// Stop when input + output tokens exceed a budget.
    TokenBudget {
        /// The token budget.
        max_total: u64,
    },
    /// Stop after this many consecutive errors.
    ConsecutiveErrors {
        /// The error limit.
        max: u32,
    },
    /// Stop when a specific tool is called.
    StopOnTool {
        /// The tool's name.
        tool_name: String,
    },
    /// Stop when the model's output matches a regular expression.
    ContentMatch {
        /// The regular expression.
        pattern: String,
    },
    /// Stop when identical tool calls repeat within a sliding window.
    LoopDetection {
        /// The window size, in tool calls.
        window: u32,
    },
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn json_shapes_round_trip() {
        let cases = [
            (
                StopConditionSpec::MaxRounds { rounds: 10 },
                json!({"type": "max_rounds", "rounds": 10}),
            ),
            (
                StopConditionSpec::Timeout { seconds: 300 },
                json!({"type": "timeout", "seconds": 300}),
            ),
            (
                StopConditionSpec::TokenBudget { max_total: 100_000 },
                json!({"type": "token_budget", "max_total": 100_000}),
            ),
            (
                StopConditionSpec::ConsecutiveErrors { max: 3 },
                json!({"type": "consecutive_errors", "max": 3}),
            ),
            (
                StopConditionSpec::StopOnTool {
                    tool_name: "finish".into(),
                },
                json!({"type": "stop_on_tool", "tool_name": "finish"}),
            ),
            (
                StopConditionSpec::ContentMatch {
                    pattern: "DONE$".into(),
                },
                json!({"type": "content_match", "pattern": "DONE$"}),
            ),
            (
                StopConditionSpec::LoopDetection { window: 4 },
                json!({"type": "loop_detection", "window": 4}),
            ),
        ];
        for (spec, expected) in cases {
            assert_eq!(serde_json::to_value(&spec).unwrap(), expected);
            assert_eq!(
                serde_json::from_value::<StopConditionSpec>(expected).unwrap(),
                spec
            );
        }
    }

    #[test]
    fn yaml_list_loads() {
        let specs: Vec<StopConditionSpec> = serde_yaml_ng::from_str(
            "- type: max_rounds\n  rounds: 10\n- type: timeout\n  seconds: 300\n",
        )
        .unwrap();
        assert_eq!(
            specs,
            vec![
                StopConditionSpec::MaxRounds { rounds: 10 },
                StopConditionSpec::Timeout { seconds: 300 }
            ]
        );
    }

    #[test]
    fn schema_lists_variants() {
        let schema = serde_json::to_value(schemars::schema_for!(StopConditionSpec)).unwrap();
        assert_eq!(schema["oneOf"].as_array().map(Vec::len), Some(7));
    }
}
