//! The run's lifecycle: step ends, the run's end, handoff between agents, checkpoints.

use std::time::Duration;

use serde_json::json;

use crate::contract::{AgentEvent, Message, StoppedReason, TerminationReason};
use crate::error::StorageError;
use crate::handoff::{ActiveAgentKey, HandoffAction};
use crate::phase::Phase;
use crate::policies::StopRequest;
use crate::state::StateCommand;
use crate::store::Checkpoint;

use super::outage::StoreOutage;
use super::phases::{error_text, state_failure};
use super::{Driver, Next, Step, now_secs};

impl Driver<'_> {
    /// StepEnd: phase, checkpoint, then the next step or the end of the run.
    pub(super) async fn end_step(&mut self, natural_end: bool) -> Step<Next> {
        self.phase(Phase::StepEnd, None).await?;
        self.apply_handoff()?;
        self.emit(AgentEvent::StepEnd);
        let ending = if self.run.cancellation.is_cancelled() {
            Some(TerminationReason::Cancelled)
        } else if let Some(Some(stop)) = self.thread.store.get::<StopRequest>() {
            let stop: StoppedReason = stop.clone();
            Some(TerminationReason::Stopped(stop))
        } else {
            natural_end.then_some(TerminationReason::NaturalEnd)
        };
        match ending {
            // The run's end checkpoint, right after, persists this step with it:
            // one write instead of two.
            Some(reason) => self.finish(reason).await,
            None => {
                self.checkpoint().await?;
                self.next_step().await
            }
        }
    }

    /// RunEnd: phase, record, checkpoint, RunFinish.
    pub(super) async fn finish(&mut self, reason: TerminationReason) -> Step<Next> {
        if let Err(error) = self.phase(Phase::RunEnd, None).await {
            tracing::warn!(run_id = %self.run.identity.run_id, error = %error_text(&error), "RunEnd phase failed");
        }
        if let Err(error) = self.run.record.finish(reason.clone(), now_secs()) {
            tracing::warn!(run_id = %self.run.identity.run_id, %error, "run already finished");
        }
        self.cancel_open_approvals(&reason);
        self.checkpoint_before(1).await?;
        let lived = Duration::from_secs(now_secs().saturating_sub(self.run.record.created_at));
        self.deps.metrics.run_finished(
            self.run.agent.spec.id.as_str(),
            &self.meters(),
            reason.code(),
            lived,
        );
        let response = self
            .thread
            .messages
            .iter()
            .rev()
            .find(|m| m.role == crate::contract::Role::Assistant)
            .map(Message::text)
            .unwrap_or_default();
        self.emit(AgentEvent::RunFinish {
            thread_id: self.thread.thread_id.clone(),
            run_id: self.run.identity.run_id.clone(),
            result: Some(json!({ "response": response })),
            termination: reason.clone(),
        });
        Ok(Next::Finished)
    }

    /// Runs the run on the variant the thread's [`ActiveAgentKey`] names: refuses a
    /// request or an active variant the agent does not have (an error event, and the
    /// thread stays on what it ran), and re-resolves the agent when the variant
    /// changed. Called where the book's switch happens (RunStart, StepEnd) and where
    /// a passivated run is taken up again.
    pub(super) fn apply_handoff(&mut self) -> Step<()> {
        let Some(state) = self.thread.store.get::<ActiveAgentKey>().cloned() else {
            return Ok(());
        };
        let variants = self.run.agent.env.agent_variants();
        let mut refusal = None;
        if let Some(requested) = &state.requested_agent
            && !variants.contains_key(requested)
        {
            refusal = Some((requested.clone(), HandoffAction::Withdraw));
        }
        if let Some(active) = &state.active_agent
            && !variants.contains_key(active)
        {
            refusal = Some((active.clone(), HandoffAction::Clear));
        }
        if let Some((variant, action)) = refusal {
            self.emit(AgentEvent::Error {
                message: format!(
                    "handoff refused: agent `{}` has no variant `{variant}`",
                    self.run.identity.agent_id
                ),
                code: Some("handoff_unknown_variant".to_owned()),
            });
            let mut command = StateCommand::new();
            command.update::<ActiveAgentKey>(action);
            self.thread.store.commit(command)?;
        }
        let active = self
            .thread
            .store
            .get::<ActiveAgentKey>()
            .and_then(|state| state.active_agent.clone());
        if active == self.run.variant {
            return Ok(());
        }
        let agent_id = self.run.identity.agent_id.as_str();
        let agent = match &active {
            Some(variant) => self.deps.resolver.resolve_variant(agent_id, variant),
            None => self.deps.resolver.resolve(agent_id),
        }
        .map_err(state_failure)?;
        tracing::debug!(run_id = %self.run.identity.run_id, from = ?self.run.variant, to = ?active, "handoff");
        self.thread.install(&agent)?;
        self.run.agent = agent;
        self.run.variant = active;
        Ok(())
    }

    /// Persists new messages, the run record and the state, atomically and fenced.
    pub(super) async fn checkpoint(&mut self) -> Step<()> {
        self.checkpoint_before(0).await
    }

    /// A checkpoint followed by `trailing_events` events that close the activation
    /// (`StepEnd`, `RunFinish`): their seqs are reserved, so the next activation,
    /// which starts from this checkpoint, numbers on after them.
    ///
    /// A store that is away (a restart, a failover) is waited for, up to
    /// `store_outage_timeout` (decision 0086): each try is built afresh, so the
    /// reserved seqs count the events that said the run waits.
    pub(super) async fn checkpoint_before(&mut self, trailing_events: u64) -> Step<()> {
        let mut outage: Option<StoreOutage> = None;
        loop {
            // While the store is away, one more seq is reserved: the event that
            // says the run goes on follows the checkpoint that lands.
            let reserved = trailing_events + u64::from(outage.is_some());
            let checkpoint = self.next_checkpoint(reserved)?;
            let expected = checkpoint.expected_message_count;
            let appended = checkpoint.new_messages.len() as u64;
            match self.deps.store.checkpoint(checkpoint).await {
                // The approval changes it made are the feed's (`FeedingStore`).
                Ok(_) => {
                    self.checkpoint_landed(appended);
                    if let Some(outage) = outage {
                        outage.recovered(self);
                    }
                    return Ok(());
                }
                // An earlier try the connection lost on its way did land: the
                // fence lets no other writer append, so the log is ours. Once
                // more without the messages, so the run's lifecycle counts the
                // events sent since.
                Err(StorageError::VersionConflict {
                    expected: conflicting,
                    actual,
                }) if outage.as_ref().is_some_and(StoreOutage::maybe_written)
                    && appended > 0
                    && conflicting == expected
                    && actual == expected + appended =>
                {
                    self.checkpoint_landed(appended);
                }
                Err(error) if error.is_transient() => {
                    let outage = outage.get_or_insert_with(|| StoreOutage::began(self, &error));
                    outage.wait(self, error).await?;
                }
                Err(error) => {
                    if let Some(outage) = outage {
                        outage.ended(self);
                    }
                    return Err(error.into());
                }
            }
        }
    }

    /// The checkpoint of what the run holds now, its lifecycle reserving the
    /// seqs of `trailing_events` after the events sent so far.
    fn next_checkpoint(&mut self, trailing_events: u64) -> Step<Checkpoint> {
        let mut lifecycle = self.lifecycle();
        lifecycle.next_event_seq = self.run.events.next_seq() + trailing_events;
        self.set_lifecycle(lifecycle)?;
        let state = self.thread.store.checkpoint_state();
        self.run.record.updated_at = now_secs();
        Ok(Checkpoint {
            thread_id: self.thread.thread_id.clone(),
            fencing: self.deps.fence.token(&self.thread.thread_id),
            expected_message_count: self.thread.persisted_messages,
            new_messages: self.thread.unpersisted_messages(),
            run: self.run.record.clone(),
            state,
            new_thread: self.thread.unwritten.clone(),
            approvals: self.run.approvals.clone(),
        })
    }

    /// Notes a checkpoint with `appended` messages as written.
    fn checkpoint_landed(&mut self, appended: u64) {
        self.thread.persisted_messages += appended;
        self.run.approvals.clear();
        if self.thread.unwritten.take().is_some() {
            self.run.events.release();
        }
    }
}
