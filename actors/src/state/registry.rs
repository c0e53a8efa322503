//! Key registrations: the erased operations the store needs for each key.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::hash::BuildHasherDefault;
use std::sync::Arc;

use super::key::{KeyScope, MergeStrategy, StateKey, StateKeyOptions};
use super::map::{StateMap, TypeIdHasher};
use super::persisted::EncodedValue;
use crate::error::StateError;
use crate::hashing::FastHashMap;

/// Everything the runtime knows about one registered key.
///
/// The function pointers are instantiated per key type at registration, so the store
/// can encode, decode and reset keys it only knows by string.
#[derive(Clone, Copy)]
pub struct KeyRegistration {
    /// The key string.
    pub key: &'static str,
    /// The key type's name, for diagnostics.
    pub type_name: &'static str,
    /// Effective lifetime scope.
    pub scope: KeyScope,
    /// Merge strategy.
    pub merge: MergeStrategy,
    /// Whether checkpoints include the key.
    pub persistent: bool,
    /// Whether the value survives uninstalling the owning plugin.
    pub retain_on_uninstall: bool,
    type_id: TypeId,
    encode: fn(&StateMap) -> Result<Option<EncodedValue>, StateError>,
    defer: fn(&StateMap) -> Option<EncodedValue>,
    decode_into: fn(&mut StateMap, &EncodedValue) -> Result<(), StateError>,
    reset: fn(&mut StateMap),
    remove: fn(&mut StateMap),
    encode_default: fn() -> Result<EncodedValue, StateError>,
}

impl KeyRegistration {
    /// The registration of `K` with `options`.
    pub fn of<K: StateKey>(options: StateKeyOptions) -> Self {
        Self {
            key: K::KEY,
            type_name: std::any::type_name::<K>(),
            scope: options.scope.unwrap_or(K::SCOPE),
            merge: K::MERGE,
            persistent: options.persistent,
            retain_on_uninstall: options.retain_on_uninstall,
            type_id: TypeId::of::<K>(),
            encode: |map| map.get::<K>().map(K::encode).transpose(),
            defer: |map| {
                map.slot(TypeId::of::<K>())
                    .map(|slot| EncodedValue::deferred(Arc::clone(slot), encode_slot::<K>))
            },
            decode_into: |map, json| {
                map.insert::<K>(K::decode(json)?);
                Ok(())
            },
            reset: |map| map.insert::<K>(K::Value::default()),
            remove: |map| {
                map.remove::<K>();
            },
            encode_default: || K::encode(&K::Value::default()),
        }
    }

    /// The key type's id, which addresses its value in a [`StateMap`].
    pub(crate) fn type_id(&self) -> TypeId {
        self.type_id
    }

    /// Whether both registrations are for the same key type.
    pub fn same_key_type(&self, other: &KeyRegistration) -> bool {
        self.type_id == other.type_id
    }

    pub(crate) fn encode(&self, map: &StateMap) -> Result<Option<EncodedValue>, StateError> {
        (self.encode)(map)
    }

    /// The key's value, shared and encoded only when read (see
    /// [`EncodedValue`]); `None` when the map holds none.
    pub(crate) fn defer(&self, map: &StateMap) -> Option<EncodedValue> {
        (self.defer)(map)
    }

    pub(crate) fn decode_into(
        &self,
        map: &mut StateMap,
        json: &EncodedValue,
    ) -> Result<(), StateError> {
        (self.decode_into)(map, json)
    }

    pub(crate) fn reset(&self, map: &mut StateMap) {
        (self.reset)(map)
    }

    pub(crate) fn remove_from(&self, map: &mut StateMap) {
        (self.remove)(map)
    }
}

/// Encodes a slot holding `K::Value` with the key's own encoder.
fn encode_slot<K: StateKey>(value: &(dyn Any + Send + Sync)) -> Result<EncodedValue, String> {
    let value = value
        .downcast_ref::<K::Value>()
        .ok_or_else(|| format!("the state slot for `{}` holds another type", K::KEY))?;
    K::encode(value).map_err(|error| error.to_string())
}

impl fmt::Debug for KeyRegistration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyRegistration")
            .field("key", &self.key)
            .field("type_name", &self.type_name)
            .field("scope", &self.scope)
            .field("merge", &self.merge)
            .field("persistent", &self.persistent)
            .field("retain_on_uninstall", &self.retain_on_uninstall)
            .finish()
    }
}

/// The set of registered keys, addressable by string and by key type.
///
/// Built once per execution environment and shared (`Arc`) by every thread that runs
/// it; a thread copies it only if its keys diverge.
#[derive(Debug, Clone, Default)]
pub struct KeyRegistry {
    by_name: FastHashMap<&'static str, KeyRegistration>,
    by_type: HashMap<TypeId, &'static str, BuildHasherDefault<TypeIdHasher>>,
    /// Encodings of default values: checkpoints leave keys at their default out.
    defaults: FastHashMap<&'static str, EncodedValue>,
    /// One default value per key, shared by every map reset from this registry: a
    /// key nobody wrote costs a pointer, and checkpoints skip it without encoding.
    default_values: StateMap,
}

impl KeyRegistry {
    /// Adds a key; a key string or type already present is refused.
    pub fn insert(&mut self, registration: KeyRegistration) -> Result<(), StateError> {
        if self.by_name.contains_key(registration.key)
            || self.by_type.contains_key(&registration.type_id)
        {
            return Err(StateError::KeyAlreadyRegistered {
                key: registration.key.to_owned(),
            });
        }
        self.by_type.insert(registration.type_id, registration.key);
        self.by_name.insert(registration.key, registration);
        registration.reset(&mut self.default_values);
        // A default that cannot be encoded is simply always exported.
        if let Ok(json) = (registration.encode_default)() {
            self.defaults.insert(registration.key, json);
        }
        Ok(())
    }

    /// One map holding every key's shared default value.
    pub(crate) fn default_values(&self) -> &StateMap {
        &self.default_values
    }

    /// Gives `registration`'s key its default value in `map`.
    pub(crate) fn reset(&self, registration: &KeyRegistration, map: &mut StateMap) {
        if !map.share_from(&self.default_values, registration.type_id) {
            registration.reset(map);
        }
    }

    /// Whether `map` still holds the shared default of `registration`'s key (so it
    /// holds the default value without anyone comparing it).
    pub(crate) fn holds_shared_default(
        &self,
        registration: &KeyRegistration,
        map: &StateMap,
    ) -> bool {
        map.shares_with(&self.default_values, registration.type_id)
    }

    /// Whether `json` is the encoding of `key`'s default value. The text is
    /// compared: both come from the same encoder, and a miss only means the key
    /// is checkpointed although it holds its default.
    pub(crate) fn is_default(&self, key: &str, json: &EncodedValue) -> bool {
        self.defaults.get(key).is_some_and(
            |default| matches!((default.as_str(), json.as_str()), (Ok(a), Ok(b)) if a == b),
        )
    }

    /// Whether `key` is registered here with the same type as in `registration`.
    pub(crate) fn has_same(&self, registration: &KeyRegistration) -> bool {
        self.by_name
            .get(registration.key)
            .is_some_and(|r| r.type_id == registration.type_id)
    }

    pub(crate) fn remove(&mut self, key: &str) -> Option<KeyRegistration> {
        let registration = self.by_name.remove(key)?;
        self.by_type.remove(&registration.type_id);
        self.defaults.remove(key);
        registration.remove_from(&mut self.default_values);
        Some(registration)
    }

    pub(crate) fn get(&self, key: &str) -> Option<&KeyRegistration> {
        self.by_name.get(key)
    }

    /// Checks that `key` is registered for exactly the type `type_id`.
    pub(crate) fn check(&self, key: &'static str, type_id: TypeId) -> Result<(), StateError> {
        match self.by_type.get(&type_id) {
            Some(registered) if *registered == key => Ok(()),
            Some(_) => Err(StateError::KeyTypeMismatch {
                key: key.to_owned(),
            }),
            None if self.by_name.contains_key(key) => Err(StateError::KeyTypeMismatch {
                key: key.to_owned(),
            }),
            None => Err(StateError::UnknownKey {
                key: key.to_owned(),
            }),
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &KeyRegistration> {
        self.by_name.values()
    }

    pub(crate) fn len(&self) -> usize {
        self.by_name.len()
    }
}
