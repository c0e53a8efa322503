//! `[node]`: what a node may take of its machine — its memory budget, from the
//! file, else from its container's memory limit, else a fixed default.

use std::path::Path;

use awaken_actors::memory::MemoryBudget;
use bytesize::ByteSize;
use serde::{Deserialize, Serialize};

use super::file::ConfigError;

/// The `[node]` section.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NodeConfig {
    /// The bytes the node's caches and admitted work may use (`"768MiB"`,
    /// `"1Gi"`, or a number of bytes); three quarters of the container's memory
    /// limit when unset and there is one, else 768 MiB.
    pub memory_budget: Option<ByteSize>,
}

/// Where a node's budget came from (logged at start).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetOrigin {
    /// `node.memory_budget`.
    Configured,
    /// Three quarters of this container memory limit, in bytes.
    ContainerLimit(u64),
    /// No setting and no container limit.
    Default,
}

impl NodeConfig {
    /// The node's budget and where it came from; `cgroup_root` is where the
    /// cgroup file systems are mounted (`/sys/fs/cgroup`), `own_cgroup` what
    /// `/proc/self/cgroup` says.
    pub fn memory_budget(
        &self,
        cgroup_root: &Path,
        own_cgroup: &str,
    ) -> Result<(MemoryBudget, BudgetOrigin), ConfigError> {
        if let Some(size) = self.memory_budget {
            let budget = MemoryBudget::new(size.as_u64()).map_err(|_| {
                ConfigError::new(format!(
                    "node.memory_budget must be at least {} (one run and the node's caches), got {}",
                    ByteSize(MemoryBudget::MINIMUM).display().iec(),
                    size.display().iec(),
                ))
            })?;
            return Ok((budget, BudgetOrigin::Configured));
        }
        Ok(match container_limit(cgroup_root, own_cgroup) {
            Some(limit) => (
                MemoryBudget::within_limit(limit),
                BudgetOrigin::ContainerLimit(limit),
            ),
            None => (MemoryBudget::default(), BudgetOrigin::Default),
        })
    }
}

/// Limits at or above this are "no limit" (cgroup v1 writes the largest page
/// multiple below `i64::MAX`).
const UNLIMITED: u64 = 1 << 62;

/// The memory limit of the process's cgroup, v2 or v1: its own cgroup's file
/// first, then the mount's root (a container sees its cgroup as the root).
pub fn container_limit(cgroup_root: &Path, own_cgroup: &str) -> Option<u64> {
    let mut candidates = Vec::new();
    for line in own_cgroup.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let path = path.trim_start_matches('/');
        if controllers.is_empty() {
            for mount in ["", "unified"] {
                let base = cgroup_root.join(mount);
                candidates.push(base.join(path).join("memory.max"));
                candidates.push(base.join("memory.max"));
            }
        } else if controllers.split(',').any(|c| c == "memory") {
            let base = cgroup_root.join("memory");
            candidates.push(base.join(path).join("memory.limit_in_bytes"));
            candidates.push(base.join("memory.limit_in_bytes"));
        }
    }
    candidates.into_iter().find_map(|file| {
        let text = std::fs::read_to_string(file).ok()?;
        let limit: u64 = text.trim().parse().ok()?;
        (limit < UNLIMITED).then_some(limit)
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const MIB: u64 = 1024 * 1024;

    fn write(root: &Path, file: &str, text: &str) {
        let path = root.join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn a_v1_memory_cgroup_of_the_process_gives_the_limit() {
        let root = tempfile::tempdir().unwrap();
        write(
            root.path(),
            "memory/memory.limit_in_bytes",
            "9223372036854771712\n",
        );
        write(
            root.path(),
            "memory/pods/a/memory.limit_in_bytes",
            "1073741824\n",
        );
        let own = "4:memory:/pods/a\n3:cpuset:/\n0::/\n";
        assert_eq!(container_limit(root.path(), own), Some(1024 * MIB));
        let (budget, origin) = NodeConfig::default()
            .memory_budget(root.path(), own)
            .unwrap();
        assert_eq!(origin, BudgetOrigin::ContainerLimit(1024 * MIB));
        assert_eq!(budget.total(), 768 * MIB);
    }

    #[test]
    fn a_v2_limit_is_read_and_max_is_no_limit() {
        let root = tempfile::tempdir().unwrap();
        write(root.path(), "memory.max", "536870912\n");
        assert_eq!(container_limit(root.path(), "0::/\n"), Some(512 * MIB));
        write(root.path(), "memory.max", "max\n");
        assert_eq!(container_limit(root.path(), "0::/\n"), None);
        let v1_unlimited = tempfile::tempdir().unwrap();
        write(
            v1_unlimited.path(),
            "memory/memory.limit_in_bytes",
            "9223372036854771712\n",
        );
        assert_eq!(container_limit(v1_unlimited.path(), "4:memory:/\n"), None);
    }

    #[test]
    fn without_a_limit_or_a_setting_the_default_holds() {
        let root = tempfile::tempdir().unwrap();
        let (budget, origin) = NodeConfig::default()
            .memory_budget(root.path(), "")
            .unwrap();
        assert_eq!(
            (budget, origin),
            (MemoryBudget::default(), BudgetOrigin::Default)
        );
    }

    #[test]
    fn a_setting_wins_over_the_container() {
        let root = tempfile::tempdir().unwrap();
        write(root.path(), "memory.max", "536870912\n");
        let config = NodeConfig {
            memory_budget: Some(ByteSize::mib(300)),
        };
        let (budget, origin) = config.memory_budget(root.path(), "0::/\n").unwrap();
        assert_eq!(
            (budget.total(), origin),
            (300 * MIB, BudgetOrigin::Configured)
        );
    }

    #[test]
    fn a_budget_below_the_minimum_names_the_key_and_the_minimum() {
        let config = NodeConfig {
            memory_budget: Some(ByteSize::mib(1)),
        };
        let error = config
            .memory_budget(Path::new("/nonexistent"), "")
            .unwrap_err();
        let text = error.to_string();
        assert!(text.contains("node.memory_budget"), "{text}");
        assert!(text.contains("32.0 MiB"), "{text}");
    }
}
