//! Thread calls: reaching a thread's owning node from any node.
//!
//! The owner of shard `n` subscribes to `awaken.shard.<n>.call` while it holds the
//! shard's lease, so a call published there reaches exactly the node that runs the
//! thread, and NATS answers "no responders" while a shard has no owner (during a
//! failover). The subscription is a queue group: while a lease changes hands
//! the old owner may still be subscribed, and each call reaches one of the two
//! (the old one declines and the caller sends again). A call ([`ThreadCall`]) is answered on the caller's inbox by frames
//! ([`CallFrame`]): `Working` heartbeats while it runs (a held decision can take as
//! long as the run it resumed), `Events` chunks for a replay, and a final `Done`.
//! A node answers calls for its own threads in place, without NATS.
//!
//! Cancel, interrupt, status, decisions forwarded by the decision bus and replays of
//! a run's events travel this way.

mod client;
mod host;
mod server;
mod wire;

pub use client::{RouteError, RouterConfig, ThreadRouter};
pub use host::{Answer, ThreadHost};
pub use server::ShardServer;
pub use wire::{CallFrame, CallOutcome, SHARD_SUBJECT_PREFIX, ThreadCall, call_subject};
