//! Handoff: switching a thread between variants of its agent at step boundaries.
//!
//! A [`HandoffPlugin`] declares named [`AgentOverlay`]s. Tools and hooks ask for a
//! switch by updating [`ActiveAgentKey`] ([`request_handoff`], [`activate_handoff`],
//! [`clear_handoff`]); the plugin's sync hook promotes a request at RunStart and
//! StepEnd, and the run loop then runs the next step with the variant (its system
//! prompt, model and tools), re-resolved from the base spec with the overlay laid
//! over it. The active variant is thread state, so the next run starts with it.
//! See `docs/handoff.md` and decision 0026.

mod plugin;
mod state;

pub use crate::contract::{AgentOverlay, HandoffState};
pub use plugin::{HANDOFF_PLUGIN_ID, HandoffPlugin};
pub use state::{ActiveAgentKey, HandoffAction, activate_handoff, clear_handoff, request_handoff};
