//! `PermissionGrantsKey`: tools a human chose to "always allow" on a thread.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::state::{KeyScope, StateKey};

/// Tools that run without asking on this thread, because a human approved one of
/// their calls with `"always_allow": true`.
///
/// Grants are per exact tool name — never widened to the rule pattern that asked,
/// since one approval of `mcp__github__list` should not approve all of `mcp__*`.
/// They turn `ask` into `allow` only: deny rules still win.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PermissionGrants {
    /// The granted tool names.
    pub tools: BTreeSet<String>,
}

impl PermissionGrants {
    /// Whether `tool_name` was granted.
    pub fn allows(&self, tool_name: &str) -> bool {
        self.tools.contains(tool_name)
    }
}

/// Changes to [`PermissionGrants`].
#[derive(Debug)]
pub enum PermissionGrantsUpdate {
    /// Always allow this tool from now on.
    Allow(String),
    /// Forget the grant of this tool.
    Revoke(String),
    /// Forget every grant.
    Clear,
}

/// Thread-scoped, persistent state key of the "always allow" grants: they survive the
/// run (and checkpoints) and last as long as the thread.
#[derive(Debug)]
pub struct PermissionGrantsKey;

impl StateKey for PermissionGrantsKey {
    const KEY: &'static str = "permission.grants";
    const SCOPE: KeyScope = KeyScope::Thread;
    type Value = PermissionGrants;
    type Update = PermissionGrantsUpdate;

    fn apply(value: &mut PermissionGrants, update: PermissionGrantsUpdate) {
        match update {
            PermissionGrantsUpdate::Allow(tool) => {
                value.tools.insert(tool);
            }
            PermissionGrantsUpdate::Revoke(tool) => {
                value.tools.remove(&tool);
            }
            PermissionGrantsUpdate::Clear => value.tools.clear(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grant_revoke_clear() {
        let mut grants = PermissionGrants::default();
        for update in [
            PermissionGrantsUpdate::Allow("a".into()),
            PermissionGrantsUpdate::Allow("b".into()),
            PermissionGrantsUpdate::Revoke("a".into()),
        ] {
            PermissionGrantsKey::apply(&mut grants, update);
        }
        assert!(!grants.allows("a") && grants.allows("b"));
        PermissionGrantsKey::apply(&mut grants, PermissionGrantsUpdate::Clear);
        assert!(grants.tools.is_empty());
    }
}
