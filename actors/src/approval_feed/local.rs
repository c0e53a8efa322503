//! [`LocalFeedLog`]: the feed of a node alone, kept in its memory.
//!
//! The last records are kept (by count and by bytes) so a follower that
//! reconnects resumes where it left off; positions are `<epoch>-<seq>`, the
//! epoch new for each process, so a position from before a restart is known
//! not to be this log's and starts with a gap.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use futures::StreamExt;
use tokio::sync::broadcast;

use super::{FeedEntry, FeedError, FeedItem, FeedSink, FeedStream};
use crate::contract::ApprovalChange;

/// Records kept for followers that resume, at most.
const KEPT_RECORDS: usize = 1024;
/// Bytes of records (as JSON) kept for followers that resume, at most.
const KEPT_BYTES: usize = 8 * 1024 * 1024;
/// Records a live follower may fall behind by before it is given a gap.
const LIVE_LAG: usize = 1024;

#[derive(Debug)]
struct Kept {
    seq: u64,
    bytes: usize,
    change: ApprovalChange,
}

#[derive(Debug, Default)]
struct Log {
    next_seq: u64,
    kept: VecDeque<Kept>,
    bytes: usize,
}

/// The approval feed of a single node: in memory, followed by its SSE clients.
#[derive(Debug, Clone)]
pub struct LocalFeedLog {
    epoch: Arc<str>,
    log: Arc<Mutex<Log>>,
    live: broadcast::Sender<(u64, ApprovalChange)>,
}

impl Default for LocalFeedLog {
    fn default() -> Self {
        let (live, _) = broadcast::channel(LIVE_LAG);
        Self {
            epoch: uuid::Uuid::now_v7().simple().to_string().into(),
            log: Arc::new(Mutex::new(Log {
                next_seq: 1,
                ..Log::default()
            })),
            live,
        }
    }
}

fn lock(log: &Mutex<Log>) -> MutexGuard<'_, Log> {
    // Every critical section leaves the log consistent.
    log.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl LocalFeedLog {
    fn position(&self, seq: u64) -> String {
        format!("{}-{seq}", self.epoch)
    }

    fn entry(&self, seq: u64, change: ApprovalChange) -> FeedItem {
        FeedItem::Entry(Box::new(FeedEntry {
            position: self.position(seq),
            change,
        }))
    }

    /// The seq `position` names in this log, if it is one of this log's.
    fn seq_of(&self, position: &str) -> Option<u64> {
        let (epoch, seq) = position.rsplit_once('-')?;
        (epoch == &*self.epoch).then(|| seq.parse().ok())?
    }
}

#[async_trait]
impl FeedSink for LocalFeedLog {
    async fn publish(&self, changes: &[ApprovalChange]) -> Vec<Result<(), FeedError>> {
        let mut log = lock(&self.log);
        changes
            .iter()
            .map(|change| {
                let bytes = serde_json::to_vec(change)
                    .map_err(|error| FeedError::Encoding(error.to_string()))?
                    .len();
                let seq = log.next_seq;
                log.next_seq += 1;
                log.bytes += bytes;
                log.kept.push_back(Kept {
                    seq,
                    bytes,
                    change: change.clone(),
                });
                while log.kept.len() > KEPT_RECORDS || log.bytes > KEPT_BYTES {
                    let Some(oldest) = log.kept.pop_front() else {
                        break;
                    };
                    log.bytes -= oldest.bytes;
                }
                // Nobody following is no failure.
                let _ = self.live.send((seq, change.clone()));
                Ok(())
            })
            .collect()
    }

    async fn follow(&self, after: Option<&str>) -> Result<FeedStream, FeedError> {
        // Subscribed under the lock, so nothing is published between the kept
        // records read here and the first live one.
        let (live, first) = {
            let log = lock(&self.log);
            let live = self.live.subscribe();
            let oldest = log.kept.front().map_or(log.next_seq, |kept| kept.seq);
            let first: Vec<FeedItem> = match after.map(|position| self.seq_of(position)) {
                None => Vec::new(),
                Some(Some(seq)) if seq < log.next_seq && seq + 1 >= oldest => log
                    .kept
                    .iter()
                    .filter(|kept| kept.seq > seq)
                    .map(|kept| self.entry(kept.seq, kept.change.clone()))
                    .collect(),
                Some(_) => vec![FeedItem::Gap],
            };
            (live, first)
        };
        let this = self.clone();
        let live = futures::stream::unfold(live, move |mut live| {
            let this = this.clone();
            async move {
                let item = match live.recv().await {
                    Ok((seq, change)) => this.entry(seq, change),
                    Err(broadcast::error::RecvError::Lagged(_)) => FeedItem::Gap,
                    Err(broadcast::error::RecvError::Closed) => return None,
                };
                Some((item, live))
            }
        });
        Ok(futures::stream::iter(first).chain(live).boxed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{ApprovalChange, ApprovalStatus};
    use crate::ids::ThreadId;
    use crate::store::conformance::approval;

    fn change(id: &str) -> ApprovalChange {
        let thread = ThreadId::new("t").unwrap();
        ApprovalChange::requested(approval(id, &thread, "r", "tool", 1))
    }

    async fn next(stream: &mut FeedStream) -> FeedItem {
        stream.next().await.expect("the feed goes on")
    }

    fn id_of(item: &FeedItem) -> (&str, String) {
        match item {
            FeedItem::Entry(entry) => (
                entry.change.approval.approval_id.as_str(),
                entry.position.clone(),
            ),
            FeedItem::Gap => panic!("a gap where an entry was expected"),
        }
    }

    #[tokio::test]
    async fn a_follower_resumes_after_its_position_and_then_goes_live() {
        let log = LocalFeedLog::default();
        let mut first = log.follow(None).await.unwrap();
        log.publish(&[change("a1"), change("a2")]).await;
        let item = next(&mut first).await;
        let (id, position) = id_of(&item);
        assert_eq!(id, "a1");
        let mut resumed = log.follow(Some(&position)).await.unwrap();
        log.publish(&[change("a3")]).await;
        assert_eq!(id_of(&next(&mut resumed).await).0, "a2");
        assert_eq!(id_of(&next(&mut resumed).await).0, "a3");
        assert_eq!(
            match next(&mut first).await {
                FeedItem::Entry(entry) => entry.change.approval.status,
                FeedItem::Gap => panic!("gap"),
            },
            ApprovalStatus::Pending
        );
    }

    #[tokio::test]
    async fn a_position_of_another_process_or_one_no_longer_kept_is_a_gap() {
        let log = LocalFeedLog::default();
        let other = LocalFeedLog::default();
        other.publish(&[change("x")]).await;
        log.publish(&[change("y")]).await;
        for position in [other.position(1), "garbage".to_owned(), log.position(999)] {
            let mut stream = log.follow(Some(&position)).await.unwrap();
            assert_eq!(next(&mut stream).await, FeedItem::Gap, "{position}");
        }
        let many: Vec<ApprovalChange> = (0..KEPT_RECORDS + 5)
            .map(|i| change(&format!("a{i}")))
            .collect();
        log.publish(&many).await;
        let mut stream = log.follow(Some(&log.position(1))).await.unwrap();
        assert_eq!(next(&mut stream).await, FeedItem::Gap);
        let kept = log.follow(Some(&log.position(6))).await.unwrap();
        assert_eq!(kept.take(KEPT_RECORDS - 1).count().await, KEPT_RECORDS - 1);
    }
}
