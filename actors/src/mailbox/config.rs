//! `MailboxConfig`: lease timing, sweeps, garbage collection and retry back-off.

use std::time::Duration;

use serde::{Deserialize, Serialize};

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
    /// How often terminal dispatches are garbage-collected.
    #[serde(with = "humantime_serde")]
    pub gc_interval: Duration,
    /// How long terminal dispatches are kept.
    #[serde(with = "humantime_serde")]
    pub gc_ttl: Duration,
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
