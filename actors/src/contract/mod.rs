//! The book's contract types: the vocabulary every layer speaks.
//!
//! These are pure data: messages and threads, run and tool-call lifecycles, events,
//! suspension and decisions, mailbox dispatches, agent, model and provider specs. They
//! carry no behaviour beyond constructors, state-machine checks and small helpers, so
//! every other layer (state engine, phases, actors, cluster, gateway) can depend on
//! them. All of them serialize to the JSON shapes the book documents and travel between
//! nodes through [`crate::codec`].
//!
//! Maps are `BTreeMap`s so encodings are deterministic; optional fields are omitted
//! when empty; timestamps are unix milliseconds except on [`RunRecord`] (seconds).

pub mod agent_spec;
pub mod approval;
pub mod delegation;
pub mod dispatch;
pub mod event;
pub mod handoff;
pub mod identity;
pub mod inference;
pub mod input;
pub mod message;
pub mod model_spec;
pub mod progress;
pub mod run;
pub mod stop;
pub mod suspension;
pub mod thread;
pub mod tool;
pub mod tool_call;
pub mod trace;
pub mod usage;

pub use agent_spec::{
    AgentSpec, PluginConfigKey, RemoteAuth, RemoteEndpoint, SpecError, ToolExecutionMode,
};
pub use approval::{
    Approval, ApprovalAnswer, ApprovalChange, ApprovalEvent, ApprovalResolution, ApprovalStatus,
    ApprovalWrite,
};
pub use delegation::{DelegateRunResult, DelegateRunStatus};
pub use dispatch::{MailboxInterrupt, RunDispatch, RunDispatchResult, RunDispatchStatus};
pub use event::{AgentEvent, StreamEvent};
pub use handoff::{AgentOverlay, HandoffState};
pub use identity::{RunIdentity, RunOrigin};
pub use inference::{
    ContextCompactionMode, ContextWindowPolicy, InferenceOverride, ReasoningEffort,
};
pub use input::RunInput;
pub use message::{ContentBlock, Message, Role, ToolCall, Visibility, strip_unpaired_tool_calls};
pub use model_spec::{ModelSpec, ProviderSpec};
pub use progress::{ProgressStatus, TOOL_CALL_PROGRESS_ACTIVITY_TYPE, ToolCallProgressState};
pub use run::{
    AppliedDecision, RunRecord, RunStatus, RunStatusTransitionError, RunWaitingState,
    RunWaitingTicket, StoppedReason, TerminationReason, WaitingReason,
};
pub use stop::StopConditionSpec;
pub use suspension::{
    ChildSuspension, PendingToolCall, RemoteSuspension, ResumeDecisionAction, SuspendTicket,
    Suspension, ToolCallResume, ToolCallResumeMode,
};
pub use thread::{TENANT_KEY, Thread, ThreadMetadata};
pub use tool::{RUN_CANCELLED_MESSAGE, ToolDescriptor, ToolResult, ToolStatus};
pub use tool_call::{
    ToolCallOutcome, ToolCallState, ToolCallStatus, ToolCallTransitionError, derive_run_status,
};
pub use trace::{InvalidTraceParent, TraceContext};
pub use usage::TokenUsage;
