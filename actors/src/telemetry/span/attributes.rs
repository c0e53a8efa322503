//! Attributes written as OTLP `KeyValue` messages the moment they are set: a
//! value is read where it lives (a `&str`, a number, an id's `Display`) and
//! never copied into an owned string first.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use super::wire::{self, WireType};

/// Something an attribute can hold, written as an OTLP `AnyValue` body.
pub trait AttributeValue {
    /// Writes the `AnyValue` message's body (the one field of its oneof).
    fn write(&self, out: &mut Vec<u8>);
}

/// Where attributes go: the `KeyValue` fields `tag` of the message being
/// written (a span's attributes, an event's, a resource's).
#[derive(Debug)]
pub struct Attributes<'a> {
    out: &'a mut Vec<u8>,
    tag: u32,
}

impl<'a> Attributes<'a> {
    /// Attributes appended to `out` as field `tag`.
    pub fn new(out: &'a mut Vec<u8>, tag: u32) -> Self {
        Self { out, tag }
    }

    /// Writes attribute `key` with `value`.
    pub fn set(&mut self, key: &str, value: impl AttributeValue) -> &mut Self {
        wire::nested(self.out, self.tag, |pair| {
            wire::string(pair, 1, key);
            wire::nested(pair, 2, |any| value.write(any));
        });
        self
    }
}

/// A value written as the text its `Display` gives (ids, numbers as text),
/// without a `String` in between.
#[derive(Debug, Clone, Copy)]
pub struct Shown<T>(pub T);

impl<T: fmt::Display> AttributeValue for Shown<T> {
    fn write(&self, out: &mut Vec<u8>) {
        wire::display(out, 1, &self.0);
    }
}

/// A list of strings (`gen_ai.response.finish_reasons`).
#[derive(Debug, Clone, Copy)]
pub struct Strings<'a>(pub &'a [&'a str]);

impl AttributeValue for Strings<'_> {
    fn write(&self, out: &mut Vec<u8>) {
        wire::nested(out, 5, |array| {
            for text in self.0 {
                wire::nested(array, 1, |element| text.write(element));
            }
        });
    }
}

impl AttributeValue for str {
    fn write(&self, out: &mut Vec<u8>) {
        wire::oneof_bytes(out, 1, self.as_bytes());
    }
}

impl AttributeValue for String {
    fn write(&self, out: &mut Vec<u8>) {
        self.as_str().write(out);
    }
}

impl AttributeValue for Cow<'_, str> {
    fn write(&self, out: &mut Vec<u8>) {
        self.as_ref().write(out);
    }
}

impl AttributeValue for Arc<str> {
    fn write(&self, out: &mut Vec<u8>) {
        self.as_ref().write(out);
    }
}

impl AttributeValue for bool {
    fn write(&self, out: &mut Vec<u8>) {
        wire::key(out, 2, WireType::Varint);
        wire::varint_bytes(out, u64::from(*self));
    }
}

impl AttributeValue for i64 {
    fn write(&self, out: &mut Vec<u8>) {
        wire::key(out, 3, WireType::Varint);
        wire::varint_bytes(out, self.cast_unsigned());
    }
}

impl AttributeValue for f64 {
    fn write(&self, out: &mut Vec<u8>) {
        wire::key(out, 4, WireType::SixtyFourBit);
        out.extend_from_slice(&self.to_le_bytes());
    }
}

impl<T: AttributeValue + ?Sized> AttributeValue for &T {
    fn write(&self, out: &mut Vec<u8>) {
        (**self).write(out);
    }
}
