//! The serialized form of a state map, as stores keep it.

use std::any::Any;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, OnceLock};

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
/// makes checkpoints cheap to build and small to keep (decision 0031). A
/// checkpoint may also hold the typed value itself and encode it only when a
/// reader first needs the text (decision 0033): a store that keeps checkpoints in
/// memory never pays for JSON it does not read. It serializes as the JSON it
/// holds, so stored documents look the same.
#[derive(Clone)]
pub struct EncodedValue(Repr);

#[derive(Clone)]
enum Repr {
    /// The JSON text.
    Text(Box<RawValue>),
    /// A value shared with the state it was checkpointed from, encoded on first use.
    Deferred(Arc<Deferred>),
}

/// A typed value whose encoding waits for the first reader of its text.
struct Deferred {
    /// The value, immutable while shared (a later write to the live state copies
    /// it first).
    value: Arc<dyn Any + Send + Sync>,
    /// The key's encoder, instantiated for the value's type.
    encode: DeferredEncoder,
    /// The text once a reader asked for it, or why it could not be encoded.
    text: OnceLock<Result<Box<RawValue>, String>>,
}

/// Encodes a deferred value; the error is the key's encoding error, as text.
pub(crate) type DeferredEncoder = fn(&(dyn Any + Send + Sync)) -> Result<EncodedValue, String>;

/// The name under which `serde_json` passes raw JSON text through serde (a detail
/// of `serde_json`'s `raw_value` feature, pinned by this module's tests): JSON
/// (de)serializers hand the text over verbatim; others, such as the MessagePack
/// codec, see a one-field map holding the text.
const RAW_VALUE_TOKEN: &str = "$serde_json::private::RawValue";

impl EncodedValue {
    /// Encodes `value` as JSON text.
    pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Self, serde_json::Error> {
        serde_json::value::to_raw_value(value).map(|text| Self(Repr::Text(text)))
    }

    /// Holds `value` unencoded; `encode` makes its text when a reader first asks.
    pub(crate) fn deferred(value: Arc<dyn Any + Send + Sync>, encode: DeferredEncoder) -> Self {
        Self(Repr::Deferred(Arc::new(Deferred {
            value,
            encode,
            text: OnceLock::new(),
        })))
    }

    /// The JSON text, encoding a deferred value on first use.
    fn raw(&self) -> Result<&RawValue, serde_json::Error> {
        match &self.0 {
            Repr::Text(text) => Ok(text),
            Repr::Deferred(deferred) => deferred
                .text
                .get_or_init(|| match (deferred.encode)(deferred.value.as_ref())? {
                    EncodedValue(Repr::Text(text)) => Ok(text),
                    encoded => encoded
                        .raw()
                        .map(RawValue::to_owned)
                        .map_err(|e| e.to_string()),
                })
                .as_deref()
                .map_err(serde::ser::Error::custom),
        }
    }

    /// Decodes the text into `T`.
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_str(self.raw()?.get())
    }

    /// The JSON text; an error when the value is deferred and cannot be encoded.
    pub fn as_str(&self) -> Result<&str, serde_json::Error> {
        self.raw().map(RawValue::get)
    }

    /// The value as a JSON tree, for readers that inspect it (APIs, tests).
    pub fn to_json(&self) -> JsonValue {
        // Text was produced by a serializer or parsed as JSON: it is valid JSON. A
        // deferred value that cannot be encoded reads as null.
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
        self.raw()
            .map_err(serde::ser::Error::custom)?
            .serialize(serializer)
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
            .map(|text| EncodedValue(Repr::Text(text)))
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
        if let (Repr::Deferred(mine), Repr::Deferred(theirs)) = (&self.0, &other.0)
            && Arc::ptr_eq(&mine.value, &theirs.value)
        {
            return true;
        }
        match (self.as_str(), other.as_str()) {
            (Ok(mine), Ok(theirs)) if mine == theirs => true,
            _ => self.to_json() == other.to_json(),
        }
    }
}

impl PartialEq<JsonValue> for EncodedValue {
    fn eq(&self, other: &JsonValue) -> bool {
        self.to_json() == *other
    }
}

impl fmt::Debug for EncodedValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.as_str() {
            Ok(text) => f.write_str(text),
            Err(error) => write!(f, "<not encodable: {error}>"),
        }
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
