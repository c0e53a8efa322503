//! The hasher of the runtime's own in-memory maps (threads, runs, dispatches,
//! event buffers, state keys).
//!
//! The standard library's SipHash cost about 5 % of a run's instructions through
//! these maps; foldhash is several times cheaper and, seeded at random per process
//! and per map, still keeps an outsider from precomputing colliding ids (see
//! decision 0032).

/// Builds the hasher of a [`FastHashMap`] or [`FastDashMap`].
pub type FastHashState = foldhash::fast::RandomState;

/// A `HashMap` with the runtime's hasher.
pub type FastHashMap<K, V> = std::collections::HashMap<K, V, FastHashState>;

/// A `HashSet` with the runtime's hasher.
pub type FastHashSet<T> = std::collections::HashSet<T, FastHashState>;

/// A `DashMap` with the runtime's hasher.
pub type FastDashMap<K, V> = dashmap::DashMap<K, V, FastHashState>;
