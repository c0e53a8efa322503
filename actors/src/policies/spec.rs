//! From declarative [`StopConditionSpec`]s to policies, and the `stop_conditions`
//! config section that carries them in an agent spec.

use std::sync::Arc;

use super::builtin::{
    ConsecutiveErrorsPolicy, ContentMatchPolicy, LoopDetectionPolicy, MaxRoundsPolicy,
    StopOnToolPolicy, TimeoutPolicy, TokenBudgetPolicy,
};
use super::policy::StopPolicy;
use crate::contract::{PluginConfigKey, StopConditionSpec};

/// Why a stop policy could not be built from its configuration.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// A `content_match` pattern is not a valid regular expression.
    #[error("invalid stop-condition pattern `{pattern}`: {source}")]
    InvalidPattern {
        /// The pattern as written.
        pattern: String,
        /// What the regex compiler reported.
        #[source]
        source: regex::Error,
    },
    /// A required text field was empty.
    #[error("stop condition `{policy}` needs a non-empty `{field}`")]
    Empty {
        /// The policy's id.
        policy: &'static str,
        /// The empty field.
        field: &'static str,
    },
}

/// Builds one policy per spec, in order. Every variant is implemented; the first
/// invalid spec (an unparsable regex, an empty tool name) fails the whole list.
pub fn policies_from_specs(
    specs: &[StopConditionSpec],
) -> Result<Vec<Arc<dyn StopPolicy>>, PolicyError> {
    specs.iter().map(policy_from_spec).collect()
}

/// Builds the policy one spec describes.
pub fn policy_from_spec(spec: &StopConditionSpec) -> Result<Arc<dyn StopPolicy>, PolicyError> {
    Ok(match spec {
        StopConditionSpec::MaxRounds { rounds } => Arc::new(MaxRoundsPolicy::new(*rounds)),
        StopConditionSpec::Timeout { seconds } => {
            Arc::new(TimeoutPolicy::new(seconds.saturating_mul(1000)))
        }
        StopConditionSpec::TokenBudget { max_total } => {
            Arc::new(TokenBudgetPolicy::new(*max_total))
        }
        StopConditionSpec::ConsecutiveErrors { max } => {
            Arc::new(ConsecutiveErrorsPolicy::new(*max))
        }
        StopConditionSpec::StopOnTool { tool_name } => {
            Arc::new(StopOnToolPolicy::new(tool_name.clone())?)
        }
        StopConditionSpec::ContentMatch { pattern } => Arc::new(ContentMatchPolicy::new(pattern)?),
        StopConditionSpec::LoopDetection { window } => Arc::new(LoopDetectionPolicy::new(*window)),
    })
}

/// The `stop_conditions` section of an agent spec: extra stop conditions evaluated
/// after the agent's `max_rounds`. The runtime claims and validates it.
#[derive(Debug)]
pub struct StopConditionsConfigKey;

impl PluginConfigKey for StopConditionsConfigKey {
    const KEY: &'static str = "stop_conditions";
    type Config = Vec<StopConditionSpec>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_builds_in_order() {
        let specs: Vec<StopConditionSpec> = serde_json::from_value(serde_json::json!([
            {"type": "max_rounds", "rounds": 10},
            {"type": "timeout", "seconds": 300},
            {"type": "token_budget", "max_total": 1000},
            {"type": "consecutive_errors", "max": 3},
            {"type": "stop_on_tool", "tool_name": "finish"},
            {"type": "content_match", "pattern": "DONE"},
            {"type": "loop_detection", "window": 4}
        ]))
        .unwrap();
        let ids: Vec<String> = policies_from_specs(&specs)
            .unwrap()
            .iter()
            .map(|p| p.id().to_owned())
            .collect();
        assert_eq!(
            ids,
            [
                "max_rounds",
                "timeout",
                "token_budget",
                "consecutive_errors",
                "stop_on_tool",
                "content_match",
                "loop_detection"
            ]
        );
    }

    #[test]
    fn timeout_spec_is_in_seconds() {
        let policy = policy_from_spec(&StopConditionSpec::Timeout { seconds: 2 }).unwrap();
        let at = |elapsed_ms| super::super::StopPolicyStats {
            elapsed_ms,
            ..Default::default()
        };
        assert!(!policy.evaluate(&at(2000)).is_stop());
        assert!(policy.evaluate(&at(2001)).is_stop());
    }

    #[test]
    fn invalid_specs_fail_the_list() {
        let specs = [
            StopConditionSpec::MaxRounds { rounds: 3 },
            StopConditionSpec::ContentMatch {
                pattern: "[z-a]".into(),
            },
        ];
        let err = policies_from_specs(&specs).unwrap_err();
        assert!(
            matches!(err, PolicyError::InvalidPattern { ref pattern, .. } if pattern == "[z-a]")
        );
        assert!(
            policies_from_specs(&[StopConditionSpec::StopOnTool {
                tool_name: String::new()
            }])
            .is_err()
        );
    }
}
