//! Plumbing of every segment: the run's state keys, events, meters and phase passes.

use std::sync::Arc;

use crate::contract::{AgentEvent, ToolCallState};
use crate::phase::{EffectBatch, Phase, PhaseContext, ToolCallView};
use crate::state::{PendingScheduledActions, StateCommand};
use crate::telemetry;
use crate::thread::keys::{
    RunLifecycle, RunLifecycleKey, ToolCallStates, ToolCalls, ToolCallsUpdate,
};

use super::{Driver, Failure, Step};

impl Driver<'_> {
    /// The step's call states, borrowed: cloning them copies every call's
    /// arguments and result.
    pub(super) fn calls(&self) -> &ToolCalls {
        static NO_CALLS: ToolCalls = ToolCalls { calls: Vec::new() };
        self.thread
            .store
            .get::<ToolCallStates>()
            .unwrap_or(&NO_CALLS)
    }

    pub(super) fn put_call(&mut self, state: ToolCallState) -> Step<()> {
        let mut command = StateCommand::new();
        command.update::<ToolCallStates>(ToolCallsUpdate::Put(Box::new(state)));
        self.thread.store.commit(command)?;
        Ok(())
    }

    pub(super) fn lifecycle(&self) -> RunLifecycle {
        self.thread
            .store
            .get::<RunLifecycleKey>()
            .cloned()
            .unwrap_or_default()
    }

    pub(super) fn set_lifecycle(&mut self, lifecycle: RunLifecycle) -> Step<()> {
        let mut command = StateCommand::new();
        command.update::<RunLifecycleKey>(lifecycle);
        self.thread.store.commit(command)?;
        Ok(())
    }

    pub(super) fn emit(&self, event: AgentEvent) {
        self.run.events.emit(event);
    }

    /// The meters of the agent (and model) this run runs on now.
    pub(super) fn meters(&self) -> std::sync::Arc<telemetry::AgentMeters> {
        let agent = &self.run.agent;
        self.deps.metrics.agent(
            agent.spec.id.as_str(),
            &agent.model.provider,
            &agent.model.model,
        )
    }

    /// Whether `phase` has anything to run: hooks, or scheduled actions due in it.
    /// Callers skip building what only the phase would read.
    pub(super) fn runs_phase(&self, phase: Phase) -> bool {
        !self.run.agent.env.hooks_for_phase(phase).is_empty()
            || self
                .thread
                .store
                .get::<PendingScheduledActions>()
                .is_some_and(|p| p.has_due(phase))
    }

    pub(super) async fn phase(
        &mut self,
        phase: Phase,
        tool_call: Option<ToolCallView>,
    ) -> Step<()> {
        if !self.runs_phase(phase) {
            return Ok(());
        }
        let env = Arc::clone(&self.run.agent.env);
        let mut ctx = PhaseContext::new(
            phase,
            Arc::clone(&self.run.agent.spec),
            Arc::clone(&self.run.identity),
            self.thread.messages_view(),
            self.run.cancellation.clone(),
        )
        .with_step(self.lifecycle().step);
        if let Some(call) = tool_call {
            ctx = ctx.with_tool_call(call);
        }
        if let Some(response) = &self.run.last_response {
            ctx = ctx.with_inference(Arc::clone(response));
        }
        if let Some(profile) = &self.deps.profile {
            ctx = ctx.with_profile(profile.clone());
        }
        let report = self
            .deps
            .phases
            .run_phase(&env, &mut self.thread.store, ctx)
            .await?;
        if !report.effects.is_empty() {
            tokio::spawn(async move {
                report.effects.dispatch(&env).await;
            });
        }
        Ok(())
    }

    pub(super) fn dispatch_effects(&self, effects: Vec<crate::state::TypedEffect>) {
        if effects.is_empty() {
            return;
        }
        let env = Arc::clone(&self.run.agent.env);
        let batch = EffectBatch::from_commit(effects, &self.thread.store.snapshot());
        tokio::spawn(async move {
            batch.dispatch(&env).await;
        });
    }
}

pub(super) fn state_failure(error: impl std::fmt::Display) -> Failure {
    Failure::State(error.to_string())
}

pub(super) fn error_text(failure: &Failure) -> String {
    match failure {
        Failure::State(message) => message.clone(),
        Failure::Fenced => "fenced".to_owned(),
    }
}
