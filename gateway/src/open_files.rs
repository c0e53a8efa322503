//! The process's limit of open files: every connection is one, so a node serving
//! `server.max_connections` needs at least that many, with room for its own
//! files and connections (store, NATS, MCP servers).
//!
//! Many systems start processes with a soft limit of 1,024 and a far higher hard
//! one; `main` raises the soft limit to the hard one before anything runs
//! ([`raise_to_hard_limit`]), as servers commonly do.

/// Descriptors kept for the node's own use besides its HTTP connections.
pub const RESERVED: u64 = 256;

/// Raises the soft limit of open files to the hard one; the limit in effect
/// after, or `None` where it is unknown or unlimited.
pub fn raise_to_hard_limit() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
        let limit = getrlimit(Resource::Nofile);
        if let (Some(current), Some(maximum)) = (limit.current, limit.maximum)
            && current < maximum
        {
            let raised = Rlimit {
                current: Some(maximum),
                maximum: Some(maximum),
            };
            if let Err(error) = setrlimit(Resource::Nofile, raised) {
                tracing::debug!(%error, current, maximum, "the open-file limit stays as it was");
            }
        }
        current()
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// The soft limit of open files in effect, `None` where it is unknown or unlimited.
pub fn current() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        rustix::process::getrlimit(rustix::process::Resource::Nofile).current
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// The limit in effect and the descriptors needed, when the limit cannot hold
/// `max_connections` and the [`RESERVED`] ones besides.
pub fn shortfall(max_connections: usize) -> Option<(u64, u64)> {
    let limit = current()?;
    let needed = u64::try_from(max_connections)
        .unwrap_or(u64::MAX)
        .saturating_add(RESERVED);
    (limit < needed).then_some((limit, needed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_holds_the_connections_and_a_reserve_or_says_so() {
        let Some(limit) = raise_to_hard_limit() else {
            return;
        };
        assert!(shortfall(0).is_none() || limit < RESERVED);
        let too_many = usize::try_from(limit).unwrap_or(usize::MAX);
        assert_eq!(
            shortfall(too_many),
            Some((limit, limit.saturating_add(RESERVED)))
        );
    }
}
