//! What a delegated sub-agent run hands back to the agent that called it.
//!
//! A delegate tool call (`agent_run_<id>`) runs the delegate as a child run on a
//! thread of its own; when the child ends, a [`DelegateRunResult`] becomes the
//! call's tool result: a success carrying the child's answer, or an error result
//! saying why there is none.

use serde::{Deserialize, Serialize};

use crate::contract::tool::ToolResult;
use crate::ids::{AgentId, RunId, ThreadId};

/// How a delegated run ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", content = "reason", rename_all = "snake_case")]
pub enum DelegateRunStatus {
    /// The delegate answered.
    Completed,
    /// The delegate's run ended without an answer (an error, a block, a stop).
    Failed(String),
    /// The delegate's run was cancelled.
    Cancelled,
    /// The delegate did not finish within the allowed time; its run was cancelled.
    Timeout,
}

impl DelegateRunStatus {
    /// The code an unsuccessful status gives the parent's error tool result.
    pub fn error_code(&self) -> Option<&'static str> {
        match self {
            Self::Completed => None,
            Self::Failed(_) => Some("delegate_failed"),
            Self::Cancelled => Some("delegate_cancelled"),
            Self::Timeout => Some("delegate_timeout"),
        }
    }
}

/// The outcome of one delegated run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DelegateRunResult {
    /// The delegate agent.
    pub agent_id: AgentId,
    /// How the child run ended.
    #[serde(flatten)]
    pub status: DelegateRunStatus,
    /// The delegate's last answer, if it gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<String>,
    /// Inference rounds the child run took.
    pub steps: u32,
    /// The child run's thread.
    pub thread_id: ThreadId,
    /// The child run.
    pub run_id: RunId,
}

impl DelegateRunResult {
    /// The delegating call's tool result: the whole result as data on success, an
    /// error result with the status's code otherwise.
    pub fn to_tool_result(&self, tool_name: &str) -> ToolResult {
        match (&self.status, self.status.error_code()) {
            (_, None) => {
                ToolResult::success(tool_name, serde_json::to_value(self).unwrap_or_default())
            }
            (status, Some(code)) => {
                let message = match status {
                    DelegateRunStatus::Failed(reason) => {
                        format!("agent `{}` failed: {reason}", self.agent_id)
                    }
                    DelegateRunStatus::Cancelled => {
                        format!("agent `{}` was cancelled", self.agent_id)
                    }
                    _ => format!("agent `{}` did not finish in time", self.agent_id),
                };
                ToolResult::error_with_code(tool_name, code, message)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn result(status: DelegateRunStatus) -> DelegateRunResult {
        DelegateRunResult {
            agent_id: AgentId::new("worker").unwrap(),
            status,
            response: Some("done".into()),
            steps: 2,
            thread_id: ThreadId::new("t-child").unwrap(),
            run_id: RunId::new("r-child").unwrap(),
        }
    }

    #[test]
    fn completed_is_a_success_with_the_answer() {
        let tool = result(DelegateRunStatus::Completed).to_tool_result("agent_run_worker");
        assert!(!tool.is_error());
        assert_eq!(
            tool.data,
            json!({"agent_id": "worker", "status": "completed", "response": "done",
                   "steps": 2, "thread_id": "t-child", "run_id": "r-child"})
        );
    }

    #[test]
    fn unsuccessful_statuses_are_error_results_with_their_codes() {
        for (status, code) in [
            (DelegateRunStatus::Failed("boom".into()), "delegate_failed"),
            (DelegateRunStatus::Cancelled, "delegate_cancelled"),
            (DelegateRunStatus::Timeout, "delegate_timeout"),
        ] {
            let tool = result(status.clone()).to_tool_result("agent_run_worker");
            assert!(tool.is_error(), "{status:?}");
            assert_eq!(tool.error_code.as_deref(), Some(code), "{status:?}");
        }
        let failed = result(DelegateRunStatus::Failed("boom".into()));
        assert_eq!(
            serde_json::to_value(&failed).unwrap()["reason"],
            json!("boom")
        );
    }
}
