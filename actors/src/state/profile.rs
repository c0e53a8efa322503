//! Shared and profile state: asynchronous, store-backed, addressed by namespace + key.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde::{Serialize, de::DeserializeOwned};

use crate::JsonValue;
use crate::error::{StateError, StorageError};

/// A typed namespace of profile or shared state.
///
/// Unlike a [`StateKey`](super::StateKey) it is not part of snapshots: it is read and
/// written asynchronously through [`ProfileAccess`], last writer wins.
pub trait ProfileKey: 'static + Send + Sync {
    /// Namespace identifier (the storage namespace).
    const KEY: &'static str;
    /// The stored value.
    type Value: Clone + Default + Serialize + DeserializeOwned + Send + Sync + 'static;

    /// Encodes a value for the store.
    fn encode(value: &Self::Value) -> Result<JsonValue, StateError> {
        super::command::encode_payload(Self::KEY, value)
    }

    /// Decodes a stored value.
    fn decode(value: JsonValue) -> Result<Self::Value, StateError> {
        super::command::decode_payload(Self::KEY, value)
    }
}

/// Persistence for profile and shared state, keyed by `(namespace, key)`.
#[async_trait]
pub trait ProfileStore: Send + Sync {
    /// The stored value, if any.
    async fn get(&self, namespace: &str, key: &str) -> Result<Option<JsonValue>, StorageError>;
    /// Stores a value, replacing any previous one.
    async fn put(&self, namespace: &str, key: &str, value: JsonValue) -> Result<(), StorageError>;
    /// Removes a value; removing an absent value is not an error.
    async fn delete(&self, namespace: &str, key: &str) -> Result<(), StorageError>;
}

/// Typed access to a [`ProfileStore`], handed to hooks and tools.
#[derive(Clone)]
pub struct ProfileAccess {
    store: Arc<dyn ProfileStore>,
}

impl std::fmt::Debug for ProfileAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProfileAccess").finish_non_exhaustive()
    }
}

fn to_storage(err: StateError) -> StorageError {
    StorageError::Serialization(err.to_string())
}

impl ProfileAccess {
    /// Wraps a store.
    pub fn new(store: Arc<dyn ProfileStore>) -> Self {
        Self { store }
    }

    /// Reads `K` under `key`; the default value when absent.
    pub async fn read<K: ProfileKey>(&self, key: &str) -> Result<K::Value, StorageError> {
        match self.store.get(K::KEY, key).await? {
            Some(json) => K::decode(json).map_err(to_storage),
            None => Ok(K::Value::default()),
        }
    }

    /// Writes `K` under `key`.
    pub async fn write<K: ProfileKey>(
        &self,
        key: &str,
        value: &K::Value,
    ) -> Result<(), StorageError> {
        let json = K::encode(value).map_err(to_storage)?;
        self.store.put(K::KEY, key, json).await
    }

    /// Deletes `K` under `key`.
    pub async fn delete<K: ProfileKey>(&self, key: &str) -> Result<(), StorageError> {
        self.store.delete(K::KEY, key).await
    }
}

/// Conventional key strings for shared state.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StateScope(String);

impl StateScope {
    /// System-wide shared state.
    pub fn global() -> Self {
        Self("global".to_owned())
    }

    /// State shared between a parent thread and its children.
    pub fn parent_thread(id: impl std::fmt::Display) -> Self {
        Self(format!("parent_thread::{id}"))
    }

    /// State shared by every agent of one type.
    pub fn agent_type(name: impl std::fmt::Display) -> Self {
        Self(format!("agent_type::{name}"))
    }

    /// Thread-local persistent state.
    pub fn thread(id: impl std::fmt::Display) -> Self {
        Self(format!("thread::{id}"))
    }

    /// Any other grouping.
    pub fn new(scope: impl Into<String>) -> Self {
        Self(scope.into())
    }

    /// The key string to pass to [`ProfileAccess`].
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// In-process [`ProfileStore`], for single-node use and tests.
#[derive(Debug, Default)]
pub struct InMemoryProfileStore {
    entries: Mutex<HashMap<(String, String), JsonValue>>,
}

impl InMemoryProfileStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), JsonValue>> {
        // A panic while holding this lock cannot leave the map half-written: every
        // critical section is a single insert, remove or clone.
        self.entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[async_trait]
impl ProfileStore for InMemoryProfileStore {
    async fn get(&self, namespace: &str, key: &str) -> Result<Option<JsonValue>, StorageError> {
        Ok(self
            .entries()
            .get(&(namespace.to_owned(), key.to_owned()))
            .cloned())
    }

    async fn put(&self, namespace: &str, key: &str, value: JsonValue) -> Result<(), StorageError> {
        self.entries()
            .insert((namespace.to_owned(), key.to_owned()), value);
        Ok(())
    }

    async fn delete(&self, namespace: &str, key: &str) -> Result<(), StorageError> {
        self.entries()
            .remove(&(namespace.to_owned(), key.to_owned()));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Locale;
    impl ProfileKey for Locale {
        const KEY: &'static str = "locale";
        type Value = String;
    }

    #[tokio::test]
    async fn typed_read_write_delete() {
        let access = ProfileAccess::new(Arc::new(InMemoryProfileStore::new()));
        assert_eq!(access.read::<Locale>("alice").await.unwrap(), "");
        access
            .write::<Locale>("alice", &"en-US".to_owned())
            .await
            .unwrap();
        assert_eq!(access.read::<Locale>("alice").await.unwrap(), "en-US");
        assert_eq!(access.read::<Locale>("bob").await.unwrap(), "");
        access.delete::<Locale>("alice").await.unwrap();
        assert_eq!(access.read::<Locale>("alice").await.unwrap(), "");
    }

    #[tokio::test]
    async fn undecodable_values_are_serialization_errors() {
        let store = Arc::new(InMemoryProfileStore::new());
        store
            .put("locale", "x", serde_json::json!(42))
            .await
            .unwrap();
        let access = ProfileAccess::new(store);
        let err = access.read::<Locale>("x").await.unwrap_err();
        assert!(matches!(err, StorageError::Serialization(_)));
    }

    #[test]
    fn scope_strings() {
        assert_eq!(StateScope::global().as_str(), "global");
        assert_eq!(
            StateScope::parent_thread("t1").as_str(),
            "parent_thread::t1"
        );
        assert_eq!(
            StateScope::agent_type("coder").as_str(),
            "agent_type::coder"
        );
        assert_eq!(StateScope::thread("t2").as_str(), "thread::t2");
        assert_eq!(StateScope::new("team").as_str(), "team");
    }
}
