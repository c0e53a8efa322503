//! The approval feed: every approval change the store makes, announced once it
//! is stored, to whoever follows approvals (the inbox's SSE stream, and on a
//! cluster the NATS subjects `awaken.approvals.<event>.<agent>`).
//!
//! ```text
//! checkpoint ─▶ FeedingStore ─▶ ApprovalFeed ─▶ FeedSink ─▶ followers
//!                  (store)        (queue,         (local log, or
//!                                  catch-up)       JetStream)
//! ```
//!
//! The store is the record: each change is also marked there as owed to the
//! feed, in the same write, and cleared once the sink kept it. A change that was
//! stored but not published (the node died between the two, the sink was away,
//! the queue was full) is found by the catch-up sweep and published then: the
//! feed misses nothing the store holds. A sink that is told the same change
//! twice (two nodes catching up at once, a publication that landed but whose
//! answer was lost) keeps it once where it can (JetStream's duplicate window,
//! keyed by approval id and event); followers key records by
//! `(approval_id, event)` beyond that.

mod feeding_store;
mod local;
mod publisher;

use async_trait::async_trait;
use futures::stream::BoxStream;

pub use feeding_store::FeedingStore;
pub use local::LocalFeedLog;
pub use publisher::{ApprovalFeed, FeedConfig, FeedCounts};

use crate::contract::ApprovalChange;

/// One record of the feed as a follower sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedEntry {
    /// Where it is in the feed: what a follower resumes after (SSE's `id`).
    pub position: String,
    /// The change it announces.
    pub change: ApprovalChange,
}

/// What a follower is given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FeedItem {
    /// The next record.
    Entry(Box<FeedEntry>),
    /// The feed no longer holds (or never gave) what followed the position the
    /// follower resumed from: records were missed, and the follower lists the
    /// approvals again (`GET /v1/approvals`) to catch up. New records follow.
    Gap,
}

/// The records a follower is given, in feed order.
pub type FeedStream = BoxStream<'static, FeedItem>;

/// Why the feed could not do what it was asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FeedError {
    /// What keeps the feed is away (NATS reconnecting); try again.
    #[error("the approval feed is unavailable: {0}")]
    Unavailable(String),
    /// A record could not be encoded.
    #[error("an approval record could not be encoded: {0}")]
    Encoding(String),
}

/// Where the feed's records are kept and followed from.
#[async_trait]
pub trait FeedSink: Send + Sync + 'static {
    /// Keeps `changes` in order; one outcome per change (the ones kept are
    /// marked as published in the store, the others are tried again later).
    async fn publish(&self, changes: &[ApprovalChange]) -> Vec<Result<(), FeedError>>;

    /// The records after `after` (a position this sink gave; `None`: only new
    /// ones), then new ones as they are kept. An `after` this sink cannot resume
    /// from starts with [`FeedItem::Gap`].
    async fn follow(&self, after: Option<&str>) -> Result<FeedStream, FeedError>;

    /// Whether other nodes publish to this sink too: then what one of them left
    /// owed (it died between a change and its record) is caught up by the
    /// others, which sweep the store every period.
    fn shared(&self) -> bool {
        false
    }
}
