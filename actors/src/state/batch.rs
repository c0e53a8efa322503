//! `MutationBatch`: the updates one hook, action or tool produced.

use std::any::TypeId;
use std::fmt;

use smallvec::SmallVec;

use super::key::{MergeStrategy, StateKey};
use super::map::StateMap;
use crate::error::StateError;

/// One type-erased `K::Update`, applied by `K::apply`.
pub(crate) trait MutationOp: Send {
    fn key(&self) -> &'static str;
    fn key_type(&self) -> TypeId;
    fn apply(self: Box<Self>, map: &mut StateMap);
}

struct KeyPatch<K: StateKey> {
    update: K::Update,
}

impl<K: StateKey> MutationOp for KeyPatch<K> {
    fn key(&self) -> &'static str {
        K::KEY
    }

    fn key_type(&self) -> TypeId {
        TypeId::of::<K>()
    }

    fn apply(self: Box<Self>, map: &mut StateMap) {
        K::apply(map.get_or_insert_default::<K>(), self.update);
    }
}

/// A touched key and how it merges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TouchedKey {
    /// The key string.
    pub key: &'static str,
    /// The key's merge strategy.
    pub merge: MergeStrategy,
}

/// The keys a batch writes; most batches write one or two.
pub(crate) type TouchedKeys = SmallVec<[TouchedKey; 2]>;

/// A batch's updates; most batches hold one or two, kept inline.
pub(crate) type Ops = SmallVec<[Box<dyn MutationOp>; 2]>;

/// Updates collected from one producer, applied atomically on commit.
///
/// `touched_keys` lets the phase engine detect `Exclusive` overlaps between batches
/// produced in parallel without looking at the updates themselves.
#[derive(Default)]
pub struct MutationBatch {
    base_revision: Option<u64>,
    ops: Ops,
    touched_keys: TouchedKeys,
}

impl MutationBatch {
    /// An empty batch with no base revision.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records the revision the batch was computed against; commits check it.
    pub fn with_base_revision(mut self, revision: u64) -> Self {
        self.base_revision = Some(revision);
        self
    }

    /// Sets the base revision in place.
    pub fn set_base_revision(&mut self, revision: u64) {
        self.base_revision = Some(revision);
    }

    /// The revision the batch was computed against, if recorded.
    pub fn base_revision(&self) -> Option<u64> {
        self.base_revision
    }

    /// Queues one update for `K`.
    pub fn update<K: StateKey>(&mut self, update: K::Update) {
        if !self.touched_keys.iter().any(|t| t.key == K::KEY) {
            self.touched_keys.push(TouchedKey {
                key: K::KEY,
                merge: K::MERGE,
            });
        }
        self.ops.push(Box::new(KeyPatch::<K> { update }));
    }

    /// Every key this batch writes, once each, in first-write order.
    pub fn touched_keys(&self) -> &[TouchedKey] {
        &self.touched_keys
    }

    /// Keys this batch writes that conflict with any concurrent writer.
    pub fn exclusive_keys(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.touched_keys
            .iter()
            .filter(|t| t.merge == MergeStrategy::Exclusive)
            .map(|t| t.key)
    }

    /// Whether this batch and `other` both write some `Exclusive` key.
    pub fn conflicts_with(&self, other: &MutationBatch) -> Option<&'static str> {
        self.exclusive_keys()
            .find(|key| other.touched_keys.iter().any(|t| t.key == *key))
    }

    /// Number of queued updates.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether the batch has no updates.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Appends `other`'s updates after this batch's (sequential composition).
    ///
    /// Both batches must have been computed against the same revision when both
    /// recorded one.
    pub fn extend(&mut self, other: MutationBatch) -> Result<(), StateError> {
        match (self.base_revision, other.base_revision) {
            (Some(left), Some(right)) if left != right => {
                return Err(StateError::MutationBaseRevisionMismatch { left, right });
            }
            (None, Some(right)) => self.base_revision = Some(right),
            _ => {}
        }
        for touched in other.touched_keys {
            if !self.touched_keys.iter().any(|t| t.key == touched.key) {
                self.touched_keys.push(touched);
            }
        }
        self.ops.extend(other.ops);
        Ok(())
    }

    /// Merges a batch produced in parallel: refused when both write an `Exclusive`
    /// key, otherwise the updates are concatenated.
    pub fn merge_parallel(&mut self, other: MutationBatch) -> Result<(), StateError> {
        if let Some(key) = self.conflicts_with(&other) {
            return Err(StateError::ParallelMergeConflict {
                key: key.to_owned(),
            });
        }
        self.extend(other)
    }

    pub(crate) fn ops(&self) -> impl Iterator<Item = &dyn MutationOp> {
        self.ops.iter().map(|op| op.as_ref())
    }

    /// The keys written and the updates, for applying.
    pub(crate) fn into_parts(self) -> (TouchedKeys, Ops) {
        (self.touched_keys, self.ops)
    }
}

impl fmt::Debug for MutationBatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MutationBatch")
            .field("base_revision", &self.base_revision)
            .field("ops", &self.ops.len())
            .field("touched_keys", &self.touched_keys)
            .finish()
    }
}
