//! What a node remembers of the records it wrote or was told of, to skip reading
//! them.
//!
//! A thread's operations usually come from the node that owns it, so the record it
//! wrote last is usually still the latest; the mailbox's feed refreshes remembered
//! records and adds those with queued work (the record the next claim changes).
//! Using it is safe because every write is a compare-and-set on the cached
//! revision: a stale entry only costs a failed write and a fresh read. Answers
//! that write nothing are never given from the cache (see
//! `JetStreamMailbox::with_thread`).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// A bounded map; when full, an arbitrary entry makes room.
#[derive(Debug)]
pub(crate) struct Bounded<K, V> {
    entries: Mutex<HashMap<K, V>>,
    capacity: usize,
}

impl<K: Eq + Hash + Clone, V: Clone> Bounded<K, V> {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
            capacity: capacity.max(1),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<K, V>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn get(&self, key: &K) -> Option<V> {
        self.lock().get(key).cloned()
    }

    pub(crate) fn put(&self, key: K, value: V) {
        let mut entries = self.lock();
        if entries.len() >= self.capacity
            && !entries.contains_key(&key)
            && let Some(victim) = entries.keys().next().cloned()
        {
            entries.remove(&victim);
        }
        entries.insert(key, value);
    }

    /// Stores the value `make` builds unless the entry holds one `keep` prefers;
    /// a key without an entry gets one only when `add`.
    pub(crate) fn offer(
        &self,
        key: K,
        add: bool,
        keep: impl FnOnce(&V) -> bool,
        make: impl FnOnce() -> V,
    ) {
        let mut entries = self.lock();
        match entries.get_mut(&key) {
            Some(known) if !keep(known) => *known = make(),
            Some(_) => {}
            None if add => {
                drop(entries);
                self.put(key, make());
            }
            None => {}
        }
    }

    pub(crate) fn forget(&self, key: &K) {
        self.lock().remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stays_within_capacity() {
        let cache = Bounded::new(2);
        for n in 0..10 {
            cache.put(n, n * 10);
        }
        assert_eq!(cache.lock().len(), 2);
        assert_eq!(cache.get(&9), Some(90));
        cache.forget(&9);
        assert_eq!(cache.get(&9), None);
    }

    #[test]
    fn offers_replace_only_what_keep_rejects() {
        let cache = Bounded::new(4);
        cache.offer(1, false, |_| false, || 10);
        assert_eq!(cache.get(&1), None, "not added without `add`");
        cache.offer(1, true, |_| false, || 10);
        assert_eq!(cache.get(&1), Some(10));
        cache.offer(1, true, |known| *known >= 5, || 5);
        assert_eq!(cache.get(&1), Some(10), "kept");
        cache.offer(1, false, |known| *known >= 20, || 20);
        assert_eq!(cache.get(&1), Some(20), "replaced");
    }
}
