//! Scheduled-action handlers.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use async_trait::async_trait;

use crate::JsonValue;
use crate::error::StateError;
use crate::phase::{Phase, PhaseContext};
use crate::state::{ScheduledActionSpec, StateCommand, decode_payload};

/// Handles one typed action during its phase's EXECUTE stage.
#[async_trait]
pub trait TypedScheduledActionHandler<A: ScheduledActionSpec>: Send + Sync + 'static {
    /// Runs the action against a fresh snapshot; may schedule more actions.
    async fn handle_typed(
        &self,
        ctx: &PhaseContext,
        payload: A::Payload,
    ) -> Result<StateCommand, StateError>;
}

/// A handler in erased form, taking the JSON payload.
#[async_trait]
pub trait ScheduledActionHandler: Send + Sync {
    /// Decodes and runs the action.
    async fn handle(
        &self,
        ctx: &PhaseContext,
        payload: JsonValue,
    ) -> Result<StateCommand, StateError>;
}

pub(crate) struct TypedActionAdapter<A, H> {
    handler: H,
    _spec: PhantomData<fn() -> A>,
}

impl<A, H> TypedActionAdapter<A, H> {
    pub(crate) fn new(handler: H) -> Self {
        Self {
            handler,
            _spec: PhantomData,
        }
    }
}

#[async_trait]
impl<A, H> ScheduledActionHandler for TypedActionAdapter<A, H>
where
    A: ScheduledActionSpec,
    H: TypedScheduledActionHandler<A>,
{
    async fn handle(
        &self,
        ctx: &PhaseContext,
        payload: JsonValue,
    ) -> Result<StateCommand, StateError> {
        let payload = decode_payload::<A::Payload>(A::KEY, payload)?;
        self.handler.handle_typed(ctx, payload).await
    }
}

/// A registered action handler.
#[derive(Clone)]
pub struct ActionRegistration {
    /// The action key.
    pub key: &'static str,
    /// The phase it runs in.
    pub phase: Phase,
    /// The plugin that registered it.
    pub plugin_id: Arc<str>,
    /// The handler.
    pub handler: Arc<dyn ScheduledActionHandler>,
}

impl fmt::Debug for ActionRegistration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ActionRegistration")
            .field("key", &self.key)
            .field("phase", &self.phase)
            .field("plugin_id", &self.plugin_id)
            .finish()
    }
}
