//! Runs that can never start end as failed, visibly.
//!
//! A dispatch is dead-lettered before its run began when the node that claimed it
//! cannot start it (the agent is unknown there, its model's provider has no key,
//! the input is gone) or cannot reach the thread through every attempt. Without
//! more, whoever submitted the run would see it `queued` forever and its stream
//! would never end. [`AgentRuntime::end_unstarted`] gives such a run what every
//! ended run has: a record (`done`, termination `error` with the cause) and a
//! `run_start`/`run_finish` pair on the event hub, so followers end with the cause.
//!
//! The record is written only while the run has none: a run that did start keeps
//! its own (it continues from its checkpoint wherever its thread is loaded next).
//! The thread's message log is left alone; the run's input was never taken in.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::contract::{AgentEvent, RunIdentity, RunRecord, StreamEvent, TerminationReason};
use crate::error::StorageError;
use crate::ids::{AgentId, RunId, ThreadId};
use crate::store::{implicit_thread, now_millis, stamped_new_thread};
use crate::thread::{EventHub, RunRequest};

use super::AgentRuntime;

impl AgentRuntime {
    /// Ends run `run_id` of `thread_id`, accepted but never to start, as failed
    /// with `reason`; `request` is its input when still known. Returns whether it
    /// ended the run here (`false`: the run has a record already).
    pub async fn end_unstarted(
        &self,
        thread_id: &ThreadId,
        run_id: &RunId,
        request: Option<&RunRequest>,
        reason: &str,
    ) -> Result<bool, StorageError> {
        let store = self.store();
        if store.load_run(run_id).await?.is_some() {
            return Ok(false);
        }
        let termination = TerminationReason::Error(reason.to_owned());
        let parent_run_id = request.and_then(|r| r.parent_run_id.clone());
        // A record needs the run's agent: the one it asked for, else the one its
        // thread ran last or the runtime's default. A run that names none of them
        // still ends on its stream.
        if let Some(agent_id) = self.agent_of_unstarted(thread_id, request).await? {
            let mut identity = RunIdentity::new(
                thread_id.clone(),
                run_id.clone(),
                agent_id,
                request.map(|r| r.origin).unwrap_or_default(),
            );
            identity.parent_run_id = parent_run_id.clone();
            identity.parent_thread_id = request.and_then(|r| r.parent_thread_id.clone());
            identity.parent_tool_call_id = request.and_then(|r| r.parent_tool_call_id.clone());
            identity.trace = request.and_then(|r| r.trace);
            let now_secs = now_millis() / 1000;
            let mut record = RunRecord::new(&identity, now_secs);
            // Running → Done is always allowed.
            let _ = record.finish(termination.clone(), now_secs);
            if !self.create_failed_run(&record).await? {
                return Ok(false);
            }
        }
        let hub: &dyn EventHub = &*self.deps.hub;
        let events = [
            AgentEvent::RunStart {
                thread_id: thread_id.clone(),
                run_id: run_id.clone(),
                parent_run_id,
            },
            AgentEvent::RunFinish {
                thread_id: thread_id.clone(),
                run_id: run_id.clone(),
                result: None,
                termination,
            },
        ];
        let timestamp: Arc<str> = humantime::format_rfc3339_millis(std::time::SystemTime::now())
            .to_string()
            .into();
        for (seq, event) in (0..).zip(events) {
            let stamped = Arc::new(StreamEvent::new(seq, Arc::clone(&timestamp), event));
            hub.publish(thread_id, run_id, &stamped, None);
        }
        self.failed_starts.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(%thread_id, %run_id, %reason, "a run that could not start ended as failed");
        Ok(true)
    }

    /// Runs this node ended with [`AgentRuntime::end_unstarted`] since it started.
    pub fn failed_starts(&self) -> u64 {
        self.failed_starts.load(Ordering::Relaxed)
    }

    async fn agent_of_unstarted(
        &self,
        thread_id: &ThreadId,
        request: Option<&RunRequest>,
    ) -> Result<Option<AgentId>, StorageError> {
        if let Some(agent_id) = request.and_then(|r| r.agent_id.clone()) {
            return Ok(Some(agent_id));
        }
        if let Some(latest) = self.store().latest_run(thread_id).await? {
            return Ok(Some(latest.agent_id));
        }
        Ok(self.default_agent().cloned())
    }

    /// Writes `record` (creating its thread when it has none); `false` when the
    /// run got a record meanwhile.
    async fn create_failed_run(&self, record: &RunRecord) -> Result<bool, StorageError> {
        let store = self.store();
        match store.create_run(record).await {
            Ok(()) => return Ok(true),
            Err(StorageError::AlreadyExists(_)) => return Ok(false),
            Err(StorageError::NotFound(_)) => {}
            Err(other) => return Err(other),
        }
        // A thread adopted for this run and never written is written with it.
        let adopted = self
            .region
            .get()
            .and_then(|region| region.take_unwritten(&record.thread_id));
        let thread = match adopted {
            Some(thread) => stamped_new_thread(&thread, now_millis()),
            None => implicit_thread(&record.thread_id, now_millis()),
        };
        match store.create_thread(&thread).await {
            Ok(()) | Err(StorageError::AlreadyExists(_)) => {}
            Err(other) => return Err(other),
        }
        match store.create_run(record).await {
            Ok(()) => Ok(true),
            Err(StorageError::AlreadyExists(_)) => Ok(false),
            Err(other) => Err(other),
        }
    }
}
