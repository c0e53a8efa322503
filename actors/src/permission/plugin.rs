//! `PermissionPlugin`: applies permission rules before tool calls and offers.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::json;

use super::grants::{PermissionGrants, PermissionGrantsKey, PermissionGrantsUpdate};
use super::rules::{
    PermissionBehavior, PermissionConfigKey, PermissionRules, PermissionRulesConfig, RulesError,
};
use crate::JsonValue;
use crate::actions::{ExcludeTool, ToolInterceptAction, ToolInterceptPayload};
use crate::codec::canonical_json;
use crate::contract::{
    AgentSpec, PendingToolCall, PluginConfigKey, ResumeDecisionAction, SuspendTicket, Suspension,
    ToolCallResume, ToolCallResumeMode, ToolResult,
};
use crate::error::StateError;
use crate::phase::{Phase, PhaseContext, ToolCallView};
use crate::plugin::{
    ConfigSchema, PhaseHook, Plugin, PluginConfigError, PluginDescriptor, PluginRegistrar,
};
use crate::state::{StateCommand, StateKeyOptions};

/// The suspension action of permission prompts.
pub const PERMISSION_ACTION: &str = "tool_permission";

/// How many distinct agent sections keep their compiled rules.
const SECTION_CACHE_CAPACITY: usize = 64;

/// The longest argument text shown in a permission prompt.
const PROMPT_ARGUMENTS_MAX_CHARS: usize = 500;

/// Gates tool calls with allow / ask / deny rules (book: "Enable Tool Permission HITL").
///
/// - BeforeToolExecute: `deny` schedules a `Block` intercept; `ask` schedules a
///   `Suspend` intercept whose ticket replays the call once a human approves; `allow`
///   does nothing.
/// - BeforeInference: tools denied by a plain-name rule are excluded from the offer.
///
/// The rules are the plugin's own (from [`PermissionPlugin::new`]) plus the agent's
/// `permission` section, compiled once per distinct section.
#[derive(Debug, Clone, Default)]
pub struct PermissionPlugin {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    base: Arc<PermissionRules>,
    /// Compiled rules per distinct `permission` section, oldest first.
    sections: Mutex<Vec<(JsonValue, Arc<PermissionRules>)>>,
}

impl PermissionPlugin {
    /// The id the book registers it under.
    pub const ID: &'static str = "permission";

    /// A plugin applying `rules` to every agent, plus each agent's own section.
    pub fn new(rules: PermissionRules) -> Self {
        Self {
            inner: Arc::new(Inner {
                base: Arc::new(rules),
                sections: Mutex::new(Vec::new()),
            }),
        }
    }

    /// The rules that apply to `spec`'s agent: the plugin's, then its `permission`
    /// section's (whose `default_behavior`, when set, replaces the plugin's).
    pub fn rules_for(&self, spec: &AgentSpec) -> Result<Arc<PermissionRules>, RulesError> {
        self.inner.rules_for(spec)
    }
}

impl Inner {
    fn rules_for(&self, spec: &AgentSpec) -> Result<Arc<PermissionRules>, RulesError> {
        let Some(section) = spec.sections.get(PermissionConfigKey::KEY) else {
            return Ok(Arc::clone(&self.base));
        };
        let mut cache = self
            .sections
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, rules)) = cache.iter().find(|(value, _)| value == section) {
            return Ok(Arc::clone(rules));
        }
        let config = <PermissionRulesConfig as serde::Deserialize>::deserialize(section)
            .map_err(|e| RulesError::Json(e.to_string()))?;
        let rules = Arc::new(self.base.layered(&config)?);
        if cache.len() >= SECTION_CACHE_CAPACITY {
            cache.remove(0);
        }
        cache.push((section.clone(), Arc::clone(&rules)));
        Ok(rules)
    }
}

impl Plugin for PermissionPlugin {
    fn descriptor(&self) -> PluginDescriptor {
        PluginDescriptor::new(Self::ID, "Allows, asks for or denies tool calls by rule")
    }

    fn register(&self, r: &mut PluginRegistrar) -> Result<(), StateError> {
        r.register_key::<PermissionGrantsKey>(StateKeyOptions::default())?;
        r.register_phase_hook(
            "exclude_denied_tools",
            Phase::BeforeInference,
            ExcludeDeniedHook {
                inner: Arc::clone(&self.inner),
            },
        )?;
        r.register_phase_hook(
            "check_tool_permission",
            Phase::BeforeToolExecute,
            CheckHook {
                inner: Arc::clone(&self.inner),
            },
        )
    }

    fn config_schemas(&self) -> Vec<ConfigSchema> {
        vec![ConfigSchema::of::<PermissionConfigKey>()]
    }

    fn validate_config(&self, spec: &AgentSpec) -> Result<(), PluginConfigError> {
        self.inner
            .rules_for(spec)
            .map(|_| ())
            .map_err(|e| PluginConfigError::new(PermissionConfigKey::KEY, e.to_string()))
    }
}

fn hook_error(hook: &str, error: &RulesError) -> StateError {
    StateError::HookFailed {
        source_id: format!("{}/{hook}", PermissionPlugin::ID),
        message: error.to_string(),
    }
}

struct ExcludeDeniedHook {
    inner: Arc<Inner>,
}

#[async_trait]
impl PhaseHook for ExcludeDeniedHook {
    async fn run(&self, ctx: &PhaseContext) -> Result<StateCommand, StateError> {
        let rules = self
            .inner
            .rules_for(ctx.agent_spec())
            .map_err(|e| hook_error("exclude_denied_tools", &e))?;
        let mut command = StateCommand::new();
        for tool in rules.unconditionally_denied() {
            command.schedule_action::<ExcludeTool>(tool.to_owned())?;
        }
        Ok(command)
    }
}

struct CheckHook {
    inner: Arc<Inner>,
}

#[async_trait]
impl PhaseHook for CheckHook {
    async fn run(&self, ctx: &PhaseContext) -> Result<StateCommand, StateError> {
        let mut command = StateCommand::new();
        let Some(call) = ctx.tool_call.as_deref() else {
            return Ok(command);
        };
        let rules = self
            .inner
            .rules_for(ctx.agent_spec())
            .map_err(|e| hook_error("check_tool_permission", &e))?;
        let verdict = rules.evaluate(&call.tool_name, &call.arguments);

        // Deny rules win over everything, human approvals and remembered grants too.
        if verdict.behavior == PermissionBehavior::Deny {
            command.schedule_action::<ToolInterceptAction>(ToolInterceptPayload::Block {
                reason: format!(
                    "tool `{}` is denied by permission rule `{}`",
                    call.tool_name,
                    verdict.source()
                ),
            })?;
            return Ok(command);
        }

        // A replay after a human decision: never ask twice for one call.
        if let Some(decision) = &call.decision {
            match HumanDecision::of(decision) {
                HumanDecision::Approved { always_allow } => {
                    if always_allow {
                        tracing::info!(tool = %call.tool_name, "permission: always allow granted for this thread");
                        command.update::<PermissionGrantsKey>(PermissionGrantsUpdate::Allow(
                            call.tool_name.clone(),
                        ));
                    }
                }
                HumanDecision::Refused => {
                    command.schedule_action::<ToolInterceptAction>(
                        ToolInterceptPayload::SetResult(ToolResult::error_with_code(
                            call.tool_name.as_str(),
                            "permission_denied",
                            "the user did not approve this tool call",
                        )),
                    )?;
                }
            }
            return Ok(command);
        }

        let granted = ctx
            .state::<PermissionGrantsKey>()
            .is_some_and(|grants: &PermissionGrants| grants.allows(&call.tool_name));
        if verdict.behavior == PermissionBehavior::Ask && !granted {
            command.schedule_action::<ToolInterceptAction>(ToolInterceptPayload::Suspend(
                permission_ticket(call, verdict.source()),
            ))?;
        }
        Ok(command)
    }
}

/// What a human decided about a suspended call, as this plugin reads the decision.
enum HumanDecision {
    /// Run the call; maybe remember the tool for the thread.
    Approved { always_allow: bool },
    /// Do not run it.
    Refused,
}

impl HumanDecision {
    /// `resume` approves unless the payload says `"approved": false`. (`cancel` is
    /// handled by the run loop before any replay; it is read as a refusal here only
    /// for callers that replay calls themselves.)
    fn of(decision: &ToolCallResume) -> Self {
        let flag = |name: &str| decision.result.get(name).and_then(JsonValue::as_bool);
        match decision.action {
            ResumeDecisionAction::Resume if flag("approved") != Some(false) => Self::Approved {
                always_allow: flag("always_allow") == Some(true),
            },
            _ => Self::Refused,
        }
    }
}

/// The suspension asking a human about `call`.
fn permission_ticket(call: &ToolCallView, rule: &str) -> SuspendTicket {
    let suspension = Suspension::new(
        format!("permission:{}", call.call_id),
        PERMISSION_ACTION,
        format!(
            "Allow tool `{}` with arguments {}? (permission rule `{rule}` asks for approval)",
            call.tool_name,
            truncate_chars(&canonical_json(&call.arguments), PROMPT_ARGUMENTS_MAX_CHARS),
        ),
    )
    .with_parameters(call.arguments.clone())
    .with_response_schema(decision_schema());
    SuspendTicket::new(
        suspension,
        PendingToolCall {
            id: call.call_id.clone(),
            name: call.tool_name.clone(),
            arguments: call.arguments.clone(),
        },
        ToolCallResumeMode::ReplayToolCall,
    )
}

/// The JSON Schema of the decision payload (`ToolCallResume::result`).
pub fn decision_schema() -> JsonValue {
    json!({
        "type": "object",
        "properties": {
            "approved": {
                "type": "boolean",
                "description": "false refuses the call; absent or true runs it"
            },
            "always_allow": {
                "type": "boolean",
                "description": "true also runs later calls of this tool on this thread without asking"
            }
        },
        "additionalProperties": false
    })
}

fn truncate_chars(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::DecisionId;

    fn decision(action: ResumeDecisionAction, result: JsonValue) -> ToolCallResume {
        ToolCallResume {
            decision_id: DecisionId::new("d1").unwrap(),
            action,
            result,
            reason: None,
            updated_at: 0,
            trace: None,
        }
    }

    #[test]
    fn decisions_are_read_leniently_but_never_approve_by_accident() {
        use ResumeDecisionAction::{Cancel, Resume};
        let approved = |d: &ToolCallResume| match HumanDecision::of(d) {
            HumanDecision::Approved { always_allow } => Some(always_allow),
            HumanDecision::Refused => None,
        };
        assert_eq!(approved(&decision(Resume, JsonValue::Null)), Some(false));
        assert_eq!(
            approved(&decision(Resume, json!({"approved": true}))),
            Some(false)
        );
        assert_eq!(
            approved(&decision(
                Resume,
                json!({"approved": true, "always_allow": true})
            )),
            Some(true)
        );
        assert_eq!(
            approved(&decision(Resume, json!({"always_allow": "yes"}))),
            Some(false)
        );
        assert_eq!(
            approved(&decision(Resume, json!({"approved": false}))),
            None
        );
        assert_eq!(approved(&decision(Cancel, json!({"approved": true}))), None);
    }

    #[test]
    fn truncation_respects_characters() {
        assert_eq!(truncate_chars("héllo", 2), "hé…");
        assert_eq!(truncate_chars("hé", 2), "hé");
    }
}
