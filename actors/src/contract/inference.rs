//! Inference parameters: per-call overrides and the context-window policy.
//!
//! [`InferenceOverride`] lets plugins adjust one model call (model, temperature,
//! reasoning effort…); several overrides merge field by field, last one wins.
//! [`ContextWindowPolicy`] tells the runtime how much history fits and when to
//! compact it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How hard a reasoning model should think.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReasoningEffort {
    /// No reasoning.
    None,
    /// Light reasoning.
    Low,
    /// Moderate reasoning.
    Medium,
    /// Thorough reasoning.
    High,
    /// The provider's maximum.
    Max,
    /// An explicit token budget; serialized as `{"budget": n}`.
    Budget(u32),
}

/// Per-inference parameter overrides; `None` means "use the agent's default".
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct InferenceOverride {
    /// Model registry id to use instead of the agent's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Models to try, in order, if the primary fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback_models: Option<Vec<String>>,
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Output token limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Nucleus sampling threshold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// Reasoning effort.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<ReasoningEffort>,
}

impl InferenceOverride {
    /// Whether no field is set.
    pub fn is_empty(&self) -> bool {
        self.model.is_none()
            && self.fallback_models.is_none()
            && self.temperature.is_none()
            && self.max_tokens.is_none()
            && self.top_p.is_none()
            && self.reasoning_effort.is_none()
    }

    /// Merges `other` into `self`: each field `other` sets replaces ours (last wins).
    pub fn merge(&mut self, other: InferenceOverride) {
        let InferenceOverride {
            model,
            fallback_models,
            temperature,
            max_tokens,
            top_p,
            reasoning_effort,
        } = other;
        if model.is_some() {
            self.model = model;
        }
        if fallback_models.is_some() {
            self.fallback_models = fallback_models;
        }
        if temperature.is_some() {
            self.temperature = temperature;
        }
        if max_tokens.is_some() {
            self.max_tokens = max_tokens;
        }
        if top_p.is_some() {
            self.top_p = top_p;
        }
        if reasoning_effort.is_some() {
            self.reasoning_effort = reasoning_effort;
        }
    }
}

/// How auto-compaction summarizes old history.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ContextCompactionMode {
    /// Keep the most recent messages raw and summarize the rest.
    #[default]
    KeepRecentRawSuffix,
    /// Summarize everything up to the latest point where all tool calls are answered.
    CompactToSafeFrontier,
}

/// How the runtime fits history into the model's context window.
///
/// Missing fields take their defaults when deserializing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct ContextWindowPolicy {
    /// The model's total context window, in tokens.
    pub max_context_tokens: u64,
    /// Tokens reserved for the model's output.
    pub max_output_tokens: u64,
    /// Recent messages always kept, even over budget.
    pub min_recent_messages: u32,
    /// Whether to use provider prompt caching.
    pub enable_prompt_cache: bool,
    /// Token count that triggers auto-compaction; `None` disables it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub autocompact_threshold: Option<u64>,
    /// Strategy used when auto-compaction fires.
    pub compaction_mode: ContextCompactionMode,
    /// Raw messages kept in `KeepRecentRawSuffix` mode.
    pub compaction_raw_suffix_messages: u32,
}

impl Default for ContextWindowPolicy {
    fn default() -> Self {
        Self {
            max_context_tokens: 200_000,
            max_output_tokens: 16_384,
            min_recent_messages: 10,
            enable_prompt_cache: true,
            autocompact_threshold: None,
            compaction_mode: ContextCompactionMode::KeepRecentRawSuffix,
            compaction_raw_suffix_messages: 2,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn reasoning_effort_shapes() {
        assert_eq!(
            serde_json::to_value(ReasoningEffort::None).unwrap(),
            json!("none")
        );
        assert_eq!(
            serde_json::to_value(ReasoningEffort::Max).unwrap(),
            json!("max")
        );
        assert_eq!(
            serde_json::to_value(ReasoningEffort::Budget(2048)).unwrap(),
            json!({"budget": 2048})
        );
        assert_eq!(
            serde_json::from_value::<ReasoningEffort>(json!({"budget": 5})).unwrap(),
            ReasoningEffort::Budget(5)
        );
    }

    #[test]
    fn override_empty_and_shape() {
        let empty = InferenceOverride::default();
        assert!(empty.is_empty());
        assert_eq!(serde_json::to_value(&empty).unwrap(), json!({}));
        let o = InferenceOverride {
            temperature: Some(0.5),
            reasoning_effort: Some(ReasoningEffort::High),
            ..InferenceOverride::default()
        };
        assert!(!o.is_empty());
        let value = serde_json::to_value(&o).unwrap();
        assert_eq!(
            value,
            json!({"temperature": 0.5, "reasoning_effort": "high"})
        );
        assert_eq!(
            serde_json::from_value::<InferenceOverride>(value).unwrap(),
            o
        );
    }

    #[test]
    fn merge_is_per_field_last_wins() {
        let mut base = InferenceOverride {
            model: Some("a".into()),
            temperature: Some(0.1),
            max_tokens: Some(100),
            ..InferenceOverride::default()
        };
        base.merge(InferenceOverride {
            model: Some("b".into()),
            top_p: Some(0.9),
            fallback_models: Some(vec!["c".into()]),
            ..InferenceOverride::default()
        });
        assert_eq!(
            base,
            InferenceOverride {
                model: Some("b".into()),
                fallback_models: Some(vec!["c".into()]),
                temperature: Some(0.1),
                max_tokens: Some(100),
                top_p: Some(0.9),
                reasoning_effort: None,
            }
        );
        let before = base.clone();
        base.merge(InferenceOverride::default());
        assert_eq!(base, before, "merging an empty override changes nothing");
    }

    #[test]
    fn policy_defaults_match_the_book() {
        let policy = ContextWindowPolicy::default();
        assert_eq!(
            serde_json::to_value(&policy).unwrap(),
            json!({
                "max_context_tokens": 200_000,
                "max_output_tokens": 16_384,
                "min_recent_messages": 10,
                "enable_prompt_cache": true,
                "compaction_mode": "keep_recent_raw_suffix",
                "compaction_raw_suffix_messages": 2
            })
        );
        let partial: ContextWindowPolicy = serde_json::from_value(json!({
            "autocompact_threshold": 100_000,
            "compaction_mode": "compact_to_safe_frontier"
        }))
        .unwrap();
        assert_eq!(
            partial,
            ContextWindowPolicy {
                autocompact_threshold: Some(100_000),
                compaction_mode: ContextCompactionMode::CompactToSafeFrontier,
                ..ContextWindowPolicy::default()
            }
        );
    }

    #[test]
    fn policy_schema_is_generated() {
        let schema = schemars::schema_for!(ContextWindowPolicy);
        let value = serde_json::to_value(&schema).unwrap();
        assert!(value["properties"]["max_context_tokens"].is_object());
    }
}
