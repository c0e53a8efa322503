//! Run events on the wire: the events of one run that wait to be published
//! together go out as one message, a MessagePack array of [`StreamEvent`]s
//! (decision 0077). A message costs the NATS server and every subscriber about
//! the same whatever it holds, and a thread actor emits its events in bursts.

use awaken_actors::contract::{StreamEvent, TraceContext};
use bytes::{BufMut, Bytes, BytesMut};

use crate::codec;
use crate::error::ClusterError;

/// Room left under the server's `max_payload` for a message's headers (a
/// `traceparent` is 70 bytes) and the array's own header.
const HEADROOM: usize = 1024;

/// An event encoded on its own, on its way to NATS.
#[derive(Debug)]
pub(super) struct Outgoing {
    pub(super) subject: String,
    pub(super) payload: Bytes,
    pub(super) trace: Option<TraceContext>,
}

impl Outgoing {
    /// What the event holds while it waits: its subject and encoded payload.
    pub(super) fn bytes(&self) -> u64 {
        (self.subject.len() + self.payload.len()) as u64
    }
}

/// One message: consecutive events of one run with the same trace context.
#[derive(Debug)]
pub(super) struct Batch {
    pub(super) subject: String,
    pub(super) trace: Option<TraceContext>,
    pub(super) payload: Bytes,
}

/// Groups `queued` (in the order they were emitted) into messages: consecutive
/// events of the same run and trace context share one while it stays within
/// `max_payload`. An event larger than that goes alone, as it did before.
pub(super) fn batches(
    queued: impl IntoIterator<Item = Outgoing>,
    max_payload: usize,
) -> Vec<Batch> {
    let limit = max_payload.saturating_sub(HEADROOM);
    let mut out = Vec::new();
    let mut open: Option<(Outgoing, Vec<Bytes>, usize)> = None;
    for event in queued {
        if let Some((first, parts, size)) = &mut open {
            let joins = first.subject == event.subject && first.trace == event.trace;
            if joins && *size + event.payload.len() <= limit {
                *size += event.payload.len();
                parts.push(event.payload);
                continue;
            }
        }
        if let Some((first, parts, _)) = open.take() {
            out.push(seal(first, parts));
        }
        let size = event.payload.len();
        open = Some((event, Vec::new(), size));
    }
    if let Some((first, parts, _)) = open {
        out.push(seal(first, parts));
    }
    out
}

/// The message of `first` followed by `rest`: an array header, then each
/// event's encoding as it is (an array of maps needs no re-encoding).
fn seal(first: Outgoing, rest: Vec<Bytes>) -> Batch {
    let size = first.payload.len() + rest.iter().map(Bytes::len).sum::<usize>();
    let mut payload = BytesMut::with_capacity(size + 5);
    let count = u32::try_from(rest.len() + 1).unwrap_or(u32::MAX);
    // Writing into a BytesMut cannot fail.
    let _ = rmp::encode::write_array_len(&mut (&mut payload).writer(), count);
    payload.extend_from_slice(&first.payload);
    for part in &rest {
        payload.extend_from_slice(part);
    }
    Batch {
        subject: first.subject,
        trace: first.trace,
        payload: payload.freeze(),
    }
}

/// The events of one message on `awaken.events.<run_id>`, in the order they
/// were emitted.
pub fn decode_events(payload: &[u8]) -> Result<Vec<StreamEvent>, ClusterError> {
    codec::decode(payload)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use awaken_actors::contract::AgentEvent;

    use super::*;

    fn event(seq: u64) -> StreamEvent {
        StreamEvent::new(seq, "2026-11-28T00:00:00.000Z", AgentEvent::StepEnd)
    }

    fn outgoing(subject: &str, seq: u64, trace: Option<TraceContext>) -> Outgoing {
        Outgoing {
            subject: subject.to_owned(),
            payload: codec::encode(&event(seq)).unwrap(),
            trace,
        }
    }

    fn seqs(batch: &Batch) -> Vec<u64> {
        decode_events(&batch.payload)
            .unwrap()
            .iter()
            .map(|e| e.seq)
            .collect()
    }

    #[test]
    fn consecutive_events_of_a_run_share_a_message_in_order() {
        let queued = (0..40).map(|seq| outgoing("awaken.events.a", seq, None));
        let out = batches(queued, 1 << 20);
        assert_eq!(out.len(), 1);
        assert_eq!(seqs(&out[0]), (0..40).collect::<Vec<_>>());
    }

    #[test]
    fn a_message_is_the_encoding_of_its_events_as_one_array() {
        let out = batches(
            (0..20).map(|seq| outgoing("awaken.events.a", seq, None)),
            1 << 20,
        );
        let events: Vec<StreamEvent> = (0..20).map(event).collect();
        assert_eq!(out[0].payload, codec::encode(&events).unwrap());
    }

    #[test]
    fn a_lone_event_is_an_array_of_one() {
        let out = batches([outgoing("awaken.events.a", 7, None)], 1 << 20);
        assert_eq!(out.len(), 1);
        assert_eq!(seqs(&out[0]), [7]);
    }

    #[test]
    fn runs_and_trace_contexts_split_messages_and_keep_the_order() {
        let trace =
            TraceContext::parse("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01").unwrap();
        let queued = [
            outgoing("awaken.events.a", 0, None),
            outgoing("awaken.events.a", 1, None),
            outgoing("awaken.events.b", 0, None),
            outgoing("awaken.events.a", 2, None),
            outgoing("awaken.events.a", 3, Some(trace)),
            outgoing("awaken.events.a", 4, Some(trace)),
        ];
        let out = batches(queued, 1 << 20);
        let shape: Vec<(&str, Vec<u64>, bool)> = out
            .iter()
            .map(|b| (b.subject.as_str(), seqs(b), b.trace.is_some()))
            .collect();
        assert_eq!(
            shape,
            [
                ("awaken.events.a", vec![0, 1], false),
                ("awaken.events.b", vec![0], false),
                ("awaken.events.a", vec![2], false),
                ("awaken.events.a", vec![3, 4], true),
            ]
        );
    }

    #[test]
    fn a_message_stays_within_the_servers_payload_limit() {
        let one = outgoing("awaken.events.a", 0, None).payload.len();
        let limit = HEADROOM + 3 * one;
        let out = batches(
            (0..10).map(|seq| outgoing("awaken.events.a", seq, None)),
            limit,
        );
        assert!(out.iter().all(|b| b.payload.len() <= limit));
        let all: Vec<u64> = out.iter().flat_map(seqs).collect();
        assert_eq!(all, (0..10).collect::<Vec<_>>());
        assert_eq!(out.len(), 4);
    }

    #[test]
    fn an_event_over_the_limit_still_goes_alone() {
        let out = batches(
            [
                outgoing("awaken.events.a", 0, None),
                outgoing("awaken.events.a", 1, None),
            ],
            10,
        );
        assert_eq!(out.iter().map(seqs).collect::<Vec<_>>(), [vec![0], vec![1]]);
    }

    #[test]
    fn a_payload_that_is_not_an_array_of_events_is_refused() {
        let single = codec::encode(&event(1)).unwrap();
        assert!(decode_events(&single).is_err());
        assert!(decode_events(b"\xc1").is_err());
    }
}
