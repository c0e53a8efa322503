//! `GET /v1/approvals/stream`: the approval feed as Server-Sent Events, from any
//! node, for the caller's tenant.
//!
//! Each frame's `data` is the feed's record (`{"event": "requested" |
//! "resolved", "approval": {…}}`, what NATS subscribers get too) and its `id`
//! the record's position, which a reconnecting client sends back as
//! `Last-Event-ID` to go on after it. A frame `{"event": "gap"}` (without an id)
//! says records were missed (the position is no longer kept, or is not this
//! feed's): the client lists `GET /v1/approvals` again; new records follow.
//! The server ends a stream after `server.approval_stream_max_ms`; clients
//! (an `EventSource` does this by itself) reconnect with their last id.

use std::time::Duration;

use awaken_actors::approval_feed::FeedItem;
use awaken_actors::contract::{ApprovalChange, ApprovalEvent};
use awaken_actors::{AgentId, ThreadId};
use axum::http::HeaderMap;
use bytes::Bytes;
use futures::{Stream, StreamExt};
use serde::Deserialize;
use serde_json::json;

use super::RunService;
use super::approvals::check_tool_filter;
use crate::server::auth::Caller;
use crate::server::error::ApiError;
use crate::server::sse::LAST_EVENT_ID;
use crate::server::sse_frames;

/// Longest `Last-Event-ID` accepted: positions are a few dozen characters.
const MAX_POSITION_LEN: usize = 128;

/// Which records a follower wants.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ApprovalStreamQuery {
    /// Only `requested` or only `resolved` records.
    #[serde(default)]
    pub event: Option<ApprovalEvent>,
    /// Only this agent's.
    #[serde(default)]
    pub agent_id: Option<AgentId>,
    /// Only calls of this tool.
    #[serde(default)]
    pub tool: Option<String>,
    /// Only this thread's.
    #[serde(default)]
    pub thread_id: Option<ThreadId>,
}

impl ApprovalStreamQuery {
    fn wants(&self, tenant: Option<&str>, change: &ApprovalChange) -> bool {
        let approval = &change.approval;
        tenant.is_none_or(|tenant| approval.tenant.as_deref() == Some(tenant))
            && self.event.is_none_or(|event| event == change.event)
            && self
                .agent_id
                .as_ref()
                .is_none_or(|id| *id == approval.agent_id)
            && self
                .tool
                .as_deref()
                .is_none_or(|tool| tool == approval.tool_name)
            && self
                .thread_id
                .as_ref()
                .is_none_or(|id| *id == approval.thread_id)
    }
}

/// The position a reconnecting client resumes after: 400 when it cannot be one.
fn resume_position(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get(LAST_EVENT_ID) else {
        return Ok(None);
    };
    let bad = || {
        ApiError::BadRequest(format!(
            "Last-Event-ID must be the id of an approval stream frame (at most {MAX_POSITION_LEN} visible ASCII characters)"
        ))
    };
    let text = value.to_str().map_err(|_| bad())?.trim();
    if text.is_empty() {
        return Ok(None);
    }
    if text.len() > MAX_POSITION_LEN || !text.chars().all(|c| c.is_ascii_graphic()) {
        return Err(bad());
    }
    Ok(Some(text.to_owned()))
}

/// One frame of `item`, or nothing for a record that cannot be encoded.
fn frame(item: &FeedItem) -> Option<Bytes> {
    let mut chunk = Vec::with_capacity(sse_frames::FRAME_CAPACITY);
    let written = match item {
        FeedItem::Entry(entry) => {
            sse_frames::push_named_json_frame(&mut chunk, Some(&entry.position), &entry.change)
        }
        FeedItem::Gap => {
            sse_frames::push_named_json_frame(&mut chunk, None, &json!({"event": "gap"}))
        }
    };
    match written {
        Ok(()) => Some(Bytes::from(chunk)),
        Err(error) => {
            tracing::warn!(%error, "approval record not encodable");
            None
        }
    }
}

impl RunService {
    /// The approval records `caller` may see that `query` wants, after the
    /// position the request's `Last-Event-ID` names, as SSE frames, for at most
    /// `open_for` (or until the server shuts down).
    pub(crate) async fn approval_stream(
        &self,
        caller: &Caller,
        query: ApprovalStreamQuery,
        headers: &HeaderMap,
        open_for: Duration,
    ) -> Result<impl Stream<Item = Bytes> + Send + Unpin + 'static, ApiError> {
        check_tool_filter(query.tool.as_deref())?;
        let after = resume_position(headers)?;
        let follow = self
            .control
            .runtime()
            .approval_feed()
            .follow(after.as_deref())
            .await
            .map_err(|error| ApiError::Unavailable(error.to_string()))?;
        let tenant = caller.tenant().map(str::to_owned);
        let frames = follow.filter_map(move |item| {
            let wanted = match &item {
                FeedItem::Entry(entry) => query.wants(tenant.as_deref(), &entry.change),
                FeedItem::Gap => true,
            };
            futures::future::ready(wanted.then(|| frame(&item)).flatten())
        });
        let mut stopping = self.stopping();
        let stopped = async move {
            // An error means the server state is gone: stop as well.
            let shutdown = stopping.wait_for(|stopping| *stopping);
            let _ = tokio::time::timeout(open_for, shutdown).await;
        };
        Ok(Box::pin(frames.take_until(stopped)))
    }
}
