//! The mutable core of a thread and of its current run.
//!
//! The thread actor owns these and lends them, whole, to one segment task at a time
//! (the run loop's `Driver`, `thread/run/`), so all state changes of a thread are serialized without locks and
//! the actor itself never awaits the store or a hook.

use std::sync::Arc;

use crate::cancellation::CancellationToken;
use crate::contract::{
    ApprovalWrite, InferenceOverride, Message, RunIdentity, RunRecord, Thread, ThreadMetadata,
};
use crate::error::StateError;
use crate::ids::{AgentId, MessageId, RunId, ThreadId};
use crate::llm::StreamResult;
use crate::memory::message_bytes;
use crate::runtime::ResolvedAgent;
use crate::state::{PersistedState, StateStore, UnknownKeyPolicy};

use super::emitter::RunEmitter;

/// What a core costs besides its messages and state: the core and its state
/// store, its map entry and eviction-order entry when warm (see
/// docs/benchmarks.md "Memory per warm thread").
const CORE_BYTES: usize = 2048;
/// What one state value costs on average.
pub(crate) const STATE_VALUE_BYTES: usize = 128;

/// A thread's durable data as the actor holds it.
pub(crate) struct ThreadCore {
    pub(crate) thread_id: ThreadId,
    /// The whole message log, shared with the phase contexts that read it: a
    /// context takes a reference, not a copy, and an append copies the log only if
    /// a context still holds it (none does between phases).
    pub(crate) messages: Arc<Vec<Message>>,
    /// How many of `messages` the store already has.
    pub(crate) persisted_messages: u64,
    /// Typed state; keys come from the current agent's plugins.
    pub(crate) store: StateStore,
    /// State loaded from the store before any agent declared its keys.
    pub(crate) pending_state: Option<PersistedState>,
    /// The agent of the latest run, the default for the next one.
    pub(crate) last_agent: Option<AgentId>,
    /// The thread's metadata while the store has no row for it: a thread made
    /// for its first run, which that run's first checkpoint creates (decision 0071).
    pub(crate) unwritten: Option<Box<ThreadMetadata>>,
}

impl ThreadCore {
    pub(crate) fn new(
        thread: Thread,
        messages: Vec<Message>,
        state: Option<PersistedState>,
    ) -> Self {
        let persisted_messages = messages.len() as u64;
        Self {
            thread_id: thread.id,
            messages: Arc::new(messages),
            persisted_messages,
            store: StateStore::new(),
            pending_state: state,
            last_agent: None,
            unwritten: None,
        }
    }

    /// Makes the state store match `agent`'s plugins, restoring loaded state the
    /// first time its keys are declared.
    pub(crate) fn install(&mut self, agent: &ResolvedAgent) -> Result<(), StateError> {
        agent.env.install(&mut self.store)?;
        if let Some(state) = self.pending_state.take() {
            self.store.restore(&state, UnknownKeyPolicy::Skip)?;
        }
        Ok(())
    }

    /// Approximately the bytes the core holds: what the memory budget counts
    /// for it, warm or live.
    pub(crate) fn heap_estimate(&self) -> usize {
        CORE_BYTES
            + self.thread_id.as_str().len()
            + message_bytes(&self.messages)
            + self.store.value_count() * STATE_VALUE_BYTES
            + self
                .pending_state
                .as_ref()
                .map_or(0, |state| state.extensions.len() * STATE_VALUE_BYTES)
            + self
                .last_agent
                .as_ref()
                .map_or(0, |agent| agent.as_str().len())
    }

    pub(crate) fn push_message(&mut self, message: Message) {
        Arc::make_mut(&mut self.messages).push(message);
    }

    /// The log as a phase context reads it.
    pub(crate) fn messages_view(&self) -> Arc<Vec<Message>> {
        Arc::clone(&self.messages)
    }

    pub(crate) fn unpersisted_messages(&self) -> Vec<Message> {
        let start = usize::try_from(self.persisted_messages).unwrap_or(usize::MAX);
        self.messages
            .get(start..)
            .map(<[Message]>::to_vec)
            .unwrap_or_default()
    }
}

/// What an idle thread leaves in memory when its actor stops, so the next message
/// starts a new actor without reading the store (see decision 0016).
pub(crate) struct WarmThread {
    /// The thread's core, exactly as checkpointed.
    pub(crate) core: Box<ThreadCore>,
    /// The latest run: its record while unfinished, else only its id.
    pub(crate) latest_run: LatestRun,
}

impl WarmThread {
    /// A thread with nothing in it yet: no message, no state, no run.
    pub(crate) fn empty(thread_id: &ThreadId) -> Self {
        Self {
            core: Box::new(ThreadCore::new(
                Thread::with_id(thread_id.clone()),
                Vec::new(),
                None,
            )),
            latest_run: LatestRun::None,
        }
    }

    /// `thread`, made for a run about to start and not in the store yet: the
    /// run's first checkpoint writes it.
    pub(crate) fn unwritten(thread: &Thread) -> Self {
        let mut warm = Self::empty(&thread.id);
        warm.core.unwritten = Some(Box::new(thread.metadata.clone()));
        warm
    }

    /// Whether only this core knows the thread: dropping it would lose the thread.
    pub(crate) fn is_unwritten(&self) -> bool {
        self.core.unwritten.is_some()
    }
}

/// The latest run of a thread that has no actor.
pub(crate) enum LatestRun {
    /// The thread never ran.
    None,
    /// The run ended; new input continues from it (`parent_run_id`).
    Finished(RunId),
    /// The run waits for a decision, or was running when its actor died.
    Unfinished(Box<RunRecord>),
}

/// The current run of a thread.
pub(crate) struct RunCore {
    pub(crate) agent: ResolvedAgent,
    /// The handoff variant `agent` was resolved for; `None` is the base agent.
    pub(crate) variant: Option<String>,
    pub(crate) identity: Arc<RunIdentity>,
    pub(crate) record: RunRecord,
    pub(crate) cancellation: CancellationToken,
    pub(crate) events: Arc<RunEmitter>,
    pub(crate) overrides: Option<InferenceOverride>,
    pub(crate) last_response: Option<Arc<StreamResult>>,
    pub(crate) step_message_id: MessageId,
    /// The span of this activation of the run (`invoke_agent`); none between
    /// activations and when spans are not exported.
    pub(crate) span: crate::telemetry::Span,
    /// Approvals asked for or resolved since the last checkpoint, which the next
    /// one writes.
    pub(crate) approvals: Vec<ApprovalWrite>,
}

impl RunCore {
    pub(crate) fn new(
        agent: ResolvedAgent,
        identity: RunIdentity,
        record: RunRecord,
        events: Arc<RunEmitter>,
        overrides: Option<InferenceOverride>,
    ) -> Self {
        Self {
            agent,
            variant: None,
            identity: Arc::new(identity),
            record,
            cancellation: CancellationToken::new(),
            events,
            overrides,
            last_response: None,
            step_message_id: MessageId::generate(),
            span: crate::telemetry::Span::none(),
            approvals: Vec::new(),
        }
    }
}
