//! JetStream key-value buckets that work on nats-server 2.9.10.
//!
//! `create_key_value` fails against 2.9.10 (its account-info reply lacks fields the
//! client expects), so a bucket's backing stream is created here by hand, with the
//! settings a KV bucket has, and then opened with `get_key_value`.

use std::time::Duration;

use async_nats::jetstream::{self, kv, stream};
use awaken_actors::backoff::Backoff;

use crate::error::ClusterError;
use crate::streams::ensure_stream;

/// How a bucket is created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketSpec {
    /// The bucket name (`[A-Za-z0-9_-]+`).
    pub name: String,
    /// Revisions kept per key.
    pub history: i64,
    /// Entries older than this expire; zero keeps them forever.
    pub max_age: Duration,
    /// Copies kept on a clustered server (1 on a single server).
    pub replicas: usize,
}

impl BucketSpec {
    /// A bucket keeping one revision per key, forever.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            history: 1,
            max_age: Duration::ZERO,
            replicas: 1,
        }
    }

    /// Entries expire `max_age` after their last write.
    pub fn with_max_age(mut self, max_age: Duration) -> Self {
        self.max_age = max_age;
        self
    }

    /// Keeps `replicas` copies (at least one).
    pub fn with_replicas(mut self, replicas: usize) -> Self {
        self.replicas = replicas.max(1);
        self
    }
}

/// Opens the bucket, creating its stream first if it does not exist.
pub async fn ensure_bucket(
    js: &jetstream::Context,
    spec: &BucketSpec,
) -> Result<kv::Store, ClusterError> {
    // JetStream refuses a duplicate window longer than max_age.
    let duplicate_window = match spec.max_age {
        Duration::ZERO => Duration::from_secs(120),
        age => age.min(Duration::from_secs(120)),
    };
    ensure_stream(
        js,
        stream::Config {
            name: format!("KV_{}", spec.name),
            subjects: vec![format!("$KV.{}.>", spec.name)],
            max_messages_per_subject: spec.history,
            max_age: spec.max_age,
            duplicate_window,
            allow_rollup: true,
            deny_delete: true,
            allow_direct: true,
            discard: stream::DiscardPolicy::New,
            num_replicas: spec.replicas,
            ..Default::default()
        },
    )
    .await?;
    // On a clustered server the stream just created may not be found yet
    // through the server this client asks next: look again, briefly.
    let mut pauses = OPEN_PAUSES;
    let mut attempt = 1;
    loop {
        match js.get_key_value(&spec.name).await {
            Ok(store) => return Ok(store),
            Err(error) if attempt < OPEN_ATTEMPTS => {
                tracing::debug!(bucket = %spec.name, %error, attempt, "the bucket's stream is not visible yet; looking again");
                pauses.wait().await;
                attempt += 1;
            }
            Err(error) => return Err(ClusterError::nats(error)),
        }
    }
}

/// Attempts to open a bucket whose stream exists before the failure is final.
const OPEN_ATTEMPTS: u32 = 8;
/// The pauses between them: 20 ms, doubling to 640 ms (about 2.5 s in all).
const OPEN_PAUSES: Backoff = Backoff::new(Duration::from_millis(20), Duration::from_millis(640));
