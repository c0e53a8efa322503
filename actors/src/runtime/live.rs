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

    /// Replaces the registries with a set whose agents all resolve.
    pub fn replace(&self, registries: ValidatedRegistries) {
        self.current
            .store(Arc::new(RegistryResolver::new(Arc::new(registries.0))));
    }
}

impl AgentResolver for LiveRegistries {
    fn resolve(&self, agent_id: &str) -> Result<ResolvedAgent, ResolveError> {
        self.current.load().resolve(agent_id)
    }

    fn resolve_variant(
        &self,
        agent_id: &str,
        variant: &str,
    ) -> Result<ResolvedAgent, ResolveError> {
        self.current.load().resolve_variant(agent_id, variant)
    }
}

/// A registry set in which every local agent resolves: the only kind a running
/// runtime can switch to.
#[derive(Debug, Clone)]
pub struct ValidatedRegistries(RegistrySet);

impl ValidatedRegistries {
    /// Checks `registries` with [`validate_agents`].
    pub fn new(registries: RegistrySet) -> Result<Self, BuildError> {
        validate_agents(&registries)?;
        Ok(Self(registries))
    }
}

/// Dry-runs the resolution of every local agent, so a missing model, provider or
/// plugin is reported before the set is used; a remote agent's backend must accept
/// its endpoint.
pub fn validate_agents(registries: &RegistrySet) -> Result<(), BuildError> {
    for (id, spec) in registries.agents.iter() {
        if spec.endpoint.is_some() {
            // A remote agent is checked as a delegate: its backend and endpoint.
            super::resolve::remote_tool(registries, spec)
                .map_err(|err| BuildError::ValidationFailed(format!("agent `{id}`: {err}")))?;
            continue;
        }
        let resolved = super::resolve::resolve(registries, id).and_then(|base| {
            // Every variant must resolve too (its model, say), or a handoff would
            // fail mid-run.
            base.env.agent_variants().keys().try_for_each(|variant| {
                super::resolve::resolve_variant_of(registries, &base, variant).map(drop)
            })
        });
        match resolved {
            Ok(()) => {}
            Err(ResolveError::EnvBuild(state)) => return Err(BuildError::State(state)),
            Err(err) => {
                return Err(BuildError::ValidationFailed(format!("agent `{id}`: {err}")));
            }
        }
    }
    Ok(())
}
