//! Tool permissions with human-in-the-loop approval.
//!
//! # Rules
//!
//! A rule pairs a [`ToolPattern`] with a [`PermissionBehavior`]: `allow` runs the
//! call, `ask` suspends it until a human decides, `deny` blocks it. Rules are usually
//! written in YAML (or JSON) and loaded with [`PermissionRules::from_yaml`],
//! [`PermissionRules::from_json`] or [`PermissionRules::from_file`]:
//!
//! ```yaml
//! default_behavior: ask          # for calls no rule matches
//! rules:
//!   - tool: read_file            # exact name
//!     behavior: allow
//!   - tool: "Bash(npm *)"        # primary-argument glob
//!     behavior: allow
//!   - tool: 'Bash(command =~ "(?i)\brm\b")'   # field regex
//!     behavior: deny
//!   - tool: "Edit(file_path ~ 'src/**')"      # field glob
//!     behavior: ask
//!   - tool: "mcp__*"             # name glob
//!     behavior: ask
//!   - tool: "/^delete_/"         # name regex
//!     behavior: deny
//! ```
//!
//! The pattern syntax, including what "primary argument" means, is documented on
//! [`ToolPattern`]. Every pattern is compiled when the rules load; a bad glob or regex
//! is a [`RulesError::Pattern`] naming the rule's index, its text and the byte
//! position of the problem.
//!
//! # Which rule wins
//!
//! Firewall-like, as the book states: **deny > allow > ask > default**. All rules that
//! match a call are considered, whatever their order — one matching deny blocks it,
//! else one matching allow runs it, else one matching ask suspends it, else the
//! default applies. An allow can carve an exception out of a broader ask
//! (`Bash(npm *)` beside `Bash`), but only a deny can narrow an allowed tool.
//!
//! # The plugin
//!
//! [`PermissionPlugin`] hooks two phases:
//!
//! - **BeforeToolExecute**: deny schedules a `ToolInterceptAction` with
//!   `Block { reason }` (the run ends blocked); ask schedules `Suspend` with a
//!   `SuspendTicket` in `ReplayToolCall` mode whose suspension has action
//!   [`PERMISSION_ACTION`], the arguments as parameters and [`decision_schema`] as
//!   response schema; allow does nothing.
//! - **BeforeInference**: tools denied by a plain-name rule are removed from the tools
//!   offered to the model with `ExcludeTool`, so the model does not try them.
//!
//! Rules come from [`PermissionPlugin::new`] plus the agent's own `permission` section
//! ([`PermissionConfigKey`], same shape as the YAML above), appended after the
//! plugin's; the section's `default_behavior`, when set, replaces the plugin's. The
//! section is schema-checked and compiled when the agent is resolved.
//!
//! # Decisions and "always allow"
//!
//! When the human answers, the run loop replays the call with the decision in
//! `ToolCallView::decision`. The plugin then lets the call run instead of asking again
//! — unless a deny rule matches now, or the decision is a `resume` whose payload says
//! `"approved": false`, in which case the call gets a `permission_denied` error result
//! instead of running. (A `cancel` decision never reaches the plugin: the run loop
//! cancels the call itself, with the error code `cancelled`.) An approval applies to that one call: asks are never cached. If the
//! decision payload says `"always_allow": true`, the tool's exact name is recorded in
//! the thread-scoped, persistent [`PermissionGrantsKey`]; later calls of that tool on
//! the same thread, in this run and later ones, run without asking. Grants turn asks
//! into allows only — deny rules still win over them.

mod grants;
mod pattern;
mod plugin;
mod rules;

pub use grants::{PermissionGrants, PermissionGrantsKey, PermissionGrantsUpdate};
pub use pattern::{PatternError, PatternErrorKind, ToolPattern};
pub use plugin::{PERMISSION_ACTION, PermissionPlugin, decision_schema};
pub use rules::{
    PermissionBehavior, PermissionConfigKey, PermissionRule, PermissionRuleEntry, PermissionRules,
    PermissionRulesConfig, PermissionVerdict, RulesError,
};
