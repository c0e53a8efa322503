//! The eight phases of a run and the engine that executes one phase.
//!
//! A run walks `RunStart → [StepStart → BeforeInference → AfterInference →
//! BeforeToolExecute → AfterToolExecute → StepEnd]* → RunEnd`. At each phase the
//! [`PhaseRuntime`] runs the phase's hooks (GATHER) and then the phase's scheduled
//! actions until they converge (EXECUTE).

mod context;
mod engine;

pub use context::{PhaseContext, ToolCallView};
pub use engine::{
    DEFAULT_MAX_PHASE_ROUNDS, EffectBatch, EffectDispatchReport, PhaseReport, PhaseRuntime,
};

use serde::{Deserialize, Serialize};

/// A named point in the run loop where plugins hook in.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Once, when a run begins.
    RunStart,
    /// At the start of each inference round.
    StepStart,
    /// Just before the model is called; the request can still change.
    BeforeInference,
    /// Right after the model answered.
    AfterInference,
    /// Before each tool call executes; intercepts happen here.
    BeforeToolExecute,
    /// After each tool call produced its result.
    AfterToolExecute,
    /// At the end of each round; checkpoints and stop conditions.
    StepEnd,
    /// Once, when the run ends for any reason.
    RunEnd,
}

impl Phase {
    /// Every phase, in execution order.
    pub const ALL: [Phase; 8] = [
        Phase::RunStart,
        Phase::StepStart,
        Phase::BeforeInference,
        Phase::AfterInference,
        Phase::BeforeToolExecute,
        Phase::AfterToolExecute,
        Phase::StepEnd,
        Phase::RunEnd,
    ];

    /// Dense index, for per-phase tables.
    pub const fn index(self) -> usize {
        self as usize
    }
}
