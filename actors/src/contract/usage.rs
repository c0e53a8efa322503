//! Token accounting reported by model providers.
//!
//! Providers report different subsets of counters, so every field is optional and
//! omitted from JSON when unknown. [`TokenUsage::add`] accumulates usage over the
//! inference rounds of a run.

use serde::{Deserialize, Serialize};

/// Token counts for one inference call (or a sum of several).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TokenUsage {
    /// Input (prompt) tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<u64>,
    /// Output (completion) tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_tokens: Option<u64>,
    /// Total as reported by the provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_tokens: Option<u64>,
    /// Prompt tokens served from the provider's cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_tokens: Option<u64>,
    /// Prompt tokens written to the provider's cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_creation_tokens: Option<u64>,
    /// Reasoning ("thinking") tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking_tokens: Option<u64>,
}

fn add_field(into: &mut Option<u64>, other: Option<u64>) {
    *into = match (*into, other) {
        (Some(a), Some(b)) => Some(a.saturating_add(b)),
        (a, None) => a,
        (None, b) => b,
    };
}

impl TokenUsage {
    /// Usage with prompt and completion counts and their sum as total.
    pub fn new(prompt_tokens: u64, completion_tokens: u64) -> Self {
        Self {
            prompt_tokens: Some(prompt_tokens),
            completion_tokens: Some(completion_tokens),
            total_tokens: Some(prompt_tokens.saturating_add(completion_tokens)),
            ..Self::default()
        }
    }

    /// Adds `other` field by field; a counter known on either side stays known.
    pub fn add(&mut self, other: &TokenUsage) {
        add_field(&mut self.prompt_tokens, other.prompt_tokens);
        add_field(&mut self.completion_tokens, other.completion_tokens);
        add_field(&mut self.total_tokens, other.total_tokens);
        add_field(&mut self.cache_read_tokens, other.cache_read_tokens);
        add_field(&mut self.cache_creation_tokens, other.cache_creation_tokens);
        add_field(&mut self.thinking_tokens, other.thinking_tokens);
    }

    /// The total: the reported `total_tokens`, else prompt + completion (unknown = 0).
    pub fn total(&self) -> u64 {
        self.total_tokens.unwrap_or_else(|| {
            self.prompt_tokens
                .unwrap_or(0)
                .saturating_add(self.completion_tokens.unwrap_or(0))
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn default_serializes_empty() {
        assert_eq!(
            serde_json::to_value(TokenUsage::default()).unwrap(),
            json!({})
        );
        assert_eq!(
            serde_json::from_value::<TokenUsage>(json!({})).unwrap(),
            TokenUsage::default()
        );
    }

    #[test]
    fn json_shape() {
        let usage = TokenUsage {
            cache_read_tokens: Some(5),
            ..TokenUsage::new(10, 3)
        };
        let value = serde_json::to_value(usage).unwrap();
        assert_eq!(
            value,
            json!({"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13, "cache_read_tokens": 5})
        );
        assert_eq!(serde_json::from_value::<TokenUsage>(value).unwrap(), usage);
    }

    #[test]
    fn add_keeps_known_counters() {
        let mut sum = TokenUsage::default();
        sum.add(&TokenUsage::new(10, 3));
        sum.add(&TokenUsage {
            thinking_tokens: Some(7),
            prompt_tokens: Some(1),
            ..TokenUsage::default()
        });
        assert_eq!(sum.prompt_tokens, Some(11));
        assert_eq!(sum.completion_tokens, Some(3));
        assert_eq!(sum.total_tokens, Some(13));
        assert_eq!(sum.thinking_tokens, Some(7));
        assert_eq!(sum.cache_read_tokens, None);
    }

    #[test]
    fn total_falls_back_to_sum() {
        assert_eq!(TokenUsage::new(4, 5).total(), 9);
        let partial = TokenUsage {
            prompt_tokens: Some(4),
            ..TokenUsage::default()
        };
        assert_eq!(partial.total(), 4);
        assert_eq!(TokenUsage::default().total(), 0);
    }
}
