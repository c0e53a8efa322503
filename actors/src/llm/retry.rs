//! Retries with exponential backoff, then fallback models.
//!
//! [`RetryingExecutor`] tries the request's model up to `1 + max_retries` times, then
//! each fallback model the same way, sleeping [`LlmRetryPolicy::backoff`] between
//! attempts on one model. Cancellation stops everything. An open circuit
//! ([`InferenceExecutionError::CircuitOpen`]) skips the remaining retries of that model
//! but still moves on to the fallbacks: the breaker would refuse the retries anyway.
//!
//! # Streaming
//!
//! `execute_stream` follows the same plan, but only while nothing has been forwarded
//! yet. Once a delta reached the consumer (and through it, possibly a user's screen),
//! retrying would replay text the consumer already has, or worse, a different answer
//! glued to the first one's beginning. So after the first forwarded item a failure is
//! passed through unchanged and the stream ends; the run loop decides what to do with
//! a half-streamed turn. Before the first item, a failure is invisible to the consumer
//! and is retried exactly like in `execute`.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use serde::{Deserialize, Serialize};

use super::{InferenceChunk, InferenceRequest, InferenceStream, LlmExecutor, StreamResult};
use crate::contract::PluginConfigKey;
use crate::error::InferenceExecutionError;

/// Longest backoff between two attempts.
const MAX_BACKOFF_MS: u64 = 8_000;

/// How failed inference calls are retried (the agent's `retry` section).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct LlmRetryPolicy {
    /// Retries after the first attempt, per model (0 = no retry).
    pub max_retries: u32,
    /// Models tried in order once the primary model exhausted its retries.
    pub fallback_models: Vec<String>,
    /// Base of the exponential backoff, in milliseconds (0 = no wait).
    pub backoff_base_ms: u64,
}

impl Default for LlmRetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 2,
            fallback_models: Vec::new(),
            backoff_base_ms: 500,
        }
    }
}

impl LlmRetryPolicy {
    /// Delay before retry number `attempt` (0-based): `min(base * 2^attempt, 8 s)`,
    /// or longer when the provider asked for it.
    pub fn backoff(&self, attempt: u32, error: &InferenceExecutionError) -> Duration {
        let exponential = crate::backoff::delay(
            Duration::from_millis(self.backoff_base_ms),
            attempt,
            Duration::from_millis(MAX_BACKOFF_MS),
        );
        let requested = match error {
            InferenceExecutionError::RateLimited {
                retry_after_ms: Some(ms),
                ..
            } => *ms,
            _ => 0,
        };
        exponential.max(Duration::from_millis(requested))
    }

    /// Whether this policy changes anything compared with a plain executor.
    pub fn is_active(&self) -> bool {
        self.max_retries > 0 || !self.fallback_models.is_empty()
    }
}

/// Binds [`LlmRetryPolicy`] to the `retry` section of an agent spec.
#[derive(Debug)]
pub struct RetryConfigKey;

impl PluginConfigKey for RetryConfigKey {
    const KEY: &'static str = "retry";
    type Config = LlmRetryPolicy;
}

/// Wraps an executor with retries and model fallback.
pub struct RetryingExecutor {
    inner: Arc<dyn LlmExecutor>,
    policy: LlmRetryPolicy,
}

impl std::fmt::Debug for RetryingExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RetryingExecutor")
            .field("inner", &self.inner.name())
            .field("policy", &self.policy)
            .finish()
    }
}

impl RetryingExecutor {
    /// Wraps `inner` with `policy`.
    pub fn new(inner: Arc<dyn LlmExecutor>, policy: LlmRetryPolicy) -> Self {
        Self { inner, policy }
    }

    /// The policy in force.
    pub fn policy(&self) -> &LlmRetryPolicy {
        &self.policy
    }
}

/// What to do after a failed attempt.
#[derive(Debug)]
enum NextStep {
    /// Try again after this delay (same or next model, as the plan says).
    Retry(Duration),
    /// Stop and return this error.
    GiveUp(InferenceExecutionError),
}

/// Walks the attempt plan: the primary model with its retries, then each fallback.
#[derive(Debug)]
struct AttemptPlan {
    models: Vec<String>,
    model_index: usize,
    attempt: u32,
    max_retries: u32,
}

impl AttemptPlan {
    fn new(policy: &LlmRetryPolicy, request: &InferenceRequest) -> Self {
        // Fallbacks from the request (an inference override) win over the policy's.
        let fallbacks = if request.fallback_models.is_empty() {
            &policy.fallback_models
        } else {
            &request.fallback_models
        };
        let models = std::iter::once(request.model.clone())
            .chain(fallbacks.iter().cloned())
            .collect();
        Self {
            models,
            model_index: 0,
            attempt: 0,
            max_retries: policy.max_retries,
        }
    }

    /// The request for the current attempt.
    fn request(&self, template: &InferenceRequest) -> InferenceRequest {
        let mut request = template.clone();
        request.model = self.models[self.model_index].clone();
        request.fallback_models.clear();
        request
    }

    /// Records a failure of the current attempt and decides what comes next.
    fn on_failure(&mut self, policy: &LlmRetryPolicy, error: InferenceExecutionError) -> NextStep {
        let model = &self.models[self.model_index];
        tracing::warn!(model = %model, attempt = self.attempt, %error, "inference attempt failed");
        if !error.allows_fallback() {
            return NextStep::GiveUp(error);
        }
        if error.is_retryable() && self.attempt < self.max_retries {
            let delay = policy.backoff(self.attempt, &error);
            self.attempt += 1;
            return NextStep::Retry(delay);
        }
        if self.model_index + 1 < self.models.len() {
            self.model_index += 1;
            self.attempt = 0;
            return NextStep::Retry(Duration::ZERO);
        }
        NextStep::GiveUp(error)
    }
}

async fn pause(delay: Duration) {
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
}

#[async_trait]
impl LlmExecutor for RetryingExecutor {
    async fn execute(
        &self,
        request: InferenceRequest,
    ) -> Result<StreamResult, InferenceExecutionError> {
        let mut plan = AttemptPlan::new(&self.policy, &request);
        loop {
            match self.inner.execute(plan.request(&request)).await {
                Ok(result) => return Ok(result),
                Err(error) => match plan.on_failure(&self.policy, error) {
                    NextStep::Retry(delay) => pause(delay).await,
                    NextStep::GiveUp(error) => return Err(error),
                },
            }
        }
    }

    fn execute_stream(self: Arc<Self>, request: InferenceRequest) -> InferenceStream {
        let plan = AttemptPlan::new(&self.policy, &request);
        let state = StreamRetryState {
            executor: self,
            template: request,
            plan,
            current: None,
            forwarded: false,
            finished: false,
        };
        futures::stream::unfold(state, StreamRetryState::next_item).boxed()
    }

    fn name(&self) -> &str {
        self.inner.name()
    }
}

/// The state `execute_stream` threads through its items.
struct StreamRetryState {
    executor: Arc<RetryingExecutor>,
    template: InferenceRequest,
    plan: AttemptPlan,
    /// The attempt being streamed, if one is open.
    current: Option<InferenceStream>,
    /// Whether any item reached the consumer; from then on failures pass through.
    forwarded: bool,
    /// Whether the stream has ended (after `Done` or a final error).
    finished: bool,
}

type StreamItem = Result<InferenceChunk, InferenceExecutionError>;

impl StreamRetryState {
    async fn next_item(mut self) -> Option<(StreamItem, Self)> {
        loop {
            if self.finished {
                return None;
            }
            let Some(current) = self.current.as_mut() else {
                let attempt = self.plan.request(&self.template);
                self.current = Some(Arc::clone(&self.executor.inner).execute_stream(attempt));
                continue;
            };
            let error = match current.next().await {
                Some(Ok(chunk)) => {
                    self.forwarded = true;
                    if matches!(chunk, InferenceChunk::Done(_)) {
                        self.finished = true;
                        self.current = None;
                    }
                    return Some((Ok(chunk), self));
                }
                Some(Err(error)) => error,
                None => InferenceExecutionError::provider("stream ended without a final result"),
            };
            self.current = None;
            if self.forwarded {
                // Too late to retry: the consumer already holds part of this answer.
                self.finished = true;
                return Some((Err(error), self));
            }
            match self.plan.on_failure(&self.executor.policy, error) {
                NextStep::Retry(delay) => pause(delay).await,
                NextStep::GiveUp(error) => {
                    self.finished = true;
                    return Some((Err(error), self));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::contract::{ContentBlock, Message};
    use crate::llm::collect_stream;

    /// Fails with the scripted errors in order, then answers with the model's name.
    struct Flaky {
        errors: Mutex<Vec<InferenceExecutionError>>,
        calls: Mutex<Vec<String>>,
        failing_models: Vec<String>,
    }

    impl Flaky {
        fn new(errors: Vec<InferenceExecutionError>, failing_models: &[&str]) -> Arc<Self> {
            Arc::new(Self {
                errors: Mutex::new(errors),
                calls: Mutex::new(Vec::new()),
                failing_models: failing_models.iter().map(|m| (*m).to_owned()).collect(),
            })
        }
    }

    #[async_trait]
    impl LlmExecutor for Flaky {
        async fn execute(
            &self,
            request: InferenceRequest,
        ) -> Result<StreamResult, InferenceExecutionError> {
            self.calls.lock().unwrap().push(request.model.clone());
            if self.failing_models.contains(&request.model) {
                return Err(InferenceExecutionError::provider("down"));
            }
            if let Some(error) = self.errors.lock().unwrap().pop() {
                return Err(error);
            }
            Ok(StreamResult {
                content: vec![ContentBlock::text(request.model)],
                ..StreamResult::default()
            })
        }

        fn name(&self) -> &str {
            "flaky"
        }
    }

    fn request() -> InferenceRequest {
        InferenceRequest::new("primary", vec![Message::user("hi")])
    }

    #[tokio::test(start_paused = true)]
    async fn retries_then_succeeds() {
        let inner = Flaky::new(
            vec![
                InferenceExecutionError::provider("500"),
                InferenceExecutionError::provider("500"),
            ],
            &[],
        );
        let exec = RetryingExecutor::new(inner.clone(), LlmRetryPolicy::default());
        let started = tokio::time::Instant::now();
        let result = exec.execute(request()).await.unwrap();
        assert_eq!(result.text(), "primary");
        assert_eq!(inner.calls.lock().unwrap().len(), 3);
        // 500 ms then 1000 ms of backoff on the paused clock.
        assert_eq!(started.elapsed(), Duration::from_millis(1500));
    }

    #[tokio::test(start_paused = true)]
    async fn falls_back_after_exhausting_retries() {
        let inner = Flaky::new(vec![], &["primary"]);
        let policy = LlmRetryPolicy {
            max_retries: 1,
            fallback_models: vec!["secondary".into()],
            backoff_base_ms: 10,
        };
        let exec = RetryingExecutor::new(inner.clone(), policy);
        let result = exec.execute(request()).await.unwrap();
        assert_eq!(result.text(), "secondary");
        assert_eq!(
            *inner.calls.lock().unwrap(),
            vec!["primary", "primary", "secondary"]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn gives_up_with_the_last_error() {
        let inner = Flaky::new(vec![], &["primary"]);
        let policy = LlmRetryPolicy {
            max_retries: 0,
            fallback_models: vec![],
            backoff_base_ms: 0,
        };
        let err = RetryingExecutor::new(inner, policy)
            .execute(request())
            .await
            .unwrap_err();
        assert_eq!(err, InferenceExecutionError::provider("down"));
    }

    #[tokio::test(start_paused = true)]
    async fn cancellation_is_not_retried() {
        let inner = Flaky::new(vec![InferenceExecutionError::Cancelled], &[]);
        let exec = RetryingExecutor::new(inner.clone(), LlmRetryPolicy::default());
        assert_eq!(
            exec.execute(request()).await.unwrap_err(),
            InferenceExecutionError::Cancelled
        );
        assert_eq!(inner.calls.lock().unwrap().len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn open_circuit_skips_retries_but_tries_fallbacks() {
        let inner = Flaky::new(
            vec![InferenceExecutionError::CircuitOpen {
                model: "primary".into(),
            }],
            &[],
        );
        let policy = LlmRetryPolicy {
            max_retries: 3,
            fallback_models: vec!["secondary".into()],
            backoff_base_ms: 100,
        };
        let exec = RetryingExecutor::new(inner.clone(), policy);
        let started = tokio::time::Instant::now();
        let result = exec.execute(request()).await.unwrap();
        assert_eq!(result.text(), "secondary");
        assert_eq!(*inner.calls.lock().unwrap(), vec!["primary", "secondary"]);
        assert_eq!(
            started.elapsed(),
            Duration::ZERO,
            "no backoff before a fallback"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn open_circuit_without_fallback_is_returned() {
        let open = InferenceExecutionError::CircuitOpen {
            model: "primary".into(),
        };
        let inner = Flaky::new(vec![open.clone()], &[]);
        let exec = RetryingExecutor::new(inner.clone(), LlmRetryPolicy::default());
        assert_eq!(exec.execute(request()).await.unwrap_err(), open);
        assert_eq!(inner.calls.lock().unwrap().len(), 1);
    }

    /// How one streaming attempt behaves.
    #[derive(Clone)]
    enum Attempt {
        /// Fails before yielding anything.
        FailAtOnce(InferenceExecutionError),
        /// Yields one text delta, then fails.
        FailAfterDelta(InferenceExecutionError),
        /// Yields two deltas and `Done` with the model's name as text.
        Succeed,
        /// Yields a delta and ends without `Done`.
        Truncate,
    }

    /// Streams the scripted attempts in order (the last one repeats).
    struct StreamScript {
        attempts: Mutex<Vec<Attempt>>,
        calls: Mutex<Vec<String>>,
    }

    impl StreamScript {
        fn new(mut attempts: Vec<Attempt>) -> Arc<Self> {
            attempts.reverse();
            Arc::new(Self {
                attempts: Mutex::new(attempts),
                calls: Mutex::new(Vec::new()),
            })
        }
    }

    #[async_trait]
    impl LlmExecutor for StreamScript {
        async fn execute(
            &self,
            _request: InferenceRequest,
        ) -> Result<StreamResult, InferenceExecutionError> {
            unreachable!("the tests stream")
        }

        fn execute_stream(self: Arc<Self>, request: InferenceRequest) -> InferenceStream {
            self.calls.lock().unwrap().push(request.model.clone());
            let attempt = {
                let mut attempts = self.attempts.lock().unwrap();
                if attempts.len() > 1 {
                    attempts.pop().unwrap()
                } else {
                    attempts[0].clone()
                }
            };
            let delta = |text: &str| {
                Ok(InferenceChunk::Delta(super::super::InferenceDelta::Text {
                    delta: text.into(),
                }))
            };
            let items = match attempt {
                Attempt::FailAtOnce(error) => vec![Err(error)],
                Attempt::FailAfterDelta(error) => vec![delta("par"), Err(error)],
                Attempt::Truncate => vec![delta("par")],
                Attempt::Succeed => vec![
                    delta("a"),
                    delta("b"),
                    Ok(InferenceChunk::Done(StreamResult {
                        content: vec![ContentBlock::text(request.model)],
                        ..StreamResult::default()
                    })),
                ],
            };
            futures::stream::iter(items).boxed()
        }

        fn name(&self) -> &str {
            "stream-script"
        }
    }

    async fn drain(stream: InferenceStream) -> Vec<StreamItem> {
        stream.collect().await
    }

    fn down() -> InferenceExecutionError {
        InferenceExecutionError::provider("down")
    }

    #[tokio::test(start_paused = true)]
    async fn stream_retries_failures_before_the_first_item() {
        let inner = StreamScript::new(vec![
            Attempt::FailAtOnce(down()),
            Attempt::Truncate,
            Attempt::Succeed,
        ]);
        let exec = Arc::new(RetryingExecutor::new(
            inner.clone(),
            LlmRetryPolicy::default(),
        ));
        let started = tokio::time::Instant::now();
        let items = drain(exec.execute_stream(request())).await;
        // The truncated attempt forwarded a delta, so it is not retried.
        assert_eq!(items.len(), 2);
        assert!(matches!(&items[0], Ok(InferenceChunk::Delta(_))));
        assert_eq!(
            items[1],
            Err(InferenceExecutionError::provider(
                "stream ended without a final result"
            ))
        );
        assert_eq!(inner.calls.lock().unwrap().len(), 2);
        assert_eq!(started.elapsed(), Duration::from_millis(500));
    }

    #[tokio::test(start_paused = true)]
    async fn stream_backs_off_then_succeeds() {
        let inner = StreamScript::new(vec![
            Attempt::FailAtOnce(down()),
            Attempt::FailAtOnce(down()),
            Attempt::Succeed,
        ]);
        let exec = Arc::new(RetryingExecutor::new(
            inner.clone(),
            LlmRetryPolicy::default(),
        ));
        let started = tokio::time::Instant::now();
        let items = drain(exec.execute_stream(request())).await;
        assert_eq!(items.len(), 3);
        let Ok(InferenceChunk::Done(result)) = &items[2] else {
            panic!("expected Done, got {:?}", items[2]);
        };
        assert_eq!(result.text(), "primary");
        assert_eq!(started.elapsed(), Duration::from_millis(1500));
    }

    #[tokio::test(start_paused = true)]
    async fn stream_error_after_a_delta_passes_through() {
        let inner = StreamScript::new(vec![Attempt::FailAfterDelta(down()), Attempt::Succeed]);
        let exec = Arc::new(RetryingExecutor::new(
            inner.clone(),
            LlmRetryPolicy::default(),
        ));
        let items = drain(exec.execute_stream(request())).await;
        assert_eq!(items.len(), 2);
        assert_eq!(items[1], Err(down()));
        assert_eq!(
            inner.calls.lock().unwrap().len(),
            1,
            "no retry once streaming"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn stream_falls_back_and_skips_open_circuits() {
        let inner = StreamScript::new(vec![
            Attempt::FailAtOnce(down()),
            Attempt::FailAtOnce(down()),
            Attempt::FailAtOnce(InferenceExecutionError::CircuitOpen {
                model: "secondary".into(),
            }),
            Attempt::Succeed,
        ]);
        let policy = LlmRetryPolicy {
            max_retries: 1,
            fallback_models: vec!["secondary".into(), "tertiary".into()],
            backoff_base_ms: 10,
        };
        let exec = Arc::new(RetryingExecutor::new(inner.clone(), policy));
        let started = tokio::time::Instant::now();
        let result = collect_stream(exec.execute_stream(request()))
            .await
            .unwrap();
        assert_eq!(result.text(), "tertiary");
        assert_eq!(
            *inner.calls.lock().unwrap(),
            vec!["primary", "primary", "secondary", "tertiary"]
        );
        assert_eq!(started.elapsed(), Duration::from_millis(10));
    }

    #[tokio::test(start_paused = true)]
    async fn stream_gives_up_with_the_last_error_and_stops_on_cancel() {
        let inner = StreamScript::new(vec![Attempt::FailAtOnce(down())]);
        let policy = LlmRetryPolicy {
            max_retries: 2,
            fallback_models: vec![],
            backoff_base_ms: 0,
        };
        let exec = Arc::new(RetryingExecutor::new(inner.clone(), policy.clone()));
        let items = drain(exec.execute_stream(request())).await;
        assert_eq!(items, vec![Err(down())]);
        assert_eq!(inner.calls.lock().unwrap().len(), 3);

        let inner = StreamScript::new(vec![Attempt::FailAtOnce(
            InferenceExecutionError::Cancelled,
        )]);
        let exec = Arc::new(RetryingExecutor::new(inner.clone(), policy));
        let items = drain(exec.execute_stream(request())).await;
        assert_eq!(items, vec![Err(InferenceExecutionError::Cancelled)]);
        assert_eq!(inner.calls.lock().unwrap().len(), 1);
    }

    #[test]
    fn backoff_is_exponential_capped_and_honours_retry_after() {
        let policy = LlmRetryPolicy::default();
        let plain = InferenceExecutionError::provider("x");
        assert_eq!(policy.backoff(0, &plain), Duration::from_millis(500));
        assert_eq!(policy.backoff(3, &plain), Duration::from_millis(4000));
        assert_eq!(policy.backoff(10, &plain), Duration::from_millis(8000));
        assert_eq!(policy.backoff(63, &plain), Duration::from_millis(8000));
        let limited = InferenceExecutionError::RateLimited {
            message: "slow down".into(),
            retry_after_ms: Some(20_000),
        };
        assert_eq!(policy.backoff(0, &limited), Duration::from_millis(20_000));
    }
}
