//! MessagePack codec for every wire type.
//!
//! This is the one encoding used between nodes (NATS payloads, content type
//! [`CONTENT_TYPE`]). Structs are written as maps keyed by field name, so a node can
//! add a field (with `#[serde(default)]`) without breaking older nodes, and older
//! payloads still decode on newer nodes.
//!
//! The codec runs serde in *human-readable* mode on both sides, the same mode JSON
//! uses. Every type therefore takes the same serde path as in its JSON form: anything
//! that round-trips through JSON round-trips here, and a payload can be transcoded to
//! JSON (for logs or HTTP) without loss. Compact binary forms (a `Uuid` as 16 raw
//! bytes) are deliberately not used.
//!
//! [`canonical_json`] is the one textual form used where equal JSON values must give
//! equal text (loop detection, permission patterns).

use serde::Serialize;
use serde::de::DeserializeOwned;

/// The content type of codec payloads.
pub const CONTENT_TYPE: &str = "application/msgpack";

/// A value could not be encoded or decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// Serialization failed.
    #[error("msgpack encode error: {0}")]
    Encode(String),
    /// The bytes are not a valid encoding of the expected type.
    #[error("msgpack decode error: {0}")]
    Decode(String),
}

/// Encodes a value as MessagePack with named fields.
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, CodecError> {
    let mut buf = Vec::new();
    let mut serializer = rmp_serde::Serializer::new(&mut buf)
        .with_struct_map()
        .with_human_readable();
    value
        .serialize(&mut serializer)
        .map_err(|err| CodecError::Encode(err.to_string()))?;
    Ok(buf)
}

/// Decodes a value encoded by [`encode`] (or by an older or newer version of its type).
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    let mut deserializer = rmp_serde::Deserializer::from_read_ref(bytes).with_human_readable();
    T::deserialize(&mut deserializer).map_err(|err| CodecError::Decode(err.to_string()))
}

/// The canonical JSON text of a value: object keys sorted, no whitespace.
///
/// Two values that are equal as JSON (whatever their key order) give the same text,
/// so it can key caches, hash tool-call arguments or be matched against patterns,
/// independently of how serde_json happens to order maps in this build.
pub fn canonical_json(value: &serde_json::Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &serde_json::Value, out: &mut String) {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_scalar(&Value::String(key.clone()), out);
                out.push(':');
                write_canonical(item, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => write_scalar(scalar, out),
    }
}

/// Scalars (and keys, as strings) use serde_json's own escaping and number format.
fn write_scalar(value: &serde_json::Value, out: &mut String) {
    out.push_str(&value.to_string());
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde::Deserialize;

    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Sample {
        name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<String>,
        values: BTreeMap<String, f64>,
    }

    #[test]
    fn canonical_json_sorts_keys_at_every_level() {
        let a = serde_json::json!({"b": [1, {"z": "q\"", "a": null}], "a": 1.5});
        assert_eq!(
            canonical_json(&a),
            r#"{"a":1.5,"b":[1,{"a":null,"z":"q\""}]}"#
        );
    }

    #[test]
    fn round_trips_a_struct() {
        let sample = Sample {
            name: "x".into(),
            note: None,
            values: BTreeMap::from([("pi".into(), 3.25)]),
        };
        let bytes = encode(&sample).unwrap();
        assert_eq!(decode::<Sample>(&bytes).unwrap(), sample);
    }

    #[test]
    fn structs_are_maps_with_field_names() {
        let bytes = encode(&Sample {
            name: "x".into(),
            note: None,
            values: BTreeMap::new(),
        })
        .unwrap();
        // fixmap with 2 entries (note is skipped), first key "name".
        assert_eq!(bytes[0], 0x82);
        assert_eq!(&bytes[1..6], b"\xa4name");
    }

    #[test]
    fn named_fields_survive_added_fields_both_ways() {
        #[derive(Debug, PartialEq, Serialize, serde::Deserialize)]
        struct Old {
            a: u32,
        }
        #[derive(Debug, PartialEq, Serialize, serde::Deserialize)]
        struct New {
            a: u32,
            #[serde(default)]
            b: Option<String>,
        }
        let new: New = decode(&encode(&Old { a: 7 }).unwrap()).unwrap();
        assert_eq!(new, New { a: 7, b: None });
        let newer = New {
            a: 7,
            b: Some("x".into()),
        };
        let old: Old = decode(&encode(&newer).unwrap()).unwrap();
        assert_eq!(old, Old { a: 7 });
    }

    #[test]
    fn garbage_is_a_decode_error() {
        let err = decode::<Sample>(&[0xc1]).unwrap_err();
        assert!(matches!(err, CodecError::Decode(_)));
        let err = decode::<Sample>(&encode(&42u8).unwrap()).unwrap_err();
        assert!(matches!(err, CodecError::Decode(_)));
    }
}
