//! The protobuf wire format, as much of it as OTLP spans need: fields written
//! straight into a byte vector, nested messages given their length after
//! their body (decision 0070).
//!
//! A nested message reserves one byte for its length and moves its body only
//! when the body turns out to be 128 bytes or more: attributes, events and
//! links are short, so almost every length is written in place.

use std::fmt::{self, Write as _};

/// Protobuf wire types (the three OTLP spans use, and the two fixed widths).
#[derive(Debug, Clone, Copy)]
#[repr(u8)]
pub enum WireType {
    /// `int64`, `uint32`, `bool`, enums.
    Varint = 0,
    /// `fixed64`, `double`.
    SixtyFourBit = 1,
    /// `string`, `bytes`, nested messages.
    LengthDelimited = 2,
    /// `fixed32`.
    ThirtyTwoBit = 5,
}

/// A field's key: its number and wire type.
pub fn key(out: &mut Vec<u8>, tag: u32, wire_type: WireType) {
    varint_bytes(out, u64::from(tag << 3 | wire_type as u32));
}

/// A base-128 varint.
pub fn varint_bytes(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value & 0x7f) as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// How many bytes [`varint_bytes`] writes for `value`.
pub fn varint_len(value: u64) -> usize {
    // One byte per started group of seven bits, at least one.
    (64 - (value | 1).leading_zeros() as usize).div_ceil(7)
}

/// A `bytes` field; left out when empty, as proto3 does.
pub fn bytes(out: &mut Vec<u8>, tag: u32, value: &[u8]) {
    if !value.is_empty() {
        oneof_bytes(out, tag, value);
    }
}

/// A `string` field; left out when empty.
pub fn string(out: &mut Vec<u8>, tag: u32, text: &str) {
    bytes(out, tag, text.as_bytes());
}

/// A member of a oneof (or any field that must be present): written even when
/// empty.
pub fn oneof_bytes(out: &mut Vec<u8>, tag: u32, value: &[u8]) {
    key(out, tag, WireType::LengthDelimited);
    varint_bytes(out, value.len() as u64);
    out.extend_from_slice(value);
}

/// A `string` field holding `parts` one after another; written even when
/// empty.
pub fn joined(out: &mut Vec<u8>, tag: u32, parts: &[&str]) {
    key(out, tag, WireType::LengthDelimited);
    varint_bytes(out, parts.iter().map(|part| part.len() as u64).sum());
    for part in parts {
        out.extend_from_slice(part.as_bytes());
    }
}

/// A `uint32`/`uint64`/enum field; left out when zero.
pub fn varint(out: &mut Vec<u8>, tag: u32, value: u64) {
    if value != 0 {
        key(out, tag, WireType::Varint);
        varint_bytes(out, value);
    }
}

/// A `fixed64` field; left out when zero.
pub fn fixed64(out: &mut Vec<u8>, tag: u32, value: u64) {
    if value != 0 {
        key(out, tag, WireType::SixtyFourBit);
        out.extend_from_slice(&value.to_le_bytes());
    }
}

/// A `fixed32` field; left out when zero.
pub fn fixed32(out: &mut Vec<u8>, tag: u32, value: u32) {
    if value != 0 {
        key(out, tag, WireType::ThirtyTwoBit);
        out.extend_from_slice(&value.to_le_bytes());
    }
}

/// The bytes of a length-delimited field `tag` whose body is `len` bytes.
pub fn field_len(tag: u32, len: usize) -> usize {
    varint_len(u64::from(tag << 3)) + varint_len(len as u64) + len
}

/// A nested message (or any length-delimited body) as field `tag`, its body
/// written in place by `body`.
pub fn nested<R>(out: &mut Vec<u8>, tag: u32, body: impl FnOnce(&mut Vec<u8>) -> R) -> R {
    key(out, tag, WireType::LengthDelimited);
    let length_at = out.len();
    out.push(0);
    let result = body(out);
    let len = out.len() - length_at - 1;
    if len < 0x80 {
        out[length_at] = len as u8;
    } else {
        let mut prefix = Vec::with_capacity(10);
        varint_bytes(&mut prefix, len as u64);
        out.splice(length_at..=length_at, prefix);
    }
    result
}

/// A `string` field holding `text` as `Display` writes it, with no `String`
/// in between; written even when empty.
pub fn display(out: &mut Vec<u8>, tag: u32, text: impl fmt::Display) {
    nested(out, tag, |body| {
        // Writing into a vector cannot fail; a `Display` that reports an
        // error leaves what it wrote.
        let _ = write!(Utf8Sink(body), "{text}");
    });
}

/// A `fmt::Write` appending to a byte vector.
struct Utf8Sink<'a>(&'a mut Vec<u8>);

impl fmt::Write for Utf8Sink<'_> {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        self.0.extend_from_slice(text.as_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_lengths_match_what_is_written() {
        for value in [
            0,
            1,
            127,
            128,
            300,
            16_383,
            16_384,
            u64::from(u32::MAX),
            u64::MAX,
        ] {
            let mut out = Vec::new();
            varint_bytes(&mut out, value);
            assert_eq!(out.len(), varint_len(value), "{value}");
        }
    }

    #[test]
    fn a_long_nested_body_gets_a_longer_length_in_front() {
        for len in [0usize, 1, 127, 128, 200, 20_000] {
            let mut out = vec![0xaa];
            nested(&mut out, 3, |body| {
                body.extend(std::iter::repeat_n(7u8, len))
            });
            let mut expected = vec![0xaa, 3 << 3 | 2];
            varint_bytes(&mut expected, len as u64);
            expected.extend(std::iter::repeat_n(7u8, len));
            assert_eq!(out, expected, "{len}");
            assert_eq!(out.len() - 1, field_len(3, len));
        }
    }

    #[test]
    fn joined_parts_are_one_string() {
        let mut out = Vec::new();
        joined(&mut out, 5, &["chat ", "gpt", ""]);
        assert_eq!(
            out,
            [
                5 << 3 | 2,
                8,
                b'c',
                b'h',
                b'a',
                b't',
                b' ',
                b'g',
                b'p',
                b't'
            ]
        );
    }

    #[test]
    fn displayed_text_is_a_length_delimited_string() {
        let mut out = Vec::new();
        display(&mut out, 1, format_args!("run-{}", 42));
        assert_eq!(out, [1 << 3 | 2, 6, b'r', b'u', b'n', b'-', b'4', b'2']);
    }
}
