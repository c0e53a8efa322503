//! Wall-clock time for the timeout policy, replaceable in tests.

use std::time::{SystemTime, UNIX_EPOCH};

/// A source of wall-clock time in unix milliseconds.
///
/// [`StopConditionPlugin`](super::StopConditionPlugin) reads it at run start and at
/// every step end; tests hand it a manual clock instead of sleeping.
pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since the unix epoch.
    fn now_ms(&self) -> u64;
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        // A clock set before 1970 reads as 0; the timeout then measures from 0 too.
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }
}
