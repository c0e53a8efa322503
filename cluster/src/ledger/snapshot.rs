//! Snapshots of the ledger's state, so the stream can be trimmed and a node can
//! start without replaying every command ever issued.
//!
//! A snapshot is written in parts (each under the payload limit), then its head
//! is moved to it by compare-and-set (only forwards). After that the stream is
//! purged up to the *previous* snapshot and the previous snapshot's parts are
//! removed: a node that lags by less than one snapshot interval never sees a
//! gap, and one that lags more finds the messages it missed in the head snapshot.

use async_nats::jetstream::{self, kv};
use awaken_actors::mailbox::{MailboxState, SequencedDispatch};
use bytes::Bytes;
use futures::TryStreamExt;

use super::inputs::RunInputs;
use super::replica::Folded;
use super::wire::{
    Epoch, HEAD_KEY, Head, MAX_COMMAND, Part, Stored, part_covers, part_key, splice_part,
};
use crate::codec;
use crate::error::ClusterError;
use crate::kv::{BucketSpec, ensure_bucket};

/// How often loading a snapshot is retried when its parts vanish underneath.
const LOAD_ATTEMPTS: u32 = 3;

/// The batches after which a state of `dispatches` is worth a new snapshot: at
/// least `min`, more when the state is large, so a snapshot's cost stays a
/// fraction of the replay it saves.
pub(crate) fn interval(min: u64, dispatches: usize) -> u64 {
    min.max(u64::try_from(dispatches / 4).unwrap_or(u64::MAX))
}

/// What [`Snapshots::write`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Written {
    /// The head moved to the new snapshot; the head it replaced, if any, whose
    /// stream prefix and parts may now be removed.
    Replaced(Option<Head>),
    /// A snapshot at `newest` is recent enough; nothing was written.
    Skipped {
        /// The head's stream sequence.
        newest: u64,
    },
}

/// The snapshot bucket.
#[derive(Debug, Clone)]
pub(crate) struct Snapshots {
    bucket: kv::Store,
}

impl Snapshots {
    /// Opens (creating when missing) the bucket `name`.
    pub(crate) async fn open(
        js: &jetstream::Context,
        name: &str,
        replicas: usize,
    ) -> Result<Self, ClusterError> {
        let spec = BucketSpec::new(name).with_replicas(replicas);
        Ok(Self {
            bucket: ensure_bucket(js, &spec).await?,
        })
    }

    /// The newest snapshot's head and the revision it is at (0: none yet).
    pub(crate) async fn head(&self) -> Result<(Option<Head>, u64), ClusterError> {
        match self
            .bucket
            .entry(HEAD_KEY)
            .await
            .map_err(ClusterError::nats)?
        {
            Some(entry) if entry.operation == kv::Operation::Put => {
                Ok((Some(codec::decode(&entry.value)?), entry.revision))
            }
            _ => Ok((None, 0)),
        }
    }

    /// The newest snapshot as a state (an empty one at sequence 0 when none).
    pub(crate) async fn load(&self) -> Result<Folded, ClusterError> {
        // A newer snapshot may remove the parts of the one just read: read again.
        let mut attempts = 0;
        loop {
            match self.load_once().await {
                Err(missing) if missing.is_transient() && attempts < LOAD_ATTEMPTS => {
                    tracing::debug!(%missing, "snapshot changed while loading; reading again");
                    attempts += 1;
                }
                loaded => return loaded,
            }
        }
    }

    async fn load_once(&self) -> Result<Folded, ClusterError> {
        let (Some(head), _) = self.head().await? else {
            return Ok(Folded::default());
        };
        let mut dispatches = Vec::new();
        let mut epochs = Vec::new();
        let mut settled = Vec::new();
        let mut inputs = RunInputs::default();
        for index in 0..head.parts {
            let key = part_key(head.covers, index);
            let value = self
                .bucket
                .get(&key)
                .await
                .map_err(ClusterError::nats)?
                .ok_or_else(|| {
                    ClusterError::Unexpected(format!("snapshot part {key} is missing"))
                })?;
            let part: Part = codec::decode(&value)?;
            for stored in part.dispatches {
                if let Some(input) = stored.input {
                    inputs.insert(
                        stored.dispatch.run_id.clone(),
                        stored.dispatch.dispatch_id.clone(),
                        input,
                    );
                }
                dispatches.push(SequencedDispatch {
                    seq: stored.seq,
                    dispatch: stored.dispatch,
                });
            }
            epochs.extend(part.epochs.into_iter().map(|e| (e.thread_id, e.epoch)));
            settled.extend(part.settled);
        }
        Ok(Folded {
            state: MailboxState::restore(head.next_seq, dispatches, epochs, settled),
            inputs,
            applied: head.covers,
            charge: None,
        })
    }

    /// Writes `folded` (the state after stream sequence `folded.applied`) and
    /// moves the head to it — unless the head is less than `min_gap` behind
    /// (another node took a snapshot recently) or another node moves it first.
    pub(crate) async fn write(
        &self,
        folded: &Folded,
        min_gap: u64,
    ) -> Result<Written, ClusterError> {
        let (state, covers) = (&folded.state, folded.applied);
        let (previous, revision) = self.head().await?;
        if let Some(head) = &previous
            && head.covers.saturating_add(min_gap) > covers
        {
            return Ok(Written::Skipped {
                newest: head.covers,
            });
        }
        let parts = encode_parts(state, &folded.inputs)?;
        let count = u32::try_from(parts.len())
            .map_err(|_| ClusterError::InvalidInput("snapshot has too many parts".into()))?;
        for (index, part) in (0..count).zip(parts) {
            self.bucket
                .put(part_key(covers, index), part)
                .await
                .map_err(ClusterError::nats)?;
        }
        let head = codec::encode(&Head {
            covers,
            parts: count,
            next_seq: state.next_seq(),
        })?;
        let moved = if revision == 0 {
            self.bucket.create(HEAD_KEY, head).await.is_ok()
        } else {
            self.bucket.update(HEAD_KEY, head, revision).await.is_ok()
        };
        if moved {
            return Ok(Written::Replaced(previous));
        }
        // Another node moved the head meanwhile: these parts are nobody's.
        self.remove_parts(covers, count).await?;
        let (newest, _) = self.head().await?;
        Ok(Written::Skipped {
            newest: newest.map_or(0, |head| head.covers),
        })
    }

    /// Removes the parts of every snapshot up to `covers`: the replaced one's, and
    /// any a writer left behind (on 2.9.10 clusters two writers racing for the head
    /// can both see their compare-and-set succeed, and the overwritten one's parts
    /// are nobody's).
    pub(crate) async fn remove_parts_up_to(&self, covers: u64) -> Result<(), ClusterError> {
        let keys: Vec<String> = self
            .bucket
            .keys()
            .await
            .map_err(ClusterError::nats)?
            .try_collect()
            .await
            .map_err(ClusterError::nats)?;
        for key in keys {
            if part_covers(&key).is_some_and(|at| at <= covers) {
                self.bucket.purge(&key).await.map_err(ClusterError::nats)?;
            }
        }
        Ok(())
    }

    /// Removes the parts of the snapshot at `covers`.
    pub(crate) async fn remove_parts(&self, covers: u64, parts: u32) -> Result<(), ClusterError> {
        for index in 0..parts {
            self.bucket
                .purge(part_key(covers, index))
                .await
                .map_err(ClusterError::nats)?;
        }
        Ok(())
    }
}

/// Encoded items gathered into one part.
#[derive(Default)]
struct Chunk {
    dispatches: Vec<Bytes>,
    epochs: Vec<Bytes>,
    settled: Vec<Bytes>,
    size: usize,
}

impl Chunk {
    fn is_empty(&self) -> bool {
        self.dispatches.is_empty() && self.epochs.is_empty() && self.settled.is_empty()
    }

    /// Seals the chunk into `parts` first when `item` would not fit.
    fn make_room(&mut self, parts: &mut Vec<Bytes>, item: &Bytes) -> Result<(), ClusterError> {
        if !self.is_empty() && self.size + item.len() > MAX_COMMAND {
            parts.push(std::mem::take(self).seal()?);
        }
        self.size += item.len();
        Ok(())
    }

    fn seal(self) -> Result<Bytes, ClusterError> {
        Ok(Bytes::from(splice_part(
            &self.dispatches,
            &self.epochs,
            &self.settled,
        )?))
    }
}

/// The state and its runs' inputs in parts of at most [`MAX_COMMAND`] bytes each
/// (unless a single dispatch is larger).
fn encode_parts(state: &MailboxState, inputs: &RunInputs) -> Result<Vec<Bytes>, ClusterError> {
    let mut parts = Vec::new();
    let mut chunk = Chunk::default();
    for (thread_id, epoch) in state.epochs() {
        let item = codec::encode(&Epoch {
            thread_id: thread_id.clone(),
            epoch,
        })?;
        chunk.make_room(&mut parts, &item)?;
        chunk.epochs.push(item);
    }
    for (seq, dispatch) in state.sequenced() {
        let item = codec::encode(&Stored {
            seq,
            dispatch: dispatch.clone(),
            input: inputs
                .of_dispatch(&dispatch.run_id, &dispatch.dispatch_id)
                .map(|input| Box::new(input.clone())),
        })?;
        chunk.make_room(&mut parts, &item)?;
        chunk.dispatches.push(item);
    }
    for mark in state.settled() {
        let item = codec::encode(mark)?;
        chunk.make_room(&mut parts, &item)?;
        chunk.settled.push(item);
    }
    if !chunk.is_empty() || parts.is_empty() {
        parts.push(chunk.seal()?);
    }
    Ok(parts)
}
