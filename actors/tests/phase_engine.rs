//! The phase engine's rules: GATHER concurrency and conflict fallback, EXECUTE
//! convergence, effects, activation filtering, request transforms and core actions.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use awaken_actors::actions::{
    AddContextMessage, ContextMessage, ContextMessagesKey, ExcludeTool, IncludeOnlyTools,
    InferenceOverrideKey, LoopActionHandlersPlugin, SetInferenceOverride, ToolFilterKey,
    ToolInterceptAction, ToolInterceptKey, ToolInterceptPayload,
};
use awaken_actors::contract::{InferenceOverride, Message, ToolResult};
use awaken_actors::llm::InferenceRequest;
use awaken_actors::phase::{PhaseContext, PhaseRuntime, ToolCallView};
use awaken_actors::plugin::{
    ExecutionEnv, InferenceRequestTransform, PhaseHook, Plugin, PluginDescriptor, PluginEntry,
    PluginRegistrar, TypedEffectHandler, TypedScheduledActionHandler,
};
use awaken_actors::state::{
    EffectSpec, FailedScheduledActions, MergeStrategy, PendingScheduledActions,
    ScheduledActionSpec, Snapshot, StateCommand, StateKey, StateKeyOptions, StateStore,
};
use awaken_actors::{Phase, StateError, ToolCallId};

// ---------------------------------------------------------------- keys

/// Exclusive counter whose update *replaces* the value.
struct Total;
impl StateKey for Total {
    const KEY: &'static str = "test.total";
    type Value = i64;
    type Update = i64;
    fn apply(value: &mut i64, update: i64) {
        *value = update;
    }
}

/// Commutative counter whose update adds.
struct Hits;
impl StateKey for Hits {
    const KEY: &'static str = "test.hits";
    const MERGE: MergeStrategy = MergeStrategy::Commutative;
    type Value = i64;
    type Update = i64;
    fn apply(value: &mut i64, update: i64) {
        *value += update;
    }
}

/// Exclusive log of strings.
struct Log;
impl StateKey for Log {
    const KEY: &'static str = "test.log";
    type Value = Vec<String>;
    type Update = String;
    fn apply(value: &mut Vec<String>, update: String) {
        value.push(update);
    }
}

// ---------------------------------------------------------------- hooks

/// Reads `Total` from the snapshot and writes `Total + 1`.
struct IncrementTotal;
#[async_trait]
impl PhaseHook for IncrementTotal {
    async fn run(&self, ctx: &PhaseContext) -> Result<StateCommand, StateError> {
        let current = ctx.state::<Total>().copied().unwrap_or_default();
        let mut cmd = StateCommand::new();
        cmd.update::<Total>(current + 1);
        Ok(cmd)
    }
}

struct AddHit;
#[async_trait]
impl PhaseHook for AddHit {
    async fn run(&self, _ctx: &PhaseContext) -> Result<StateCommand, StateError> {
        let mut cmd = StateCommand::new();
        cmd.update::<Hits>(1);
        Ok(cmd)
    }
}

/// Appends a fixed entry to `Log`.
struct Append(&'static str);
#[async_trait]
impl PhaseHook for Append {
    async fn run(&self, _ctx: &PhaseContext) -> Result<StateCommand, StateError> {
        let mut cmd = StateCommand::new();
        cmd.update::<Log>(self.0.to_owned());
        Ok(cmd)
    }
}

/// Runs an arbitrary closure as a hook.
struct FnHook<F>(F);
#[async_trait]
impl<F> PhaseHook for FnHook<F>
where
    F: Fn(&PhaseContext) -> Result<StateCommand, StateError> + Send + Sync + 'static,
{
    async fn run(&self, ctx: &PhaseContext) -> Result<StateCommand, StateError> {
        (self.0)(ctx)
    }
}

// ---------------------------------------------------------------- plugins

type Registration = Box<dyn Fn(&mut PluginRegistrar) -> Result<(), StateError> + Send + Sync>;

/// A plugin defined by a registration closure.
struct TestPlugin(Registration);
impl Plugin for TestPlugin {
    fn descriptor(&self) -> PluginDescriptor {
        PluginDescriptor::new("test", "test plugin")
    }
    fn register(&self, r: &mut PluginRegistrar) -> Result<(), StateError> {
        (self.0)(r)
    }
}

fn plugin(
    f: impl Fn(&mut PluginRegistrar) -> Result<(), StateError> + Send + Sync + 'static,
) -> Arc<dyn Plugin> {
    Arc::new(TestPlugin(Box::new(f)))
}

fn keys_plugin() -> Arc<dyn Plugin> {
    plugin(|r| {
        r.register_key::<Total>(StateKeyOptions::default())?;
        r.register_key::<Hits>(StateKeyOptions::default())?;
        r.register_key::<Log>(StateKeyOptions::default())
    })
}

fn env_of(plugins: Vec<(&str, Arc<dyn Plugin>)>) -> ExecutionEnv {
    env_filtered(plugins, &[])
}

fn env_filtered(plugins: Vec<(&str, Arc<dyn Plugin>)>, filter: &[&str]) -> ExecutionEnv {
    let mut entries = vec![
        PluginEntry::required(
            LoopActionHandlersPlugin::ID,
            Arc::new(LoopActionHandlersPlugin),
        ),
        PluginEntry::required("keys", keys_plugin()),
    ];
    entries.extend(plugins.into_iter().map(|(id, p)| PluginEntry::new(id, p)));
    let filter: BTreeSet<String> = filter.iter().map(|s| (*s).to_owned()).collect();
    ExecutionEnv::from_plugins(entries, &filter).unwrap()
}

fn store_for(env: &ExecutionEnv) -> StateStore {
    let mut store = StateStore::new();
    env.install(&mut store).unwrap();
    store
}

fn ctx(phase: Phase) -> PhaseContext {
    PhaseContext::test_default().with_phase(phase)
}

// ---------------------------------------------------------------- GATHER

#[tokio::test]
async fn non_conflicting_hooks_commit_once() {
    let env = env_of(vec![(
        "p",
        plugin(|r| {
            r.register_phase_hook("total", Phase::StepStart, IncrementTotal)?;
            r.register_phase_hook("hit", Phase::StepStart, AddHit)?;
            r.register_phase_hook("log", Phase::StepStart, Append("x"))
        }),
    )]);
    let mut store = store_for(&env);
    let report = PhaseRuntime::new()
        .run_phase(&env, &mut store, ctx(Phase::StepStart))
        .await
        .unwrap();
    assert_eq!(report.hooks_run, 3);
    assert_eq!(report.commits, 1);
    assert_eq!(report.deferred_hooks, 0);
    assert_eq!(store.read::<Total>(), Some(1));
    assert_eq!(store.read::<Hits>(), Some(1));
    assert_eq!(store.read::<Log>().unwrap(), ["x"]);
}

#[tokio::test]
async fn exclusive_conflicts_fall_back_to_serial_and_match_serial_results() {
    let hooks = || {
        plugin(|r| {
            r.register_phase_hook("a", Phase::StepEnd, IncrementTotal)?;
            r.register_phase_hook("b", Phase::StepEnd, IncrementTotal)?;
            r.register_phase_hook("c", Phase::StepEnd, IncrementTotal)
        })
    };
    let env = env_of(vec![("p", hooks())]);
    let mut store = store_for(&env);
    let report = PhaseRuntime::new()
        .run_phase(&env, &mut store, ctx(Phase::StepEnd))
        .await
        .unwrap();
    assert_eq!(report.deferred_hooks, 2);
    assert_eq!(report.commits, 3);

    // Serial reference: each hook alone, each on the state the previous one left.
    let mut serial = store_for(&env);
    for _ in 0..3 {
        let snapshot = serial.snapshot();
        let cmd = IncrementTotal
            .run(&ctx(Phase::StepEnd).with_snapshot(snapshot))
            .await
            .unwrap();
        serial.commit(cmd).unwrap();
    }
    assert_eq!(store.read::<Total>(), serial.read::<Total>());
    assert_eq!(store.read::<Total>(), Some(3));
}

#[tokio::test]
async fn partition_keeps_compatible_hooks_in_the_first_commit() {
    // a and c conflict on Total; b only touches Hits and joins a's batch.
    let env = env_of(vec![(
        "p",
        plugin(|r| {
            r.register_phase_hook("a", Phase::StepEnd, IncrementTotal)?;
            r.register_phase_hook("b", Phase::StepEnd, AddHit)?;
            r.register_phase_hook("c", Phase::StepEnd, IncrementTotal)
        }),
    )]);
    let mut store = store_for(&env);
    let report = PhaseRuntime::new()
        .run_phase(&env, &mut store, ctx(Phase::StepEnd))
        .await
        .unwrap();
    assert_eq!((report.commits, report.deferred_hooks), (2, 1));
    assert_eq!(store.read::<Total>(), Some(2));
    assert_eq!(store.read::<Hits>(), Some(1));
}

#[tokio::test]
async fn commutative_writes_concatenate() {
    let env = env_of(vec![(
        "p",
        plugin(|r| {
            for name in ["a", "b", "c", "d"] {
                r.register_phase_hook(name, Phase::StepEnd, AddHit)?;
            }
            Ok(())
        }),
    )]);
    let mut store = store_for(&env);
    let report = PhaseRuntime::new()
        .run_phase(&env, &mut store, ctx(Phase::StepEnd))
        .await
        .unwrap();
    assert_eq!((report.commits, report.deferred_hooks), (1, 0));
    assert_eq!(store.read::<Hits>(), Some(4));
}

#[tokio::test]
async fn hooks_see_one_frozen_snapshot() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (s1, s2) = (seen.clone(), seen.clone());
    let env = env_of(vec![(
        "p",
        plugin(move |r| {
            let (s1, s2) = (s1.clone(), s2.clone());
            r.register_phase_hook(
                "first",
                Phase::StepStart,
                FnHook(move |ctx: &PhaseContext| {
                    s1.lock().unwrap().push(ctx.snapshot.revision());
                    let mut cmd = StateCommand::new();
                    cmd.update::<Hits>(1);
                    Ok(cmd)
                }),
            )?;
            r.register_phase_hook(
                "second",
                Phase::StepStart,
                FnHook(move |ctx: &PhaseContext| {
                    s2.lock().unwrap().push(ctx.snapshot.revision());
                    Ok(StateCommand::new())
                }),
            )
        }),
    )]);
    let mut store = store_for(&env);
    let before = store.revision();
    PhaseRuntime::new()
        .run_phase(&env, &mut store, ctx(Phase::StepStart))
        .await
        .unwrap();
    assert_eq!(*seen.lock().unwrap(), vec![before, before]);
}

#[tokio::test]
async fn a_failing_hook_fails_the_phase_and_commits_nothing() {
    let env = env_of(vec![(
        "p",
        plugin(|r| {
            r.register_phase_hook("ok", Phase::StepStart, AddHit)?;
            r.register_phase_hook(
                "bad",
                Phase::StepStart,
                FnHook(|_: &PhaseContext| {
                    Err(StateError::HookFailed {
                        source_id: "p/bad".into(),
                        message: "boom".into(),
                    })
                }),
            )
        }),
    )]);
    let mut store = store_for(&env);
    let revision = store.revision();
    let err = PhaseRuntime::new()
        .run_phase(&env, &mut store, ctx(Phase::StepStart))
        .await
        .unwrap_err();
    assert!(matches!(err, StateError::HookFailed { .. }));
    assert_eq!(store.revision(), revision);
    assert_eq!(store.read::<Hits>(), Some(0));
}

// ---------------------------------------------------------------- EXECUTE

/// Counts down: payload n schedules n - 1 until 0, appending each n to the log.
struct Countdown;
impl ScheduledActionSpec for Countdown {
    const KEY: &'static str = "test.countdown";
    const PHASE: Phase = Phase::AfterToolExecute;
    type Payload = u32;
}

struct CountdownHandler;
#[async_trait]
impl TypedScheduledActionHandler<Countdown> for CountdownHandler {
    async fn handle_typed(&self, _ctx: &PhaseContext, n: u32) -> Result<StateCommand, StateError> {
        let mut cmd = StateCommand::new();
        cmd.update::<Log>(n.to_string());
        if n > 0 {
            cmd.schedule_action::<Countdown>(n - 1)?;
        }
        Ok(cmd)
    }
}

fn countdown_env(start: u32) -> ExecutionEnv {
    env_of(vec![(
        "p",
        plugin(move |r| {
            r.register_scheduled_action::<Countdown, _>(CountdownHandler)?;
            r.register_phase_hook(
                "start",
                Phase::AfterToolExecute,
                FnHook(move |_: &PhaseContext| {
                    let mut cmd = StateCommand::new();
                    cmd.schedule_action::<Countdown>(start)?;
                    Ok(cmd)
                }),
            )
        }),
    )])
}

#[tokio::test]
async fn actions_converge_within_sixteen_rounds() {
    let env = countdown_env(15);
    let mut store = store_for(&env);
    let report = PhaseRuntime::new()
        .run_phase(&env, &mut store, ctx(Phase::AfterToolExecute))
        .await
        .unwrap();
    assert_eq!(report.rounds, 16);
    assert_eq!(report.actions_run, 16);
    assert_eq!(store.read::<Log>().unwrap().len(), 16);
}

#[tokio::test]
async fn actions_that_do_not_converge_fail_the_phase() {
    let env = countdown_env(16);
    let mut store = store_for(&env);
    let err = PhaseRuntime::new()
        .run_phase(&env, &mut store, ctx(Phase::AfterToolExecute))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        StateError::PhaseRunLoopExceeded {
            phase: Phase::AfterToolExecute,
            max_rounds: 16
        }
    );
}

#[tokio::test]
async fn actions_for_other_phases_stay_pending() {
    let env = countdown_env(3);
    let mut store = store_for(&env);
    let report = PhaseRuntime::new()
        .run_phase(&env, &mut store, ctx(Phase::StepEnd))
        .await
        .unwrap();
    assert_eq!(report.actions_run, 0);
    assert!(
        store
            .read::<PendingScheduledActions>()
            .unwrap()
            .actions
            .is_empty()
    );

    // Scheduled from a StepStart hook for AfterToolExecute: still pending after StepStart.
    let env = env_of(vec![(
        "p",
        plugin(|r| {
            r.register_scheduled_action::<Countdown, _>(CountdownHandler)?;
            r.register_phase_hook(
                "early",
                Phase::StepStart,
                FnHook(|_: &PhaseContext| {
                    let mut cmd = StateCommand::new();
                    cmd.schedule_action::<Countdown>(0)?;
                    Ok(cmd)
                }),
            )
        }),
    )]);
    let mut store = store_for(&env);
    let rt = PhaseRuntime::new();
    rt.run_phase(&env, &mut store, ctx(Phase::StepStart))
        .await
        .unwrap();
    assert!(
        store
            .read::<PendingScheduledActions>()
            .unwrap()
            .has_due(Phase::AfterToolExecute)
    );
    let report = rt
        .run_phase(&env, &mut store, ctx(Phase::AfterToolExecute))
        .await
        .unwrap();
    assert_eq!(report.actions_run, 1);
    assert_eq!(store.read::<Log>().unwrap(), ["0"]);
}

struct Explode;
impl ScheduledActionSpec for Explode {
    const KEY: &'static str = "test.explode";
    const PHASE: Phase = Phase::StepEnd;
    type Payload = String;
}

struct ExplodeHandler(Arc<Mutex<u32>>);
#[async_trait]
impl TypedScheduledActionHandler<Explode> for ExplodeHandler {
    async fn handle_typed(
        &self,
        _ctx: &PhaseContext,
        why: String,
    ) -> Result<StateCommand, StateError> {
        *self.0.lock().unwrap() += 1;
        Err(StateError::HookFailed {
            source_id: Explode::KEY.into(),
            message: why,
        })
    }
}

#[tokio::test]
async fn failed_actions_are_recorded_not_retried() {
    let calls = Arc::new(Mutex::new(0));
    let calls_in = calls.clone();
    let env = env_of(vec![(
        "p",
        plugin(move |r| {
            r.register_scheduled_action::<Explode, _>(ExplodeHandler(calls_in.clone()))?;
            r.register_phase_hook(
                "go",
                Phase::StepEnd,
                FnHook(|_: &PhaseContext| {
                    let mut cmd = StateCommand::new();
                    cmd.schedule_action::<Explode>("kaboom".into())?;
                    cmd.update::<Hits>(1);
                    Ok(cmd)
                }),
            )
        }),
    )]);
    let mut store = store_for(&env);
    let report = PhaseRuntime::new()
        .run_phase(&env, &mut store, ctx(Phase::StepEnd))
        .await
        .unwrap();
    assert_eq!(report.failed_actions, 1);
    assert_eq!(*calls.lock().unwrap(), 1);
    let failed = store.read::<FailedScheduledActions>().unwrap();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].key, "test.explode");
    assert!(failed[0].error.contains("kaboom"));
    assert_eq!(
        store.read::<Hits>(),
        Some(1),
        "the hook's own update stands"
    );
}

// ---------------------------------------------------------------- effects

struct Audit;
impl EffectSpec for Audit {
    const KEY: &'static str = "test.audit";
    type Payload = String;
}

struct Undeclared;
impl EffectSpec for Undeclared {
    const KEY: &'static str = "test.undeclared";
    type Payload = ();
}

/// Records (payload, Hits seen in the post-commit snapshot); fails on "fail".
struct AuditHandler(Arc<Mutex<Vec<(String, i64)>>>);
#[async_trait]
impl TypedEffectHandler<Audit> for AuditHandler {
    async fn handle_typed(&self, payload: String, snapshot: &Snapshot) -> Result<(), String> {
        let hits = snapshot.get::<Hits>().copied().unwrap_or_default();
        self.0.lock().unwrap().push((payload.clone(), hits));
        if payload == "fail" {
            Err("audit sink down".into())
        } else {
            Ok(())
        }
    }
}

fn effect_env(seen: Arc<Mutex<Vec<(String, i64)>>>, emit: &'static [&'static str]) -> ExecutionEnv {
    env_of(vec![(
        "p",
        plugin(move |r| {
            r.register_effect::<Audit, _>(AuditHandler(seen.clone()))?;
            r.register_phase_hook(
                "emit",
                Phase::RunEnd,
                FnHook(move |_: &PhaseContext| {
                    let mut cmd = StateCommand::new();
                    cmd.update::<Hits>(5);
                    for payload in emit {
                        cmd.emit::<Audit>((*payload).to_owned())?;
                    }
                    Ok(cmd)
                }),
            )
        }),
    )])
}

#[tokio::test]
async fn effects_dispatch_after_commit_and_failures_do_not_roll_back() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let env = effect_env(seen.clone(), &["first", "fail", "last"]);
    let mut store = store_for(&env);
    let report = PhaseRuntime::new()
        .run_phase(&env, &mut store, ctx(Phase::RunEnd))
        .await
        .unwrap();
    assert_eq!(report.effects.len(), 3);
    assert!(
        seen.lock().unwrap().is_empty(),
        "not dispatched before the caller asks"
    );
    let dispatch = report.effects.dispatch(&env).await;
    assert_eq!(dispatch.dispatched, 2);
    assert_eq!(
        dispatch.failures,
        vec![("test.audit".to_owned(), "audit sink down".to_owned())]
    );
    assert_eq!(
        *seen.lock().unwrap(),
        vec![("first".into(), 5), ("fail".into(), 5), ("last".into(), 5)],
        "every handler saw the post-commit state, in order"
    );
    assert_eq!(store.read::<Hits>(), Some(5));
}

#[tokio::test]
async fn unknown_effects_are_refused_before_commit() {
    let env = env_of(vec![(
        "p",
        plugin(|r| {
            r.register_phase_hook(
                "emit",
                Phase::RunEnd,
                FnHook(|_: &PhaseContext| {
                    let mut cmd = StateCommand::new();
                    cmd.update::<Hits>(1);
                    cmd.emit::<Undeclared>(())?;
                    Ok(cmd)
                }),
            )
        }),
    )]);
    let mut store = store_for(&env);
    let revision = store.revision();
    let err = PhaseRuntime::new()
        .run_phase(&env, &mut store, ctx(Phase::RunEnd))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        StateError::UnknownEffectHandler {
            key: "test.undeclared".into()
        }
    );
    assert_eq!(store.revision(), revision);
    assert_eq!(store.read::<Hits>(), Some(0));
}

// ---------------------------------------------------------------- activation

#[tokio::test]
async fn hook_filter_gates_behaviour_but_not_structure() {
    let make = |tag: &'static str| {
        plugin(move |r| r.register_phase_hook("log", Phase::StepStart, Append(tag)))
    };
    // Only "on" is active; "off" still contributes its action handler.
    let env = env_filtered(
        vec![
            (
                "off",
                plugin(|r| r.register_scheduled_action::<Countdown, _>(CountdownHandler)),
            ),
            ("on", make("on")),
            (
                "hidden",
                plugin(|r| r.register_phase_hook("log", Phase::StepStart, Append("hidden"))),
            ),
        ],
        &["on"],
    );
    let mut store = store_for(&env);
    PhaseRuntime::new()
        .run_phase(&env, &mut store, ctx(Phase::StepStart))
        .await
        .unwrap();
    assert_eq!(store.read::<Log>().unwrap(), ["on"]);
    assert!(env.action_handler(Countdown::KEY).is_some());
    assert_eq!(
        env.action_handler(Countdown::KEY)
            .unwrap()
            .plugin_id
            .as_ref(),
        "off"
    );

    // An empty filter activates everyone.
    let env = env_filtered(
        vec![
            ("a", make("a")),
            (
                "b",
                plugin(|r| r.register_phase_hook("log", Phase::StepStart, Append("b"))),
            ),
        ],
        &[],
    );
    let mut store = store_for(&env);
    PhaseRuntime::new()
        .run_phase(&env, &mut store, ctx(Phase::StepStart))
        .await
        .unwrap();
    assert_eq!(store.read::<Log>().unwrap().len(), 2);
}

#[test]
fn duplicates_across_plugins_are_errors() {
    let with_total = || plugin(|r| r.register_key::<Total>(StateKeyOptions::default()));
    let entries = vec![
        PluginEntry::new("a", with_total()),
        PluginEntry::new("b", with_total()),
    ];
    assert_eq!(
        ExecutionEnv::from_plugins(entries, &BTreeSet::new()).unwrap_err(),
        StateError::KeyAlreadyRegistered {
            key: "test.total".into()
        }
    );
    let with_handler = || plugin(|r| r.register_scheduled_action::<Countdown, _>(CountdownHandler));
    let entries = vec![
        PluginEntry::new("a", with_handler()),
        PluginEntry::new("b", with_handler()),
    ];
    assert_eq!(
        ExecutionEnv::from_plugins(entries, &BTreeSet::new()).unwrap_err(),
        StateError::HandlerAlreadyRegistered {
            key: "test.countdown".into()
        }
    );
    let entries = vec![
        PluginEntry::new("a", plugin(|_| Ok(()))),
        PluginEntry::new("a", plugin(|_| Ok(()))),
    ];
    assert_eq!(
        ExecutionEnv::from_plugins(entries, &BTreeSet::new()).unwrap_err(),
        StateError::PluginAlreadyInstalled { name: "a".into() }
    );
}

#[test]
fn duplicates_within_a_plugin_are_errors() {
    let mut r = PluginRegistrar::new("p");
    r.register_phase_hook("h", Phase::RunStart, AddHit).unwrap();
    assert!(matches!(
        r.register_phase_hook("h", Phase::RunStart, AddHit),
        Err(StateError::HookAlreadyRegistered { .. })
    ));
    r.register_phase_hook("h", Phase::RunEnd, AddHit).unwrap();
    r.register_effect::<Audit, _>(AuditHandler(Arc::default()))
        .unwrap();
    assert_eq!(
        r.register_effect::<Audit, _>(AuditHandler(Arc::default())),
        Err(StateError::EffectHandlerAlreadyRegistered {
            key: "test.audit".into()
        })
    );
}

/// Appends its tag to the system prompt so order is observable.
struct Tag(&'static str);
impl InferenceRequestTransform for Tag {
    fn transform(&self, request: &mut InferenceRequest, _snapshot: &Snapshot) {
        request.messages.push(Message::system(self.0));
    }
}

#[test]
fn request_transforms_run_in_registration_order_for_active_plugins() {
    let env = env_filtered(
        vec![
            (
                "one",
                plugin(|r| {
                    r.register_request_transform("a", Tag("one-a"))?;
                    r.register_request_transform("b", Tag("one-b"))
                }),
            ),
            (
                "two",
                plugin(|r| r.register_request_transform("a", Tag("two"))),
            ),
            (
                "three",
                plugin(|r| r.register_request_transform("a", Tag("three"))),
            ),
        ],
        &["one", "three"],
    );
    let mut request = InferenceRequest::new("m", vec![]);
    env.apply_request_transforms(&mut request, &Snapshot::default());
    let texts: Vec<String> = request.messages.iter().map(Message::text).collect();
    assert_eq!(texts, ["one-a", "one-b", "three"]);
}

// ---------------------------------------------------------------- core actions

#[tokio::test]
async fn core_inference_actions_land_in_state() {
    let env = env_of(vec![(
        "p",
        plugin(|r| {
            r.register_phase_hook(
                "cost",
                Phase::BeforeInference,
                FnHook(|_: &PhaseContext| {
                    let mut cmd = StateCommand::new();
                    cmd.schedule_action::<SetInferenceOverride>(InferenceOverride {
                        max_tokens: Some(100),
                        temperature: Some(0.9),
                        ..Default::default()
                    })?;
                    cmd.schedule_action::<ExcludeTool>("rm".into())?;
                    cmd.schedule_action::<AddContextMessage>(ContextMessage::system(
                        "hint", "be brief",
                    ))?;
                    Ok(cmd)
                }),
            )?;
            r.register_phase_hook(
                "quality",
                Phase::BeforeInference,
                FnHook(|_: &PhaseContext| {
                    let mut cmd = StateCommand::new();
                    cmd.schedule_action::<SetInferenceOverride>(InferenceOverride {
                        temperature: Some(0.0),
                        ..Default::default()
                    })?;
                    cmd.schedule_action::<IncludeOnlyTools>(vec!["rm".into(), "ls".into()])?;
                    Ok(cmd)
                }),
            )
        }),
    )]);
    let mut store = store_for(&env);
    let report = PhaseRuntime::new()
        .run_phase(&env, &mut store, ctx(Phase::BeforeInference))
        .await
        .unwrap();
    assert_eq!(report.actions_run, 5);
    let over = store.read::<InferenceOverrideKey>().unwrap();
    assert_eq!(over.max_tokens, Some(100));
    assert_eq!(over.temperature, Some(0.0), "last writer wins per field");
    let filter = store.read::<ToolFilterKey>().unwrap();
    assert!(filter.allows("ls"));
    assert!(!filter.allows("rm"));
    assert!(!filter.allows("cat"));
    let context = store.read::<ContextMessagesKey>().unwrap();
    assert_eq!(context.for_step(1)[0].content, "be brief");
}

#[tokio::test]
async fn intercepts_resolve_by_priority_per_call() {
    let env = env_of(vec![(
        "p",
        plugin(|r| {
            r.register_phase_hook(
                "set",
                Phase::BeforeToolExecute,
                FnHook(|_: &PhaseContext| {
                    let mut cmd = StateCommand::new();
                    cmd.schedule_action::<ToolInterceptAction>(ToolInterceptPayload::SetResult(
                        ToolResult::success("rm", serde_json::json!("cached")),
                    ))?;
                    Ok(cmd)
                }),
            )?;
            r.register_phase_hook(
                "block",
                Phase::BeforeToolExecute,
                FnHook(|_: &PhaseContext| {
                    let mut cmd = StateCommand::new();
                    cmd.schedule_action::<ToolInterceptAction>(ToolInterceptPayload::Block {
                        reason: "rm is disabled".into(),
                    })?;
                    Ok(cmd)
                }),
            )
        }),
    )]);
    let mut store = store_for(&env);
    let call = ToolCallView {
        call_id: ToolCallId::new("call-1").unwrap(),
        tool_name: "rm".into(),
        arguments: serde_json::json!({"path": "/"}),
        result: None,
        decision: None,
    };
    PhaseRuntime::new()
        .run_phase(
            &env,
            &mut store,
            ctx(Phase::BeforeToolExecute).with_tool_call(call),
        )
        .await
        .unwrap();
    let intercepts = store.read::<ToolInterceptKey>().unwrap();
    assert_eq!(
        intercepts.get(&ToolCallId::new("call-1").unwrap()),
        Some(&ToolInterceptPayload::Block {
            reason: "rm is disabled".into()
        })
    );
}
