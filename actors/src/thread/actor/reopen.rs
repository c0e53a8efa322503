//! Taking a thread up: loading its last checkpoint and reopening an unfinished run.

use std::collections::HashMap;
use std::sync::Arc;

use ractor::ActorProcessingErr;

use crate::contract::{RunIdentity, RunRecord, RunStatus};
use crate::ids::ThreadId;
use crate::thread::core::{LatestRun, RunCore, ThreadCore, WarmThread};
use crate::thread::deps::ThreadDeps;
use crate::thread::emitter::RunEmitter;
use crate::thread::keys::RunLifecycleKey;

use super::{Input, RunCtl, ThreadActorState};

/// Loads a thread's last checkpoint (a new, empty thread when the store has none).
pub(super) async fn rehydrate(
    deps: &ThreadDeps,
    thread_id: &ThreadId,
) -> Result<(Box<ThreadCore>, LatestRun), ActorProcessingErr> {
    let loaded = if deps.fence.fences_on_load() {
        let token = deps.fence.token(thread_id);
        deps.store.fence_and_load(thread_id, token).await?
    } else {
        deps.store.load_thread_snapshot(thread_id).await?
    };
    let Some(snapshot) = loaded else {
        let WarmThread { core, latest_run } = WarmThread::empty(thread_id);
        return Ok((core, latest_run));
    };
    let mut core = ThreadCore::new(snapshot.thread, snapshot.messages, snapshot.state);
    let latest = match snapshot.latest_run {
        None => LatestRun::None,
        Some(record) => {
            core.last_agent = Some(record.agent_id.clone());
            if record.status.is_terminal() {
                LatestRun::Finished(record.run_id)
            } else {
                LatestRun::Unfinished(Box::new(record))
            }
        }
    };
    Ok((Box::new(core), latest))
}

pub(super) fn identity_of(record: &RunRecord) -> RunIdentity {
    let mut identity = RunIdentity::new(
        record.thread_id.clone(),
        record.run_id.clone(),
        record.agent_id.clone(),
        record.origin,
    );
    identity.parent_run_id = record.parent_run_id.clone();
    identity.parent_thread_id = record.parent_thread_id.clone();
    identity.parent_tool_call_id = record.parent_tool_call_id.clone();
    identity.trace = record.trace;
    identity
}

impl ThreadActorState {
    /// Takes up an unfinished run again: a waiting one waits on, a running one
    /// continues from the checkpoint (or gives up after too many restarts).
    pub(super) fn reopen(
        &mut self,
        core: &mut ThreadCore,
        record: RunRecord,
        restarts: u32,
    ) -> Result<(), ActorProcessingErr> {
        self.last_run = Some(record.run_id.clone());
        let agent = match self.deps.resolver.resolve(record.agent_id.as_str()) {
            Ok(agent) => agent,
            Err(error) => {
                tracing::error!(thread_id = %self.thread_id, %error, "cannot resolve the agent of an unfinished run");
                return Ok(());
            }
        };
        core.install(&agent)?;
        let lifecycle = core
            .store
            .get::<RunLifecycleKey>()
            .cloned()
            .unwrap_or_default();
        let events = Arc::new(RunEmitter::new(
            self.thread_id.clone(),
            record.run_id.clone(),
            Arc::clone(&self.deps.hub),
            lifecycle.next_event_seq,
        ));
        let status = record.status;
        let identity = identity_of(&record);
        let mut run = RunCore::new(agent, identity, record, Arc::clone(&events), None);
        if let Some(message_id) = lifecycle.step_message_id {
            run.step_message_id = message_id;
        }
        self.ctl = Some(RunCtl {
            run_id: run.identity.run_id.clone(),
            status,
            step_inferring: false,
            events,
            cancellation: run.cancellation.clone(),
            tools: HashMap::new(),
        });
        self.run = Some(Box::new(run));
        if status == RunStatus::Running {
            // The node or the actor died mid-run: continue from the last
            // checkpoint, unless it keeps dying.
            if restarts > self.deps.config.max_restarts {
                self.queue.push_back(Input::GiveUp(format!(
                    "the thread actor restarted {restarts} times"
                )));
            } else {
                self.queue.push_back(Input::Restarted);
            }
        }
        Ok(())
    }
}
