//! Creating a JetStream stream when several nodes start at once.
//!
//! `get_or_create_stream` looks the stream up and creates it when missing. Two
//! nodes starting together both find it missing and both create it; nats-server
//! 2.9 refuses the second create ("subjects overlap with an existing stream"),
//! although the stream it wanted now exists. So a refused create is followed by
//! another look-up, and the stream that is there is used.

use std::time::Duration;

use async_nats::jetstream::{self, stream};
use awaken_actors::backoff::Backoff;

use crate::error::ClusterError;

/// Look-up-or-create attempts before a refusal is final.
const ATTEMPTS: u32 = 5;
/// The pauses after refused attempts: 20 ms, doubling.
const PAUSES: Backoff = Backoff::new(Duration::from_millis(20), Duration::from_millis(320));

/// The stream named in `config`, created if no node has created it yet.
pub(crate) async fn ensure_stream(
    js: &jetstream::Context,
    config: stream::Config,
) -> Result<stream::Stream, ClusterError> {
    let mut pauses = PAUSES;
    let mut attempt = 1;
    loop {
        // Boxed: the client's futures are large, and every node start awaits this.
        match Box::pin(js.get_or_create_stream(config.clone())).await {
            Ok(stream) => return Ok(stream),
            Err(error) if attempt < ATTEMPTS => {
                tracing::debug!(stream = %config.name, %error, attempt, "creating the stream raced another node; looking again");
                if let Ok(stream) = Box::pin(js.get_stream(&config.name)).await {
                    return Ok(stream);
                }
                pauses.wait().await;
                attempt += 1;
            }
            Err(error) => return Err(ClusterError::nats(error)),
        }
    }
}

/// How long one request to create an ordered consumer may take before it is
/// sent again. A healthy server answers within milliseconds.
const ORDERED_ATTEMPT: Duration = Duration::from_millis(750);

/// Requests to create an ordered consumer before giving up.
const ORDERED_ATTEMPTS: u32 = 8;

/// An ordered push consumer on `stream`, asked for again when a request goes
/// unanswered. On a three-server cluster that lost a server, nats-server 2.9
/// keeps placing some new ephemeral consumers on the lost peer for minutes:
/// that request times out (after the client's 10 s) while the next one,
/// placed elsewhere, is answered at once (decision 0087).
pub(crate) async fn ordered_consumer(
    stream: &stream::Stream,
    config: jetstream::consumer::push::OrderedConfig,
) -> Result<jetstream::consumer::Consumer<jetstream::consumer::push::OrderedConfig>, ClusterError> {
    let mut attempt = 1;
    loop {
        let asked = Box::pin(stream.create_consumer(config.clone()));
        let failure = match tokio::time::timeout(ORDERED_ATTEMPT, asked).await {
            Ok(Ok(consumer)) => return Ok(consumer),
            Ok(Err(error)) => ClusterError::nats(error),
            Err(_) => ClusterError::TimedOut {
                doing: "creating an ordered consumer",
                after: ORDERED_ATTEMPT,
            },
        };
        if attempt >= ORDERED_ATTEMPTS {
            return Err(failure);
        }
        tracing::debug!(error = %failure, attempt, "ordered consumer not created; asking again");
        attempt += 1;
    }
}
