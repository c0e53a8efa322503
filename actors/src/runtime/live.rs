//! `LiveRegistries`: the registry set a runtime resolves from, replaceable while
//! runs go on (the config API's writes), without a lock on the resolution path.

use std::sync::Arc;

use arc_swap::ArcSwap;

use super::registry::RegistrySet;
use super::resolve::{AgentResolver, RegistryResolver, ResolvedAgent};
use crate::error::{BuildError, ResolveError};

/// The current registry set and its memoizing resolver, swapped whole.
///
/// A run resolves its agent when it starts or resumes, so a replacement reaches the
/// next activation; activations already under way keep the agent they resolved.
#[derive(Debug)]
pub struct LiveRegistries {
    current: ArcSwap<RegistryResolver>,
}

impl LiveRegistries {
    /// Starts with `registries`.
    pub fn new(registries: Arc<RegistrySet>) -> Self {
        Self {
            current: ArcSwap::from_pointee(RegistryResolver::new(registries)),
        }
    }

    /// The registries in force now.
    pub fn current(&self) -> Arc<RegistrySet> {
        Arc::clone(self.current.load().registries())
    }

    /// Replaces the registries once every local agent in `registries` resolves;
    /// refused otherwise, leaving the current set in force.
    pub fn replace(&self, registries: RegistrySet) -> Result<(), BuildError> {
        validate_agents(&registries)?;
        self.current
            .store(Arc::new(RegistryResolver::new(Arc::new(registries))));
        Ok(())
    }
}

impl AgentResolver for LiveRegistries {
    fn resolve(&self, agent_id: &str) -> Result<ResolvedAgent, ResolveError> {
        self.current.load().resolve(agent_id)
    }
}

/// Dry-runs the resolution of every local agent, so a missing model, provider or
/// plugin is reported before the set is used.
pub fn validate_agents(registries: &RegistrySet) -> Result<(), BuildError> {
    for (id, spec) in registries.agents.iter() {
        if spec.endpoint.is_some() {
            continue;
        }
        match super::resolve::resolve(registries, id) {
            Ok(_) => {}
            Err(ResolveError::EnvBuild(state)) => return Err(BuildError::State(state)),
            Err(err) => {
                return Err(BuildError::ValidationFailed(format!("agent `{id}`: {err}")));
            }
        }
    }
    Ok(())
}
