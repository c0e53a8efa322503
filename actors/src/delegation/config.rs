//! The `delegation` section of an agent spec: how its delegate calls wait.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::contract::PluginConfigKey;

/// How a delegating agent waits for its delegates (the spec's `delegation` section).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct DelegationConfig {
    /// Longest one execution of a delegate call waits for the child run, in
    /// milliseconds; time the child spends waiting for a human does not count. On
    /// expiry the child run is cancelled and the call fails with `delegate_timeout`.
    #[schemars(range(min = 1))]
    pub timeout_ms: u64,
    /// Whether the child's events are forwarded into the parent's stream, as the
    /// delegate call's `delegate-run` activity.
    pub stream_events: bool,
    /// How often the child's record is read while its events do not say it
    /// stopped, in milliseconds: the fallback when events are lost (an owner
    /// failing over).
    #[schemars(range(min = 10))]
    pub poll_interval_ms: u64,
}

impl Default for DelegationConfig {
    fn default() -> Self {
        Self {
            timeout_ms: 300_000,
            stream_events: true,
            poll_interval_ms: 1_000,
        }
    }
}

impl DelegationConfig {
    /// [`Self::timeout_ms`] as a duration.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms.max(1))
    }

    /// [`Self::poll_interval_ms`] as a duration.
    pub fn poll_interval(&self) -> Duration {
        Duration::from_millis(self.poll_interval_ms.max(10))
    }
}

/// Binds [`DelegationConfig`] to the `delegation` section of an agent spec.
#[derive(Debug)]
pub struct DelegationConfigKey;

impl PluginConfigKey for DelegationConfigKey {
    const KEY: &'static str = "delegation";
    type Config = DelegationConfig;
}
