//! `MemoryBudget`: the bytes a node may use, and each cache's share of them.

/// One mebibyte.
const MIB: u64 = 1024 * 1024;

/// What a node's budget is divided among.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Share {
    /// Cores of idle threads kept so their next run need not read the store.
    WarmThreads,
    /// Event buffers of ended runs, for clients that reconnect.
    EndedRuns,
    /// What the mailbox remembers of settled dispatches (deduplication).
    SettledDispatches,
    /// Active runs and the input queued for them: refused past it, never evicted.
    Admitted,
}

impl Share {
    /// Every share, in the order metrics list them.
    pub const ALL: [Share; 4] = [
        Share::WarmThreads,
        Share::EndedRuns,
        Share::SettledDispatches,
        Share::Admitted,
    ];

    /// The name metrics and logs use (`awaken_memory_bytes{cache=...}`).
    pub fn name(self) -> &'static str {
        match self {
            Share::WarmThreads => "warm_threads",
            Share::EndedRuns => "ended_runs",
            Share::SettledDispatches => "settled_dispatches",
            Share::Admitted => "admitted",
        }
    }

    /// Percent of the budget. The 20 % left over is the node's own: connections,
    /// the runtime, allocator slack and what no meter counts (decision 0089).
    fn percent(self) -> u64 {
        match self {
            Share::WarmThreads => 30,
            Share::EndedRuns => 10,
            Share::SettledDispatches => 10,
            Share::Admitted => 30,
        }
    }
}

/// Why a budget cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "memory budget {bytes} bytes is below the minimum of {} MiB (one run and the node's caches)",
    MemoryBudget::MINIMUM / MIB
)]
pub struct BudgetError {
    /// The refused budget.
    pub bytes: u64,
}

/// The bytes a node may use, divided into [`Share`]s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryBudget {
    total: u64,
}

impl MemoryBudget {
    /// The smallest usable budget: its admitted share holds a run with a long
    /// history, and every cache keeps a few entries.
    pub const MINIMUM: u64 = 32 * MIB;

    /// The budget of a node that knows no limit of its container: what the
    /// chart's default limit leaves after the process's own use (decision 0089).
    pub const DEFAULT: u64 = 768 * MIB;

    /// A budget of `bytes`, refused below [`Self::MINIMUM`].
    pub fn new(bytes: u64) -> Result<Self, BudgetError> {
        if bytes < Self::MINIMUM {
            return Err(BudgetError { bytes });
        }
        Ok(Self { total: bytes })
    }

    /// The default budget under a container memory limit of `limit` bytes: three
    /// quarters of it (the rest is code, stacks and allocator slack), at least
    /// the minimum.
    pub fn within_limit(limit: u64) -> Self {
        Self {
            total: (limit / 4 * 3).max(Self::MINIMUM),
        }
    }

    /// The whole budget in bytes.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The bytes `share` may hold.
    pub fn share(&self, share: Share) -> u64 {
        self.total / 100 * share.percent()
    }
}

impl Default for MemoryBudget {
    fn default() -> Self {
        Self {
            total: Self::DEFAULT,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_below_the_minimum_are_refused_naming_it() {
        let error = MemoryBudget::new(MemoryBudget::MINIMUM - 1).unwrap_err();
        assert!(error.to_string().contains("minimum of 32 MiB"), "{error}");
        assert!(MemoryBudget::new(MemoryBudget::MINIMUM).is_ok());
    }

    #[test]
    fn shares_leave_a_fifth_to_the_node() {
        let budget = MemoryBudget::new(1000 * MIB).unwrap();
        let shared: u64 = Share::ALL.iter().map(|s| budget.share(*s)).sum();
        assert_eq!(shared, budget.total() / 100 * 80);
    }

    #[test]
    fn a_container_limit_gives_three_quarters() {
        assert_eq!(
            MemoryBudget::within_limit(1024 * MIB).total(),
            MemoryBudget::DEFAULT
        );
        assert_eq!(
            MemoryBudget::within_limit(MIB).total(),
            MemoryBudget::MINIMUM
        );
    }
}
