//! `StateMap`: the typed, heterogeneous container behind every snapshot.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use super::key::StateKey;

/// Hashes a `TypeId` by taking the hash value it writes; `TypeId`s are already
/// well-distributed, so running them through SipHash again only costs time.
#[derive(Default)]
pub(crate) struct TypeIdHasher(u64);

impl Hasher for TypeIdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // `TypeId` hashes through `write_u64`/`write_u128` on current compilers; fold
        // any other byte stream in so the hasher stays correct if that ever changes.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 ^= n;
    }

    fn write_u128(&mut self, n: u128) {
        // Truncation is intended: fold both halves into the 64-bit hash.
        self.0 ^= (n as u64) ^ ((n >> 64) as u64);
    }
}

/// One value behind its own pointer, shared by snapshots and checkpoints.
pub(crate) type Slot = Arc<dyn Any + Send + Sync>;

/// Values of registered state keys, addressed by key type.
///
/// Each value sits behind its own `Arc`, so cloning the map (which a commit does
/// while snapshots are alive) copies pointers, not values; a value is cloned only
/// when it is written while a snapshot still shares it.
#[derive(Clone, Default)]
pub struct StateMap {
    slots: HashMap<TypeId, Slot, BuildHasherDefault<TypeIdHasher>>,
}

impl StateMap {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether a value for `K` is present.
    pub fn contains<K: StateKey>(&self) -> bool {
        self.slots.contains_key(&TypeId::of::<K>())
    }

    /// The value for `K`, if present.
    pub fn get<K: StateKey>(&self) -> Option<&K::Value> {
        self.slots
            .get(&TypeId::of::<K>())
            .and_then(|slot| slot.downcast_ref::<K::Value>())
    }

    /// A mutable reference to the value for `K`, if present (copy-on-write).
    pub fn get_mut<K: StateKey>(&mut self) -> Option<&mut K::Value> {
        let slot = self.slots.get_mut(&TypeId::of::<K>())?;
        Some(make_mut::<K>(slot))
    }

    /// Inserts a value, replacing any existing one.
    pub fn insert<K: StateKey>(&mut self, value: K::Value) {
        self.slots.insert(TypeId::of::<K>(), Arc::new(value));
    }

    /// Removes and returns the value for `K`.
    pub fn remove<K: StateKey>(&mut self) -> Option<K::Value> {
        let slot = self.slots.remove(&TypeId::of::<K>())?;
        let value = slot.downcast::<K::Value>().ok()?;
        Some(Arc::try_unwrap(value).unwrap_or_else(|shared| (*shared).clone()))
    }

    /// The value for `K`, inserting the default if absent.
    pub fn get_or_insert_default<K: StateKey>(&mut self) -> &mut K::Value {
        let slot = self
            .slots
            .entry(TypeId::of::<K>())
            .or_insert_with(|| Arc::new(K::Value::default()));
        make_mut::<K>(slot)
    }

    /// Makes this map's value for `type_id` the very value `source` holds (a shared
    /// pointer; a later write copies it first). Nothing happens if `source` has none.
    pub(crate) fn share_from(&mut self, source: &StateMap, type_id: TypeId) -> bool {
        match source.slots.get(&type_id) {
            Some(slot) => {
                self.slots.insert(type_id, Arc::clone(slot));
                true
            }
            None => false,
        }
    }

    /// The shared value for `type_id`, if present.
    pub(crate) fn slot(&self, type_id: TypeId) -> Option<&Slot> {
        self.slots.get(&type_id)
    }

    /// Whether this map's value for `type_id` is the very value `other` holds.
    pub(crate) fn shares_with(&self, other: &StateMap, type_id: TypeId) -> bool {
        match (self.slots.get(&type_id), other.slots.get(&type_id)) {
            (Some(mine), Some(theirs)) => Arc::ptr_eq(mine, theirs),
            _ => false,
        }
    }

    /// Number of values held.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether the map holds no values.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
}

/// Gives exclusive access to a slot's value, cloning it first if a snapshot shares it.
fn make_mut<K: StateKey>(slot: &mut Slot) -> &mut K::Value {
    if Arc::get_mut(slot).is_none() {
        let copy = slot.downcast_ref::<K::Value>().cloned().unwrap_or_default();
        *slot = Arc::new(copy);
    }
    match Arc::get_mut(slot).and_then(|value| value.downcast_mut::<K::Value>()) {
        Some(value) => value,
        // The slot is keyed by `TypeId::of::<K>()` and only ever holds `K::Value`, and
        // it was made unique just above.
        None => unreachable!("state slot for `{}` holds another type", K::KEY),
    }
}

impl fmt::Debug for StateMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StateMap")
            .field("len", &self.slots.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Counter;
    impl StateKey for Counter {
        const KEY: &'static str = "test.counter";
        type Value = u32;
        type Update = u32;
        fn apply(value: &mut u32, update: u32) {
            *value += update;
        }
    }

    struct Names;
    impl StateKey for Names {
        const KEY: &'static str = "test.names";
        type Value = Vec<String>;
        type Update = String;
        fn apply(value: &mut Vec<String>, update: String) {
            value.push(update);
        }
    }

    /// A second key with the same value type must get its own slot.
    struct OtherCounter;
    impl StateKey for OtherCounter {
        const KEY: &'static str = "test.other_counter";
        type Value = u32;
        type Update = u32;
        fn apply(value: &mut u32, update: u32) {
            *value = update;
        }
    }

    #[test]
    fn typed_access_by_key_type() {
        let mut map = StateMap::new();
        assert!(!map.contains::<Counter>());
        map.insert::<Counter>(3);
        map.insert::<OtherCounter>(7);
        assert_eq!(map.get::<Counter>(), Some(&3));
        assert_eq!(map.get::<OtherCounter>(), Some(&7));
        *map.get_mut::<Counter>().unwrap() += 1;
        assert_eq!(map.get::<Counter>(), Some(&4));
        assert_eq!(map.remove::<Counter>(), Some(4));
        assert_eq!(map.get::<Counter>(), None);
        assert_eq!(map.len(), 1);
    }

    #[test]
    fn get_or_insert_default_inserts_once() {
        let mut map = StateMap::new();
        map.get_or_insert_default::<Names>().push("a".into());
        map.get_or_insert_default::<Names>().push("b".into());
        assert_eq!(map.get::<Names>().unwrap(), &["a", "b"]);
    }

    #[test]
    fn clones_share_values_until_written() {
        let mut map = StateMap::new();
        map.insert::<Names>(vec!["a".into()]);
        let frozen = map.clone();
        map.get_mut::<Names>().unwrap().push("b".into());
        assert_eq!(frozen.get::<Names>().unwrap(), &["a"]);
        assert_eq!(map.get::<Names>().unwrap(), &["a", "b"]);
    }
}
