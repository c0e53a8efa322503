//! What the ledger stream and its snapshot bucket hold, in the cluster codec.
//!
//! | where | value |
//! |---|---|
//! | stream `LEDGER_<name>`, subject `awaken.ledger.<name>` | [`Batch`]: a writer's commands, applied in stream order; headers `Awaken-Ledger-Writer` and `Awaken-Ledger-Batch` name the writer and number its batches |
//! | bucket `<name>_snapshots`, key `head` | [`Head`]: the newest complete snapshot |
//! | bucket `<name>_snapshots`, key `part.<covers>.<n>` | [`Part`]: a share of that snapshot's dispatches |
//!
//! A writer encodes each command once, when it is issued (which also sizes it), and
//! splices the encoded commands into a batch; the result decodes as a [`Batch`].

use awaken_actors::contract::RunDispatch;
use awaken_actors::ids::ThreadId;
use awaken_actors::mailbox::Mark;
use awaken_actors::thread::RunRequest;
use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::command::Command;
use crate::error::ClusterError;

/// Header naming the batch's writer (a mailbox instance).
pub(crate) const WRITER_HEADER: &str = "Awaken-Ledger-Writer";

/// Header numbering the writer's batches, so it recognises its own coming back.
pub(crate) const BATCH_HEADER: &str = "Awaken-Ledger-Batch";

/// Largest batch or snapshot part, bytes: well under nats-server's default
/// `max_payload` of 1 MiB.
pub(crate) const MAX_PAYLOAD: usize = 512 * 1024;

/// Room kept for a batch's envelope (the writer id and headers).
const ENVELOPE: usize = 1024;

/// Largest single command, bytes.
pub(crate) const MAX_COMMAND: usize = MAX_PAYLOAD - ENVELOPE;

/// One command with the id its issuer waits on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Op {
    /// Unique among the writer's ops.
    pub(crate) id: u64,
    /// The change.
    pub(crate) command: Command,
}

/// An [`Op`] to encode, borrowing its command (the writer keeps the command).
#[derive(Debug, Serialize)]
pub(crate) struct OpRef<'a> {
    /// As [`Op::id`].
    pub(crate) id: u64,
    /// As [`Op::command`].
    pub(crate) command: &'a Command,
}

/// Commands one writer published together; the message's stream sequence orders
/// them among all others.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Batch {
    /// The writing mailbox instance; its ops' answers go to its callers.
    pub(crate) writer: String,
    /// The commands, applied in this order.
    pub(crate) ops: Vec<Op>,
}

/// The newest complete snapshot: the state after applying every batch up to and
/// including stream sequence `covers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Head {
    /// The last stream sequence the snapshot includes.
    pub(crate) covers: u64,
    /// How many parts it has.
    pub(crate) parts: u32,
    /// The sequence number the next enqueue takes.
    pub(crate) next_seq: u64,
}

/// A share of a snapshot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Part {
    /// Dispatches with their enqueue sequence numbers.
    pub(crate) dispatches: Vec<Stored>,
    /// Threads whose epoch an interrupt raised (all of them in the first part).
    pub(crate) epochs: Vec<Epoch>,
    /// Marks of settled dispatches, oldest first across the parts in order
    /// (decision 0089; absent in snapshots of earlier nodes).
    #[serde(default)]
    pub(crate) settled: Vec<Mark>,
}

/// A dispatch as a snapshot keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Stored {
    pub(crate) seq: u64,
    pub(crate) dispatch: RunDispatch,
    /// The run's input, when it came with the dispatch and the run may still start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) input: Option<Box<RunRequest>>,
}

/// A thread's raised epoch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Epoch {
    pub(crate) thread_id: ThreadId,
    pub(crate) epoch: u64,
}

/// The key of a snapshot's `index`-th part.
pub(crate) fn part_key(covers: u64, index: u32) -> String {
    format!("part.{covers}.{index}")
}

/// The `covers` of a part's key; `None` for any other key.
pub(crate) fn part_covers(key: &str) -> Option<u64> {
    let (covers, index) = key.strip_prefix("part.")?.split_once('.')?;
    index.parse::<u32>().ok()?;
    covers.parse().ok()
}

/// The key of the snapshot head.
pub(crate) const HEAD_KEY: &str = "head";

fn codec_error(error: impl Into<crate::error::BoxError>) -> ClusterError {
    ClusterError::codec(error)
}

/// A [`Batch`] payload from `writer` and its already encoded [`Op`]s.
pub(crate) fn splice_batch(writer: &str, ops: &[Bytes]) -> Result<Vec<u8>, ClusterError> {
    let body: usize = ops.iter().map(Bytes::len).sum();
    let mut out = Vec::with_capacity(body + writer.len() + 32);
    rmp::encode::write_map_len(&mut out, 2).map_err(codec_error)?;
    rmp::encode::write_str(&mut out, "writer").map_err(codec_error)?;
    rmp::encode::write_str(&mut out, writer).map_err(codec_error)?;
    rmp::encode::write_str(&mut out, "ops").map_err(codec_error)?;
    write_array(&mut out, ops)?;
    Ok(out)
}

/// A [`Part`] payload from encoded [`Stored`] dispatches, [`Epoch`]s and
/// [`Mark`]s.
pub(crate) fn splice_part(
    dispatches: &[Bytes],
    epochs: &[Bytes],
    settled: &[Bytes],
) -> Result<Vec<u8>, ClusterError> {
    let body: usize = dispatches
        .iter()
        .chain(epochs)
        .chain(settled)
        .map(Bytes::len)
        .sum();
    let mut out = Vec::with_capacity(body + 48);
    rmp::encode::write_map_len(&mut out, 3).map_err(codec_error)?;
    rmp::encode::write_str(&mut out, "dispatches").map_err(codec_error)?;
    write_array(&mut out, dispatches)?;
    rmp::encode::write_str(&mut out, "epochs").map_err(codec_error)?;
    write_array(&mut out, epochs)?;
    rmp::encode::write_str(&mut out, "settled").map_err(codec_error)?;
    write_array(&mut out, settled)?;
    Ok(out)
}

fn write_array(out: &mut Vec<u8>, items: &[Bytes]) -> Result<(), ClusterError> {
    let len = u32::try_from(items.len()).map_err(codec_error)?;
    rmp::encode::write_array_len(out, len).map_err(codec_error)?;
    for item in items {
        out.extend_from_slice(item);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use awaken_actors::contract::RunDispatchStatus;
    use awaken_actors::ids::{DispatchId, RunId};
    use awaken_actors::mailbox::MarkDigest;

    use super::*;
    use crate::codec;

    fn dispatch() -> RunDispatch {
        RunDispatch::new(ThreadId::new("t").unwrap(), RunId::new("r").unwrap(), 3, 7)
    }

    #[test]
    fn part_keys_name_their_snapshot() {
        assert_eq!(part_covers(&part_key(1234, 7)), Some(1234));
        for other in [
            HEAD_KEY,
            "part.",
            "part.12",
            "part.x.0",
            "part.12.y",
            "parts.1.0",
        ] {
            assert_eq!(part_covers(other), None, "{other}");
        }
    }

    #[test]
    fn a_spliced_batch_decodes_as_the_ops_it_was_made_of() {
        let ops = vec![
            Op {
                id: 1,
                command: Command::Cancel {
                    dispatch_id: DispatchId::new("d").unwrap(),
                    now_ms: 9,
                },
            },
            Op {
                id: 2,
                command: Command::Gc {
                    ttl_ms: 5,
                    now_ms: 6,
                    dedupe_window_ms: Some(4),
                    max_settled: None,
                },
            },
        ];
        let encoded: Vec<Bytes> = ops.iter().map(|op| codec::encode(op).unwrap()).collect();
        let batch: Batch = codec::decode(&splice_batch("node-1", &encoded).unwrap()).unwrap();
        assert_eq!(batch.writer, "node-1");
        assert_eq!(batch.ops, ops);
    }

    #[test]
    fn a_spliced_part_decodes_as_its_dispatches_and_epochs() {
        let stored = Stored {
            seq: 4,
            dispatch: dispatch(),
            input: None,
        };
        let epoch = Epoch {
            thread_id: ThreadId::new("t").unwrap(),
            epoch: 2,
        };
        let mark = Mark {
            digest: MarkDigest::of_key("k"),
            status: RunDispatchStatus::Acked,
            at_ms: 7,
        };
        let part: Part = codec::decode(
            &splice_part(
                &[codec::encode(&stored).unwrap()],
                &[codec::encode(&epoch).unwrap()],
                &[codec::encode(&mark).unwrap()],
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(part.dispatches, [stored]);
        assert_eq!(part.epochs, [epoch]);
        assert_eq!(part.settled, [mark]);
    }
}
