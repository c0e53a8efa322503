//! The `Tool` trait: capabilities the model can call.

mod context;

pub use context::ToolCallContext;

use async_trait::async_trait;

use crate::JsonValue;
use crate::contract::{ToolDescriptor, ToolResult};
use crate::error::ToolError;
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
}

impl std::fmt::Debug for dyn Tool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tool")
            .field("id", &self.descriptor().id)
            .finish()
    }
}
