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
//! A delegate with an `endpoint` runs in another service instead: a
//! [`RemoteAgentTool`] hands the call to the [`RemoteBackend`] registered for the
//! endpoint's backend (A2A), mirroring the remote task's input requests the same way.
//!
//! The child's ids are a function of the delegating call, so a replay or a re-run
//! after failover finds the same child. The shared store is the truth about how
//! the child stands; its events are how the wait learns of it early.

mod activity;
mod child;
mod config;
mod remote;
mod remote_tool;
mod started;
mod tool;

pub use activity::DELEGATE_ACTIVITY_TYPE;
pub use child::{ChildEvents, ChildRef, ChildRuns, ChildRunsSlot, DelegationError};
pub use config::{DelegationConfig, DelegationConfigKey};
pub use remote::{
    DiscoveryError, RemoteAct, RemoteAgentCard, RemoteAnswer, RemoteBackend, RemoteCall,
    RemoteError, RemoteOutcome, RemoteProgress, RemoteRequest, RemoteTask,
};
pub use remote_tool::RemoteAgentTool;
pub use tool::{AgentTool, DELEGATE_TOOL_PREFIX, delegate_tool_name};
