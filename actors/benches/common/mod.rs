//! Shared fixtures for the benches: 64 distinct state keys.

#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;

use async_trait::async_trait;
use awaken_actors::phase::PhaseContext;
use awaken_actors::plugin::{PhaseHook, Plugin, PluginDescriptor, PluginRegistrar};
use awaken_actors::state::{StateCommand, StateKey, StateKeyOptions};
use awaken_actors::{Phase, StateError};

macro_rules! keys {
    ($($name:ident),*) => {
        $(
            pub struct $name;
            impl StateKey for $name {
                const KEY: &'static str = concat!("bench.", stringify!($name));
                type Value = u64;
                type Update = u64;
                fn apply(value: &mut u64, update: u64) {
                    *value += update;
                }
            }
        )*

        /// Registers all 64 keys.
        pub fn register_all(r: &mut PluginRegistrar) -> Result<(), StateError> {
            $( r.register_key::<$name>(StateKeyOptions::default())?; )*
            Ok(())
        }

        /// Registers all 64 keys in a bare store.
        pub fn register_store(store: &mut awaken_actors::state::StateStore) {
            $( store.register_key::<$name>(StateKeyOptions::default()).unwrap(); )*
        }
    };
}

keys!(
    K0, K1, K2, K3, K4, K5, K6, K7, K8, K9, K10, K11, K12, K13, K14, K15, K16, K17, K18, K19, K20,
    K21, K22, K23, K24, K25, K26, K27, K28, K29, K30, K31, K32, K33, K34, K35, K36, K37, K38, K39,
    K40, K41, K42, K43, K44, K45, K46, K47, K48, K49, K50, K51, K52, K53, K54, K55, K56, K57, K58,
    K59, K60, K61, K62, K63
);

/// Writes one key: `Writer::<N>` touches the N-th of the first eight keys.
pub struct Writer(pub usize);

#[async_trait]
impl PhaseHook for Writer {
    async fn run(&self, _ctx: &PhaseContext) -> Result<StateCommand, StateError> {
        let mut cmd = StateCommand::new();
        match self.0 {
            0 => cmd.update::<K0>(1),
            1 => cmd.update::<K1>(1),
            2 => cmd.update::<K2>(1),
            3 => cmd.update::<K3>(1),
            4 => cmd.update::<K4>(1),
            5 => cmd.update::<K5>(1),
            6 => cmd.update::<K6>(1),
            _ => cmd.update::<K7>(1),
        };
        Ok(cmd)
    }
}

/// 64 keys plus eight hooks at StepStart, each writing its own key.
pub struct BenchPlugin;

impl Plugin for BenchPlugin {
    fn descriptor(&self) -> PluginDescriptor {
        PluginDescriptor::new("bench", "bench fixtures")
    }

    fn register(&self, r: &mut PluginRegistrar) -> Result<(), StateError> {
        register_all(r)?;
        for i in 0..8 {
            r.register_phase_hook(format!("w{i}"), Phase::StepStart, Writer(i))?;
        }
        Ok(())
    }
}

pub fn plugin() -> Arc<dyn Plugin> {
    Arc::new(BenchPlugin)
}
