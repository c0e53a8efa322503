//! W3C Trace Context: the `traceparent` a run carries from the request that
//! started it, through its checkpoints and across nodes, to every call it makes
//! to another service — so one run is one trace wherever it goes.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A `traceparent` (version 00): the trace, the caller's span, the flags.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TraceContext {
    trace_id: [u8; 16],
    span_id: [u8; 8],
    flags: u8,
}

/// A `traceparent` that does not follow the W3C format.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>, ids not all zero)")]
pub struct InvalidTraceParent;

impl TraceContext {
    /// The start of a new trace (sampled). Every bit of the trace id is
    /// random: ratio samplers read its low 63 bits, which in a UUID v4 would
    /// start with fixed variant bits and never fall in the lower half.
    pub fn root() -> Self {
        Self {
            trace_id: fastrand::u128(1..).to_be_bytes(),
            span_id: new_span_id(),
            flags: 0x01,
        }
    }

    /// The context a call made under this one sends: the same trace, a new span.
    pub fn child(&self) -> Self {
        Self {
            span_id: new_span_id(),
            ..*self
        }
    }

    /// Reads a `traceparent` header value. Versions above 00 are read as 00 when
    /// their first four fields are well formed, as the recommendation asks.
    pub fn parse(header: &str) -> Result<Self, InvalidTraceParent> {
        let header = header.trim();
        let mut fields = header.split('-');
        let (Some(version), Some(trace), Some(span), Some(flags)) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            return Err(InvalidTraceParent);
        };
        let version = hex::<1>(version).ok_or(InvalidTraceParent)?[0];
        // Version ff is invalid; 00 has exactly four fields.
        if version == 0xff || (version == 0 && fields.next().is_some()) {
            return Err(InvalidTraceParent);
        }
        let trace_id = hex::<16>(trace).ok_or(InvalidTraceParent)?;
        let span_id = hex::<8>(span).ok_or(InvalidTraceParent)?;
        let flags = hex::<1>(flags).ok_or(InvalidTraceParent)?[0];
        if trace_id == [0; 16] || span_id == [0; 8] {
            return Err(InvalidTraceParent);
        }
        Ok(Self {
            trace_id,
            span_id,
            flags,
        })
    }

    /// The trace id, 32 lowercase hex digits.
    pub fn trace_id(&self) -> String {
        to_hex(&self.trace_id)
    }

    /// The span id, 16 lowercase hex digits.
    pub fn span_id(&self) -> String {
        to_hex(&self.span_id)
    }

    /// Whether the trace is recorded (the `sampled` flag): spans of an
    /// unsampled trace are not built at all.
    pub fn sampled(&self) -> bool {
        self.flags & 0x01 == 0x01
    }

    /// The raw fields, for span libraries: trace id, span id, flags.
    pub fn to_parts(&self) -> ([u8; 16], [u8; 8], u8) {
        (self.trace_id, self.span_id, self.flags)
    }

    /// A context from a span library's ids; `None` when either id is all zeros
    /// (an invalid span).
    pub fn from_parts(trace_id: [u8; 16], span_id: [u8; 8], flags: u8) -> Option<Self> {
        (trace_id != [0; 16] && span_id != [0; 8]).then_some(Self {
            trace_id,
            span_id,
            flags,
        })
    }
}

/// `N` bytes from exactly `2N` lowercase or uppercase hex digits.
fn hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    if text.len() != 2 * N || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut bytes = [0u8; N];
    for (i, byte) in bytes.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(bytes)
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn new_span_id() -> [u8; 8] {
    fastrand::u64(1..).to_be_bytes()
}

impl fmt::Display for TraceContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "00-{}-{}-{:02x}",
            self.trace_id(),
            self.span_id(),
            self.flags
        )
    }
}

impl fmt::Debug for TraceContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TraceContext({self})")
    }
}

impl TryFrom<String> for TraceContext {
    type Error = InvalidTraceParent;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value)
    }
}

impl From<TraceContext> for String {
    fn from(context: TraceContext) -> Self {
        context.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn reads_and_writes_the_w3c_form() {
        let context = TraceContext::parse(SAMPLE).unwrap();
        assert_eq!(context.to_string(), SAMPLE);
        assert_eq!(context.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        let json = serde_json::to_string(&context).unwrap();
        assert_eq!(json, format!("\"{SAMPLE}\""));
        assert_eq!(
            serde_json::from_str::<TraceContext>(&json).unwrap(),
            context
        );
        // A later version's first four fields are read as 00.
        let later = "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes";
        assert_eq!(TraceContext::parse(later).unwrap(), context);
    }

    #[test]
    fn the_sampled_flag_is_read() {
        assert!(TraceContext::parse(SAMPLE).unwrap().sampled());
        let unsampled = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
        assert!(!TraceContext::parse(unsampled).unwrap().sampled());
        assert!(!TraceContext::parse(unsampled).unwrap().child().sampled());
    }

    #[test]
    fn a_child_keeps_the_trace_and_takes_a_new_span() {
        let parent = TraceContext::parse(SAMPLE).unwrap();
        let child = parent.child();
        assert_eq!(child.trace_id(), parent.trace_id());
        assert_ne!(child.span_id(), parent.span_id());
        let root = TraceContext::root();
        assert_ne!(root.trace_id(), parent.trace_id());
        assert!(TraceContext::parse(&root.to_string()).is_ok());
    }

    #[test]
    fn malformed_values_are_refused() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e47zz-00f067aa0ba902b7-01",
        ] {
            assert!(TraceContext::parse(bad).is_err(), "{bad}");
        }
    }
}
