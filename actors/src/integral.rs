//! Whole numbers read the way JSON Schema counts them: `3` and `3.0` are both
//! the integer 3.
//!
//! serde reads `3.0` as a float and refuses it where an integer field stands,
//! while a JSON Schema `"type": "integer"` (what the OpenAPI document gives
//! clients) allows it. Fields a client sends use [`optional`] so that every
//! number the schema allows is taken; a fraction or a number out of the field's
//! range is still refused.

use std::fmt;
use std::marker::PhantomData;

use serde::Deserializer;
use serde::de::{self, Visitor};

/// `deserialize_with` for an `Option<T>` integer field: `null` or absent is
/// `None`; an integer, or a float with no fraction, in `T`'s range is the value.
pub fn optional<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<u64> + TryFrom<i64>,
{
    deserializer.deserialize_option(OptionalVisitor(PhantomData))
}

struct OptionalVisitor<T>(PhantomData<T>);

impl<'de, T: TryFrom<u64> + TryFrom<i64>> Visitor<'de> for OptionalVisitor<T> {
    type Value = Option<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a whole number or null")
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer
            .deserialize_any(WholeVisitor(PhantomData))
            .map(Some)
    }
}

struct WholeVisitor<T>(PhantomData<T>);

impl<T> WholeVisitor<T> {
    fn out_of_range<E: de::Error>(shown: impl fmt::Display) -> E {
        E::custom(format_args!("{shown} is out of range"))
    }
}

impl<T: TryFrom<u64> + TryFrom<i64>> Visitor<'_> for WholeVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a whole number")
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<T, E> {
        T::try_from(value).map_err(|_| Self::out_of_range(value))
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<T, E> {
        T::try_from(value).map_err(|_| Self::out_of_range(value))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<T, E> {
        if value.fract() != 0.0 || !value.is_finite() {
            return Err(E::invalid_type(de::Unexpected::Float(value), &self));
        }
        // 2^64 and -2^63, exactly representable: the casts below stay in range.
        const U64_END: f64 = 18_446_744_073_709_551_616.0;
        const I64_START: f64 = -9_223_372_036_854_775_808.0;
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        match value {
            v if (0.0..U64_END).contains(&v) => self.visit_u64(v as u64),
            v if (I64_START..0.0).contains(&v) => self.visit_i64(v as i64),
            _ => Err(Self::out_of_range(value)),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    struct Body {
        #[serde(default, deserialize_with = "super::optional")]
        priority: Option<u8>,
    }

    fn priority(json: &str) -> Result<Option<u8>, serde_json::Error> {
        serde_json::from_str::<Body>(json).map(|body| body.priority)
    }

    #[test]
    fn whole_numbers_are_taken_in_either_notation() {
        assert_eq!(priority(r#"{"priority": 7}"#).unwrap(), Some(7));
        assert_eq!(priority(r#"{"priority": 7.0}"#).unwrap(), Some(7));
        assert_eq!(priority(r#"{"priority": 2.55e2}"#).unwrap(), Some(255));
        assert_eq!(priority(r#"{"priority": null}"#).unwrap(), None);
        assert_eq!(priority("{}").unwrap(), None);
    }

    #[test]
    fn fractions_and_numbers_out_of_range_are_refused() {
        for json in [
            r#"{"priority": 7.5}"#,
            r#"{"priority": 256}"#,
            r#"{"priority": -1}"#,
            r#"{"priority": -1.0}"#,
            r#"{"priority": "7"}"#,
            r#"{"priority": 1e300}"#,
        ] {
            assert!(priority(json).is_err(), "{json}");
        }
    }
}
