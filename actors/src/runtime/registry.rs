//! The registries an `AgentRuntime` resolves agents from.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use crate::contract::{AgentSpec, ModelSpec};
use crate::delegation::{RemoteAgentCard, RemoteBackend};
use crate::llm::{CircuitBreaker, CircuitBreakerConfig, LlmExecutor};
use crate::plugin::Plugin;
use crate::policies::StopPolicy;
use crate::tool::Tool;

/// An id-keyed registry of one kind of entry.
///
/// Backed by a sorted map so listings are deterministic. `insert` refuses duplicate
/// ids, handing the value back.
pub struct Registry<T> {
    entries: BTreeMap<String, T>,
}

impl<T> Default for Registry<T> {
    fn default() -> Self {
        Self {
            entries: BTreeMap::new(),
        }
    }
}

impl<T> fmt::Debug for Registry<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.entries.keys()).finish()
    }
}

impl<T: Clone> Clone for Registry<T> {
    fn clone(&self) -> Self {
        Self {
            entries: self.entries.clone(),
        }
    }
}

impl<T> Registry<T> {
    /// Adds an entry; an existing id is refused and the value returned.
    pub fn insert(&mut self, id: impl Into<String>, value: T) -> Result<(), T> {
        match self.entries.entry(id.into()) {
            std::collections::btree_map::Entry::Occupied(_) => Err(value),
            std::collections::btree_map::Entry::Vacant(slot) => {
                slot.insert(value);
                Ok(())
            }
        }
    }

    /// Adds or replaces an entry.
    pub fn upsert(&mut self, id: impl Into<String>, value: T) -> Option<T> {
        self.entries.insert(id.into(), value)
    }

    /// Removes an entry.
    pub fn remove(&mut self, id: &str) -> Option<T> {
        self.entries.remove(id)
    }

    /// The entry with this id.
    pub fn get(&self, id: &str) -> Option<&T> {
        self.entries.get(id)
    }

    /// Whether an entry has this id.
    pub fn contains(&self, id: &str) -> bool {
        self.entries.contains_key(id)
    }

    /// Entries in id order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &T)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Ids in order.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the registry is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Everything resolution reads: agents, tools, models, providers and plugins.
///
/// Cloning is cheap (entries are `Arc`s), so a new configuration can be built beside
/// the live one and swapped in whole.
#[derive(Debug, Clone, Default)]
pub struct RegistrySet {
    /// Agent definitions.
    pub agents: Registry<Arc<AgentSpec>>,
    /// Global tools.
    pub tools: Registry<Arc<dyn Tool>>,
    /// Model ids mapped to a provider and an upstream model name.
    pub models: Registry<ModelSpec>,
    /// LLM executors by provider id.
    pub providers: Registry<Arc<dyn LlmExecutor>>,
    /// Plugins by id.
    pub plugins: Registry<Arc<dyn Plugin>>,
    /// Backends that run remote delegates, by `endpoint.backend` (e.g. `a2a`).
    pub remote_backends: Registry<Arc<dyn RemoteBackend>>,
    /// Cards of remote agents, by agent id, as discovered at start-up.
    pub remote_cards: Registry<RemoteAgentCard>,
    /// Stop policies every agent evaluates after its own `max_rounds` and
    /// `stop_conditions` (the builder's `with_stop_policy`).
    pub stop_policies: Vec<Arc<dyn StopPolicy>>,
    /// Circuit breakers by provider and settings; they outlive single resolutions.
    pub(crate) breakers: BreakerCache,
}

/// Shares one circuit breaker per provider and configuration across resolutions, so
/// failures seen by one run open the circuit for the next.
#[derive(Debug, Clone, Default)]
pub(crate) struct BreakerCache {
    breakers: Arc<std::sync::Mutex<BreakersByKey>>,
}

/// Breakers keyed by (provider id, settings).
type BreakersByKey = std::collections::HashMap<(String, String), Arc<CircuitBreaker>>;

impl BreakerCache {
    /// The breaker for `provider` with `config`, created on first use.
    pub(crate) fn get(&self, provider: &str, config: &CircuitBreakerConfig) -> Arc<CircuitBreaker> {
        let key = (provider.to_owned(), format!("{config:?}"));
        let mut breakers = self
            .breakers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        Arc::clone(
            breakers
                .entry(key)
                .or_insert_with(|| Arc::new(CircuitBreaker::new(config.clone()))),
        )
    }
}

impl fmt::Debug for dyn Plugin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plugin")
            .field("name", &self.descriptor().name)
            .finish()
    }
}
