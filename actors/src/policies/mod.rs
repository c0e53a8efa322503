//! Stop conditions evaluated at the end of every step.
//!
//! A stop policy that fires writes a [`StopRequest`] into run state; the run loop
//! ends the run with `TerminationReason::Stopped` after the step.

mod max_rounds;

pub use max_rounds::MaxRoundsPlugin;

use crate::contract::StoppedReason;
use crate::state::StateKey;

/// State key: the first stop condition that fired in this run, if any.
#[derive(Debug)]
pub struct StopRequest;

impl StateKey for StopRequest {
    const KEY: &'static str = "__runtime.stop_request";
    type Value = Option<StoppedReason>;
    type Update = StoppedReason;

    /// The first request wins; later ones are ignored.
    fn apply(value: &mut Option<StoppedReason>, update: StoppedReason) {
        value.get_or_insert(update);
    }
}
