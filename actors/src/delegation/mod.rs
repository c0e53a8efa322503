//! Delegation: an agent's `delegates` offered to its model as tools that run the
//! delegate as a child run (book: Multi-Agent Patterns).
//!
//! ```text
//! parent run ── call agent_run_worker ──► AgentTool (in the call's ToolCallActor)
//!                                           │ submit child run (own thread, lineage)
//!                                           ▼
//!                        ChildRuns ──► the child thread's owner (any node) runs it
//!                                           │ events, then RunFinish
//!   tool result ◄── DelegateRunResult ◄─────┘ (suspended: the call mirrors the
//!                                              child's ticket; its decision is
//!                                              handed to the child)
//! ```
//!
//! The child's ids are a function of the delegating call, so a replay or a re-run
//! after failover finds the same child. The shared store is the truth about how
//! the child stands; its events are how the wait learns of it early.

mod child;
mod config;
mod tool;

pub use child::{ChildEvents, ChildRef, ChildRuns, ChildRunsSlot, DelegationError};
pub use config::{DelegationConfig, DelegationConfigKey};
pub use tool::{AgentTool, DELEGATE_ACTIVITY_TYPE, DELEGATE_TOOL_PREFIX, delegate_tool_name};
