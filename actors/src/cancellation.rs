//! Cooperative cancellation shared by a run, its inference task and its tool
//! calls: tokio-util's token. Cancelling any clone cancels all of them; work
//! observes it by polling `is_cancelled` or by awaiting `cancelled` in a
//! `select!`. Re-exported here because tools and phases receive it in their
//! contexts (`ToolContext::cancellation`, `PhaseContext::cancellation`).

pub use tokio_util::sync::CancellationToken;
