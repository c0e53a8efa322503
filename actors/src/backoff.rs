//! Back-off: the one rule for how long to wait before trying again.
//!
//! Every retry in the project — a model call, a mailbox dispatch, an A2A push, a
//! NATS stream or consumer that is not there yet, a look for an expired entry —
//! waits a first pause that doubles with each further attempt up to a cap. The
//! rule lives here so the retries agree on it and their tests test one thing.

use std::time::Duration;

/// The pause before retry number `retry` (0 for the first): `first · 2^retry`,
/// at most `cap`.
pub fn delay(first: Duration, retry: u32, cap: Duration) -> Duration {
    let doubled = 1_u32
        .checked_shl(retry)
        .and_then(|factor| first.checked_mul(factor))
        .unwrap_or(Duration::MAX);
    doubled.min(cap)
}

/// The pauses of one retry loop, in order: a loop that holds no attempt count
/// takes its next pause from here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    first: Duration,
    cap: Duration,
    retry: u32,
}

impl Backoff {
    /// Pauses from `first`, doubling up to `cap`.
    pub const fn new(first: Duration, cap: Duration) -> Self {
        Self {
            first,
            cap,
            retry: 0,
        }
    }

    /// The pause to wait now; the next one is twice as long, up to the cap.
    pub fn next_pause(&mut self) -> Duration {
        let pause = delay(self.first, self.retry, self.cap);
        self.retry = self.retry.saturating_add(1);
        pause
    }

    /// Waits the next pause.
    pub async fn wait(&mut self) {
        tokio::time::sleep(self.next_pause()).await;
    }

    /// Starts from the first pause again (the thing retried came back).
    pub fn reset(&mut self) {
        self.retry = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn pauses_double_up_to_the_cap() {
        let mut backoff = Backoff::new(50 * MS, 250 * MS);
        let pauses: Vec<Duration> = (0..5).map(|_| backoff.next_pause()).collect();
        assert_eq!(pauses, [50 * MS, 100 * MS, 200 * MS, 250 * MS, 250 * MS]);
        backoff.reset();
        assert_eq!(backoff.next_pause(), 50 * MS);
    }

    #[test]
    fn a_long_loop_stays_at_the_cap_without_overflowing() {
        assert_eq!(delay(500 * MS, 63, 8_000 * MS), 8_000 * MS);
        assert_eq!(delay(500 * MS, u32::MAX, 8_000 * MS), 8_000 * MS);
        assert_eq!(delay(Duration::MAX, 3, Duration::MAX), Duration::MAX);
        let mut backoff = Backoff::new(MS, 10 * MS);
        for _ in 0..100 {
            backoff.next_pause();
        }
        assert_eq!(backoff.next_pause(), 10 * MS);
    }

    #[test]
    fn the_cap_bounds_even_the_first_pause() {
        assert_eq!(delay(50 * MS, 0, 10 * MS), 10 * MS);
        assert_eq!(delay(50 * MS, 4, 10 * MS), 10 * MS);
    }

    #[test]
    fn a_zero_first_pause_never_waits() {
        assert_eq!(delay(Duration::ZERO, 10, 8_000 * MS), Duration::ZERO);
    }
}
