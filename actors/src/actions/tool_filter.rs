//! `ExcludeTool` and `IncludeOnlyTools`: per-step narrowing of the offered tools.

use std::collections::BTreeSet;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::contract::ToolDescriptor;
use crate::error::StateError;
use crate::phase::{Phase, PhaseContext};
use crate::plugin::TypedScheduledActionHandler;
use crate::state::{ScheduledActionSpec, StateCommand, StateKey};

/// Which tools the coming inference may offer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolFilter {
    /// Tools removed for this step (additive).
    pub excluded: BTreeSet<String>,
    /// When set, only these tools are offered (union of every request).
    pub include_only: Option<BTreeSet<String>>,
}

impl ToolFilter {
    /// Whether a tool id survives the filter: include-only first, then exclusions.
    pub fn allows(&self, tool_id: &str) -> bool {
        let included = self
            .include_only
            .as_ref()
            .is_none_or(|only| only.contains(tool_id));
        included && !self.excluded.contains(tool_id)
    }

    /// Keeps the descriptors the filter allows.
    pub fn apply(&self, tools: Vec<ToolDescriptor>) -> Vec<ToolDescriptor> {
        tools.into_iter().filter(|t| self.allows(&t.id)).collect()
    }
}

/// Changes to the step's [`ToolFilter`].
#[derive(Debug)]
pub enum ToolFilterUpdate {
    /// Excludes one tool.
    Exclude(String),
    /// Adds tools to the include-only set.
    IncludeOnly(Vec<String>),
    /// Resets the filter (after the inference it applied to).
    Clear,
}

/// State key holding the step's tool filter.
#[derive(Debug)]
pub struct ToolFilterKey;

impl StateKey for ToolFilterKey {
    const KEY: &'static str = "runtime.tool_filter";
    type Value = ToolFilter;
    type Update = ToolFilterUpdate;

    fn apply(value: &mut ToolFilter, update: ToolFilterUpdate) {
        match update {
            ToolFilterUpdate::Exclude(id) => {
                value.excluded.insert(id);
            }
            ToolFilterUpdate::IncludeOnly(ids) => {
                value
                    .include_only
                    .get_or_insert_with(BTreeSet::new)
                    .extend(ids);
            }
            ToolFilterUpdate::Clear => *value = ToolFilter::default(),
        }
    }
}

/// Removes a tool from the set offered for the current step (book: `ExcludeTool`).
#[derive(Debug)]
pub struct ExcludeTool;

impl ScheduledActionSpec for ExcludeTool {
    const KEY: &'static str = "runtime.exclude_tool";
    const PHASE: Phase = Phase::BeforeInference;
    type Payload = String;
}

/// Restricts the offered tools to a list (book: `IncludeOnlyTools`); several
/// requests are unioned, and exclusions still apply afterwards.
#[derive(Debug)]
pub struct IncludeOnlyTools;

impl ScheduledActionSpec for IncludeOnlyTools {
    const KEY: &'static str = "runtime.include_only_tools";
    const PHASE: Phase = Phase::BeforeInference;
    type Payload = Vec<String>;
}

pub(super) struct ExcludeToolHandler;

#[async_trait]
impl TypedScheduledActionHandler<ExcludeTool> for ExcludeToolHandler {
    async fn handle_typed(
        &self,
        _ctx: &PhaseContext,
        payload: String,
    ) -> Result<StateCommand, StateError> {
        let mut command = StateCommand::new();
        command.update::<ToolFilterKey>(ToolFilterUpdate::Exclude(payload));
        Ok(command)
    }
}

pub(super) struct IncludeOnlyToolsHandler;

#[async_trait]
impl TypedScheduledActionHandler<IncludeOnlyTools> for IncludeOnlyToolsHandler {
    async fn handle_typed(
        &self,
        _ctx: &PhaseContext,
        payload: Vec<String>,
    ) -> Result<StateCommand, StateError> {
        let mut command = StateCommand::new();
        command.update::<ToolFilterKey>(ToolFilterUpdate::IncludeOnly(payload));
        Ok(command)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(filter: &ToolFilter) -> Vec<String> {
        let tools = ["a", "b", "c", "d"]
            .into_iter()
            .map(|id| ToolDescriptor::new(id, id, id))
            .collect();
        filter.apply(tools).into_iter().map(|t| t.id).collect()
    }

    #[test]
    fn semantics() {
        let mut f = ToolFilter::default();
        assert_eq!(ids(&f), ["a", "b", "c", "d"], "no filter keeps all");
        ToolFilterKey::apply(&mut f, ToolFilterUpdate::Exclude("b".into()));
        ToolFilterKey::apply(&mut f, ToolFilterUpdate::Exclude("c".into()));
        assert_eq!(ids(&f), ["a", "d"], "exclusions are additive");
        ToolFilterKey::apply(
            &mut f,
            ToolFilterUpdate::IncludeOnly(vec!["a".into(), "b".into()]),
        );
        ToolFilterKey::apply(&mut f, ToolFilterUpdate::IncludeOnly(vec!["d".into()]));
        assert_eq!(
            ids(&f),
            ["a", "d"],
            "include-only sets union, exclusions applied after"
        );
        ToolFilterKey::apply(&mut f, ToolFilterUpdate::Clear);
        assert_eq!(ids(&f), ["a", "b", "c", "d"]);
    }
}
