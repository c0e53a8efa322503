//! `PhaseContext`: what a hook or action handler may look at.

use std::sync::Arc;

use crate::JsonValue;
use crate::cancellation::CancellationToken;
use crate::contract::{AgentSpec, Message, RunIdentity, ToolCallResume, ToolResult};
use crate::ids::ToolCallId;
use crate::llm::StreamResult;
use crate::phase::Phase;
use crate::state::{ProfileAccess, Snapshot, StateKey};

/// The tool call a BeforeToolExecute or AfterToolExecute phase is about.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCallView {
    /// The call id.
    pub call_id: ToolCallId,
    /// The tool's id.
    pub tool_name: String,
    /// The (validated) arguments.
    pub arguments: JsonValue,
    /// The result; set in AfterToolExecute.
    pub result: Option<ToolResult>,
    /// The human decision this execution replays, when it is a resumed call.
    pub decision: Option<ToolCallResume>,
}

/// Immutable inputs of one phase execution.
///
/// Every field is cheap to clone (`Arc`s), because the engine hands a fresh copy
/// with a newer snapshot to each serially re-run hook and each action handler.
#[derive(Debug, Clone)]
pub struct PhaseContext {
    /// The phase being executed.
    pub phase: Phase,
    /// The frozen state the hook reads.
    pub snapshot: Snapshot,
    /// The agent being run.
    pub agent_spec: Arc<AgentSpec>,
    /// Who is running: thread, run, lineage, agent, origin.
    pub run_identity: Arc<RunIdentity>,
    /// 1-based step number; 0 before the first step.
    pub step: u32,
    /// The thread's messages as of the phase start (shared with the thread, not
    /// copied).
    pub messages: Arc<Vec<Message>>,
    /// The tool call, in the tool phases.
    pub tool_call: Option<Arc<ToolCallView>>,
    /// The model's response, from AfterInference on within a step.
    pub inference: Option<Arc<StreamResult>>,
    /// Profile and shared state, when a profile store is configured.
    pub profile: Option<ProfileAccess>,
    /// The run's cancellation token.
    pub cancellation: CancellationToken,
}

impl PhaseContext {
    /// A context for `phase` of the run `run_identity` of `agent_spec`, over the
    /// thread's `messages` and the run's `cancellation`.
    pub fn new(
        phase: Phase,
        agent_spec: Arc<AgentSpec>,
        run_identity: Arc<RunIdentity>,
        messages: Arc<Vec<Message>>,
        cancellation: CancellationToken,
    ) -> Self {
        Self {
            phase,
            snapshot: Snapshot::default(),
            agent_spec,
            run_identity,
            step: 0,
            messages,
            tool_call: None,
            inference: None,
            profile: None,
            cancellation,
        }
    }

    /// Reads a state key from the snapshot.
    pub fn state<K: StateKey>(&self) -> Option<&K::Value> {
        self.snapshot.get::<K>()
    }

    /// The agent being run.
    pub fn agent_spec(&self) -> &AgentSpec {
        &self.agent_spec
    }

    /// The same context at another phase.
    pub fn with_phase(mut self, phase: Phase) -> Self {
        self.phase = phase;
        self
    }

    /// The same context reading another snapshot.
    pub fn with_snapshot(mut self, snapshot: Snapshot) -> Self {
        self.snapshot = snapshot;
        self
    }

    /// Sets the step number.
    pub fn with_step(mut self, step: u32) -> Self {
        self.step = step;
        self
    }

    /// Sets the message log.
    pub fn with_messages(mut self, messages: Arc<Vec<Message>>) -> Self {
        self.messages = messages;
        self
    }

    /// Sets the tool call under consideration.
    pub fn with_tool_call(mut self, call: ToolCallView) -> Self {
        self.tool_call = Some(Arc::new(call));
        self
    }

    /// Sets the model response.
    pub fn with_inference(mut self, response: Arc<StreamResult>) -> Self {
        self.inference = Some(response);
        self
    }

    /// Sets profile access.
    pub fn with_profile(mut self, profile: ProfileAccess) -> Self {
        self.profile = Some(profile);
        self
    }

    /// Sets the cancellation token.
    pub fn with_cancellation(mut self, token: CancellationToken) -> Self {
        self.cancellation = token;
        self
    }

    /// A context with placeholder identity, for unit tests of hooks.
    #[cfg(any(test, feature = "testsuite"))]
    pub fn test_default() -> Self {
        use crate::contract::RunOrigin;
        use crate::ids::{AgentId, RunId, ThreadId};

        let agent = AgentId::new("test-agent").unwrap_or_else(|_| AgentId::generate());
        let identity = RunIdentity::new(
            ThreadId::new("test-thread").unwrap_or_else(|_| ThreadId::generate()),
            RunId::new("test-run").unwrap_or_else(|_| RunId::generate()),
            agent.clone(),
            RunOrigin::User,
        );
        Self::new(
            Phase::RunStart,
            Arc::new(AgentSpec::new(agent)),
            Arc::new(identity),
            Arc::default(),
            CancellationToken::new(),
        )
    }
}
