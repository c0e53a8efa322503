//! Approvals as stores keep them: the inbox's query and page, and the
//! [`ApprovalTable`] the in-memory and file stores hold them in.
//!
//! Approvals change only in checkpoints (the run loop's [`ApprovalWrite`]s, applied
//! with the rest of the checkpoint or not at all) and when their thread is deleted
//! (every open one is cancelled, and kept, so the inbox still says what became of
//! it). Pages are ordered by `requested_at`, then id, and continue after a cursor
//! naming the last approval seen: an approval asked for later lands after every
//! page already read, so paging through a busy inbox skips and repeats nothing.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::clamp_limit;
use crate::contract::{
    Approval, ApprovalChange, ApprovalEvent, ApprovalResolution, ApprovalStatus, ApprovalWrite,
};
use crate::hashing::FastHashMap;
use crate::ids::{AgentId, ApprovalId, ThreadId};

/// The cause an approval is cancelled with when its thread is deleted.
pub const THREAD_DELETED: &str = "thread_deleted";

/// Where a page of approvals continues: after this approval.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ApprovalCursor {
    /// The last approval's `requested_at`.
    pub requested_at: u64,
    /// The last approval's id.
    pub approval_id: ApprovalId,
}

impl ApprovalCursor {
    /// The cursor that continues after `approval`.
    pub fn after(approval: &Approval) -> Self {
        Self {
            requested_at: approval.requested_at,
            approval_id: approval.approval_id.clone(),
        }
    }
}

/// Written `<requested_at>.<approval_id>`: opaque to clients, readable in logs.
impl fmt::Display for ApprovalCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.requested_at, self.approval_id)
    }
}

/// Why a cursor was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a cursor this listing returned")]
pub struct BadCursor(String);

impl FromStr for ApprovalCursor {
    type Err = BadCursor;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || BadCursor(text.chars().take(64).collect());
        let (at, id) = text.split_once('.').ok_or_else(bad)?;
        Ok(Self {
            requested_at: at.parse().map_err(|_| bad())?,
            approval_id: ApprovalId::new(id).map_err(|_| bad())?,
        })
    }
}

impl Serialize for ApprovalCursor {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ApprovalCursor {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Which approvals to list: the inbox's filters and paging.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApprovalQuery {
    /// Only approvals of this tenant's threads (`None`: every tenant's).
    pub tenant: Option<String>,
    /// Only approvals in this status.
    pub status: Option<ApprovalStatus>,
    /// Only approvals of this agent.
    pub agent_id: Option<AgentId>,
    /// Only approvals of calls of this tool.
    pub tool_name: Option<String>,
    /// Only approvals of this thread.
    pub thread_id: Option<ThreadId>,
    /// Only approvals asked for at or after this time, unix millis.
    pub requested_from: Option<u64>,
    /// Only approvals asked for before this time, unix millis.
    pub requested_before: Option<u64>,
    /// Continue after this approval.
    pub after: Option<ApprovalCursor>,
    /// Page size, clamped to `1..=200`; 0 takes the default.
    pub limit: usize,
}

impl ApprovalQuery {
    /// The page size actually used.
    pub fn effective_limit(&self) -> usize {
        if self.limit == 0 {
            super::DEFAULT_PAGE_LIMIT
        } else {
            clamp_limit(self.limit)
        }
    }

    /// Whether `approval` passes the filters (paging aside).
    pub fn matches(&self, approval: &Approval) -> bool {
        self.tenant
            .as_deref()
            .is_none_or(|tenant| approval.tenant.as_deref() == Some(tenant))
            && self.status.is_none_or(|status| status == approval.status)
            && self
                .agent_id
                .as_ref()
                .is_none_or(|id| *id == approval.agent_id)
            && self
                .tool_name
                .as_deref()
                .is_none_or(|tool| tool == approval.tool_name)
            && self
                .thread_id
                .as_ref()
                .is_none_or(|id| *id == approval.thread_id)
            && self
                .requested_from
                .is_none_or(|from| approval.requested_at >= from)
            && self
                .requested_before
                .is_none_or(|before| approval.requested_at < before)
    }
}

/// One page of approvals, oldest request first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalPage {
    /// The approvals on this page.
    pub items: Vec<Approval>,
    /// Pass as the next query's `after` to continue; `None` when nothing matching
    /// remains.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<ApprovalCursor>,
}

/// The feed records a stored approval still owes: one bit per [`ApprovalEvent`].
/// Set by the write that makes the change, cleared once the feed published it
/// (`ThreadRunStore::approvals_published`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Owed(u8);

impl Owed {
    /// The bit of `event`, as PostgreSQL's `feed` column holds it too.
    pub(crate) const fn bit(event: ApprovalEvent) -> u8 {
        match event {
            ApprovalEvent::Requested => 1,
            ApprovalEvent::Resolved => 2,
        }
    }

    fn with(self, event: ApprovalEvent) -> Self {
        Self(self.0 | Self::bit(event))
    }

    fn without(self, event: ApprovalEvent) -> Self {
        Self(self.0 & !Self::bit(event))
    }

    fn owes(self, event: ApprovalEvent) -> bool {
        self.0 & Self::bit(event) != 0
    }

    fn is_empty(self) -> bool {
        self.0 == 0
    }
}

/// The changes `approval` owes the feed, in the order it went through them.
pub(crate) fn owed_changes(approval: &Approval, owed: u8) -> Vec<ApprovalChange> {
    ApprovalEvent::ALL
        .into_iter()
        .filter(|event| owed & Owed::bit(*event) != 0)
        .map(|event| match event {
            ApprovalEvent::Requested => ApprovalChange::requested(approval.as_requested()),
            ApprovalEvent::Resolved => ApprovalChange::resolved(approval.clone()),
        })
        .collect()
}

/// When `approval` last changed, unix millis: its resolution, or its request.
pub(crate) fn changed_at(approval: &Approval) -> u64 {
    approval.resolved_at.unwrap_or(approval.requested_at)
}

/// One approval of an [`ApprovalTable`] and what it owes the feed.
#[derive(Debug, Clone)]
struct Entry {
    approval: Approval,
    owed: Owed,
}

/// Every approval of a store, by id and in listing order: what the in-memory store
/// holds and what the file store rebuilds from its files. What the feed is owed
/// is kept here only, never in files: the stores that use the table serve one
/// node, whose feed does not outlive its process.
#[derive(Debug, Default, Clone)]
pub(crate) struct ApprovalTable {
    by_id: FastHashMap<ApprovalId, Entry>,
    order: BTreeSet<ApprovalCursor>,
    /// The approvals that owe the feed a record, in listing order.
    owing: BTreeSet<ApprovalCursor>,
}

impl ApprovalTable {
    /// The approval `id`.
    pub(crate) fn get(&self, id: &ApprovalId) -> Option<&Approval> {
        self.by_id.get(id).map(|entry| &entry.approval)
    }

    /// Adds `approval` as it was stored (files read back on open, a head just
    /// written), keeping what an approval of its id owed the feed.
    pub(crate) fn insert(&mut self, approval: Approval) {
        self.order.insert(ApprovalCursor::after(&approval));
        let owed = self
            .by_id
            .get(&approval.approval_id)
            .map_or_else(Owed::default, |entry| entry.owed);
        self.by_id
            .insert(approval.approval_id.clone(), Entry { approval, owed });
    }

    /// Records that the feed is owed `changes` (made by a store that keeps the
    /// approvals elsewhere and this table beside them).
    pub(crate) fn owe_all(&mut self, changes: &[ApprovalChange]) {
        for change in changes {
            self.owe(&change.approval.approval_id, change.event);
        }
    }

    fn owe(&mut self, id: &ApprovalId, event: ApprovalEvent) {
        if let Some(entry) = self.by_id.get_mut(id) {
            entry.owed = entry.owed.with(event);
            self.owing.insert(ApprovalCursor::after(&entry.approval));
        }
    }

    /// Applies a checkpoint's writes for a thread of `tenant`: a request is stored
    /// unless its id is there, a resolution applies to an open approval only.
    /// Returns the changes made, each owed to the feed.
    pub(crate) fn apply(
        &mut self,
        writes: &[ApprovalWrite],
        tenant: Option<&str>,
    ) -> Vec<ApprovalChange> {
        let mut changed = Vec::new();
        for write in writes {
            match write {
                ApprovalWrite::Requested(approval) => {
                    if self.by_id.contains_key(&approval.approval_id) {
                        continue;
                    }
                    let mut approval = (**approval).clone();
                    approval.tenant = tenant.map(str::to_owned);
                    let id = approval.approval_id.clone();
                    changed.push(ApprovalChange::requested(approval.clone()));
                    self.insert(approval);
                    self.owe(&id, ApprovalEvent::Requested);
                }
                ApprovalWrite::Resolved {
                    approval_id,
                    resolution,
                } => {
                    if let Some(entry) = self.by_id.get_mut(approval_id)
                        && entry.approval.resolve(resolution)
                    {
                        changed.push(ApprovalChange::resolved(entry.approval.clone()));
                        self.owe(approval_id, ApprovalEvent::Resolved);
                    }
                }
            }
        }
        changed
    }

    /// Cancels every open approval of `thread_id` at `now_ms`; the changes made.
    pub(crate) fn cancel_thread(
        &mut self,
        thread_id: &ThreadId,
        now_ms: u64,
    ) -> Vec<ApprovalChange> {
        let resolution = ApprovalResolution::cancelled(THREAD_DELETED, now_ms);
        let cancelled: Vec<ApprovalChange> = self
            .by_id
            .values_mut()
            .filter(|entry| entry.approval.thread_id == *thread_id)
            .filter_map(|entry| {
                entry
                    .approval
                    .resolve(&resolution)
                    .then(|| ApprovalChange::resolved(entry.approval.clone()))
            })
            .collect();
        for change in &cancelled {
            self.owe(&change.approval.approval_id, ApprovalEvent::Resolved);
        }
        cancelled
    }

    /// The approvals of `thread_id`.
    pub(crate) fn of_thread(&self, thread_id: &ThreadId) -> Vec<Approval> {
        self.by_id
            .values()
            .filter(|entry| entry.approval.thread_id == *thread_id)
            .map(|entry| entry.approval.clone())
            .collect()
    }

    /// Up to `limit` changes the feed is owed that were made at or before
    /// `changed_by` (unix millis), oldest request first.
    pub(crate) fn unpublished(&self, changed_by: u64, limit: usize) -> Vec<ApprovalChange> {
        self.owing
            .iter()
            .filter_map(|key| self.by_id.get(&key.approval_id))
            .filter(|entry| changed_at(&entry.approval) <= changed_by)
            .flat_map(|entry| owed_changes(&entry.approval, entry.owed.0))
            .take(limit)
            .collect()
    }

    /// Records that the feed published `published`.
    pub(crate) fn published(&mut self, published: &[(ApprovalId, ApprovalEvent)]) {
        for (id, event) in published {
            let Some(entry) = self.by_id.get_mut(id) else {
                continue;
            };
            if !entry.owed.owes(*event) {
                continue;
            }
            entry.owed = entry.owed.without(*event);
            if entry.owed.is_empty() {
                self.owing.remove(&ApprovalCursor::after(&entry.approval));
            }
        }
    }

    /// One page as `query` asks for it.
    pub(crate) fn page(&self, query: &ApprovalQuery) -> ApprovalPage {
        let limit = query.effective_limit();
        let start = match &query.after {
            Some(cursor) => std::ops::Bound::Excluded(cursor.clone()),
            None => std::ops::Bound::Unbounded,
        };
        let mut items: Vec<Approval> = self
            .order
            .range((start, std::ops::Bound::Unbounded))
            .filter_map(|key| self.by_id.get(&key.approval_id))
            .map(|entry| &entry.approval)
            .filter(|approval| query.matches(approval))
            .take(limit + 1)
            .cloned()
            .collect();
        let next_cursor = if items.len() > limit {
            items.truncate(limit);
            items.last().map(ApprovalCursor::after)
        } else {
            None
        };
        ApprovalPage { items, next_cursor }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_read_back_what_they_write() {
        let cursor = ApprovalCursor {
            requested_at: 42,
            approval_id: ApprovalId::new("a.b").unwrap(),
        };
        assert_eq!(cursor.to_string(), "42.a.b");
        assert_eq!("42.a.b".parse::<ApprovalCursor>().unwrap(), cursor);
        for bad in ["", "42", "x.a", "42.", "-1.a"] {
            assert!(bad.parse::<ApprovalCursor>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_zero_limit_takes_the_default_and_a_large_one_the_maximum() {
        let query = |limit| ApprovalQuery {
            limit,
            ..ApprovalQuery::default()
        };
        assert_eq!(query(0).effective_limit(), super::super::DEFAULT_PAGE_LIMIT);
        assert_eq!(
            query(10_000).effective_limit(),
            super::super::MAX_PAGE_LIMIT
        );
        assert_eq!(query(7).effective_limit(), 7);
    }
}
