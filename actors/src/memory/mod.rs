//! A node's memory budget: how many bytes each cache may keep before it gives
//! memory back, and how many the work a node admits may take (DESIGN.md invariant
//! 6; decision 0089).
//!
//! Caches whose contents another place holds (warm thread cores: the store;
//! buffers of ended runs' events: the run records; settled dispatches: the runs
//! they started) are evicted oldest first past their share. What only memory
//! holds — active runs and the input they wait on — cannot be evicted, so the
//! node refuses new work past the admitted share instead.

mod admission;
mod budget;
mod footprint;
mod meter;

pub use admission::{Charge, Held, RUN_BYTES, Refused, input_bytes, run_bytes};
pub use budget::{BudgetError, MemoryBudget, Share};
pub use footprint::{Footprint, message_bytes};
pub use meter::{CacheMeter, NodeMemory};
