//! A thread's history as the protocols show it: its visible log, and the records
//! of the runs that wrote it — what a call waits on or how it was decided is in
//! the run's record, not in the log.

use awaken_actors::ThreadId;
use awaken_actors::contract::{Message, Role, RunRecord};
use awaken_actors::store::{MAX_PAGE_LIMIT, RunQuery};

use super::RunService;
use crate::server::auth::Caller;
use crate::server::error::ApiError;

/// A thread's visible log and the records of its runs that called tools.
#[derive(Debug, Default)]
pub(crate) struct ThreadHistory {
    /// The log as users see it (internal messages left out).
    pub messages: Vec<Message>,
    /// The records of the runs whose calls are in `messages`, oldest first.
    pub runs: Vec<RunRecord>,
}

impl RunService {
    /// The thread's history: 404 for an unknown thread or another tenant's. Run
    /// records are read only when the log holds tool calls (nothing else needs
    /// them).
    pub(crate) async fn thread_history(
        &self,
        caller: &Caller,
        thread_id: &ThreadId,
    ) -> Result<ThreadHistory, ApiError> {
        let messages = self.visible_messages(caller, thread_id).await?;
        let calls_tools = messages
            .iter()
            .any(|message| message.role == Role::Assistant && !message.tool_calls.is_empty());
        let runs = if calls_tools {
            self.thread_records(thread_id).await?
        } else {
            Vec::new()
        };
        Ok(ThreadHistory { messages, runs })
    }

    /// Every run record of the thread, oldest first, read page by page.
    async fn thread_records(&self, thread_id: &ThreadId) -> Result<Vec<RunRecord>, ApiError> {
        let store = self.control.store();
        let mut runs = Vec::new();
        loop {
            let page = store
                .list_runs(&RunQuery {
                    thread_id: Some(thread_id.clone()),
                    offset: runs.len(),
                    limit: MAX_PAGE_LIMIT,
                    ..RunQuery::default()
                })
                .await?;
            let last = page.runs.is_empty() || runs.len() + page.runs.len() >= page.total;
            runs.extend(page.runs);
            if last {
                return Ok(runs);
            }
        }
    }
}
