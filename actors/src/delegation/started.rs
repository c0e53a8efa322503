//! The remote task an unsettled delegate call started, kept in the profile store
//! from the moment the backend learns its ids until the call settles — so a node
//! that takes the call over after a failover follows that task instead of starting
//! the remote work again.

use serde::{Deserialize, Serialize};

use super::remote::RemoteTask;
use crate::state::{ProfileAccess, ProfileKey};
use crate::tool::ToolCallContext;

/// The record as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct StartedTask {
    task_id: String,
    context_id: String,
}

/// `awaken.remote_call`: one record per unsettled remote call.
struct StartedTaskKey;

impl ProfileKey for StartedTaskKey {
    const KEY: &'static str = "awaken.remote_call";
    type Value = Option<StartedTask>;
}

/// One call's record.
#[derive(Clone)]
pub(super) struct StartedTasks {
    profile: ProfileAccess,
    /// `<run id>/<call id>`: a call id is unique within its run.
    key: String,
}

impl StartedTasks {
    /// The record of the call `ctx` runs; `None` on a runtime without a profile
    /// store (nothing outlives its node there anyway).
    pub(super) fn of(ctx: &ToolCallContext) -> Option<Self> {
        Some(Self {
            profile: ctx.profile.clone()?,
            key: format!("{}/{}", ctx.run_identity.run_id, ctx.call_id),
        })
    }

    /// The task an earlier execution of the call started, if it did not settle.
    pub(super) async fn started(&self) -> Option<RemoteTask> {
        match self.profile.read::<StartedTaskKey>(&self.key).await {
            Ok(found) => found.map(|task| RemoteTask {
                task_id: task.task_id,
                context_id: task.context_id,
            }),
            Err(error) => {
                tracing::warn!(key = %self.key, %error, "cannot read the remote task of a call: it may start again");
                None
            }
        }
    }

    /// Notes the task this execution follows.
    pub(super) async fn record(&self, task: &RemoteTask) {
        let value = Some(StartedTask {
            task_id: task.task_id.clone(),
            context_id: task.context_id.clone(),
        });
        if let Err(error) = self
            .profile
            .write::<StartedTaskKey>(&self.key, &value)
            .await
        {
            tracing::warn!(key = %self.key, %error, "cannot record the remote task of a call: a failover may start it again");
        }
    }

    /// The call settled: nothing to follow any more.
    pub(super) async fn forget(&self) {
        if let Err(error) = self.profile.delete::<StartedTaskKey>(&self.key).await {
            tracing::warn!(key = %self.key, %error, "cannot delete the record of a settled remote call");
        }
    }
}
