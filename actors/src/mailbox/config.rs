//! `MailboxConfig`: lease timing, sweeps, garbage collection and retry back-off.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::memory::{NodeMemory, Share};

/// Marks of settled dispatches kept at most: about 100 MB
/// ([`MARK_BYTES`](super::MARK_BYTES) each); a node's settled share
/// (`memory::Share::SettledDispatches`) caps it lower, to about 800,000 on the
/// default memory budget ([`MailboxConfig::within`]).
pub const DEFAULT_MAX_SETTLED: usize = 1_000_000;

/// What a garbage collection removes: the inputs of a `gc` command, so every
/// replica of a replicated mailbox removes the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GcRules {
    /// Dead letters older than this go, ms.
    pub ttl_ms: u64,
    /// Marks of dispatches settled longer ago than this go, ms.
    pub dedupe_window_ms: u64,
    /// Beyond this many marks the oldest go.
    pub max_settled: usize,
}

/// Tunables of the mailbox, with the book's defaults.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MailboxConfig {
    /// Lease of a claim on an active run, ms.
    pub lease_ms: u64,
    /// Lease of a claim on a run waiting for a human, ms.
    pub suspended_lease_ms: u64,
    /// How often a worker renews the lease of a running dispatch.
    #[serde(with = "humantime_serde")]
    pub lease_renewal_interval: Duration,
    /// How often expired leases are reclaimed.
    #[serde(with = "humantime_serde")]
    pub sweep_interval: Duration,
    /// How often dead letters and marks of settled dispatches are collected.
    #[serde(with = "humantime_serde")]
    pub gc_interval: Duration,
    /// How long dead letters are kept (other dispatches leave as they settle).
    #[serde(with = "humantime_serde")]
    pub gc_ttl: Duration,
    /// How long a settled dispatch's id and dedupe key still refuse a duplicate.
    #[serde(with = "humantime_serde")]
    pub dedupe_window: Duration,
    /// The most marks of settled dispatches remembered, oldest going first (a
    /// dispatch leaves one, two with a dedupe key): the window is shorter when
    /// more settle within it.
    pub max_settled: usize,
    /// Delivery attempts before a dispatch is dead-lettered.
    pub default_max_attempts: u32,
    /// Back-off before the first retry, ms; doubles per attempt.
    pub default_retry_delay_ms: u64,
    /// Longest back-off between retries, ms.
    pub max_retry_delay_ms: u64,
}

impl Default for MailboxConfig {
    fn default() -> Self {
        Self {
            lease_ms: 30_000,
            suspended_lease_ms: 600_000,
            lease_renewal_interval: Duration::from_secs(10),
            sweep_interval: Duration::from_secs(30),
            gc_interval: Duration::from_secs(60),
            gc_ttl: Duration::from_secs(24 * 60 * 60),
            dedupe_window: Duration::from_secs(10 * 60),
            max_settled: DEFAULT_MAX_SETTLED,
            default_max_attempts: 5,
            default_retry_delay_ms: 250,
            max_retry_delay_ms: 30_000,
        }
    }
}

impl MailboxConfig {
    /// The back-off after the `attempt`-th failed attempt (1-based):
    /// `default_retry_delay_ms · 2^(attempt−1)`, at most `max_retry_delay_ms`.
    pub fn retry_delay_ms(&self, attempt: u32) -> u64 {
        let delay = crate::backoff::delay(
            Duration::from_millis(self.default_retry_delay_ms),
            attempt.saturating_sub(1),
            Duration::from_millis(self.max_retry_delay_ms),
        );
        u64::try_from(delay.as_millis()).unwrap_or(u64::MAX)
    }

    /// `gc_ttl` in milliseconds.
    pub fn gc_ttl_ms(&self) -> u64 {
        u64::try_from(self.gc_ttl.as_millis()).unwrap_or(u64::MAX)
    }

    /// This configuration on a node with `memory`: at most the marks of settled
    /// dispatches the budget's settled share holds (decision 0089).
    #[must_use]
    pub fn within(mut self, memory: &NodeMemory) -> Self {
        let share = memory.budget().share(Share::SettledDispatches);
        let fits = usize::try_from(share / super::MARK_BYTES).unwrap_or(usize::MAX);
        self.max_settled = self.max_settled.min(fits.max(1));
        self
    }

    /// What a collection by this configuration removes.
    pub fn gc_rules(&self) -> GcRules {
        GcRules {
            ttl_ms: self.gc_ttl_ms(),
            dedupe_window_ms: u64::try_from(self.dedupe_window.as_millis()).unwrap_or(u64::MAX),
            max_settled: self.max_settled,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_budget_keeps_fewer_marks_and_a_large_one_no_more_than_asked() {
        use crate::memory::MemoryBudget;

        let small = NodeMemory::new(MemoryBudget::new(MemoryBudget::MINIMUM).unwrap());
        let kept = MailboxConfig::default().within(&small).max_settled;
        let share = small.budget().share(Share::SettledDispatches);
        assert_eq!(kept as u64, share / super::super::MARK_BYTES);
        let large = NodeMemory::new(MemoryBudget::new(64 * 1024 * 1024 * 1024).unwrap());
        let kept = MailboxConfig::default().within(&large).max_settled;
        assert_eq!(kept, DEFAULT_MAX_SETTLED);
    }

    #[test]
    fn back_off_doubles_up_to_the_cap() {
        let config = MailboxConfig::default();
        let delays: Vec<u64> = (1..=10).map(|a| config.retry_delay_ms(a)).collect();
        assert_eq!(
            delays,
            [250, 500, 1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000]
        );
        assert_eq!(config.retry_delay_ms(u32::MAX), 30_000);
    }

    #[test]
    fn config_reads_durations_and_refuses_unknown_fields() {
        let config: MailboxConfig =
            serde_json::from_str(r#"{"gc_ttl": "2h", "lease_ms": 1000}"#).unwrap();
        assert_eq!(config.gc_ttl, Duration::from_secs(7200));
        assert_eq!(config.lease_ms, 1000);
        assert_eq!(config.default_max_attempts, 5);
        assert!(serde_json::from_str::<MailboxConfig>(r#"{"lease": 1}"#).is_err());
    }
}
