//! Assembling a runtime: registries, the builder, and agent resolution.

mod builder;
mod registry;
mod resolve;

pub use builder::{AgentRuntime, AgentRuntimeBuilder};
pub use registry::{Registry, RegistrySet};
pub use resolve::{AgentResolver, RegistryResolver, ResolvedAgent, resolve};
