//! Wall-clock time in unix milliseconds, the one reading the runtime, the
//! cluster and the gateway stamp records and leases with ([`now_ms`]); in
//! nanoseconds for telemetry's timestamps ([`now_nanos`]); and
//! [`Clock`], the same as a value the timeout policy takes so tests can hand it
//! a manual clock instead of sleeping.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the unix epoch; a clock set before 1970 reads as 0.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Nanoseconds since the unix epoch (OTLP's timestamps); a clock set before
/// 1970 reads as 0.
pub fn now_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// A source of wall-clock time in unix milliseconds.
///
/// [`StopConditionPlugin`](crate::policies::StopConditionPlugin) reads it at run start and at
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
        now_ms()
    }
}
