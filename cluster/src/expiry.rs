//! Looking for server-side expiries when they are due: entries with a bucket's
//! `max_age` leave no event when they expire, so a node computes when they should
//! (the server's write time plus the TTL) and looks then. The server decides; an
//! entry still there is looked for again after a pause that doubles, so a server
//! whose expiry timer lags, or whose clock runs behind this node's, costs a few
//! looks rather than a busy loop.

use std::time::{Duration, SystemTime};

use awaken_actors::backoff::Backoff;

/// The first pause before looking again for an entry still there past its expiry.
pub(crate) const EXPIRY_RECHECK: Duration = Duration::from_millis(50);

/// The pauses before looking again for an entry that outlived its expiry: from
/// [`EXPIRY_RECHECK`], doubling up to `max` (never below the first).
pub(crate) fn rechecks(max: Duration) -> Backoff {
    Backoff::new(EXPIRY_RECHECK, max.max(EXPIRY_RECHECK))
}

/// How long from `now` until `at`; `None` when `at` is not after `now`.
pub(crate) fn time_left(at: SystemTime, now: SystemTime) -> Option<Duration> {
    at.duration_since(now).ok().filter(|left| !left.is_zero())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn rechecks_double_up_to_the_cap_and_never_below_the_first() {
        let mut recheck = rechecks(250 * MS);
        let pauses: Vec<Duration> = (0..5).map(|_| recheck.next_pause()).collect();
        assert_eq!(pauses, [50 * MS, 100 * MS, 200 * MS, 250 * MS, 250 * MS]);
        assert_eq!(rechecks(MS).next_pause(), EXPIRY_RECHECK);
    }

    #[test]
    fn an_expiry_that_has_passed_leaves_no_time() {
        let now = SystemTime::now();
        assert_eq!(time_left(now + 300 * MS, now), Some(300 * MS));
        assert_eq!(time_left(now, now), None);
        assert_eq!(time_left(now - 300 * MS, now), None);
    }
}
