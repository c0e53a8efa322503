//! The phase engine: GATHER (hooks) then EXECUTE (scheduled actions) for one phase.

use futures::future::join_all;

use super::{Phase, PhaseContext};
use crate::error::StateError;
use crate::plugin::ExecutionEnv;
use crate::state::{
    FailedScheduledAction, FailedScheduledActions, PendingAction, PendingActionsUpdate,
    PendingScheduledActions, Snapshot, StateCommand, StateStore, TypedEffect,
};

/// How many EXECUTE rounds a phase may take before it is declared divergent.
pub const DEFAULT_MAX_PHASE_ROUNDS: usize = 16;

/// Effects produced by a phase, each with the snapshot right after its commit.
///
/// The engine returns them instead of dispatching them, so the caller decides where
/// external I/O happens (a thread actor hands them to a task; tests await them).
#[derive(Debug, Default)]
pub struct EffectBatch {
    items: Vec<(TypedEffect, Snapshot)>,
}

impl EffectBatch {
    /// The effects of one commit, with its post-commit snapshot.
    pub fn from_commit(effects: Vec<TypedEffect>, snapshot: &Snapshot) -> Self {
        let mut batch = Self::default();
        batch.push_all(effects, snapshot);
        batch
    }

    fn push_all(&mut self, effects: Vec<TypedEffect>, snapshot: &Snapshot) {
        self.items
            .extend(effects.into_iter().map(|e| (e, snapshot.clone())));
    }

    /// Number of effects.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Appends another batch, keeping order.
    pub fn append(&mut self, other: EffectBatch) {
        self.items.extend(other.items);
    }

    /// Dispatches every effect in order. Failures are logged and counted; they never
    /// stop the remaining effects and never roll state back.
    pub async fn dispatch(self, env: &ExecutionEnv) -> EffectDispatchReport {
        let mut report = EffectDispatchReport::default();
        for (effect, snapshot) in self.items {
            let outcome = match env.effect_handler(&effect.key) {
                Some(registration) => registration.handler.handle(effect.payload, &snapshot).await,
                None => Err("no handler registered".to_owned()),
            };
            match outcome {
                Ok(()) => report.dispatched += 1,
                Err(error) => {
                    tracing::warn!(effect = %effect.key, %error, "effect handler failed");
                    report.failures.push((effect.key, error));
                }
            }
        }
        report
    }
}

/// What dispatching an [`EffectBatch`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct EffectDispatchReport {
    /// Effects whose handler succeeded.
    pub dispatched: usize,
    /// `(effect key, error)` for each handler that failed.
    pub failures: Vec<(String, String)>,
}

/// What running one phase did.
#[derive(Debug, Default)]
pub struct PhaseReport {
    /// Hooks run in the parallel GATHER pass.
    pub hooks_run: usize,
    /// Hooks re-run serially because their writes conflicted.
    pub deferred_hooks: usize,
    /// State commits made.
    pub commits: usize,
    /// EXECUTE rounds that had actions to run.
    pub rounds: usize,
    /// Scheduled actions executed.
    pub actions_run: usize,
    /// Scheduled actions whose handler failed (recorded in `FailedScheduledActions`).
    pub failed_actions: usize,
    /// Effects to dispatch.
    pub effects: EffectBatch,
}

/// Runs phases: hooks concurrently on one frozen snapshot, conflicts resolved by
/// serial re-execution, then scheduled actions until they converge.
#[derive(Debug, Clone)]
pub struct PhaseRuntime {
    max_rounds: usize,
}

impl Default for PhaseRuntime {
    fn default() -> Self {
        Self::new()
    }
}

impl PhaseRuntime {
    /// An engine with [`DEFAULT_MAX_PHASE_ROUNDS`].
    pub fn new() -> Self {
        Self {
            max_rounds: DEFAULT_MAX_PHASE_ROUNDS,
        }
    }

    /// An engine with another round bound.
    pub fn with_max_rounds(max_rounds: usize) -> Self {
        Self { max_rounds }
    }

    /// Runs `ctx.phase`: GATHER then EXECUTE. A failing hook fails the phase before
    /// anything of the GATHER pass is committed.
    pub async fn run_phase(
        &self,
        env: &ExecutionEnv,
        store: &mut StateStore,
        mut ctx: PhaseContext,
    ) -> Result<PhaseReport, StateError> {
        let mut report = PhaseReport::default();
        self.gather(env, store, &mut ctx, &mut report).await?;
        self.execute(env, store, &mut ctx, &mut report).await?;
        Ok(report)
    }

    async fn gather(
        &self,
        env: &ExecutionEnv,
        store: &mut StateStore,
        ctx: &mut PhaseContext,
        report: &mut PhaseReport,
    ) -> Result<(), StateError> {
        let hooks = env.hooks_for_phase(ctx.phase);
        if hooks.is_empty() {
            return Ok(());
        }
        ctx.snapshot = store.snapshot();
        let base = ctx.snapshot.revision();
        let results = join_all(hooks.iter().map(|tagged| tagged.hook.run(ctx))).await;
        report.hooks_run = hooks.len();

        let mut merged = StateCommand::new();
        let mut deferred = Vec::new();
        for (index, result) in results.into_iter().enumerate() {
            let command = result?;
            if merged.batch().conflicts_with(command.batch()).is_some() {
                deferred.push(index);
            } else {
                merged.extend(command)?;
            }
        }
        // Release the frozen snapshot so the commit need not copy the map.
        ctx.snapshot = Snapshot::default();
        self.commit(store, merged, base, report)?;

        for index in deferred {
            ctx.snapshot = store.snapshot();
            let base = ctx.snapshot.revision();
            let command = hooks[index].hook.run(ctx).await?;
            ctx.snapshot = Snapshot::default();
            self.commit(store, command, base, report)?;
            report.deferred_hooks += 1;
        }
        Ok(())
    }

    async fn execute(
        &self,
        env: &ExecutionEnv,
        store: &mut StateStore,
        ctx: &mut PhaseContext,
        report: &mut PhaseReport,
    ) -> Result<(), StateError> {
        let phase = ctx.phase;
        for _ in 0..self.max_rounds {
            let due = due_actions(store, phase);
            if due.is_empty() {
                return Ok(());
            }
            report.rounds += 1;
            let mut dequeue = StateCommand::new();
            dequeue.update::<PendingScheduledActions>(PendingActionsUpdate::Remove(
                due.iter().map(|p| p.id).collect(),
            ));
            store.commit(dequeue)?;

            for pending in due {
                report.actions_run += 1;
                ctx.snapshot = store.snapshot();
                let base = ctx.snapshot.revision();
                let outcome = match env.action_handler(&pending.action.key) {
                    Some(registration) => {
                        registration
                            .handler
                            .handle(ctx, pending.action.payload.clone())
                            .await
                    }
                    None => Err(StateError::UnknownScheduledActionHandler {
                        key: pending.action.key.clone(),
                    }),
                };
                ctx.snapshot = Snapshot::default();
                let committed =
                    outcome.and_then(|command| self.commit(store, command, base, report));
                if let Err(error) = committed {
                    tracing::warn!(action = %pending.action.key, ?phase, %error, "scheduled action failed");
                    report.failed_actions += 1;
                    let mut record = StateCommand::new();
                    record.update::<FailedScheduledActions>(FailedScheduledAction {
                        key: pending.action.key,
                        phase,
                        payload: pending.action.payload,
                        error: error.to_string(),
                    });
                    store.commit(record)?;
                }
            }
        }
        if due_actions(store, phase).is_empty() {
            Ok(())
        } else {
            Err(StateError::PhaseRunLoopExceeded {
                phase,
                max_rounds: self.max_rounds,
            })
        }
    }

    fn commit(
        &self,
        store: &mut StateStore,
        mut command: StateCommand,
        base: u64,
        report: &mut PhaseReport,
    ) -> Result<(), StateError> {
        if command.is_empty() {
            return Ok(());
        }
        command.batch_mut().set_base_revision(base);
        let outcome = store.commit(command)?;
        report.commits += 1;
        if !outcome.effects.is_empty() {
            report.effects.push_all(outcome.effects, &store.snapshot());
        }
        Ok(())
    }
}

fn due_actions(store: &StateStore, phase: Phase) -> Vec<PendingAction> {
    store
        .get::<PendingScheduledActions>()
        .map(|pending| pending.due(phase).cloned().collect())
        .unwrap_or_default()
}
