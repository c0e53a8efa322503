//! Handoff: the data of same-thread agent variant switching.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::AgentSpec;

/// What a handoff variant overrides of its base agent; `None` fields inherit.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentOverlay {
    /// Replaces the base system prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// Replaces the base model (a model registry id, like `AgentSpec.model`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Replaces the base `allowed_tools`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_tools: Option<Vec<String>>,
    /// Replaces the base `excluded_tools`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub excluded_tools: Option<Vec<String>>,
}

impl AgentOverlay {
    /// The base spec with this overlay's fields laid over it. Everything else (id,
    /// plugins, delegates, sections) stays the base agent's, so the variant keeps the
    /// thread's state and history.
    pub fn apply_to(&self, base: &AgentSpec) -> AgentSpec {
        let mut spec = base.clone();
        if let Some(prompt) = &self.system_prompt {
            spec.system_prompt.clone_from(prompt);
        }
        if let Some(model) = &self.model {
            spec.model.clone_from(model);
        }
        if let Some(allowed) = &self.allowed_tools {
            spec.allowed_tools = Some(allowed.clone());
        }
        if let Some(excluded) = &self.excluded_tools {
            spec.excluded_tools = Some(excluded.clone());
        }
        spec
    }
}

/// Which variant of its agent a thread runs, persisted with the thread.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct HandoffState {
    /// The variant in effect; `None` is the base agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_agent: Option<String>,
    /// A switch asked for and not yet taken: it happens at the next RunStart or
    /// StepEnd.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_agent: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::AgentId;

    fn base() -> AgentSpec {
        let mut spec = AgentSpec::new(AgentId::new("base").unwrap())
            .with_model("small")
            .with_system_prompt("You are general.");
        spec.excluded_tools = Some(vec!["rm".into()]);
        spec
    }

    #[test]
    fn unset_fields_inherit_the_base() {
        let overlay = AgentOverlay {
            system_prompt: Some("You research.".into()),
            ..AgentOverlay::default()
        };
        let spec = overlay.apply_to(&base());
        assert_eq!(spec.system_prompt, "You research.");
        assert_eq!(spec.model, "small");
        assert_eq!(spec.excluded_tools, Some(vec!["rm".to_owned()]));
        assert_eq!(spec.id.as_str(), "base");
    }

    #[test]
    fn set_fields_replace_the_base() {
        let overlay = AgentOverlay {
            system_prompt: None,
            model: Some("large".into()),
            allowed_tools: Some(vec!["search".into()]),
            excluded_tools: Some(vec![]),
        };
        let spec = overlay.apply_to(&base());
        assert_eq!(spec.model, "large");
        assert_eq!(spec.allowed_tools, Some(vec!["search".to_owned()]));
        assert_eq!(spec.excluded_tools, Some(vec![]));
        assert_eq!(spec.system_prompt, "You are general.");
    }

    #[test]
    fn overlays_refuse_unknown_fields() {
        let err =
            serde_json::from_value::<AgentOverlay>(serde_json::json!({"prompt": "x"})).unwrap_err();
        assert!(err.to_string().contains("unknown field"), "{err}");
    }
}
