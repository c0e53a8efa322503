//! The `Tool` trait: capabilities the model can call.

mod context;

pub use context::{ResumedCall, ToolCallContext};

use async_trait::async_trait;

use std::sync::Arc;

use crate::JsonValue;
use crate::contract::{RunIdentity, SuspendTicket, ToolDescriptor, ToolResult};
use crate::delegation::ChildRuns;
use crate::error::ToolError;
use crate::ids::ToolCallId;
use crate::state::StateCommand;

/// What a tool returns: its result for the model, plus state changes, actions and
/// effects to commit with it.
#[derive(Debug)]
pub struct ToolOutput {
    /// The result sent back to the model.
    pub result: ToolResult,
    /// Side effects on the thread's state.
    pub command: StateCommand,
}

impl ToolOutput {
    /// A result together with a state command.
    pub fn with_command(result: ToolResult, command: StateCommand) -> Self {
        Self { result, command }
    }
}

impl From<ToolResult> for ToolOutput {
    fn from(result: ToolResult) -> Self {
        Self {
            result,
            command: StateCommand::new(),
        }
    }
}

/// A capability exposed to the model: a descriptor (name, description, JSON Schema)
/// and an execution function over JSON arguments and a read-only context.
#[async_trait]
pub trait Tool: Send + Sync {
    /// The tool's identity and parameter schema.
    fn descriptor(&self) -> ToolDescriptor;

    /// Rejects malformed arguments before execution.
    fn validate_args(&self, _args: &JsonValue) -> Result<(), ToolError> {
        Ok(())
    }

    /// Runs the tool.
    async fn execute(
        &self,
        args: JsonValue,
        ctx: &ToolCallContext,
    ) -> Result<ToolOutput, ToolError>;

    /// Told that a call of this tool was cancelled (by a decision or with its run)
    /// while it ran or waited for a decision: the place to stop work the tool started
    /// outside this process. It runs on a task of its own, after the call is settled;
    /// the default does nothing.
    async fn cancelled(&self, _call: CancelledCall) {}
}

/// A call that was cancelled while it ran or was suspended.
#[derive(Clone)]
pub struct CancelledCall {
    /// Who ran the call.
    pub run_identity: Arc<RunIdentity>,
    /// The call.
    pub call_id: ToolCallId,
    /// Its ticket, when it was suspended.
    pub ticket: Option<SuspendTicket>,
    /// The runtime's delegation transport, if it has one.
    pub children: Option<Arc<dyn ChildRuns>>,
}

impl std::fmt::Debug for CancelledCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CancelledCall")
            .field("run_identity", &self.run_identity)
            .field("call_id", &self.call_id)
            .field("ticket", &self.ticket)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for dyn Tool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tool")
            .field("id", &self.descriptor().id)
            .finish()
    }
}
