//! Where a run's events go: sequence numbers, the node's event hub, and the sink
//! of whoever is currently attached to the run.

use std::cell::RefCell;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::mpsc;

use crate::contract::{AgentEvent, StreamEvent, TraceContext};
use crate::event_sink::EventSink;
use crate::ids::{RunId, ThreadId};

/// Receives every event of every run on the node, in order per run: SSE replay
/// buffers and cross-node fan-out hang off it. Must not block.
pub trait EventHub: Send + Sync {
    /// One event of `run_id` on `thread_id`, emitted in the activation whose
    /// exported span is `trace`; a hub that keeps it keeps the shared copy (a
    /// clone of the `Arc`), so buffers and followers never copy events.
    fn publish(
        &self,
        thread_id: &ThreadId,
        run_id: &RunId,
        event: &Arc<StreamEvent>,
        trace: Option<&TraceContext>,
    );

    /// An activation of `run_id` stopped on this node without ending: its thread
    /// actor was fenced off or stopped mid-run. The run goes on from its last
    /// checkpoint wherever the thread is activated next, so nobody here may wait
    /// for this activation's end any longer.
    fn abandoned(&self, _thread_id: &ThreadId, _run_id: &RunId) {}
}

/// A hub that drops everything, for runtimes nobody observes globally.
#[derive(Debug, Default, Clone, Copy)]
pub struct NullEventHub;

impl EventHub for NullEventHub {
    fn publish(
        &self,
        _thread_id: &ThreadId,
        _run_id: &RunId,
        _event: &Arc<StreamEvent>,
        _trace: Option<&TraceContext>,
    ) {
    }
}

struct Inner {
    next_seq: u64,
    /// The exported span of the activation emitting, passed to the hub.
    trace: Option<TraceContext>,
    sink: Option<Arc<dyn EventSink>>,
    /// Set once the sink was slow: later events queue behind the pending one.
    pump: Option<mpsc::UnboundedSender<AgentEvent>>,
    /// Events stamped but not delivered yet, while the run is not recorded.
    held: Option<Vec<Arc<StreamEvent>>>,
}

/// Stamps a run's events with `seq` and a timestamp and delivers them, in order, to
/// the hub and to the attached sink.
///
/// Emission is synchronous and never blocks. A sink that accepts an event at once
/// (in-memory collectors, channels) is called in place; the first time a sink is not
/// ready, a forwarding task takes over that event and every later one, in order, so a
/// slow sink cannot stall the thread actor.
pub(crate) struct RunEmitter {
    thread_id: ThreadId,
    run_id: RunId,
    hub: Arc<dyn EventHub>,
    inner: Mutex<Inner>,
}

impl RunEmitter {
    pub(crate) fn new(
        thread_id: ThreadId,
        run_id: RunId,
        hub: Arc<dyn EventHub>,
        next_seq: u64,
    ) -> Self {
        Self {
            thread_id,
            run_id,
            hub,
            inner: Mutex::new(Inner {
                next_seq,
                trace: None,
                sink: None,
                pump: None,
                held: None,
            }),
        }
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Critical sections never panic midway; a poisoned lock still holds
        // consistent data.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Sends future events to `sink` (replacing any earlier one).
    pub(crate) fn attach(&self, sink: Arc<dyn EventSink>) {
        let mut inner = self.inner();
        inner.sink = Some(sink);
        inner.pump = None;
    }

    /// Stops sending events to the attached sink.
    pub(crate) fn detach(&self) {
        let mut inner = self.inner();
        inner.sink = None;
        inner.pump = None;
    }

    /// Marks the events emitted from now on as the activation `trace`'s.
    pub(crate) fn trace_with(&self, trace: TraceContext) {
        self.inner().trace = Some(trace);
    }

    /// The sequence number the next event will get.
    pub(crate) fn next_seq(&self) -> u64 {
        self.inner().next_seq
    }

    /// Holds the events emitted from now on (stamped, in order) until
    /// [`release`](Self::release) or [`discard`](Self::discard).
    pub(crate) fn hold(&self) {
        self.inner().held.get_or_insert_with(Vec::new);
    }

    /// Delivers the held events, in order, and stops holding.
    pub(crate) fn release(&self) {
        let mut inner = self.inner();
        let Some(held) = inner.held.take() else {
            return;
        };
        for stamped in held {
            self.deliver_stamped(&mut inner, stamped);
        }
    }

    /// Drops the held events undelivered and stops holding.
    pub(crate) fn discard(&self) {
        self.inner().held = None;
    }

    /// Emits one event.
    pub(crate) fn emit(&self, event: AgentEvent) {
        let mut inner = self.inner();
        let seq = inner.next_seq;
        inner.next_seq += 1;
        let stamped = Arc::new(StreamEvent::new(seq, now_rfc3339(), event));
        if let Some(held) = &mut inner.held {
            held.push(stamped);
            return;
        }
        self.deliver_stamped(&mut inner, stamped);
    }

    /// Publishes `stamped` to the hub and hands it to the sink, if any.
    fn deliver_stamped(&self, inner: &mut Inner, stamped: Arc<StreamEvent>) {
        self.hub.publish(
            &self.thread_id,
            &self.run_id,
            &stamped,
            inner.trace.as_ref(),
        );
        if inner.sink.is_none() && inner.pump.is_none() {
            return;
        }
        // The sink takes the event by value: it is copied only if the hub kept it.
        let event =
            Arc::try_unwrap(stamped).map_or_else(|shared| shared.event.clone(), |own| own.event);
        deliver(inner, event);
    }
}

fn deliver(inner: &mut Inner, event: AgentEvent) {
    if let Some(pump) = &inner.pump {
        if pump.send(event).is_err() {
            inner.pump = None;
            inner.sink = None;
        }
        return;
    }
    let Some(sink) = inner.sink.clone() else {
        return;
    };
    let Some(event) = sink.try_emit(event) else {
        return;
    };
    let forward = Arc::clone(&sink);
    let mut delivery = Box::pin(async move { sink.emit(event).await });
    if crate::inline::poll_once(delivery.as_mut()).is_ready() {
        return;
    }
    // The sink was not ready: a forwarding task finishes this delivery and owns the
    // order of every later one.
    let (tx, mut rx) = mpsc::unbounded_channel::<AgentEvent>();
    tokio::spawn(async move {
        delivery.await;
        while let Some(next) = rx.recv().await {
            forward.emit(next).await;
        }
    });
    inner.pump = Some(tx);
}

/// The current time in RFC 3339 with milliseconds. A run emits several events per
/// millisecond, so each worker thread formats a given millisecond once and its
/// events share that text.
fn now_rfc3339() -> Arc<str> {
    thread_local! {
        static LAST: RefCell<(u128, Option<Arc<str>>)> = const { RefCell::new((u128::MAX, None)) };
    }
    let now = SystemTime::now();
    let Ok(since_epoch) = now.duration_since(UNIX_EPOCH) else {
        return humantime::format_rfc3339_millis(now).to_string().into();
    };
    let millis = since_epoch.as_millis();
    LAST.with_borrow_mut(|(last_millis, text)| match text {
        Some(text) if *last_millis == millis => Arc::clone(text),
        _ => {
            let fresh: Arc<str> = humantime::format_rfc3339_millis(now).to_string().into();
            *text = Some(Arc::clone(&fresh));
            *last_millis = millis;
            fresh
        }
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use async_trait::async_trait;
    use tokio::sync::Notify;

    use super::*;

    fn text(event: &AgentEvent) -> String {
        match event {
            AgentEvent::TextDelta { delta } => delta.clone(),
            other => format!("{other:?}"),
        }
    }

    /// Takes every event at once except `slow`, which waits for `release`.
    struct GatedSink {
        release: Notify,
        out: mpsc::UnboundedSender<String>,
    }

    #[async_trait]
    impl EventSink for GatedSink {
        async fn emit(&self, event: AgentEvent) {
            if text(&event) == "slow" {
                self.release.notified().await;
            }
            let _ = self.out.send(text(&event));
        }

        fn try_emit(&self, event: AgentEvent) -> Option<AgentEvent> {
            if text(&event) == "slow" {
                return Some(event);
            }
            let _ = self.out.send(text(&event));
            None
        }
    }

    #[tokio::test]
    async fn events_a_sink_takes_at_once_still_wait_behind_a_slow_one() {
        let (out, mut received) = mpsc::unbounded_channel();
        let sink = Arc::new(GatedSink {
            release: Notify::new(),
            out,
        });
        let emitter = RunEmitter::new(
            ThreadId::new("t").unwrap(),
            RunId::new("r").unwrap(),
            Arc::new(NullEventHub),
            0,
        );
        emitter.attach(sink.clone());
        for delta in ["first", "slow", "a", "b"] {
            emitter.emit(AgentEvent::TextDelta {
                delta: delta.into(),
            });
        }
        assert_eq!(received.recv().await.unwrap(), "first");
        assert!(
            received.try_recv().is_err(),
            "nothing passes the slow event"
        );
        sink.release.notify_one();
        let mut rest = Vec::new();
        for _ in 0..3 {
            rest.push(received.recv().await.unwrap());
        }
        assert_eq!(rest, ["slow", "a", "b"]);
    }

    /// Records the seq and text of every event it is given.
    #[derive(Default)]
    struct SeqHub(Mutex<Vec<(u64, String)>>);

    impl EventHub for SeqHub {
        fn publish(
            &self,
            _thread_id: &ThreadId,
            _run_id: &RunId,
            event: &Arc<StreamEvent>,
            _trace: Option<&TraceContext>,
        ) {
            self.0.lock().unwrap().push((event.seq, text(&event.event)));
        }
    }

    fn delta(text: &str) -> AgentEvent {
        AgentEvent::TextDelta { delta: text.into() }
    }

    #[test]
    fn held_events_go_out_in_order_on_release_and_never_on_discard() {
        let hub = Arc::new(SeqHub::default());
        let emitter = RunEmitter::new(
            ThreadId::new("t").unwrap(),
            RunId::new("r").unwrap(),
            hub.clone(),
            0,
        );
        let (out, mut sink_got) = mpsc::unbounded_channel();
        emitter.attach(Arc::new(GatedSink {
            release: Notify::new(),
            out,
        }));
        emitter.hold();
        emitter.emit(delta("a"));
        emitter.emit(delta("b"));
        assert!(hub.0.lock().unwrap().is_empty());
        assert!(sink_got.try_recv().is_err());
        emitter.release();
        emitter.emit(delta("c"));
        let seen = |hub: &SeqHub| hub.0.lock().unwrap().clone();
        let expected: Vec<(u64, String)> = vec![(0, "a".into()), (1, "b".into()), (2, "c".into())];
        assert_eq!(seen(&hub), expected);
        let delivered: Vec<String> = (0..3).map(|_| sink_got.try_recv().unwrap()).collect();
        assert_eq!(delivered, ["a", "b", "c"]);

        emitter.hold();
        emitter.emit(delta("unseen"));
        emitter.discard();
        emitter.release();
        emitter.emit(delta("d"));
        let last = seen(&hub).pop().unwrap();
        assert_eq!(last, (4, "d".into()), "the discarded event kept its seq");
        assert_eq!(seen(&hub).len(), 4);
    }

    fn format(time: SystemTime) -> String {
        humantime::format_rfc3339_millis(time).to_string()
    }

    #[test]
    fn timestamps_are_the_current_millisecond_also_when_reused() {
        for _ in 0..1000 {
            let before = format(SystemTime::now());
            let stamped = now_rfc3339();
            let after = format(SystemTime::now());
            // Same fixed-width format, so text order is time order.
            assert!(
                *before <= *stamped && *stamped <= *after,
                "{before} {stamped} {after}"
            );
        }
    }
}
