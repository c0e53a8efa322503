//! The runtime every node starts from, before any agent: the permission plugin
//! and the A2A backend that remote agents run through.

use std::sync::Arc;

use awaken_actors::permission::{PermissionPlugin, PermissionRules};
use awaken_actors::runtime::AgentRuntimeBuilder;
use awaken_actors::thread::ThreadConfig;

use crate::protocols::a2a::{A2A_BACKEND, A2aBackend};

/// A builder with `config` for thread actors, the permission plugin (with
/// `rules` for every agent without a `permission` section of its own) and the
/// A2A backend; no tools and no agents.
pub fn runtime_base(config: ThreadConfig, rules: PermissionRules) -> AgentRuntimeBuilder {
    AgentRuntimeBuilder::new()
        .with_thread_config(config)
        .with_plugin(PermissionPlugin::ID, Arc::new(PermissionPlugin::new(rules)))
        .with_remote_backend(A2A_BACKEND, Arc::new(A2aBackend::new()))
}
