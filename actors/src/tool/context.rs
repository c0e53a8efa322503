//! `ToolCallContext`: the read-only context a tool executes with.

use std::sync::Arc;

use crate::JsonValue;
use crate::cancellation::CancellationToken;
use crate::contract::{
    AgentEvent, AgentSpec, ProgressStatus, RunIdentity, SuspendTicket,
    TOOL_CALL_PROGRESS_ACTIVITY_TYPE, ToolCallProgressState, ToolCallResume, TraceContext,
};
use crate::delegation::ChildRuns;
use crate::event_sink::EventSink;
use crate::ids::{MessageId, ToolCallId};
use crate::state::{ProfileAccess, Snapshot, StateKey};

/// Identity, state and reporting channels of one tool call attempt.
#[derive(Clone)]
pub struct ToolCallContext {
    /// The call id chosen by the model.
    pub call_id: ToolCallId,
    /// The tool's id.
    pub tool_name: String,
    /// 1 for the first execution, incremented by every replay after a decision.
    pub attempt: u32,
    /// Who is running.
    pub run_identity: Arc<RunIdentity>,
    /// The agent being run.
    pub agent_spec: Arc<AgentSpec>,
    /// The state the tool reads.
    pub snapshot: Snapshot,
    /// Where progress and activity reports go; reports are dropped without one.
    pub activity_sink: Option<Arc<dyn EventSink>>,
    /// Profile and shared state, when configured.
    pub profile: Option<ProfileAccess>,
    /// Cancelled when the call or its run is cancelled.
    pub cancellation: CancellationToken,
    /// Set when this execution replays a suspended call: its ticket and the
    /// decision that resumed it.
    pub resumed: Option<ResumedCall>,
    /// Where child runs are started and reached (delegation); `None` on a runtime
    /// without a delegation transport.
    pub children: Option<Arc<dyn ChildRuns>>,
    /// The trace context what this call starts joins (a child run, a remote
    /// agent): this call's exported span, or a new span id in the run's trace.
    pub trace: Option<TraceContext>,
}

/// The suspension a replayed call comes back from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResumedCall {
    /// The ticket the call was suspended with.
    pub ticket: SuspendTicket,
    /// The decision that resumed it.
    pub decision: ToolCallResume,
}

impl std::fmt::Debug for ToolCallContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolCallContext")
            .field("call_id", &self.call_id)
            .field("tool_name", &self.tool_name)
            .field("attempt", &self.attempt)
            .field("run_identity", &self.run_identity)
            .finish_non_exhaustive()
    }
}

impl ToolCallContext {
    /// A context for the first attempt of `call_id`.
    pub fn new(
        call_id: ToolCallId,
        tool_name: impl Into<String>,
        run_identity: Arc<RunIdentity>,
        agent_spec: Arc<AgentSpec>,
        snapshot: Snapshot,
    ) -> Self {
        let trace = run_identity.trace.map(|trace| trace.child());
        Self {
            call_id,
            tool_name: tool_name.into(),
            attempt: 1,
            run_identity,
            agent_spec,
            snapshot,
            activity_sink: None,
            profile: None,
            cancellation: CancellationToken::new(),
            resumed: None,
            children: None,
            trace,
        }
    }

    /// Reads a typed state key.
    pub fn state<K: StateKey>(&self) -> Option<&K::Value> {
        self.snapshot.get::<K>()
    }

    /// A key that is the same every time this attempt runs, and different for each
    /// replay: pass it to external systems to make side effects idempotent.
    pub fn idempotency_key(&self) -> String {
        format!(
            "{}:{}:{}",
            self.run_identity.run_id, self.call_id, self.attempt
        )
    }

    fn activity_message_id(&self) -> MessageId {
        MessageId::new(format!("activity:{}", self.call_id))
            .unwrap_or_else(|_| MessageId::generate())
    }

    /// Reports a full activity snapshot (replaces earlier content).
    pub async fn report_activity(&self, activity_type: &str, content: &str) {
        let Some(sink) = &self.activity_sink else {
            return;
        };
        sink.emit(AgentEvent::ActivitySnapshot {
            message_id: self.activity_message_id(),
            activity_type: activity_type.to_owned(),
            content: JsonValue::String(content.to_owned()),
            replace: Some(true),
        })
        .await;
    }

    /// Reports an incremental activity change as JSON Patch operations; a single
    /// operation object is wrapped in an array.
    pub async fn report_activity_delta(&self, activity_type: &str, patch: JsonValue) {
        let Some(sink) = &self.activity_sink else {
            return;
        };
        let patch = match patch {
            JsonValue::Array(ops) => ops,
            single => vec![single],
        };
        sink.emit(AgentEvent::ActivityDelta {
            message_id: self.activity_message_id(),
            activity_type: activity_type.to_owned(),
            patch,
        })
        .await;
    }

    /// Reports structured progress (`tool-call-progress` activity).
    pub async fn report_progress(
        &self,
        status: ProgressStatus,
        message: Option<&str>,
        progress: Option<f64>,
    ) {
        let Some(sink) = &self.activity_sink else {
            return;
        };
        let state = ToolCallProgressState {
            schema: crate::contract::progress::TOOL_CALL_PROGRESS_SCHEMA.to_owned(),
            node_id: self.call_id.to_string(),
            call_id: self.call_id.clone(),
            tool_name: self.tool_name.clone(),
            status,
            progress: progress.map(|p| p.clamp(0.0, 1.0)),
            loaded: None,
            total: None,
            message: message.map(str::to_owned),
            parent_node_id: None,
            parent_call_id: None,
        };
        let content = match serde_json::to_value(&state) {
            Ok(content) => content,
            Err(error) => {
                tracing::warn!(%error, "cannot encode tool progress");
                return;
            }
        };
        sink.emit(AgentEvent::ActivitySnapshot {
            message_id: self.activity_message_id(),
            activity_type: TOOL_CALL_PROGRESS_ACTIVITY_TYPE.to_owned(),
            content,
            replace: Some(true),
        })
        .await;
    }
}
