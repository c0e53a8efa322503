//! `StateStore`: the live state of one thread, owned by its thread actor.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, LazyLock};

use super::batch::{MutationBatch, TouchedKey};
use super::command::{StateCommand, TypedEffect};
use super::key::{KeyScope, StateKey, StateKeyOptions};
use super::map::StateMap;
use super::pending::{FailedScheduledActions, PendingActionsUpdate, PendingScheduledActions};
use super::persisted::{EncodedValue, PersistedState, UnknownKeyPolicy};
use super::registry::{KeyRegistration, KeyRegistry};
use super::snapshot::Snapshot;
use crate::error::StateError;
use crate::hashing::{FastHashMap, FastHashSet};
use crate::phase::Phase;

/// What a commit changed, for observers such as state-delta event emitters.
#[derive(Debug)]
pub struct CommitEvent<'a> {
    /// The revision the commit produced.
    pub revision: u64,
    /// The keys the commit wrote.
    pub touched_keys: &'a [TouchedKey],
}

/// Observes every successful commit; must be cheap and must not fail.
pub trait CommitHook: Send + Sync {
    /// Called after the commit is visible, with the post-commit snapshot.
    fn on_commit(&self, event: &CommitEvent<'_>, snapshot: &Snapshot);
}

/// The result of a successful commit.
#[derive(Debug)]
pub struct CommitOutcome {
    /// The revision after the commit (unchanged when the command had no updates).
    pub revision: u64,
    /// The command's effects, to be dispatched against the post-commit snapshot.
    pub effects: Vec<TypedEffect>,
}

/// Which action and effect keys have handlers; commits refuse anything else.
///
/// Every thread of an agent holds its agent's catalog, so a clone shares the
/// tables: installing an environment on a thread copies no strings, and a warm
/// thread keeps no copy of its own.
#[derive(Debug, Clone, Default)]
pub struct HandlerCatalog {
    tables: Arc<HandlerTables>,
}

#[derive(Debug, Clone, Default)]
struct HandlerTables {
    actions: FastHashMap<String, Phase>,
    effects: FastHashSet<String>,
}

impl HandlerCatalog {
    /// Declares a handler for an action key running in `phase`.
    pub fn add_action(&mut self, key: impl Into<String>, phase: Phase) {
        Arc::make_mut(&mut self.tables)
            .actions
            .insert(key.into(), phase);
    }

    /// Declares a handler for an effect key.
    pub fn add_effect(&mut self, key: impl Into<String>) {
        Arc::make_mut(&mut self.tables).effects.insert(key.into());
    }

    fn check(&self, command: &StateCommand) -> Result<(), StateError> {
        let HandlerTables { actions, effects } = &*self.tables;
        for action in command.actions() {
            if actions.get(&action.key) != Some(&action.phase) {
                return Err(StateError::UnknownScheduledActionHandler {
                    key: action.key.clone(),
                });
            }
        }
        for effect in command.effects() {
            if !effects.contains(&effect.key) {
                return Err(StateError::UnknownEffectHandler {
                    key: effect.key.clone(),
                });
            }
        }
        Ok(())
    }
}

/// The typed state of one thread: registered keys, current values, revision.
///
/// It is owned by exactly one thread actor, so it takes `&mut self` and needs no
/// locks. Readers get [`Snapshot`]s, which stay valid while later commits proceed.
pub struct StateStore {
    registry: Arc<KeyRegistry>,
    handlers: HandlerCatalog,
    current: Arc<StateMap>,
    revision: u64,
    retained: BTreeMap<String, EncodedValue>,
    commit_hooks: Vec<Arc<dyn CommitHook>>,
}

impl Default for StateStore {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for StateStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateStore")
            .field("revision", &self.revision)
            .field("keys", &self.registry.len())
            .field("commit_hooks", &self.commit_hooks.len())
            .finish()
    }
}

impl StateStore {
    /// An empty store with the runtime's own keys (pending and failed actions).
    ///
    /// Every thread starts with one, so the registry of those two keys is built
    /// once per process and shared; registering a key copies it first.
    pub fn new() -> Self {
        static RUNTIME_KEYS: LazyLock<Arc<KeyRegistry>> = LazyLock::new(|| {
            let mut registry = KeyRegistry::default();
            for registration in [
                KeyRegistration::of::<PendingScheduledActions>(StateKeyOptions::default()),
                KeyRegistration::of::<FailedScheduledActions>(StateKeyOptions::default()),
            ] {
                // A fresh registry cannot already hold the runtime's keys.
                if let Err(err) = registry.insert(registration) {
                    unreachable!("runtime keys clash in an empty registry: {err}");
                }
            }
            Arc::new(registry)
        });
        let registry = Arc::clone(&RUNTIME_KEYS);
        Self {
            current: Arc::new(registry.default_values().clone()),
            registry,
            handlers: HandlerCatalog::default(),
            revision: 0,
            retained: BTreeMap::new(),
            commit_hooks: Vec::new(),
        }
    }

    /// Registers `K` and installs its default value.
    pub fn register_key<K: StateKey>(
        &mut self,
        options: StateKeyOptions,
    ) -> Result<(), StateError> {
        self.register(KeyRegistration::of::<K>(options))
    }

    /// Registers a key; a value retained from an earlier uninstall is restored.
    pub fn register(&mut self, registration: KeyRegistration) -> Result<(), StateError> {
        Arc::make_mut(&mut self.registry).insert(registration)?;
        self.install_value(registration);
        Ok(())
    }

    /// Gives a newly registered key its retained value, or its default.
    fn install_value(&mut self, registration: KeyRegistration) {
        let map = Arc::make_mut(&mut self.current);
        match self.retained.remove(registration.key) {
            Some(json) => {
                if let Err(err) = registration.decode_into(map, &json) {
                    tracing::warn!(key = registration.key, error = %err, "dropping retained value that no longer decodes");
                    self.registry.reset(&registration, map);
                }
            }
            None => self.registry.reset(&registration, map),
        }
    }

    /// Switches to a shared registry that contains every key registered here (with
    /// the same types), giving its other keys their retained or default values.
    /// Refused when the registry lacks a key of this store.
    pub fn adopt_registry(&mut self, registry: Arc<KeyRegistry>) -> Result<(), StateError> {
        if Arc::ptr_eq(&self.registry, &registry) {
            return Ok(());
        }
        if let Some(missing) = self.registry.iter().find(|r| !registry.has_same(r)) {
            return Err(StateError::KeyTypeMismatch {
                key: missing.key.to_owned(),
            });
        }
        // Every key starts at the shared default, then this store's values are
        // carried over: the cost is this store's keys, not the registry's.
        let mut map = registry.default_values().clone();
        for registration in self.registry.iter() {
            map.share_from(&self.current, registration.type_id());
        }
        let with_retained: Vec<KeyRegistration> = if self.retained.is_empty() {
            Vec::new()
        } else {
            registry
                .iter()
                .filter(|r| self.registry.get(r.key).is_none() && self.retained.contains_key(r.key))
                .copied()
                .collect()
        };
        self.current = Arc::new(map);
        self.registry = registry;
        for registration in with_retained {
            self.install_value(registration);
        }
        Ok(())
    }

    /// Removes a key's registration; its value is kept aside when the key asked to be
    /// retained, and comes back if the key is registered again.
    pub fn uninstall_key(&mut self, key: &str) -> Result<(), StateError> {
        let Some(registration) = self.registry.get(key).copied() else {
            return Err(StateError::UnknownKey {
                key: key.to_owned(),
            });
        };
        if registration.retain_on_uninstall
            && let Some(json) = registration.encode(&self.current)?
        {
            self.retained.insert(key.to_owned(), json);
        }
        Arc::make_mut(&mut self.registry).remove(key);
        registration.remove_from(Arc::make_mut(&mut self.current));
        self.revision += 1;
        Ok(())
    }

    /// Replaces the set of action and effect keys that commits accept.
    pub fn set_handlers(&mut self, handlers: HandlerCatalog) {
        self.handlers = handlers;
    }

    /// Adds an observer called after every commit.
    pub fn add_commit_hook(&mut self, hook: Arc<dyn CommitHook>) {
        self.commit_hooks.push(hook);
    }

    /// Whether a key string is registered.
    pub fn is_registered(&self, key: &str) -> bool {
        self.registry.get(key).is_some()
    }

    /// Every registered key string.
    pub fn registered_keys(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.registry.iter().map(|r| r.key)
    }

    /// The registration of a key string.
    pub fn registration(&self, key: &str) -> Option<&KeyRegistration> {
        self.registry.get(key)
    }

    /// How many values the store holds (its keys' defaults included) and how
    /// many it retains for keys no plugin declares: what a memory estimate counts.
    pub fn value_count(&self) -> usize {
        self.current.len() + self.retained.len()
    }

    /// The current revision; every state-changing commit increments it.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// An immutable view of the current state (an `Arc` clone).
    pub fn snapshot(&self) -> Snapshot {
        Snapshot::new(self.revision, Arc::clone(&self.current))
    }

    /// The current value of `K`.
    pub fn get<K: StateKey>(&self) -> Option<&K::Value> {
        self.current.get::<K>()
    }

    /// A copy of the current value of `K`.
    pub fn read<K: StateKey>(&self) -> Option<K::Value> {
        self.current.get::<K>().cloned()
    }

    /// Checks a command without applying it: base revision, keys and handlers.
    pub fn validate(&self, command: &StateCommand) -> Result<(), StateError> {
        self.validate_batch(command.batch())?;
        self.handlers.check(command)
    }

    fn validate_batch(&self, batch: &MutationBatch) -> Result<(), StateError> {
        if let Some(expected) = batch.base_revision()
            && expected != self.revision
        {
            return Err(StateError::RevisionConflict {
                expected,
                actual: self.revision,
            });
        }
        for op in batch.ops() {
            self.registry.check(op.key(), op.key_type())?;
        }
        Ok(())
    }

    /// Applies a command atomically: either everything (updates and newly scheduled
    /// actions) becomes visible in one new revision, or nothing changes.
    pub fn commit(&mut self, command: StateCommand) -> Result<CommitOutcome, StateError> {
        self.validate(&command)?;
        let (mut batch, actions, effects) = command.into_parts();
        if !actions.is_empty() {
            batch.update::<PendingScheduledActions>(PendingActionsUpdate::Push(actions));
        }
        if batch.is_empty() {
            return Ok(CommitOutcome {
                revision: self.revision,
                effects,
            });
        }
        let (touched, ops) = batch.into_parts();
        let map = Arc::make_mut(&mut self.current);
        for op in ops {
            op.apply(map);
        }
        self.revision += 1;
        self.notify(&touched);
        Ok(CommitOutcome {
            revision: self.revision,
            effects,
        })
    }

    fn notify(&self, touched: &[TouchedKey]) {
        if self.commit_hooks.is_empty() {
            return;
        }
        let event = CommitEvent {
            revision: self.revision,
            touched_keys: touched,
        };
        let snapshot = self.snapshot();
        for hook in &self.commit_hooks {
            hook.on_commit(&event, &snapshot);
        }
    }

    /// Starts a new run: every run-scoped key goes back to its default.
    pub fn begin_run(&mut self) {
        let run_keys: Vec<KeyRegistration> = self
            .registry
            .iter()
            .filter(|r| r.scope == KeyScope::Run)
            .copied()
            .collect();
        let map = Arc::make_mut(&mut self.current);
        for registration in &run_keys {
            self.registry.reset(registration, map);
        }
        self.revision += 1;
        let touched: Vec<TouchedKey> = run_keys
            .iter()
            .map(|r| TouchedKey {
                key: r.key,
                merge: r.merge,
            })
            .collect();
        self.notify(&touched);
    }

    /// Encodes every persistent key for a checkpoint.
    pub fn export(&self) -> Result<PersistedState, StateError> {
        self.persisted(|registration| {
            Ok(registration
                .encode(&self.current)?
                .filter(|json| !self.registry.is_default(registration.key, json)))
        })
    }

    /// The persistent keys for a checkpoint, shared instead of encoded: each value
    /// is encoded when a reader of the checkpoint first needs its text (a store
    /// writing JSON, a restore), so a store that keeps checkpoints in memory never
    /// pays for encoding (decision 0033). The values are those of this moment: a
    /// later write to this store copies a shared value before changing it.
    ///
    /// Unlike [`Self::export`], a key written back to its default value is
    /// included (only keys still holding the shared default are left out):
    /// telling would take its encoding. Restoring it gives the same state.
    pub fn checkpoint_state(&self) -> PersistedState {
        let Ok(state) =
            self.persisted::<Infallible>(|registration| Ok(registration.defer(&self.current)));
        state
    }

    /// The persistent keys, each as `value_of` gives it (`None` leaves it out).
    fn persisted<E>(
        &self,
        mut value_of: impl FnMut(&KeyRegistration) -> Result<Option<EncodedValue>, E>,
    ) -> Result<PersistedState, E> {
        let mut extensions = BTreeMap::new();
        for registration in self.registry.iter().filter(|r| r.persistent) {
            // Keys at their default are left out: restore leaves absent keys at their
            // default, and most keys of a thread are.
            if self
                .registry
                .holds_shared_default(registration, &self.current)
            {
                continue;
            }
            if let Some(value) = value_of(registration)? {
                extensions.insert(registration.key.to_owned(), value);
            }
        }
        // Values retained from uninstalled plugins survive checkpoints too.
        for (key, json) in &self.retained {
            extensions
                .entry(key.clone())
                .or_insert_with(|| json.clone());
        }
        Ok(PersistedState {
            revision: self.revision,
            extensions,
        })
    }

    /// Loads a checkpoint. Decoding happens on a copy, so a failure changes nothing.
    pub fn restore(
        &mut self,
        state: &PersistedState,
        policy: UnknownKeyPolicy,
    ) -> Result<(), StateError> {
        let mut map = (*self.current).clone();
        let mut retained = self.retained.clone();
        for (key, json) in &state.extensions {
            match self.registry.get(key) {
                Some(registration) => registration.decode_into(&mut map, json)?,
                None => match policy {
                    UnknownKeyPolicy::Error => {
                        return Err(StateError::UnknownKey { key: key.clone() });
                    }
                    UnknownKeyPolicy::Skip => {
                        // Keep it aside: a plugin that registers it later gets it back.
                        tracing::debug!(key = %key, "keeping unregistered persisted key aside");
                        retained.insert(key.clone(), json.clone());
                    }
                },
            }
        }
        self.current = Arc::new(map);
        self.retained = retained;
        self.revision = state.revision.max(self.revision + 1);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::state::{EffectSpec, ScheduledActionSpec};

    struct Counter;
    impl StateKey for Counter {
        const KEY: &'static str = "test.counter";
        const MERGE: crate::state::MergeStrategy = crate::state::MergeStrategy::Commutative;
        type Value = i64;
        type Update = i64;
        fn apply(value: &mut i64, update: i64) {
            *value += update;
        }
    }

    struct Memory;
    impl StateKey for Memory {
        const KEY: &'static str = "test.memory";
        const SCOPE: KeyScope = KeyScope::Thread;
        type Value = Vec<String>;
        type Update = String;
        fn apply(value: &mut Vec<String>, update: String) {
            value.push(update);
        }
    }

    struct Scratch;
    impl StateKey for Scratch {
        const KEY: &'static str = "test.scratch";
        type Value = String;
        type Update = String;
        fn apply(value: &mut String, update: String) {
            *value = update;
        }
    }

    /// Claims `Counter`'s key string with another type.
    struct Impostor;
    impl StateKey for Impostor {
        const KEY: &'static str = "test.counter";
        type Value = bool;
        type Update = bool;
        fn apply(value: &mut bool, update: bool) {
            *value = update;
        }
    }

    struct Ping;
    impl ScheduledActionSpec for Ping {
        const KEY: &'static str = "test.ping";
        const PHASE: Phase = Phase::StepEnd;
        type Payload = u32;
    }

    struct Audit;
    impl EffectSpec for Audit {
        const KEY: &'static str = "test.audit";
        type Payload = String;
    }

    fn store() -> StateStore {
        let mut store = StateStore::new();
        store
            .register_key::<Counter>(StateKeyOptions::default())
            .unwrap();
        store
            .register_key::<Memory>(StateKeyOptions::default())
            .unwrap();
        store
            .register_key::<Scratch>(StateKeyOptions::transient())
            .unwrap();
        store
    }

    #[test]
    fn registration_installs_defaults_and_refuses_duplicates() {
        let mut store = store();
        assert_eq!(store.read::<Counter>(), Some(0));
        assert_eq!(
            store.register_key::<Counter>(StateKeyOptions::default()),
            Err(StateError::KeyAlreadyRegistered {
                key: "test.counter".into()
            })
        );
        assert_eq!(
            store.register_key::<Impostor>(StateKeyOptions::default()),
            Err(StateError::KeyAlreadyRegistered {
                key: "test.counter".into()
            })
        );
    }

    #[test]
    fn commit_bumps_revision_and_snapshots_stay_frozen() {
        let mut store = store();
        let before = store.snapshot();
        let mut cmd = StateCommand::new();
        cmd.update::<Counter>(5).update::<Memory>("hello".into());
        let outcome = store.commit(cmd).unwrap();
        assert_eq!(outcome.revision, 1);
        assert_eq!(store.read::<Counter>(), Some(5));
        assert_eq!(before.get::<Counter>(), Some(&0));
        assert_eq!(before.revision(), 0);
        assert_eq!(store.snapshot().get::<Memory>().unwrap(), &["hello"]);
    }

    #[test]
    fn unknown_key_refused_and_nothing_applied() {
        let mut store = StateStore::new();
        store
            .register_key::<Counter>(StateKeyOptions::default())
            .unwrap();
        let mut cmd = StateCommand::new();
        cmd.update::<Counter>(1).update::<Memory>("x".into());
        assert_eq!(
            store.commit(cmd).unwrap_err(),
            StateError::UnknownKey {
                key: "test.memory".into()
            }
        );
        assert_eq!(store.read::<Counter>(), Some(0));
        assert_eq!(store.revision(), 0);
    }

    #[test]
    fn same_key_string_other_type_is_a_mismatch() {
        let mut store = store();
        let mut cmd = StateCommand::new();
        cmd.update::<Impostor>(true);
        assert_eq!(
            store.commit(cmd).unwrap_err(),
            StateError::KeyTypeMismatch {
                key: "test.counter".into()
            }
        );
    }

    #[test]
    fn stale_base_revision_is_a_conflict() {
        let mut store = store();
        store
            .commit(StateCommand::from({
                let mut b = MutationBatch::new();
                b.update::<Counter>(1);
                b
            }))
            .unwrap();
        let mut cmd = StateCommand::new();
        cmd.update::<Counter>(1);
        cmd.batch_mut().set_base_revision(0);
        assert_eq!(
            store.commit(cmd).unwrap_err(),
            StateError::RevisionConflict {
                expected: 0,
                actual: 1
            }
        );
        assert_eq!(store.read::<Counter>(), Some(1));
    }

    #[test]
    fn actions_and_effects_need_handlers() {
        let mut store = store();
        let mut cmd = StateCommand::new();
        cmd.update::<Counter>(1).schedule_action::<Ping>(7).unwrap();
        assert_eq!(
            store.commit(cmd).unwrap_err(),
            StateError::UnknownScheduledActionHandler {
                key: "test.ping".into()
            }
        );
        let mut cmd = StateCommand::new();
        cmd.update::<Counter>(1).emit::<Audit>("x".into()).unwrap();
        assert_eq!(
            store.commit(cmd).unwrap_err(),
            StateError::UnknownEffectHandler {
                key: "test.audit".into()
            }
        );
        assert_eq!(store.read::<Counter>(), Some(0), "nothing committed");

        let mut handlers = HandlerCatalog::default();
        handlers.add_action(Ping::KEY, Ping::PHASE);
        handlers.add_effect(Audit::KEY);
        store.set_handlers(handlers);
        let mut cmd = StateCommand::new();
        cmd.schedule_action::<Ping>(7).unwrap();
        cmd.emit::<Audit>("x".into()).unwrap();
        let outcome = store.commit(cmd).unwrap();
        assert_eq!(outcome.effects.len(), 1);
        let pending = store.read::<PendingScheduledActions>().unwrap();
        assert!(pending.has_due(Phase::StepEnd));
        assert_eq!(pending.actions[0].action.decode::<Ping>().unwrap(), 7);
    }

    #[test]
    fn begin_run_resets_run_scope_only() {
        let mut store = store();
        let mut cmd = StateCommand::new();
        cmd.update::<Counter>(3)
            .update::<Memory>("kept".into())
            .update::<Scratch>("temp".into());
        store.commit(cmd).unwrap();
        store.begin_run();
        assert_eq!(store.read::<Counter>(), Some(0));
        assert_eq!(store.read::<Scratch>(), Some(String::new()));
        assert_eq!(store.read::<Memory>().unwrap(), vec!["kept".to_owned()]);
    }

    #[test]
    fn untouched_keys_share_the_registry_default_and_writes_copy_it() {
        let mut first = store();
        let mut second = StateStore::new();
        second.adopt_registry(Arc::clone(&first.registry)).unwrap();
        let registry = Arc::clone(&first.registry);
        let counter = *registry.get(Counter::KEY).unwrap();
        assert!(registry.holds_shared_default(&counter, &first.current));
        assert!(registry.holds_shared_default(&counter, &second.current));

        let mut cmd = StateCommand::new();
        cmd.update::<Counter>(3);
        first.commit(cmd).unwrap();
        assert!(!registry.holds_shared_default(&counter, &first.current));
        assert_eq!(first.read::<Counter>(), Some(3));
        assert_eq!(
            second.read::<Counter>(),
            Some(0),
            "the shared default is untouched"
        );
        assert!(
            first
                .export()
                .unwrap()
                .extensions
                .contains_key(Counter::KEY)
        );
        assert!(
            !second
                .export()
                .unwrap()
                .extensions
                .contains_key(Counter::KEY)
        );

        first.begin_run();
        assert!(registry.holds_shared_default(&counter, &first.current));
        assert_eq!(first.read::<Counter>(), Some(0));
    }

    #[test]
    fn scope_option_overrides_declared_scope() {
        let mut store = StateStore::new();
        store
            .register_key::<Counter>(StateKeyOptions::default().with_scope(KeyScope::Thread))
            .unwrap();
        store
            .commit({
                let mut c = StateCommand::new();
                c.update::<Counter>(2);
                c
            })
            .unwrap();
        store.begin_run();
        assert_eq!(store.read::<Counter>(), Some(2));
    }

    #[test]
    fn export_restore_round_trip_skips_transient_keys() {
        let mut store = store();
        let mut cmd = StateCommand::new();
        cmd.update::<Counter>(4)
            .update::<Memory>("m".into())
            .update::<Scratch>("s".into());
        store.commit(cmd).unwrap();
        let exported = store.export().unwrap();
        assert_eq!(exported.extensions["test.counter"], json!(4));
        assert_eq!(exported.extensions["test.memory"], json!(["m"]));
        assert!(!exported.extensions.contains_key("test.scratch"));

        let mut fresh = self::store();
        fresh.restore(&exported, UnknownKeyPolicy::Error).unwrap();
        assert_eq!(fresh.read::<Counter>(), Some(4));
        assert_eq!(fresh.read::<Memory>().unwrap(), vec!["m".to_owned()]);
        assert!(fresh.revision() >= exported.revision);
    }

    #[test]
    fn keys_at_their_default_are_left_out_of_exports() {
        let mut store = store();
        assert!(
            store.export().unwrap().extensions.is_empty(),
            "a fresh store exports nothing"
        );
        store
            .commit({
                let mut c = StateCommand::new();
                c.update::<Counter>(2).update::<Counter>(-2);
                c.update::<Memory>("x".into());
                c
            })
            .unwrap();
        let exported = store.export().unwrap();
        assert!(
            !exported.extensions.contains_key("test.counter"),
            "back at 0"
        );
        assert!(exported.extensions.contains_key("test.memory"));
        let mut fresh = self::store();
        fresh.restore(&exported, UnknownKeyPolicy::Error).unwrap();
        assert_eq!(fresh.read::<Counter>(), Some(0));
        assert_eq!(fresh.read::<Memory>().unwrap(), vec!["x".to_owned()]);
    }

    /// A key whose values JSON cannot hold (map keys must be strings).
    struct Unencodable;
    impl StateKey for Unencodable {
        const KEY: &'static str = "test.unencodable";
        type Value = BTreeMap<Vec<u8>, u8>;
        type Update = (Vec<u8>, u8);
        fn apply(value: &mut Self::Value, (key, n): (Vec<u8>, u8)) {
            value.insert(key, n);
        }
    }

    #[test]
    fn a_checkpoint_keeps_the_values_of_its_moment() {
        let mut store = store();
        let mut cmd = StateCommand::new();
        cmd.update::<Counter>(4).update::<Memory>("m".into());
        store.commit(cmd).unwrap();
        let checkpoint = store.checkpoint_state();
        assert_eq!(
            checkpoint,
            store.export().unwrap(),
            "the same values as an export"
        );

        let mut later = StateCommand::new();
        later.update::<Counter>(5).update::<Memory>("n".into());
        store.commit(later).unwrap();
        assert_eq!(checkpoint.extensions["test.counter"], json!(4));
        assert_eq!(checkpoint.extensions["test.memory"], json!(["m"]));
        assert_eq!(
            serde_json::to_string(&checkpoint.extensions).unwrap(),
            r#"{"test.counter":4,"test.memory":["m"]}"#
        );
        let mut fresh = self::store();
        fresh.restore(&checkpoint, UnknownKeyPolicy::Error).unwrap();
        assert_eq!(fresh.read::<Counter>(), Some(4));
        assert_eq!(fresh.read::<Memory>().unwrap(), vec!["m".to_owned()]);
        assert_eq!(store.read::<Counter>(), Some(9), "the live store moved on");
    }

    #[test]
    fn a_checkpoint_leaves_out_keys_nobody_wrote() {
        let store = store();
        assert!(store.checkpoint_state().extensions.is_empty());
    }

    #[test]
    fn a_value_json_cannot_hold_fails_where_its_text_is_needed() {
        let mut store = store();
        store
            .register_key::<Unencodable>(StateKeyOptions::default())
            .unwrap();
        let mut cmd = StateCommand::new();
        cmd.update::<Unencodable>((vec![1], 2));
        store.commit(cmd).unwrap();

        let checkpoint = store.checkpoint_state();
        let written = serde_json::to_string(&checkpoint).unwrap_err().to_string();
        assert!(written.contains("test.unencodable"), "{written}");
        let mut fresh = self::store();
        fresh
            .register_key::<Unencodable>(StateKeyOptions::default())
            .unwrap();
        assert!(fresh.restore(&checkpoint, UnknownKeyPolicy::Error).is_err());
        assert!(
            fresh.read::<Unencodable>().unwrap().is_empty(),
            "restore changed nothing"
        );
        assert!(matches!(
            store.export(),
            Err(StateError::KeyEncode { key, .. }) if key == "test.unencodable"
        ));
    }

    #[test]
    fn a_shared_registry_is_adopted_only_if_it_covers_the_store() {
        let mut shared = KeyRegistry::default();
        for registration in [
            KeyRegistration::of::<PendingScheduledActions>(StateKeyOptions::default()),
            KeyRegistration::of::<FailedScheduledActions>(StateKeyOptions::default()),
            KeyRegistration::of::<Counter>(StateKeyOptions::default()),
        ] {
            shared.insert(registration).unwrap();
        }
        let shared = Arc::new(shared);
        let mut fresh = StateStore::new();
        fresh.adopt_registry(Arc::clone(&shared)).unwrap();
        assert_eq!(
            fresh.read::<Counter>(),
            Some(0),
            "new keys get their default"
        );
        let mut diverged = store();
        assert!(matches!(
            diverged.adopt_registry(shared),
            Err(StateError::KeyTypeMismatch { .. })
        ));
        assert!(diverged.is_registered("test.memory"), "nothing changed");
    }

    #[test]
    fn an_adopted_registry_keeps_written_and_retained_values() {
        let retained = StateKeyOptions {
            retain_on_uninstall: true,
            ..StateKeyOptions::default()
        };
        let mut store = StateStore::new();
        store
            .register_key::<Counter>(StateKeyOptions::default())
            .unwrap();
        store.register_key::<Memory>(retained).unwrap();
        store
            .commit({
                let mut c = StateCommand::new();
                c.update::<Counter>(5);
                c.update::<Memory>("kept".into());
                c
            })
            .unwrap();
        store.uninstall_key("test.memory").unwrap();
        let revision = store.revision();

        let mut shared = KeyRegistry::default();
        for registration in [
            KeyRegistration::of::<PendingScheduledActions>(StateKeyOptions::default()),
            KeyRegistration::of::<FailedScheduledActions>(StateKeyOptions::default()),
            KeyRegistration::of::<Counter>(StateKeyOptions::default()),
            KeyRegistration::of::<Memory>(retained),
            KeyRegistration::of::<Scratch>(StateKeyOptions::transient()),
        ] {
            shared.insert(registration).unwrap();
        }
        store.adopt_registry(Arc::new(shared)).unwrap();
        assert_eq!(store.read::<Counter>(), Some(5), "written value kept");
        assert_eq!(
            store.read::<Memory>().unwrap(),
            vec!["kept".to_owned()],
            "retained value back"
        );
        assert_eq!(
            store.read::<Scratch>(),
            Some(String::new()),
            "new key at default"
        );
        assert_eq!(store.revision(), revision, "adopting changes no value");
        assert!(
            store
                .export()
                .unwrap()
                .extensions
                .contains_key("test.memory")
        );
    }

    #[test]
    fn restore_is_all_or_nothing() {
        let mut store = store();
        let mut bad = PersistedState::default();
        bad.extensions
            .insert("test.counter".into(), json!(9).into());
        bad.extensions
            .insert("test.memory".into(), json!("not a list").into());
        let err = store.restore(&bad, UnknownKeyPolicy::Error).unwrap_err();
        assert!(matches!(err, StateError::KeyDecode { ref key, .. } if key == "test.memory"));
        assert_eq!(store.read::<Counter>(), Some(0), "counter untouched");
    }

    #[test]
    fn unknown_persisted_keys_follow_policy() {
        let mut persisted = PersistedState::default();
        persisted
            .extensions
            .insert("test.counter".into(), json!(2).into());
        persisted
            .extensions
            .insert("gone.plugin".into(), json!({"a": 1}).into());

        let mut strict = store();
        assert_eq!(
            strict.restore(&persisted, UnknownKeyPolicy::Error),
            Err(StateError::UnknownKey {
                key: "gone.plugin".into()
            })
        );
        assert_eq!(strict.read::<Counter>(), Some(0));

        let mut lenient = store();
        lenient.restore(&persisted, UnknownKeyPolicy::Skip).unwrap();
        assert_eq!(lenient.read::<Counter>(), Some(2));
        assert_eq!(
            lenient.export().unwrap().extensions["gone.plugin"],
            json!({"a": 1}),
            "unknown keys are carried forward, not lost"
        );
    }

    #[test]
    fn retained_keys_come_back_after_reinstall() {
        let mut store = StateStore::new();
        let retain = StateKeyOptions {
            retain_on_uninstall: true,
            ..StateKeyOptions::default()
        };
        store.register_key::<Memory>(retain).unwrap();
        store
            .register_key::<Counter>(StateKeyOptions::default())
            .unwrap();
        store
            .commit({
                let mut c = StateCommand::new();
                c.update::<Memory>("remember me".into())
                    .update::<Counter>(5);
                c
            })
            .unwrap();
        store.uninstall_key(Memory::KEY).unwrap();
        store.uninstall_key(Counter::KEY).unwrap();
        assert!(!store.is_registered(Memory::KEY));
        assert_eq!(store.get::<Memory>(), None);
        store.register_key::<Memory>(retain).unwrap();
        store
            .register_key::<Counter>(StateKeyOptions::default())
            .unwrap();
        assert_eq!(
            store.read::<Memory>().unwrap(),
            vec!["remember me".to_owned()]
        );
        assert_eq!(store.read::<Counter>(), Some(0), "not retained");
    }

    #[derive(Default)]
    struct Recorder(Mutex<Vec<(u64, Vec<&'static str>)>>);
    impl CommitHook for Recorder {
        fn on_commit(&self, event: &CommitEvent<'_>, snapshot: &Snapshot) {
            assert_eq!(snapshot.revision(), event.revision);
            self.0.lock().unwrap().push((
                event.revision,
                event.touched_keys.iter().map(|t| t.key).collect(),
            ));
        }
    }

    #[test]
    fn commit_hooks_see_each_commit() {
        let mut store = store();
        let recorder = Arc::new(Recorder::default());
        store.add_commit_hook(recorder.clone());
        store
            .commit({
                let mut c = StateCommand::new();
                c.update::<Counter>(1);
                c
            })
            .unwrap();
        store.commit(StateCommand::new()).unwrap();
        assert_eq!(
            *recorder.0.lock().unwrap(),
            vec![(1, vec!["test.counter"])],
            "empty commits do not notify"
        );
    }

    proptest! {
        #[test]
        fn commutative_updates_commute(updates in proptest::collection::vec(-1000i64..1000, 0..32), seed in any::<u64>()) {
            let mut forward = store();
            let mut cmd = StateCommand::new();
            for u in &updates {
                cmd.update::<Counter>(*u);
            }
            forward.commit(cmd).unwrap();

            let mut shuffled = updates.clone();
            let mut rng = seed;
            for i in (1..shuffled.len()).rev() {
                rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                shuffled.swap(i, (rng % (i as u64 + 1)) as usize);
            }
            // Split into parallel batches and merge them: same result as one batch.
            let mut merged = MutationBatch::new();
            for chunk in shuffled.chunks(3) {
                let mut b = MutationBatch::new();
                for u in chunk {
                    b.update::<Counter>(*u);
                }
                merged.merge_parallel(b).unwrap();
            }
            let mut other = store();
            other.commit(StateCommand::from(merged)).unwrap();
            prop_assert_eq!(forward.read::<Counter>(), other.read::<Counter>());
        }
    }
}
