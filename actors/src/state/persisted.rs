//! The serialized form of a state map, as stores keep it.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize, de::DeserializeOwned};
use serde_json::value::RawValue;

use crate::JsonValue;

/// Persistent state keys of one thread, encoded as JSON by each key's `encode`.
///
/// Stores save it with every checkpoint; `StateStore::restore` turns it back into a
/// typed map. Keys are sorted so the encoding is deterministic.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PersistedState {
    /// Store revision at export time.
    pub revision: u64,
    /// Encoded value per state key string.
    #[serde(default)]
    pub extensions: BTreeMap<String, EncodedValue>,
}

/// One state key's value as JSON text, opaque until the key decodes it.
///
/// A checkpoint encodes every persistent key, so keeping the text (one buffer)
/// instead of a `serde_json::Value` tree (a map and a string per field) is what
/// makes checkpoints cheap to build and small to keep (decision 0031). It
/// serializes as the JSON it holds, so stored documents look the same.
#[derive(Clone)]
pub struct EncodedValue(Box<RawValue>);

/// The name under which `serde_json` passes raw JSON text through serde (a detail
/// of `serde_json`'s `raw_value` feature, pinned by this module's tests): JSON
/// (de)serializers hand the text over verbatim; others, such as the MessagePack
/// codec, see a one-field map holding the text.
const RAW_VALUE_TOKEN: &str = "$serde_json::private::RawValue";

impl EncodedValue {
    /// Encodes `value` as JSON text.
    pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Self, serde_json::Error> {
        serde_json::value::to_raw_value(value).map(Self)
    }

    /// Decodes the text into `T`.
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_str(self.0.get())
    }

    /// The JSON text.
    pub fn as_str(&self) -> &str {
        self.0.get()
    }

    /// The value as a JSON tree, for readers that inspect it (APIs, tests).
    pub fn to_json(&self) -> JsonValue {
        // The text was produced by a serializer or parsed as JSON: it is valid JSON.
        self.decode().unwrap_or(JsonValue::Null)
    }
}

impl From<&JsonValue> for EncodedValue {
    fn from(value: &JsonValue) -> Self {
        // A `Value` always serializes (its map keys are strings).
        match Self::encode(value) {
            Ok(encoded) => encoded,
            Err(_) => unreachable!("a serde_json::Value always encodes"),
        }
    }
}

impl From<JsonValue> for EncodedValue {
    fn from(value: JsonValue) -> Self {
        Self::from(&value)
    }
}

impl Serialize for EncodedValue {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for EncodedValue {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_newtype_struct(RAW_VALUE_TOKEN, EncodedValueVisitor)
    }
}

struct EncodedValueVisitor;

impl EncodedValueVisitor {
    fn from_text<E: serde::de::Error>(text: String) -> Result<EncodedValue, E> {
        RawValue::from_string(text)
            .map(EncodedValue)
            .map_err(E::custom)
    }
}

impl<'de> serde::de::Visitor<'de> for EncodedValueVisitor {
    type Value = EncodedValue;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    /// JSON deserializers: the raw text, as a map of the token to the text.
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<EncodedValue, A::Error> {
        match map.next_key::<String>()? {
            Some(key) if key == RAW_VALUE_TOKEN => Self::from_text(map.next_value()?),
            _ => Err(serde::de::Error::custom(
                "an encoded state value arrived without its JSON text",
            )),
        }
    }

    /// Other formats: whatever value was written, the token's map included.
    fn visit_newtype_struct<D: serde::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<EncodedValue, D::Error> {
        let value = JsonValue::deserialize(deserializer)?;
        if let JsonValue::Object(map) = &value
            && map.len() == 1
            && let Some(JsonValue::String(text)) = map.get(RAW_VALUE_TOKEN)
        {
            return Self::from_text(text.clone());
        }
        EncodedValue::encode(&value).map_err(serde::de::Error::custom)
    }
}

/// Equal when the JSON values are equal: stores such as PostgreSQL's `jsonb` keep
/// the same value with other whitespace and key order.
impl PartialEq for EncodedValue {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str() || self.to_json() == other.to_json()
    }
}

impl PartialEq<JsonValue> for EncodedValue {
    fn eq(&self, other: &JsonValue) -> bool {
        self.to_json() == *other
    }
}

impl fmt::Debug for EncodedValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What `restore` does with a persisted key that no plugin registered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnknownKeyPolicy {
    /// Refuse the whole restore (nothing is changed).
    #[default]
    Error,
    /// Restore the rest; the unknown key is kept aside untouched, re-exported with
    /// the next checkpoint and handed back if a plugin registers it later.
    Skip,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    #[test]
    fn an_encoded_value_is_stored_as_the_json_it_holds() {
        let mut state = PersistedState {
            revision: 3,
            ..PersistedState::default()
        };
        state
            .extensions
            .insert("k".into(), EncodedValue::encode(&vec![1, 2]).unwrap());
        let text = serde_json::to_string(&state).unwrap();
        assert_eq!(text, r#"{"revision":3,"extensions":{"k":[1,2]}}"#);
        let back: PersistedState = serde_json::from_str(&text).unwrap();
        assert_eq!(back, state);
        assert_eq!(
            back.extensions["k"].decode::<Vec<u8>>().unwrap(),
            vec![1, 2]
        );
        // Through a `Value` (as sqlx's `Json` and the gateway's readers do), too.
        let tree = serde_json::to_value(&state).unwrap();
        assert_eq!(tree["extensions"]["k"], json!([1, 2]));
        let back: PersistedState = serde_json::from_value(tree).unwrap();
        assert_eq!(back, state);
    }

    #[test]
    fn an_encoded_value_survives_the_wire_codec() {
        let value = json!({"calls": [{"id": "c1", "args": {"x": 1.5}}], "text": "ü"});
        let state = PersistedState {
            revision: 9,
            extensions: [("k".to_owned(), EncodedValue::from(&value))].into(),
        };
        let back: PersistedState =
            crate::codec::decode(&crate::codec::encode(&state).unwrap()).unwrap();
        assert_eq!(back, state);
        assert_eq!(back.extensions["k"].to_json(), value);
    }

    #[test]
    fn text_that_is_not_json_is_refused() {
        let forged =
            serde_json::json!({"revision": 1, "extensions": {"k": {RAW_VALUE_TOKEN: "{oops"}}});
        let bytes = crate::codec::encode(&forged).unwrap();
        assert!(crate::codec::decode::<PersistedState>(&bytes).is_err());
    }

    #[test]
    fn equality_is_of_values_not_of_text() {
        let compact = EncodedValue::encode(&json!({"a": 1, "b": [true]})).unwrap();
        let reordered: EncodedValue = serde_json::from_str(r#"{ "b": [ true ], "a": 1 }"#).unwrap();
        assert_eq!(compact, reordered);
        assert_eq!(compact, json!({"b": [true], "a": 1}));
        assert_ne!(compact, EncodedValue::from(json!({"a": 2, "b": [true]})));
    }
}
