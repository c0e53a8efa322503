//! `AddContextMessage`: injects context into the next inference request.

use std::collections::BTreeMap;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::contract::Role;
use crate::error::StateError;
use crate::phase::{Phase, PhaseContext};
use crate::plugin::TypedScheduledActionHandler;
use crate::state::{ScheduledActionSpec, StateCommand, StateKey};

/// How long an injected context message stays in the prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ContextLifetime {
    /// Injected into the next inference only.
    Ephemeral,
    /// Injected into every inference for the rest of the run.
    Persistent,
    /// Injected at most once every `cooldown_steps` steps.
    Throttled {
        /// Minimum steps between two injections.
        cooldown_steps: u32,
    },
}

/// A message plugins add to the model's context, deduplicated by `key`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextMessage {
    /// Dedupe key: a later message with the same key replaces an earlier one.
    pub key: String,
    /// The role the message is sent with.
    pub role: Role,
    /// The text.
    pub content: String,
    /// How long it stays.
    pub lifetime: ContextLifetime,
}

impl ContextMessage {
    /// A system message for the next inference only.
    pub fn system(key: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            role: Role::System,
            content: content.into(),
            lifetime: ContextLifetime::Ephemeral,
        }
    }

    /// A system message for every remaining inference of the run.
    pub fn system_persistent(key: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            lifetime: ContextLifetime::Persistent,
            ..Self::system(key, content)
        }
    }

    /// A system message injected at most once every `cooldown_steps` steps.
    pub fn system_throttled(
        key: impl Into<String>,
        content: impl Into<String>,
        cooldown_steps: u32,
    ) -> Self {
        Self {
            lifetime: ContextLifetime::Throttled { cooldown_steps },
            ..Self::system(key, content)
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
struct ThrottledEntry {
    message: Option<ContextMessage>,
    last_injected_step: Option<u32>,
}

/// Context messages waiting to be injected.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ContextMessages {
    persistent: BTreeMap<String, ContextMessage>,
    ephemeral: BTreeMap<String, ContextMessage>,
    throttled: BTreeMap<String, ThrottledEntry>,
}

impl ContextMessages {
    /// The messages to inject at `step`, in a stable order: persistent, throttled
    /// that are due, then ephemeral; each group sorted by key.
    pub fn for_step(&self, step: u32) -> Vec<&ContextMessage> {
        let due = self.throttled.values().filter_map(|entry| {
            let message = entry.message.as_ref()?;
            let ContextLifetime::Throttled { cooldown_steps } = message.lifetime else {
                return None;
            };
            match entry.last_injected_step {
                Some(last) if step.saturating_sub(last) < cooldown_steps.max(1) => None,
                _ => Some(message),
            }
        });
        self.persistent
            .values()
            .chain(due)
            .chain(self.ephemeral.values())
            .collect()
    }

    /// Whether nothing is waiting.
    pub fn is_empty(&self) -> bool {
        self.persistent.is_empty()
            && self.ephemeral.is_empty()
            && self.throttled.values().all(|e| e.message.is_none())
    }
}

/// Changes to [`ContextMessages`].
#[derive(Debug)]
pub enum ContextMessagesUpdate {
    /// Adds (or replaces by key) a message.
    Add(ContextMessage),
    /// Records that the messages of `step` were injected: ephemeral ones are dropped,
    /// throttled ones start their cooldown.
    Injected {
        /// The step that was sent to the model.
        step: u32,
    },
    /// Removes every message with this key.
    Remove(String),
}

/// State key holding the context messages of the current run.
#[derive(Debug)]
pub struct ContextMessagesKey;

impl StateKey for ContextMessagesKey {
    const KEY: &'static str = "runtime.context_messages";
    type Value = ContextMessages;
    type Update = ContextMessagesUpdate;

    fn apply(value: &mut ContextMessages, update: ContextMessagesUpdate) {
        match update {
            ContextMessagesUpdate::Add(message) => {
                let key = message.key.clone();
                value.persistent.remove(&key);
                value.ephemeral.remove(&key);
                match message.lifetime {
                    ContextLifetime::Ephemeral => {
                        value.throttled.remove(&key);
                        value.ephemeral.insert(key, message);
                    }
                    ContextLifetime::Persistent => {
                        value.throttled.remove(&key);
                        value.persistent.insert(key, message);
                    }
                    // Re-adding a throttled message keeps its cooldown.
                    ContextLifetime::Throttled { .. } => {
                        value.throttled.entry(key).or_default().message = Some(message);
                    }
                }
            }
            ContextMessagesUpdate::Injected { step } => {
                value.ephemeral.clear();
                let due: Vec<String> = value
                    .for_step(step)
                    .into_iter()
                    .filter(|m| matches!(m.lifetime, ContextLifetime::Throttled { .. }))
                    .map(|m| m.key.clone())
                    .collect();
                for key in due {
                    if let Some(entry) = value.throttled.get_mut(&key) {
                        entry.last_injected_step = Some(step);
                    }
                }
            }
            ContextMessagesUpdate::Remove(key) => {
                value.persistent.remove(&key);
                value.ephemeral.remove(&key);
                value.throttled.remove(&key);
            }
        }
    }
}

/// Injects a context message into the LLM conversation (book: `AddContextMessage`).
#[derive(Debug)]
pub struct AddContextMessage;

impl ScheduledActionSpec for AddContextMessage {
    const KEY: &'static str = "runtime.add_context_message";
    const PHASE: Phase = Phase::BeforeInference;
    type Payload = ContextMessage;
}

pub(super) struct AddContextMessageHandler;

#[async_trait]
impl TypedScheduledActionHandler<AddContextMessage> for AddContextMessageHandler {
    async fn handle_typed(
        &self,
        _ctx: &PhaseContext,
        payload: ContextMessage,
    ) -> Result<StateCommand, StateError> {
        let mut command = StateCommand::new();
        command.update::<ContextMessagesKey>(ContextMessagesUpdate::Add(payload));
        Ok(command)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply(value: &mut ContextMessages, update: ContextMessagesUpdate) {
        ContextMessagesKey::apply(value, update);
    }

    fn keys(value: &ContextMessages, step: u32) -> Vec<&str> {
        value
            .for_step(step)
            .iter()
            .map(|m| m.key.as_str())
            .collect()
    }

    #[test]
    fn lifetimes() {
        let mut v = ContextMessages::default();
        apply(
            &mut v,
            ContextMessagesUpdate::Add(ContextMessage::system_persistent("p", "always")),
        );
        apply(
            &mut v,
            ContextMessagesUpdate::Add(ContextMessage::system("e", "once")),
        );
        apply(
            &mut v,
            ContextMessagesUpdate::Add(ContextMessage::system_throttled("t", "every 2", 2)),
        );
        assert_eq!(keys(&v, 1), ["p", "t", "e"]);
        apply(&mut v, ContextMessagesUpdate::Injected { step: 1 });
        assert_eq!(keys(&v, 2), ["p"], "ephemeral gone, throttled cooling down");
        apply(&mut v, ContextMessagesUpdate::Injected { step: 2 });
        assert_eq!(keys(&v, 3), ["p", "t"], "cooldown of 2 steps elapsed");
    }

    #[test]
    fn same_key_replaces_and_remove_clears() {
        let mut v = ContextMessages::default();
        apply(
            &mut v,
            ContextMessagesUpdate::Add(ContextMessage::system("k", "old")),
        );
        apply(
            &mut v,
            ContextMessagesUpdate::Add(ContextMessage::system_persistent("k", "new")),
        );
        let msgs = v.for_step(1);
        assert_eq!(msgs.len(), 1);
        assert_eq!(msgs[0].content, "new");
        apply(&mut v, ContextMessagesUpdate::Remove("k".into()));
        assert!(v.is_empty());
    }

    #[test]
    fn readding_throttled_keeps_cooldown() {
        let mut v = ContextMessages::default();
        apply(
            &mut v,
            ContextMessagesUpdate::Add(ContextMessage::system_throttled("t", "a", 3)),
        );
        apply(&mut v, ContextMessagesUpdate::Injected { step: 1 });
        apply(
            &mut v,
            ContextMessagesUpdate::Add(ContextMessage::system_throttled("t", "b", 3)),
        );
        assert!(keys(&v, 2).is_empty());
        assert_eq!(v.for_step(4)[0].content, "b");
    }
}
