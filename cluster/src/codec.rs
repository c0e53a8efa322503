//! The cluster's side of the one wire codec ([`awaken_actors::codec`]: MessagePack
//! with field names, human-readable): payloads as [`Bytes`] for NATS, failures as
//! [`ClusterError::Codec`].

use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::ClusterError;

/// Encodes `value` for the wire.
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Bytes, ClusterError> {
    awaken_actors::codec::encode(value)
        .map(Bytes::from)
        .map_err(ClusterError::codec)
}

/// Decodes a wire payload.
pub fn decode<T: DeserializeOwned>(payload: &[u8]) -> Result<T, ClusterError> {
    awaken_actors::codec::decode(payload).map_err(ClusterError::codec)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Payload {
        a: u32,
    }

    #[test]
    fn garbage_is_a_codec_error() {
        assert!(matches!(
            decode::<Payload>(b"\xc1"),
            Err(ClusterError::Codec(_))
        ));
    }
}
