//! Effect handlers.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use async_trait::async_trait;

use crate::JsonValue;
use crate::state::{EffectSpec, Snapshot, decode_payload};

/// Handles one typed effect after the emitting command committed.
///
/// Failures are reported as plain strings: they are logged and counted, never
/// propagated, and never roll anything back.
#[async_trait]
pub trait TypedEffectHandler<E: EffectSpec>: Send + Sync + 'static {
    /// Performs the side effect; `snapshot` is the post-commit state.
    async fn handle_typed(&self, payload: E::Payload, snapshot: &Snapshot) -> Result<(), String>;
}

/// An effect handler in erased form.
#[async_trait]
pub trait EffectHandler: Send + Sync {
    /// Decodes and performs the effect.
    async fn handle(&self, payload: JsonValue, snapshot: &Snapshot) -> Result<(), String>;
}

pub(crate) struct TypedEffectAdapter<E, H> {
    handler: H,
    _spec: PhantomData<fn() -> E>,
}

impl<E, H> TypedEffectAdapter<E, H> {
    pub(crate) fn new(handler: H) -> Self {
        Self {
            handler,
            _spec: PhantomData,
        }
    }
}

#[async_trait]
impl<E, H> EffectHandler for TypedEffectAdapter<E, H>
where
    E: EffectSpec,
    H: TypedEffectHandler<E>,
{
    async fn handle(&self, payload: JsonValue, snapshot: &Snapshot) -> Result<(), String> {
        let payload = decode_payload::<E::Payload>(E::KEY, payload).map_err(|e| e.to_string())?;
        self.handler.handle_typed(payload, snapshot).await
    }
}

/// A registered effect handler.
#[derive(Clone)]
pub struct EffectRegistration {
    /// The effect key.
    pub key: &'static str,
    /// The plugin that registered it.
    pub plugin_id: Arc<str>,
    /// The handler.
    pub handler: Arc<dyn EffectHandler>,
}

impl fmt::Debug for EffectRegistration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EffectRegistration")
            .field("key", &self.key)
            .field("plugin_id", &self.plugin_id)
            .finish()
    }
}
