//! Request bodies still arriving: how many there are and the bytes they hold,
//! bounded for the whole server by `max_arriving_body_bytes`.
//!
//! A request takes an in-flight place (`max_concurrent_requests`) only once its
//! body has arrived (decision 0083): while a sender takes its time, the request
//! costs the node its connection and the bytes received so far, nothing else.
//! Those are bounded elsewhere (connections per address and in total by the
//! accept loop, each body by `max_body_bytes` and `body_read_timeout_secs`);
//! this is the bound on their sum, so many connections each holding a large,
//! unfinished body cannot exhaust memory.

use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{Semaphore, SemaphorePermit};

/// The server's budget of bytes for bodies still arriving, and its gauges.
#[derive(Debug)]
pub(crate) struct Arriving {
    bytes: Semaphore,
    bodies: Gauge,
    held: Gauge,
}

/// The budget is spent: the body would take the server past
/// `max_arriving_body_bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BudgetSpent;

impl Arriving {
    /// A budget of `limit` bytes; `bodies` and `held` count the bodies arriving
    /// and the bytes they hold.
    pub(crate) fn new(limit: usize, bodies: Gauge, held: Gauge) -> Self {
        Self {
            bytes: Semaphore::new(limit.min(Semaphore::MAX_PERMITS)),
            bodies,
            held,
        }
    }

    /// Counts one body as arriving until the returned guard is dropped.
    pub(crate) fn start(&self) -> ArrivingBody<'_> {
        self.bodies.inc();
        ArrivingBody {
            arriving: self,
            permit: None,
            bytes: 0,
        }
    }
}

/// One body being read: the bytes it holds of the budget, given back on drop.
#[derive(Debug)]
pub(crate) struct ArrivingBody<'a> {
    arriving: &'a Arriving,
    permit: Option<SemaphorePermit<'a>>,
    bytes: usize,
}

impl ArrivingBody<'_> {
    /// Takes `bytes` more of the budget for this body.
    pub(crate) fn hold(&mut self, bytes: usize) -> Result<(), BudgetSpent> {
        if bytes == 0 {
            return Ok(());
        }
        let wanted = u32::try_from(bytes).map_err(|_| BudgetSpent)?;
        let more = self
            .arriving
            .bytes
            .try_acquire_many(wanted)
            .map_err(|_| BudgetSpent)?;
        match &mut self.permit {
            Some(permit) => permit.merge(more),
            None => self.permit = Some(more),
        }
        self.bytes += bytes;
        self.arriving.held.inc_by(gauge_value(bytes));
        Ok(())
    }
}

impl Drop for ArrivingBody<'_> {
    fn drop(&mut self) {
        self.arriving.bodies.dec();
        self.arriving.held.dec_by(gauge_value(self.bytes));
    }
}

fn gauge_value(bytes: usize) -> i64 {
    i64::try_from(bytes).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arriving(limit: usize) -> Arriving {
        Arriving::new(limit, Gauge::default(), Gauge::default())
    }

    #[test]
    fn bodies_share_the_budget_and_give_it_back_when_done() {
        let arriving = arriving(10);
        let mut first = arriving.start();
        let mut second = arriving.start();
        assert_eq!(arriving.bodies.get(), 2);
        assert_eq!(first.hold(6), Ok(()));
        assert_eq!(second.hold(4), Ok(()));
        assert_eq!(arriving.held.get(), 10);
        assert_eq!(second.hold(1), Err(BudgetSpent), "the budget is spent");
        drop(first);
        assert_eq!(arriving.bodies.get(), 1);
        assert_eq!(arriving.held.get(), 4);
        assert_eq!(second.hold(6), Ok(()), "what the first held is free again");
        drop(second);
        assert_eq!((arriving.bodies.get(), arriving.held.get()), (0, 0));
        assert_eq!(arriving.bytes.available_permits(), 10);
    }

    #[test]
    fn nothing_held_costs_nothing() {
        let arriving = arriving(1);
        let mut body = arriving.start();
        assert_eq!(body.hold(0), Ok(()));
        assert_eq!(body.hold(2), Err(BudgetSpent));
        assert_eq!(arriving.held.get(), 0);
    }
}
