//! Retries with exponential backoff, then fallback models.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::{InferenceRequest, LlmExecutor, StreamResult};
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
        let exponential = self
            .backoff_base_ms
            .saturating_mul(1u64.checked_shl(attempt).unwrap_or(u64::MAX))
            .min(MAX_BACKOFF_MS);
        let requested = match error {
            InferenceExecutionError::RateLimited {
                retry_after_ms: Some(ms),
                ..
            } => *ms,
            _ => 0,
        };
        Duration::from_millis(exponential.max(requested))
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

#[async_trait]
impl LlmExecutor for RetryingExecutor {
    async fn execute(
        &self,
        request: InferenceRequest,
    ) -> Result<StreamResult, InferenceExecutionError> {
        // Fallbacks from the request (an inference override) win over the policy's.
        let fallbacks = if request.fallback_models.is_empty() {
            self.policy.fallback_models.clone()
        } else {
            request.fallback_models.clone()
        };
        let models: Vec<String> = std::iter::once(request.model.clone())
            .chain(fallbacks)
            .collect();
        let mut last_error = InferenceExecutionError::provider("no model to try");
        for model in models {
            for attempt in 0..=self.policy.max_retries {
                let mut attempt_request = request.clone();
                attempt_request.model = model.clone();
                attempt_request.fallback_models.clear();
                match self.inner.execute(attempt_request).await {
                    Ok(result) => return Ok(result),
                    Err(error) if !error.is_retryable() => return Err(error),
                    Err(error) => {
                        tracing::warn!(model = %model, attempt, %error, "inference attempt failed");
                        if attempt < self.policy.max_retries {
                            tokio::time::sleep(self.policy.backoff(attempt, &error)).await;
                        }
                        last_error = error;
                    }
                }
            }
        }
        Err(last_error)
    }

    fn name(&self) -> &str {
        self.inner.name()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::contract::{ContentBlock, Message};

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
