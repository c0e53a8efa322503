//! Assembling a runtime: registries, the builder, and agent resolution.

mod agent_runtime;
mod builder;
mod live;
mod registry;
mod resolve;
mod run_watch;
mod unstarted;

pub use agent_runtime::{AgentRunResult, AgentRuntime, RunEnding};
pub use builder::AgentRuntimeBuilder;
pub use live::{LiveRegistries, ValidatedRegistries, validate_agents};
pub use registry::{Registry, RegistrySet};
pub use resolve::{AgentResolver, RegistryResolver, ResolvedAgent, resolve};
pub use run_watch::{RunEnd, RunWatch};
