//! Finished spans written straight into an OTLP `ExportTraceServiceRequest`
//! (protobuf), without the intermediate message structs the SDK's exporter
//! builds (decision 0067): that conversion copied every attribute key and value
//! into owned strings, hashed each span's scope and measured nested lengths
//! once per level, and cost a node exporting every span more than the spans
//! themselves.
//!
//! Each span is written on its own as soon as it ends ([`span_body`]), and
//! appended to its scope's [`ScopeBatch`] as a `ScopeSpans.spans` field
//! ([`push_scope_span`]); a batch of them becomes a request by putting the
//! resource and scope levels around the bytes ([`export_request`]). The small messages
//! inside a span (attributes, status) are sized first, the rare ones (events,
//! links) get their length prefix inserted after. The output is byte for byte
//! what prost writes for the SDK's own conversion (tested).

use std::time::{SystemTime, UNIX_EPOCH};

use opentelemetry::trace::{SpanKind, Status};
use opentelemetry::{Array, InstrumentationScope, KeyValue, Value};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SpanData;
use prost::encoding::{WireType, encoded_len_varint, key_len};

/// The resource every batch is sent under, written once.
#[derive(Debug, Default, Clone)]
pub(super) struct EncodedResource {
    /// The `Resource` message's body.
    body: Vec<u8>,
    schema_url: Option<String>,
}

impl EncodedResource {
    pub(super) fn new(resource: &Resource) -> Self {
        let mut body = Vec::new();
        for (key, value) in resource.iter() {
            key_value(&mut body, 1, key.as_str(), value);
        }
        Self {
            body,
            schema_url: resource.schema_url().map(str::to_owned),
        }
    }
}

/// The written spans of one instrumentation scope, waiting for their request.
#[derive(Debug)]
pub(super) struct ScopeBatch {
    pub(super) scope: InstrumentationScope,
    /// `ScopeSpans.spans` fields, one per span, as [`push_scope_span`] writes them.
    pub(super) spans: Vec<u8>,
}

/// Writes the body of `span`'s `Span` message into `out` (cleared first).
pub(super) fn span_body(out: &mut Vec<u8>, span: &SpanData) {
    out.clear();
    self::span(out, span);
}

/// Appends the span whose body [`span_body`] wrote as one `ScopeSpans.spans`
/// field (key, length, body): the length is known, so the body is copied once.
pub(super) fn push_scope_span(out: &mut Vec<u8>, body: &[u8]) {
    key(out, 2, WireType::LengthDelimited);
    varint_bytes(out, body.len() as u64);
    out.extend_from_slice(body);
}

/// Writes the spans of `batches` under `resource` as an
/// `ExportTraceServiceRequest` into `out`; scopes without spans are left out.
/// Every level's length is worked out first, so each byte is written once.
pub(super) fn export_request(
    batches: &[ScopeBatch],
    resource: &EncodedResource,
    out: &mut Vec<u8>,
) {
    let scopes: Vec<(&ScopeBatch, Vec<u8>, usize)> = batches
        .iter()
        .filter(|batch| !batch.spans.is_empty())
        .map(|batch| {
            let mut scope = Vec::new();
            instrumentation_scope(&mut scope, &batch.scope);
            let len = field_len(1, scope.len())
                + batch.spans.len()
                + batch.scope.schema_url().map_or(0, |url| string_len(3, url));
            (batch, scope, len)
        })
        .collect();
    let resource_len = if resource.body.is_empty() {
        0
    } else {
        field_len(1, resource.body.len())
    };
    let resource_spans_len = resource_len
        + scopes
            .iter()
            .map(|(_, _, len)| field_len(2, *len))
            .sum::<usize>()
        + resource
            .schema_url
            .as_deref()
            .map_or(0, |url| string_len(3, url));
    out.reserve(field_len(1, resource_spans_len));
    key(out, 1, WireType::LengthDelimited);
    varint_bytes(out, resource_spans_len as u64);
    length_delimited(out, 1, &resource.body);
    for (batch, scope, len) in &scopes {
        key(out, 2, WireType::LengthDelimited);
        varint_bytes(out, *len as u64);
        key(out, 1, WireType::LengthDelimited);
        varint_bytes(out, scope.len() as u64);
        out.extend_from_slice(scope);
        out.extend_from_slice(&batch.spans);
        if let Some(url) = batch.scope.schema_url() {
            string(out, 3, url);
        }
    }
    if let Some(url) = &resource.schema_url {
        string(out, 3, url);
    }
}

/// The bytes of a length-delimited field `tag` whose body is `len` bytes.
fn field_len(tag: u32, len: usize) -> usize {
    key_len(tag) + encoded_len_varint(len as u64) + len
}

fn instrumentation_scope(out: &mut Vec<u8>, scope: &InstrumentationScope) {
    string(out, 1, scope.name());
    if let Some(version) = scope.version() {
        string(out, 2, version);
    }
    for attribute in scope.attributes() {
        key_value(out, 3, attribute.key.as_str(), &attribute.value);
    }
}

fn span(out: &mut Vec<u8>, span: &SpanData) {
    let context = &span.span_context;
    length_delimited(out, 1, &context.trace_id().to_bytes());
    length_delimited(out, 2, &context.span_id().to_bytes());
    string(out, 3, &context.trace_state().header());
    if span.parent_span_id != opentelemetry::trace::SpanId::INVALID {
        length_delimited(out, 4, &span.parent_span_id.to_bytes());
    }
    string(out, 5, &span.name);
    varint(out, 6, kind(&span.span_kind));
    fixed64(out, 7, nanos(span.start_time));
    fixed64(out, 8, nanos(span.end_time));
    for attribute in &span.attributes {
        key_value(out, 9, attribute.key.as_str(), &attribute.value);
    }
    varint(out, 10, u64::from(span.dropped_attributes_count));
    for event in span.events.iter() {
        message(out, 11, |body| {
            fixed64(body, 1, nanos(event.timestamp));
            string(body, 2, &event.name);
            attributes(body, 3, &event.attributes);
            varint(body, 4, u64::from(event.dropped_attributes_count));
        });
    }
    varint(out, 12, u64::from(span.events.dropped_count));
    for link in span.links.iter() {
        let linked = &link.span_context;
        message(out, 13, |body| {
            length_delimited(body, 1, &linked.trace_id().to_bytes());
            length_delimited(body, 2, &linked.span_id().to_bytes());
            string(body, 3, &linked.trace_state().header());
            attributes(body, 4, &link.attributes);
            varint(body, 5, u64::from(link.dropped_attributes_count));
            fixed32(
                body,
                6,
                flags(linked.is_remote(), linked.trace_flags().to_u8()),
            );
        });
    }
    varint(out, 14, u64::from(span.links.dropped_count));
    let (description, code): (&str, u64) = match &span.status {
        Status::Error { description } => (description, 2),
        Status::Ok => ("", 1),
        Status::Unset => ("", 0),
    };
    let code_len = if code == 0 { 0 } else { key_len(3) + 1 };
    key(out, 15, WireType::LengthDelimited);
    varint_bytes(out, (string_len(2, description) + code_len) as u64);
    string(out, 2, description);
    varint(out, 3, code);
    fixed32(
        out,
        16,
        flags(span.parent_span_is_remote, context.trace_flags().to_u8()),
    );
}

/// `SpanFlags`: the W3C flags, and whether the parent was remote (which is
/// always known here).
fn flags(parent_is_remote: bool, trace_flags: u8) -> u32 {
    const HAS_IS_REMOTE: u32 = 0x100;
    const IS_REMOTE: u32 = 0x200;
    u32::from(trace_flags) | HAS_IS_REMOTE | if parent_is_remote { IS_REMOTE } else { 0 }
}

fn kind(kind: &SpanKind) -> u64 {
    match kind {
        SpanKind::Internal => 1,
        SpanKind::Server => 2,
        SpanKind::Client => 3,
        SpanKind::Producer => 4,
        SpanKind::Consumer => 5,
    }
}

fn nanos(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |since| {
        u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
    })
}

fn attributes(out: &mut Vec<u8>, tag: u32, attributes: &[KeyValue]) {
    for attribute in attributes {
        key_value(out, tag, attribute.key.as_str(), &attribute.value);
    }
}

/// A `KeyValue` message as field `tag`, sized before it is written.
fn key_value(out: &mut Vec<u8>, tag: u32, name: &str, value: &Value) {
    let value_len = any_value_len(value);
    let len = string_len(1, name) + key_len(2) + encoded_len_varint(value_len as u64) + value_len;
    key(out, tag, WireType::LengthDelimited);
    varint_bytes(out, len as u64);
    string(out, 1, name);
    key(out, 2, WireType::LengthDelimited);
    varint_bytes(out, value_len as u64);
    any_value(out, value);
}

/// An `AnyValue`'s body: the one field of its `value` oneof (written even when
/// it holds the default, as a oneof is).
fn any_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::String(text) => oneof_string(out, 1, text.as_str()),
        Value::Bool(flag) => {
            key(out, 2, WireType::Varint);
            varint_bytes(out, u64::from(*flag));
        }
        Value::I64(number) => {
            key(out, 3, WireType::Varint);
            varint_bytes(out, number.cast_unsigned());
        }
        Value::F64(number) => {
            key(out, 4, WireType::SixtyFourBit);
            out.extend_from_slice(&number.to_le_bytes());
        }
        Value::Array(array) => {
            let len = array_len(array);
            key(out, 5, WireType::LengthDelimited);
            varint_bytes(out, len as u64);
            for element in elements(array) {
                let element_len = any_value_len(&element);
                key(out, 1, WireType::LengthDelimited);
                varint_bytes(out, element_len as u64);
                any_value(out, &element);
            }
        }
        // A kind of value newer than this encoder: sent as its text.
        other => oneof_string(out, 1, &other.to_string()),
    }
}

fn any_value_len(value: &Value) -> usize {
    match value {
        Value::String(text) => oneof_string_len(1, text.as_str()),
        Value::Bool(flag) => key_len(2) + encoded_len_varint(u64::from(*flag)),
        Value::I64(number) => key_len(3) + encoded_len_varint(number.cast_unsigned()),
        Value::F64(_) => key_len(4) + 8,
        Value::Array(array) => {
            let len = array_len(array);
            key_len(5) + encoded_len_varint(len as u64) + len
        }
        other => oneof_string_len(1, &other.to_string()),
    }
}

/// The length of an `ArrayValue`'s body.
fn array_len(array: &Array) -> usize {
    elements(array)
        .map(|element| {
            let len = any_value_len(&element);
            key_len(1) + encoded_len_varint(len as u64) + len
        })
        .sum()
}

fn elements(array: &Array) -> Box<dyn Iterator<Item = Value> + '_> {
    match array {
        Array::Bool(values) => Box::new(values.iter().map(|v| Value::Bool(*v))),
        Array::I64(values) => Box::new(values.iter().map(|v| Value::I64(*v))),
        Array::F64(values) => Box::new(values.iter().map(|v| Value::F64(*v))),
        Array::String(values) => Box::new(values.iter().map(|v| Value::String(v.clone()))),
        // An array kind newer than this encoder: sent as its text.
        other => Box::new(std::iter::once(Value::from(other.to_string()))),
    }
}

/// A nested message as field `tag`: its body written by `body` in place, then
/// its key and length put in front.
fn message(out: &mut Vec<u8>, tag: u32, body: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    body(out);
    let len = out.len() - start;
    let mut prefix = Vec::with_capacity(key_len(tag) + encoded_len_varint(len as u64));
    key(&mut prefix, tag, WireType::LengthDelimited);
    varint_bytes(&mut prefix, len as u64);
    out.splice(start..start, prefix);
}

/// A field's key: its number and wire type.
fn key(out: &mut Vec<u8>, tag: u32, wire_type: WireType) {
    varint_bytes(out, u64::from(tag << 3 | wire_type as u32));
}

/// A base-128 varint, pushed straight into the vector.
fn varint_bytes(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value & 0x7f) as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// A `bytes` field; omitted when empty, as proto3 does.
fn length_delimited(out: &mut Vec<u8>, tag: u32, bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    key(out, tag, WireType::LengthDelimited);
    varint_bytes(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// A `string` field; omitted when empty, as proto3 does.
fn string(out: &mut Vec<u8>, tag: u32, text: &str) {
    length_delimited(out, tag, text.as_bytes());
}

fn string_len(tag: u32, text: &str) -> usize {
    if text.is_empty() {
        0
    } else {
        key_len(tag) + encoded_len_varint(text.len() as u64) + text.len()
    }
}

/// A string member of a oneof: written even when empty.
fn oneof_string(out: &mut Vec<u8>, tag: u32, text: &str) {
    key(out, tag, WireType::LengthDelimited);
    varint_bytes(out, text.len() as u64);
    out.extend_from_slice(text.as_bytes());
}

fn oneof_string_len(tag: u32, text: &str) -> usize {
    key_len(tag) + encoded_len_varint(text.len() as u64) + text.len()
}

/// A `uint32`/`uint64`/enum field; omitted when zero.
fn varint(out: &mut Vec<u8>, tag: u32, value: u64) {
    if value != 0 {
        key(out, tag, WireType::Varint);
        varint_bytes(out, value);
    }
}

/// A `fixed64` field; omitted when zero.
fn fixed64(out: &mut Vec<u8>, tag: u32, value: u64) {
    if value != 0 {
        key(out, tag, WireType::SixtyFourBit);
        out.extend_from_slice(&value.to_le_bytes());
    }
}

/// A `fixed32` field; omitted when zero.
fn fixed32(out: &mut Vec<u8>, tag: u32, value: u32) {
    if value != 0 {
        key(out, tag, WireType::ThirtyTwoBit);
        out.extend_from_slice(&value.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;
    use std::time::Duration;

    use opentelemetry::trace::{Event, Link, SpanContext, SpanId, TraceFlags, TraceId, TraceState};
    use opentelemetry::{KeyValue, StringValue};
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
    use opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope;
    use opentelemetry_sdk::trace::{SpanEvents, SpanLinks};
    use prost::Message;

    use super::*;

    fn context(trace: u128, span: u64, flags: u8, remote: bool) -> SpanContext {
        SpanContext::new(
            TraceId::from(trace),
            SpanId::from(span),
            TraceFlags::new(flags),
            remote,
            TraceState::from_key_value([("vendor", "x")]).unwrap(),
        )
    }

    fn span(name: &'static str, scope: &InstrumentationScope, status: Status) -> SpanData {
        let at = UNIX_EPOCH + Duration::from_nanos(1_764_300_000_123_456_789);
        let mut events = SpanEvents::default();
        events.events.push(Event::new(
            "awaken.decision",
            at + Duration::from_millis(3),
            vec![KeyValue::new("awaken.decision.id", "")],
            2,
        ));
        events.dropped_count = 1;
        let mut links = SpanLinks::default();
        links.links.push(Link::new(
            context(7, 8, 0, true),
            vec![KeyValue::new("weight", -3_i64)],
            0,
        ));
        SpanData {
            span_context: context(0x0af7_6519_16cd_43dd_8448_eb21_1c80_319c, 0xb7ad, 1, false),
            parent_span_id: if name == "root" {
                SpanId::INVALID
            } else {
                SpanId::from(0xeee1)
            },
            parent_span_is_remote: name != "root",
            span_kind: SpanKind::Consumer,
            name: Cow::Borrowed(name),
            start_time: at,
            end_time: at + Duration::from_millis(5),
            attributes: vec![
                KeyValue::new("gen_ai.operation.name", "chat"),
                KeyValue::new("gen_ai.usage.input_tokens", 1_i64 << 40),
                KeyValue::new("ok", false),
                KeyValue::new("ratio", 0.25),
                KeyValue::new("empty", ""),
                KeyValue::new(
                    "gen_ai.response.finish_reasons",
                    Value::Array(Array::String(vec![StringValue::from("stop")])),
                ),
                KeyValue::new("counts", Value::Array(Array::I64(vec![0, -1, 300]))),
                KeyValue::new("flags", Value::Array(Array::Bool(vec![true, false]))),
                KeyValue::new("weights", Value::Array(Array::F64(vec![]))),
            ],
            dropped_attributes_count: 4,
            events,
            links,
            status,
            instrumentation_scope: scope.clone(),
        }
    }

    #[test]
    fn a_batch_decodes_to_what_the_sdks_own_conversion_gives() {
        let awaken = InstrumentationScope::builder("awaken").build();
        let other = InstrumentationScope::builder("other")
            .with_version("1.2")
            .with_schema_url("https://opentelemetry.io/schemas/1.41.0")
            .with_attributes([KeyValue::new("lib", "x")])
            .build();
        let batch = vec![
            span("root", &awaken, Status::Unset),
            span("second", &other, Status::error("rejected")),
            span("third", &awaken, Status::Ok),
            span("fourth", &other, Status::error("")),
        ];
        let resource = Resource::builder()
            .with_service_name("awaken")
            .with_attribute(KeyValue::new("service.instance.id", "node-a"))
            .build();
        let mut batches: Vec<ScopeBatch> = Vec::new();
        for span in &batch {
            let index = match batches
                .iter()
                .position(|b| b.scope == span.instrumentation_scope)
            {
                Some(index) => index,
                None => {
                    batches.push(ScopeBatch {
                        scope: span.instrumentation_scope.clone(),
                        spans: Vec::new(),
                    });
                    batches.len() - 1
                }
            };
            let mut body = Vec::new();
            span_body(&mut body, span);
            push_scope_span(&mut batches[index].spans, &body);
        }
        let mut bytes = Vec::new();
        export_request(&batches, &EncodedResource::new(&resource), &mut bytes);
        let decoded = ExportTraceServiceRequest::decode(bytes.as_slice()).unwrap();
        let expected = ExportTraceServiceRequest {
            resource_spans: group_spans_by_resource_and_scope(
                batch,
                &ResourceAttributesWithSchema::from(&resource),
            ),
        };
        assert_eq!(decoded, expected);
        // And byte for byte what prost writes for the same message.
        assert_eq!(bytes, expected.encode_to_vec());
    }

    #[test]
    fn an_empty_batch_is_one_resource_without_spans() {
        let mut bytes = Vec::new();
        let unused = ScopeBatch {
            scope: InstrumentationScope::builder("awaken").build(),
            spans: Vec::new(),
        };
        export_request(&[unused], &EncodedResource::default(), &mut bytes);
        let decoded = ExportTraceServiceRequest::decode(bytes.as_slice()).unwrap();
        assert_eq!(decoded.resource_spans.len(), 1);
        assert!(decoded.resource_spans[0].scope_spans.is_empty());
    }
}
