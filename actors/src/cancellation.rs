//! Cooperative cancellation shared by a run, its inference task and its tool
//! calls: tokio-util's token (cancelling any clone cancels all of them; work
//! observes it by polling `is_cancelled` or awaiting `cancelled` in a
//! `select!`), named here because tools receive it in their context.

pub use tokio_util::sync::CancellationToken;
