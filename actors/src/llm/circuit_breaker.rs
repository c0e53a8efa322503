//! A per-model circuit breaker: stop calling a model that keeps failing.
//!
//! Retries help with a blip; they make an outage worse. When a model fails
//! `failure_threshold` times in a row, its circuit *opens* and every call is refused at
//! once with [`InferenceExecutionError::CircuitOpen`], without touching the provider.
//! After `cooldown` the circuit turns *half-open*: up to `half_open_max` probe calls go
//! through. A successful probe closes the circuit; a failed one opens it again for
//! another cooldown. Any success resets the consecutive-failure count.
//!
//! State is kept per upstream model name in a [`CircuitBreaker`], shared by every
//! request that goes through the same [`CircuitBreakerExecutor`] (clone the `Arc` to
//! share one breaker between executors). The map sits behind a plain mutex that is
//! only held for a few field updates, never across an `.await`.
//!
//! Place the breaker *inside* [`RetryingExecutor`](super::RetryingExecutor): each
//! attempt is then counted, and an open circuit makes the retry loop skip straight to
//! the fallback models (`CircuitOpen` is not retryable but allows fallback).
//!
//! Cancellation is not the model's fault: a cancelled call, or a stream dropped before
//! it finished, records neither success nor failure and just frees its probe slot.
//! Time comes from `tokio::time`, so tests can run the cooldown on a paused clock.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::{InferenceChunk, InferenceRequest, InferenceStream, LlmExecutor, StreamResult};
use crate::contract::PluginConfigKey;
use crate::error::InferenceExecutionError;

/// When a model's circuit opens and how it recovers (the agent's `circuit_breaker`
/// section).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct CircuitBreakerConfig {
    /// Consecutive failures that open the circuit.
    pub failure_threshold: u32,
    /// How long the circuit stays open before probes are allowed, in milliseconds.
    pub cooldown_ms: u64,
    /// Probe calls allowed at once while half-open (at least one).
    pub half_open_max: u32,
}

impl Default for CircuitBreakerConfig {
    fn default() -> Self {
        Self {
            failure_threshold: 5,
            cooldown_ms: 30_000,
            half_open_max: 1,
        }
    }
}

impl CircuitBreakerConfig {
    /// The cooldown as a duration.
    pub fn cooldown(&self) -> Duration {
        Duration::from_millis(self.cooldown_ms)
    }
}

/// Binds [`CircuitBreakerConfig`] to the `circuit_breaker` section of an agent spec.
#[derive(Debug)]
pub struct CircuitBreakerConfigKey;

impl PluginConfigKey for CircuitBreakerConfigKey {
    const KEY: &'static str = "circuit_breaker";
    type Config = CircuitBreakerConfig;
}

/// The observable state of one model's circuit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CircuitState {
    /// Calls go through; failures are being counted.
    Closed,
    /// Calls are refused until the cooldown ends.
    Open,
    /// The cooldown ended; a limited number of probe calls go through.
    HalfOpen,
}

/// One model's bookkeeping.
#[derive(Debug, Clone, Copy)]
enum Circuit {
    Closed { consecutive_failures: u32 },
    Open { until: Instant },
    HalfOpen { probes_in_flight: u32 },
}

impl Default for Circuit {
    fn default() -> Self {
        Self::Closed {
            consecutive_failures: 0,
        }
    }
}

/// Per-model circuits under one configuration, shared across requests.
#[derive(Debug)]
pub struct CircuitBreaker {
    config: CircuitBreakerConfig,
    circuits: Mutex<HashMap<String, Circuit>>,
}

impl CircuitBreaker {
    /// A breaker with every circuit closed.
    pub fn new(config: CircuitBreakerConfig) -> Self {
        Self {
            config,
            circuits: Mutex::new(HashMap::new()),
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> &CircuitBreakerConfig {
        &self.config
    }

    /// The state of `model`'s circuit now (an open circuit whose cooldown has ended
    /// reports `HalfOpen`: the next call would be a probe).
    pub fn state(&self, model: &str) -> CircuitState {
        match self.lock().get(model) {
            None | Some(Circuit::Closed { .. }) => CircuitState::Closed,
            Some(Circuit::Open { until }) if Instant::now() < *until => CircuitState::Open,
            Some(Circuit::Open { .. } | Circuit::HalfOpen { .. }) => CircuitState::HalfOpen,
        }
    }

    /// Asks to call `model`: a permit, or `CircuitOpen` when the call must not go out.
    ///
    /// Report the outcome on the permit; dropping it unreported counts as neither.
    pub fn try_acquire(
        self: &Arc<Self>,
        model: &str,
    ) -> Result<CircuitPermit, InferenceExecutionError> {
        let mut circuits = self.lock();
        let circuit = circuits.entry(model.to_owned()).or_default();
        let probe = match *circuit {
            Circuit::Closed { .. } => false,
            Circuit::Open { until } if Instant::now() < until => {
                return Err(open_error(model));
            }
            Circuit::Open { .. } => {
                *circuit = Circuit::HalfOpen {
                    probes_in_flight: 1,
                };
                true
            }
            Circuit::HalfOpen { probes_in_flight } => {
                if probes_in_flight >= self.config.half_open_max.max(1) {
                    return Err(open_error(model));
                }
                *circuit = Circuit::HalfOpen {
                    probes_in_flight: probes_in_flight + 1,
                };
                true
            }
        };
        drop(circuits);
        Ok(CircuitPermit {
            breaker: Arc::clone(self),
            model: model.to_owned(),
            probe,
            settled: false,
        })
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Circuit>> {
        // The map holds plain counters; a panic elsewhere cannot leave it inconsistent.
        self.circuits.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn on_success(&self, model: &str) {
        let mut circuits = self.lock();
        let circuit = circuits.entry(model.to_owned()).or_default();
        if !matches!(circuit, Circuit::Closed { .. }) {
            tracing::info!(model, "circuit closed");
        }
        *circuit = Circuit::default();
    }

    fn on_failure(&self, model: &str, probe: bool) {
        let mut circuits = self.lock();
        let circuit = circuits.entry(model.to_owned()).or_default();
        let open = match *circuit {
            Circuit::Closed {
                consecutive_failures,
            } => {
                let failures = consecutive_failures.saturating_add(1);
                *circuit = Circuit::Closed {
                    consecutive_failures: failures,
                };
                failures >= self.config.failure_threshold
            }
            // A failed probe reopens the circuit for a fresh cooldown.
            Circuit::HalfOpen { .. } => probe,
            // A call admitted before the circuit opened: the circuit is open already.
            Circuit::Open { .. } => false,
        };
        if open {
            tracing::warn!(
                model,
                cooldown_ms = self.config.cooldown_ms,
                "circuit opened"
            );
            *circuit = Circuit::Open {
                until: Instant::now() + self.config.cooldown(),
            };
        }
    }

    fn on_abandoned(&self, model: &str, probe: bool) {
        if !probe {
            return;
        }
        let mut circuits = self.lock();
        if let Some(Circuit::HalfOpen { probes_in_flight }) = circuits.get_mut(model) {
            *probes_in_flight = probes_in_flight.saturating_sub(1);
        }
    }
}

fn open_error(model: &str) -> InferenceExecutionError {
    InferenceExecutionError::CircuitOpen {
        model: model.to_owned(),
    }
}

/// Permission for one call; report how it went with [`CircuitPermit::record`].
#[derive(Debug)]
pub struct CircuitPermit {
    breaker: Arc<CircuitBreaker>,
    model: String,
    probe: bool,
    settled: bool,
}

impl CircuitPermit {
    /// Whether this call is a half-open probe.
    pub fn is_probe(&self) -> bool {
        self.probe
    }

    /// Records the call's outcome; cancellation counts as neither success nor failure.
    pub fn record<T>(mut self, outcome: &Result<T, InferenceExecutionError>) {
        self.settled = true;
        match outcome {
            Ok(_) => self.breaker.on_success(&self.model),
            Err(InferenceExecutionError::Cancelled) => {
                self.breaker.on_abandoned(&self.model, self.probe);
            }
            Err(_) => self.breaker.on_failure(&self.model, self.probe),
        }
    }
}

impl Drop for CircuitPermit {
    fn drop(&mut self) {
        if !self.settled {
            self.breaker.on_abandoned(&self.model, self.probe);
        }
    }
}

/// Wraps an executor with a [`CircuitBreaker`] keyed by the request's model.
pub struct CircuitBreakerExecutor {
    inner: Arc<dyn LlmExecutor>,
    breaker: Arc<CircuitBreaker>,
}

impl std::fmt::Debug for CircuitBreakerExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CircuitBreakerExecutor")
            .field("inner", &self.inner.name())
            .field("config", self.breaker.config())
            .finish()
    }
}

impl CircuitBreakerExecutor {
    /// Wraps `inner` with a fresh breaker.
    pub fn new(inner: Arc<dyn LlmExecutor>, config: CircuitBreakerConfig) -> Self {
        Self::with_breaker(inner, Arc::new(CircuitBreaker::new(config)))
    }

    /// Wraps `inner` with an existing, possibly shared, breaker.
    pub fn with_breaker(inner: Arc<dyn LlmExecutor>, breaker: Arc<CircuitBreaker>) -> Self {
        Self { inner, breaker }
    }

    /// The breaker, for inspection or sharing.
    pub fn breaker(&self) -> &Arc<CircuitBreaker> {
        &self.breaker
    }
}

#[async_trait]
impl LlmExecutor for CircuitBreakerExecutor {
    async fn execute(
        &self,
        request: InferenceRequest,
    ) -> Result<StreamResult, InferenceExecutionError> {
        let permit = self.breaker.try_acquire(&request.model)?;
        let outcome = self.inner.execute(request).await;
        permit.record(&outcome);
        outcome
    }

    fn execute_stream(self: Arc<Self>, request: InferenceRequest) -> InferenceStream {
        let permit = match self.breaker.try_acquire(&request.model) {
            Ok(permit) => permit,
            Err(error) => return futures::stream::iter([Err(error)]).boxed(),
        };
        let inner = Arc::clone(&self.inner).execute_stream(request);
        // The permit rides along with the stream; it is settled by `Done`, by an
        // error, or by the end of the stream, and released if the consumer drops it.
        futures::stream::unfold(
            (inner, Some(permit)),
            |(mut inner, mut permit)| async move {
                let item = match inner.next().await {
                    Some(item) => item,
                    None => {
                        let permit = permit.take()?;
                        let error = InferenceExecutionError::provider(
                            "stream ended without a final result",
                        );
                        permit.record::<()>(&Err(error.clone()));
                        return Some((Err(error), (inner, None)));
                    }
                };
                match &item {
                    Ok(InferenceChunk::Done(_)) => {
                        if let Some(permit) = permit.take() {
                            permit.record::<()>(&Ok(()));
                        }
                    }
                    Err(error) => {
                        if let Some(permit) = permit.take() {
                            permit.record::<()>(&Err(error.clone()));
                        }
                    }
                    Ok(InferenceChunk::Delta(_)) => {}
                }
                Some((item, (inner, permit)))
            },
        )
        .boxed()
    }

    fn name(&self) -> &str {
        self.inner.name()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::contract::{ContentBlock, Message};
    use crate::llm::collect_stream;

    /// Fails while `failing` is set, succeeds otherwise; counts calls.
    struct Switch {
        failing: Mutex<bool>,
        calls: AtomicUsize,
    }

    impl Switch {
        fn new(failing: bool) -> Arc<Self> {
            Arc::new(Self {
                failing: Mutex::new(failing),
                calls: AtomicUsize::new(0),
            })
        }

        fn set_failing(&self, failing: bool) {
            *self.failing.lock().unwrap() = failing;
        }

        fn calls(&self) -> usize {
            self.calls.load(Ordering::SeqCst)
        }
    }

    #[async_trait]
    impl LlmExecutor for Switch {
        async fn execute(
            &self,
            request: InferenceRequest,
        ) -> Result<StreamResult, InferenceExecutionError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            if *self.failing.lock().unwrap() {
                return Err(InferenceExecutionError::provider("500"));
            }
            Ok(StreamResult {
                content: vec![ContentBlock::text(request.model)],
                ..StreamResult::default()
            })
        }

        fn name(&self) -> &str {
            "switch"
        }
    }

    fn config(threshold: u32, half_open_max: u32) -> CircuitBreakerConfig {
        CircuitBreakerConfig {
            failure_threshold: threshold,
            cooldown_ms: 1_000,
            half_open_max,
        }
    }

    fn request(model: &str) -> InferenceRequest {
        InferenceRequest::new(model, vec![Message::user("hi")])
    }

    fn is_open(outcome: &Result<StreamResult, InferenceExecutionError>) -> bool {
        matches!(outcome, Err(InferenceExecutionError::CircuitOpen { .. }))
    }

    #[test]
    fn config_defaults_and_shape() {
        let config = CircuitBreakerConfig::default();
        assert_eq!(config.cooldown(), Duration::from_secs(30));
        assert_eq!(
            serde_json::to_value(&config).unwrap(),
            serde_json::json!({"failure_threshold": 5, "cooldown_ms": 30_000, "half_open_max": 1})
        );
        let partial: CircuitBreakerConfig =
            serde_json::from_value(serde_json::json!({"cooldown_ms": 5})).unwrap();
        assert_eq!(partial.failure_threshold, 5);
        assert_eq!(partial.cooldown_ms, 5);
        let schema = serde_json::to_value(schemars::schema_for!(CircuitBreakerConfig)).unwrap();
        assert!(schema["properties"]["cooldown_ms"].is_object());
        assert_eq!(CircuitBreakerConfigKey::KEY, "circuit_breaker");
    }

    #[tokio::test(start_paused = true)]
    async fn threshold_failures_open_the_circuit() {
        let inner = Switch::new(true);
        let exec = CircuitBreakerExecutor::new(inner.clone(), config(3, 1));
        for _ in 0..3 {
            let outcome = exec.execute(request("m")).await;
            assert_eq!(outcome, Err(InferenceExecutionError::provider("500")));
        }
        assert_eq!(exec.breaker().state("m"), CircuitState::Open);
        let outcome = exec.execute(request("m")).await;
        assert_eq!(
            outcome,
            Err(InferenceExecutionError::CircuitOpen { model: "m".into() })
        );
        assert_eq!(
            inner.calls(),
            3,
            "a refused call never reaches the provider"
        );
        // Other models are not affected.
        inner.set_failing(false);
        assert!(exec.execute(request("other")).await.is_ok());
        assert_eq!(exec.breaker().state("other"), CircuitState::Closed);
    }

    #[tokio::test(start_paused = true)]
    async fn successes_reset_the_consecutive_failure_count() {
        let inner = Switch::new(true);
        let exec = CircuitBreakerExecutor::new(inner.clone(), config(3, 1));
        for _ in 0..5 {
            inner.set_failing(true);
            assert!(exec.execute(request("m")).await.is_err());
            assert!(exec.execute(request("m")).await.is_err());
            inner.set_failing(false);
            assert!(exec.execute(request("m")).await.is_ok());
        }
        assert_eq!(exec.breaker().state("m"), CircuitState::Closed);
        assert_eq!(inner.calls(), 15);
    }

    #[tokio::test(start_paused = true)]
    async fn a_successful_probe_after_cooldown_closes_it() {
        let inner = Switch::new(true);
        let exec = CircuitBreakerExecutor::new(inner.clone(), config(2, 1));
        for _ in 0..2 {
            let _ = exec.execute(request("m")).await;
        }
        tokio::time::advance(Duration::from_millis(999)).await;
        assert!(is_open(&exec.execute(request("m")).await));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(exec.breaker().state("m"), CircuitState::HalfOpen);
        inner.set_failing(false);
        assert!(exec.execute(request("m")).await.is_ok());
        assert_eq!(exec.breaker().state("m"), CircuitState::Closed);
        assert_eq!(inner.calls(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_probe_reopens_it_for_a_full_cooldown() {
        let inner = Switch::new(true);
        let exec = CircuitBreakerExecutor::new(inner.clone(), config(2, 1));
        for _ in 0..2 {
            let _ = exec.execute(request("m")).await;
        }
        tokio::time::advance(Duration::from_secs(1)).await;
        let outcome = exec.execute(request("m")).await;
        assert_eq!(outcome, Err(InferenceExecutionError::provider("500")));
        assert_eq!(exec.breaker().state("m"), CircuitState::Open);
        tokio::time::advance(Duration::from_millis(999)).await;
        assert!(is_open(&exec.execute(request("m")).await));
        assert_eq!(inner.calls(), 3);
        tokio::time::advance(Duration::from_millis(1)).await;
        inner.set_failing(false);
        assert!(exec.execute(request("m")).await.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn half_open_admits_only_half_open_max_probes() {
        let breaker = Arc::new(CircuitBreaker::new(config(1, 2)));
        breaker
            .try_acquire("m")
            .unwrap()
            .record::<()>(&Err(InferenceExecutionError::provider("x")));
        tokio::time::advance(Duration::from_secs(1)).await;
        let first = breaker.try_acquire("m").unwrap();
        let second = breaker.try_acquire("m").unwrap();
        assert!(first.is_probe() && second.is_probe());
        assert!(breaker.try_acquire("m").is_err(), "third probe refused");
        // An abandoned probe frees its slot.
        drop(second);
        let third = breaker.try_acquire("m").unwrap();
        third.record::<()>(&Err(InferenceExecutionError::Cancelled));
        first.record::<()>(&Ok(()));
        assert_eq!(breaker.state("m"), CircuitState::Closed);
        assert!(!breaker.try_acquire("m").unwrap().is_probe());
    }

    #[tokio::test(start_paused = true)]
    async fn cancellation_does_not_count_as_failure() {
        let breaker = Arc::new(CircuitBreaker::new(config(1, 1)));
        breaker
            .try_acquire("m")
            .unwrap()
            .record::<()>(&Err(InferenceExecutionError::Cancelled));
        assert_eq!(breaker.state("m"), CircuitState::Closed);
    }

    #[tokio::test(start_paused = true)]
    async fn streams_are_counted_and_refused() {
        let inner = Switch::new(true);
        let exec = Arc::new(CircuitBreakerExecutor::new(inner.clone(), config(1, 1)));
        let err = collect_stream(Arc::clone(&exec).execute_stream(request("m")))
            .await
            .unwrap_err();
        assert_eq!(err, InferenceExecutionError::provider("500"));
        let err = collect_stream(Arc::clone(&exec).execute_stream(request("m")))
            .await
            .unwrap_err();
        assert!(matches!(err, InferenceExecutionError::CircuitOpen { .. }));
        assert_eq!(inner.calls(), 1);

        tokio::time::advance(Duration::from_secs(1)).await;
        inner.set_failing(false);
        let result = collect_stream(Arc::clone(&exec).execute_stream(request("m")))
            .await
            .unwrap();
        assert_eq!(result.text(), "m");
        assert_eq!(exec.breaker().state("m"), CircuitState::Closed);
    }

    #[tokio::test(start_paused = true)]
    async fn retrying_executor_moves_past_an_open_circuit() {
        use crate::llm::{LlmRetryPolicy, RetryingExecutor};

        let inner = Switch::new(true);
        let breaker = CircuitBreakerExecutor::new(inner.clone(), config(2, 1));
        let breaker = Arc::new(breaker);
        // Open the primary's circuit.
        for _ in 0..2 {
            let _ = breaker.execute(request("primary")).await;
        }
        inner.set_failing(false);
        let retrying = RetryingExecutor::new(
            breaker.clone(),
            LlmRetryPolicy {
                max_retries: 5,
                fallback_models: vec!["secondary".into()],
                backoff_base_ms: 100,
            },
        );
        let started = Instant::now();
        let result = retrying.execute(request("primary")).await.unwrap();
        assert_eq!(result.text(), "secondary");
        assert_eq!(
            inner.calls(),
            3,
            "primary refused once, secondary called once"
        );
        assert_eq!(started.elapsed(), Duration::ZERO);
    }
}
