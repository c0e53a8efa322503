//! The one wire codec of the cluster: MessagePack with field names, human-readable
//! (ids and timestamps as strings), so payloads stay forward and backward compatible
//! and transcode to JSON.

use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::ClusterError;

/// Encodes `value` for the wire.
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Bytes, ClusterError> {
    let mut buf = Vec::new();
    let mut serializer = rmp_serde::Serializer::new(&mut buf)
        .with_struct_map()
        .with_human_readable();
    value
        .serialize(&mut serializer)
        .map_err(|e| ClusterError::Codec(e.to_string()))?;
    Ok(Bytes::from(buf))
}

/// Decodes a wire payload.
pub fn decode<T: DeserializeOwned>(payload: &[u8]) -> Result<T, ClusterError> {
    let mut deserializer = rmp_serde::Deserializer::from_read_ref(payload).with_human_readable();
    T::deserialize(&mut deserializer).map_err(|e| ClusterError::Codec(e.to_string()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Old {
        a: u32,
    }

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct New {
        a: u32,
        #[serde(default)]
        b: Option<String>,
    }

    #[test]
    fn named_fields_survive_added_fields_both_ways() {
        let new: New = decode(&encode(&Old { a: 7 }).unwrap()).unwrap();
        assert_eq!(new, New { a: 7, b: None });
        let old: Old = decode(
            &encode(&New {
                a: 7,
                b: Some("x".into()),
            })
            .unwrap(),
        )
        .unwrap();
        assert_eq!(old, Old { a: 7 });
    }

    #[test]
    fn garbage_is_a_codec_error() {
        assert!(matches!(
            decode::<Old>(b"\xc1"),
            Err(ClusterError::Codec(_))
        ));
    }
}
