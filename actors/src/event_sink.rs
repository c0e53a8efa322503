//! Event sinks: where a run's `AgentEvent`s go.

use std::sync::Mutex;

use async_trait::async_trait;

use crate::contract::AgentEvent;

/// Receives a run's events in order; protocol encoders and transports sit behind it.
#[async_trait]
pub trait EventSink: Send + Sync {
    /// Delivers one event. Sinks never fail the run: a sink that cannot deliver
    /// drops the event (and may log it).
    async fn emit(&self, event: AgentEvent);

    /// Delivers one event if that needs no waiting (`None`), else hands it back
    /// untouched, and [`emit`](Self::emit) gets it. Sinks that never wait
    /// implement it, so delivering an event costs no future.
    fn try_emit(&self, event: AgentEvent) -> Option<AgentEvent> {
        Some(event)
    }
}

/// Collects events in memory, for tests and one-shot programs.
#[derive(Debug, Default)]
pub struct VecEventSink {
    events: Mutex<Vec<AgentEvent>>,
}

impl VecEventSink {
    /// An empty sink.
    pub fn new() -> Self {
        Self::default()
    }

    fn events(&self) -> std::sync::MutexGuard<'_, Vec<AgentEvent>> {
        // Each critical section is a single push or take: a poisoned lock still
        // guards a consistent vector.
        self.events
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Removes and returns everything collected so far.
    pub fn take(&self) -> Vec<AgentEvent> {
        std::mem::take(&mut *self.events())
    }

    /// Number of events collected so far.
    pub fn len(&self) -> usize {
        self.events().len()
    }

    /// Whether nothing was collected yet.
    pub fn is_empty(&self) -> bool {
        self.events().is_empty()
    }
}

#[async_trait]
impl EventSink for VecEventSink {
    async fn emit(&self, event: AgentEvent) {
        self.events().push(event);
    }

    fn try_emit(&self, event: AgentEvent) -> Option<AgentEvent> {
        self.events().push(event);
        None
    }
}
