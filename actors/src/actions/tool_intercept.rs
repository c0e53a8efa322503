//! `ToolInterceptAction`: block, suspend or short-circuit a tool call before it runs.

use std::collections::BTreeMap;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::contract::{SuspendTicket, ToolResult};
use crate::error::StateError;
use crate::ids::ToolCallId;
use crate::phase::{Phase, PhaseContext};
use crate::plugin::TypedScheduledActionHandler;
use crate::state::{ScheduledActionSpec, StateCommand, StateKey};

/// What a plugin wants done with a tool call instead of running it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolInterceptPayload {
    /// Fail the call and end the run with this reason.
    Block {
        /// Why the call is blocked.
        reason: String,
    },
    /// Do not run the call; wait for a human decision.
    Suspend(SuspendTicket),
    /// Do not run the call; use this result.
    SetResult(ToolResult),
}

impl ToolInterceptPayload {
    /// Block > Suspend > SetResult.
    pub fn priority(&self) -> u8 {
        match self {
            Self::Block { .. } => 3,
            Self::Suspend(_) => 2,
            Self::SetResult(_) => 1,
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Self::Block { .. } => "block",
            Self::Suspend(_) => "suspend",
            Self::SetResult(_) => "set_result",
        }
    }
}

/// Changes to the resolved intercepts.
#[derive(Debug)]
pub enum ToolInterceptUpdate {
    /// Offers an intercept for a call; the higher priority wins, and on a tie the
    /// first one stays (the conflict is logged).
    Offer {
        /// The call.
        call_id: ToolCallId,
        /// The intercept.
        payload: Box<ToolInterceptPayload>,
    },
    /// Forgets the intercept of a call (once it has been acted on).
    Clear(ToolCallId),
}

/// State key holding the winning intercept per tool call.
#[derive(Debug)]
pub struct ToolInterceptKey;

impl StateKey for ToolInterceptKey {
    const KEY: &'static str = "runtime.tool_intercepts";
    type Value = BTreeMap<ToolCallId, ToolInterceptPayload>;
    type Update = ToolInterceptUpdate;

    fn apply(value: &mut Self::Value, update: ToolInterceptUpdate) {
        match update {
            ToolInterceptUpdate::Offer { call_id, payload } => match value.get(&call_id) {
                Some(current) if current.priority() > payload.priority() => {}
                Some(current) if current.priority() == payload.priority() => {
                    tracing::error!(
                        call_id = %call_id,
                        kind = current.kind(),
                        "conflicting tool intercepts of equal priority; keeping the first"
                    );
                }
                _ => {
                    value.insert(call_id, *payload);
                }
            },
            ToolInterceptUpdate::Clear(call_id) => {
                value.remove(&call_id);
            }
        }
    }
}

/// Intercepts the tool call of the current BeforeToolExecute phase (book:
/// `ToolInterceptAction`).
#[derive(Debug)]
pub struct ToolInterceptAction;

impl ScheduledActionSpec for ToolInterceptAction {
    const KEY: &'static str = "tool_intercept";
    const PHASE: Phase = Phase::BeforeToolExecute;
    type Payload = ToolInterceptPayload;
}

pub(super) struct ToolInterceptHandler;

#[async_trait]
impl TypedScheduledActionHandler<ToolInterceptAction> for ToolInterceptHandler {
    async fn handle_typed(
        &self,
        ctx: &PhaseContext,
        payload: ToolInterceptPayload,
    ) -> Result<StateCommand, StateError> {
        let Some(call) = &ctx.tool_call else {
            return Err(StateError::HookFailed {
                source_id: ToolInterceptAction::KEY.to_owned(),
                message: "scheduled outside a tool call".to_owned(),
            });
        };
        let mut command = StateCommand::new();
        command.update::<ToolInterceptKey>(ToolInterceptUpdate::Offer {
            call_id: call.call_id.clone(),
            payload: Box::new(payload),
        });
        Ok(command)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{PendingToolCall, Suspension, ToolCallResumeMode};

    fn ticket() -> SuspendTicket {
        SuspendTicket {
            suspension: Suspension {
                id: "s1".into(),
                action: "approve".into(),
                message: "ok?".into(),
                parameters: serde_json::Value::Null,
                response_schema: None,
            },
            pending: PendingToolCall {
                id: ToolCallId::new("c1").unwrap(),
                name: "rm".into(),
                arguments: serde_json::json!({}),
            },
            resume_mode: ToolCallResumeMode::ReplayToolCall,
            child: None,
            remote: None,
        }
    }

    fn offer(
        value: &mut BTreeMap<ToolCallId, ToolInterceptPayload>,
        payload: ToolInterceptPayload,
    ) {
        ToolInterceptKey::apply(
            value,
            ToolInterceptUpdate::Offer {
                call_id: ToolCallId::new("c1").unwrap(),
                payload: Box::new(payload),
            },
        );
    }

    #[test]
    fn block_beats_suspend_beats_set_result() {
        let set = ToolInterceptPayload::SetResult(ToolResult::success("rm", serde_json::json!(1)));
        let suspend = ToolInterceptPayload::Suspend(ticket());
        let block = ToolInterceptPayload::Block {
            reason: "no".into(),
        };

        for order in [
            [set.clone(), suspend.clone(), block.clone()],
            [block.clone(), set.clone(), suspend.clone()],
            [suspend.clone(), block.clone(), set.clone()],
        ] {
            let mut value = BTreeMap::new();
            for p in order {
                offer(&mut value, p);
            }
            assert_eq!(value.values().next(), Some(&block));
        }

        let mut value = BTreeMap::new();
        offer(&mut value, set.clone());
        offer(&mut value, suspend.clone());
        assert_eq!(value.values().next(), Some(&suspend));
    }

    #[test]
    fn equal_priority_keeps_the_first() {
        let mut value = BTreeMap::new();
        offer(
            &mut value,
            ToolInterceptPayload::Block {
                reason: "first".into(),
            },
        );
        offer(
            &mut value,
            ToolInterceptPayload::Block {
                reason: "second".into(),
            },
        );
        assert_eq!(
            value.values().next(),
            Some(&ToolInterceptPayload::Block {
                reason: "first".into()
            })
        );
    }
}
