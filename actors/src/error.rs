//! The engine's error types, one per layer, as the book names them.
//!
//! Each enum is `#[non_exhaustive]` so later layers can add cases without breaking
//! callers. Errors that cross actor or node boundaries (`StateError`, `ToolError`,
//! `InferenceExecutionError`, `StorageError`) are `Clone` and serializable.

use serde::{Deserialize, Serialize};

use crate::phase::Phase;

/// Errors from the typed state engine, plugin registration and the phase engine.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum StateError {
    /// A commit expected one revision but the store is at another.
    #[error("revision conflict: expected {expected}, store is at {actual}")]
    RevisionConflict {
        /// Revision the batch was built against.
        expected: u64,
        /// Revision the store is at.
        actual: u64,
    },
    /// Two batches built against different snapshots were merged.
    #[error("cannot merge batches built on revisions {left} and {right}")]
    MutationBaseRevisionMismatch {
        /// Base revision of the first batch.
        left: u64,
        /// Base revision of the second batch.
        right: u64,
    },
    /// A plugin id was installed twice.
    #[error("plugin `{name}` is already installed")]
    PluginAlreadyInstalled {
        /// The plugin id.
        name: String,
    },
    /// A plugin was looked up but never installed.
    #[error("plugin `{type_name}` is not installed")]
    PluginNotInstalled {
        /// The plugin's type or id.
        type_name: String,
    },
    /// Two registrations claimed the same state key.
    #[error("state key `{key}` is already registered")]
    KeyAlreadyRegistered {
        /// The key string.
        key: String,
    },
    /// A state key was used without being registered.
    #[error("state key `{key}` is not registered")]
    UnknownKey {
        /// The key string.
        key: String,
    },
    /// A key string is registered for a different Rust type than the one used.
    #[error("state key `{key}` is registered with a different value type")]
    KeyTypeMismatch {
        /// The key string.
        key: String,
    },
    /// A persisted value could not be decoded.
    #[error("cannot decode state key `{key}`: {message}")]
    KeyDecode {
        /// The key string.
        key: String,
        /// The decoder's message.
        message: String,
    },
    /// A value could not be encoded for persistence.
    #[error("cannot encode state key `{key}`: {message}")]
    KeyEncode {
        /// The key string.
        key: String,
        /// The encoder's message.
        message: String,
    },
    /// Two handlers were registered for one scheduled action.
    #[error("a handler for scheduled action `{key}` is already registered")]
    HandlerAlreadyRegistered {
        /// The action key.
        key: String,
    },
    /// Two handlers were registered for one effect.
    #[error("a handler for effect `{key}` is already registered")]
    EffectHandlerAlreadyRegistered {
        /// The effect key.
        key: String,
    },
    /// Scheduled actions kept producing new actions past the round bound.
    #[error("phase {phase:?} did not converge within {max_rounds} rounds")]
    PhaseRunLoopExceeded {
        /// The phase that did not converge.
        phase: Phase,
        /// The bound that was hit.
        max_rounds: usize,
    },
    /// A command scheduled an action nobody handles.
    #[error("no handler is registered for scheduled action `{key}`")]
    UnknownScheduledActionHandler {
        /// The action key.
        key: String,
    },
    /// A command emitted an effect nobody handles.
    #[error("no handler is registered for effect `{key}`")]
    UnknownEffectHandler {
        /// The effect key.
        key: String,
    },
    /// Two parallel batches wrote the same exclusive key.
    #[error("parallel batches both wrote exclusive key `{key}`")]
    ParallelMergeConflict {
        /// The contested key.
        key: String,
    },
    /// A tool id was registered twice.
    #[error("tool `{tool_id}` is already registered")]
    ToolAlreadyRegistered {
        /// The tool id.
        tool_id: String,
    },
    /// Two plugins (or one, twice) declare a handoff variant of the same name.
    #[error("agent variant `{variant}` is already registered")]
    AgentVariantAlreadyRegistered {
        /// The variant name.
        variant: String,
    },
    /// A phase hook was registered twice under one plugin for one phase.
    #[error("plugin `{plugin_id}` already registered hook `{hook}` for {phase:?}")]
    HookAlreadyRegistered {
        /// The owning plugin.
        plugin_id: String,
        /// The hook's name.
        hook: String,
        /// The phase.
        phase: Phase,
    },
    /// A profile key namespace was registered twice.
    #[error("profile key `{key}` is already registered")]
    ProfileKeyAlreadyRegistered {
        /// The namespace.
        key: String,
    },
    /// A phase hook or action handler failed.
    #[error("{source_id} failed: {message}")]
    HookFailed {
        /// `plugin/hook` or the action key.
        source_id: String,
        /// What went wrong.
        message: String,
    },
    /// The operation was cancelled.
    #[error("cancelled")]
    Cancelled,
}

/// Errors a tool returns from `validate_args` or `execute`; they fail the call
/// (unlike `ToolResult::error`, which is sent back to the model).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[serde(tag = "kind", content = "message", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ToolError {
    /// Arguments did not match what the tool accepts.
    #[error("invalid arguments: {0}")]
    InvalidArguments(String),
    /// The tool ran and failed.
    #[error("execution failed: {0}")]
    ExecutionFailed(String),
    /// A policy refused the call.
    #[error("denied: {0}")]
    Denied(String),
    /// The tool does not exist.
    #[error("tool not found: {0}")]
    NotFound(String),
    /// An unexpected internal failure.
    #[error("internal error: {0}")]
    Internal(String),
}

/// Errors from the model execution layer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum InferenceExecutionError {
    /// The provider answered with an error.
    #[error("provider error: {message}")]
    Provider {
        /// The provider's message.
        message: String,
    },
    /// The provider throttled the request.
    #[error("rate limited: {message}")]
    RateLimited {
        /// The provider's message.
        message: String,
        /// How long the provider asked us to wait, if it said.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_after_ms: Option<u64>,
    },
    /// The request did not complete in time.
    #[error("timed out: {message}")]
    Timeout {
        /// What timed out.
        message: String,
    },
    /// The run was cancelled while inference was in flight.
    #[error("inference cancelled")]
    Cancelled,
    /// The model's circuit breaker is open: recent calls kept failing, so calls are
    /// refused without reaching the provider until the cooldown ends.
    #[error("circuit open for model `{model}`")]
    CircuitOpen {
        /// The model whose circuit is open.
        model: String,
    },
}

impl InferenceExecutionError {
    /// A provider error from any displayable cause.
    pub fn provider(message: impl Into<String>) -> Self {
        Self::Provider {
            message: message.into(),
        }
    }

    /// A timeout error.
    pub fn timeout(message: impl Into<String>) -> Self {
        Self::Timeout {
            message: message.into(),
        }
    }

    /// Whether retrying the same request against the same model may succeed.
    ///
    /// An open circuit is not retryable for its model (the breaker would refuse the
    /// retry too), but see [`Self::allows_fallback`].
    pub fn is_retryable(&self) -> bool {
        !matches!(self, Self::Cancelled | Self::CircuitOpen { .. })
    }

    /// Whether trying another model may succeed: everything but cancellation.
    pub fn allows_fallback(&self) -> bool {
        !matches!(self, Self::Cancelled)
    }
}

/// Errors from thread, run and profile stores.
///
/// Adjacently tagged like [`ToolError`] (`{"kind": "not_found", "message": "..."}`):
/// serde cannot internally tag a variant that holds a bare string.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[serde(tag = "kind", content = "message", rename_all = "snake_case")]
#[non_exhaustive]
pub enum StorageError {
    /// The addressed record does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// A record with this id already exists.
    #[error("already exists: {0}")]
    AlreadyExists(String),
    /// An optimistic-concurrency check failed.
    #[error("version conflict: expected {expected}, found {actual}")]
    VersionConflict {
        /// Version the writer expected.
        expected: u64,
        /// Version the store holds.
        actual: u64,
    },
    /// A writer presented a fencing token older than the one the thread has seen: a
    /// newer owner has taken the thread over, so this writer must stop.
    #[error("fenced: presented token {presented}, the thread is at {current}")]
    Fenced {
        /// The token the writer presented.
        presented: u64,
        /// The highest token the thread has seen.
        current: u64,
    },
    /// The request cannot be stored as given (an id that cannot name a file, a run
    /// written under another thread's id, an invalid table prefix).
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// The backend failed.
    #[error("storage I/O error: {0}")]
    Io(String),
    /// A record could not be encoded or decoded.
    #[error("serialization error: {0}")]
    Serialization(String),
    /// The backend cannot be reached now (refused or lost connections, a server
    /// shutting down, a failover, a serialization failure): nothing was written,
    /// and the same request may pass once it is back.
    #[error("storage unavailable: {0}")]
    Unavailable(String),
    /// The connection ended while a write was on its way: it may or may not have
    /// landed. The same request may pass once the backend is back; a writer that
    /// must know reads back first.
    #[error("storage unavailable, the write may have landed: {0}")]
    MaybeWritten(String),
}

impl StorageError {
    /// Whether the failure can pass by itself, so the same request is worth
    /// trying again later (the backend was away, not the request wrong).
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Unavailable(_) | Self::MaybeWritten(_))
    }
}

/// Errors from resolving an agent id into a runnable agent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResolveError {
    /// No agent spec has this id.
    #[error("agent `{0}` not found")]
    AgentNotFound(String),
    /// The spec's model id is not registered.
    #[error("model `{0}` not found")]
    ModelNotFound(String),
    /// The model's provider is not registered.
    #[error("provider `{0}` not found")]
    ProviderNotFound(String),
    /// A plugin id in the spec is not registered.
    #[error("plugin `{0}` not found")]
    PluginNotFound(String),
    /// A config section failed its plugin's JSON Schema.
    #[error("invalid config section `{key}` for plugin `{plugin}`: {message}")]
    InvalidPluginConfig {
        /// The plugin that claims the section.
        plugin: String,
        /// The section key.
        key: String,
        /// What the validator reported.
        message: String,
    },
    /// Remote agents can only be used as delegates.
    #[error("agent `{0}` has a remote endpoint and can only be used as a delegate")]
    RemoteAgentNotDirectlyRunnable(String),
    /// No backend is registered for a remote delegate's `endpoint.backend`.
    #[error("remote agent `{agent}` needs backend `{backend}`, which this runtime does not have")]
    RemoteBackendNotFound {
        /// The remote agent.
        agent: String,
        /// Its endpoint's backend.
        backend: String,
    },
    /// A remote delegate's endpoint settings are refused by its backend.
    #[error("remote agent `{agent}`: {message}")]
    InvalidRemoteEndpoint {
        /// The remote agent.
        agent: String,
        /// What the backend refused.
        message: String,
    },
    /// Two tool sources provide the same tool id.
    #[error("tool `{tool_id}` is provided by both {source_a} and {source_b}")]
    ToolIdConflict {
        /// The contested id.
        tool_id: String,
        /// The first provider.
        source_a: String,
        /// The second provider.
        source_b: String,
    },
    /// A handoff named a variant none of the agent's plugins declares.
    #[error("agent `{agent}` has no handoff variant `{variant}`")]
    UnknownVariant {
        /// The base agent.
        agent: String,
        /// The variant asked for.
        variant: String,
    },
    /// Building the execution environment from plugins failed.
    #[error("cannot build execution environment: {0}")]
    EnvBuild(#[source] StateError),
}

/// Errors from `AgentRuntimeBuilder::build`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// A plugin failed to register (e.g. two plugins claim one state key).
    #[error(transparent)]
    State(#[from] StateError),
    /// Two agent specs share an id.
    #[error("agent `{0}` is registered twice")]
    AgentRegistryConflict(String),
    /// Two tools share an id.
    #[error("tool `{0}` is registered twice")]
    ToolRegistryConflict(String),
    /// Two models share an id.
    #[error("model `{0}` is registered twice")]
    ModelRegistryConflict(String),
    /// Two providers share an id.
    #[error("provider `{0}` is registered twice")]
    ProviderRegistryConflict(String),
    /// Two plugins share an id.
    #[error("plugin `{0}` is registered twice")]
    PluginRegistryConflict(String),
    /// The dry-run resolve of an agent failed.
    #[error("validation failed: {0}")]
    ValidationFailed(String),
    /// Two remote backends share a name.
    #[error("remote backend `{0}` is registered twice")]
    RemoteBackendConflict(String),
    /// A remote agent cannot be used as configured (found at start-up discovery).
    #[error(transparent)]
    DiscoveryFailed(#[from] crate::delegation::DiscoveryError),
}

/// Errors from runtime operations: resolving agents and starting runs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// A state operation failed.
    #[error(transparent)]
    State(#[from] StateError),
    /// The thread already has an active run.
    #[error("thread `{thread_id}` already has an active run")]
    ThreadAlreadyRunning {
        /// The busy thread.
        thread_id: String,
    },
    /// No agent has this id.
    #[error("agent `{agent_id}` not found")]
    AgentNotFound {
        /// The requested agent.
        agent_id: String,
    },
    /// Resolving the agent failed.
    #[error("cannot resolve agent: {message}")]
    ResolveFailed {
        /// What failed.
        message: String,
    },
    /// A run control request was refused.
    #[error(transparent)]
    Control(#[from] crate::thread::ControlError),
    /// The thread actor stopped before the run reported its end; the run continues
    /// from its last checkpoint when the thread restarts.
    #[error("lost track of run `{run_id}` before it finished")]
    RunDetached {
        /// The run.
        run_id: String,
    },
}

impl From<ResolveError> for RuntimeError {
    fn from(err: ResolveError) -> Self {
        match err {
            ResolveError::AgentNotFound(agent_id) => Self::AgentNotFound { agent_id },
            other => Self::ResolveFailed {
                message: other.to_string(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_offender() {
        let err = StateError::PhaseRunLoopExceeded {
            phase: Phase::BeforeInference,
            max_rounds: 16,
        };
        assert_eq!(
            err.to_string(),
            "phase BeforeInference did not converge within 16 rounds"
        );
        let err = ResolveError::ToolIdConflict {
            tool_id: "search".into(),
            source_a: "global".into(),
            source_b: "plugin `web`".into(),
        };
        assert_eq!(
            err.to_string(),
            "tool `search` is provided by both global and plugin `web`"
        );
    }

    #[test]
    fn build_error_wraps_state_error() {
        let err: BuildError = StateError::KeyAlreadyRegistered { key: "k".into() }.into();
        assert!(matches!(err, BuildError::State(_)));
        assert_eq!(err.to_string(), "state key `k` is already registered");
    }

    #[test]
    fn runtime_error_maps_missing_agents() {
        let err: RuntimeError = ResolveError::AgentNotFound("a".into()).into();
        assert_eq!(
            err,
            RuntimeError::AgentNotFound {
                agent_id: "a".into()
            }
        );
        let err: RuntimeError = ResolveError::ModelNotFound("m".into()).into();
        assert!(matches!(err, RuntimeError::ResolveFailed { .. }));
    }

    #[test]
    fn storage_error_json_shape() {
        let err = StorageError::NotFound("thread t1".into());
        let json = serde_json::to_value(&err).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"kind": "not_found", "message": "thread t1"})
        );
        assert_eq!(serde_json::from_value::<StorageError>(json).unwrap(), err);
        let err = StorageError::VersionConflict {
            expected: 1,
            actual: 2,
        };
        let json = serde_json::to_value(&err).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"kind": "version_conflict", "message": {"expected": 1, "actual": 2}})
        );
        assert_eq!(serde_json::from_value::<StorageError>(json).unwrap(), err);
        let err = StorageError::Fenced {
            presented: 3,
            current: 5,
        };
        let json = serde_json::to_value(&err).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"kind": "fenced", "message": {"presented": 3, "current": 5}})
        );
        assert_eq!(serde_json::from_value::<StorageError>(json).unwrap(), err);
        assert_eq!(
            err.to_string(),
            "fenced: presented token 3, the thread is at 5"
        );
    }

    #[test]
    fn open_circuit_is_not_retryable_but_allows_fallback() {
        let open = InferenceExecutionError::CircuitOpen { model: "m".into() };
        assert!(!open.is_retryable());
        assert!(open.allows_fallback());
        assert_eq!(open.to_string(), "circuit open for model `m`");
        let json = serde_json::to_value(&open).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"kind": "circuit_open", "model": "m"})
        );
        assert!(!InferenceExecutionError::Cancelled.allows_fallback());
        assert!(InferenceExecutionError::timeout("slow").is_retryable());
    }

    #[test]
    fn tool_error_json_shape() {
        let json = serde_json::to_value(ToolError::Denied("no".into())).unwrap();
        assert_eq!(json, serde_json::json!({"kind": "denied", "message": "no"}));
    }
}
