//! A batch of finished spans as an OTLP `ExportTraceServiceRequest`
//! (protobuf). Each span arrives as the body of its `Span` message, written
//! where it was recorded (`awaken_actors::telemetry::Span`, decision 0070);
//! here it is appended as one `ScopeSpans.spans` field ([`push_scope_span`]),
//! and a batch of them becomes a request by putting the scope and resource
//! levels around the bytes ([`export_request`]), every level's length worked
//! out first so each byte is written once.

use awaken_actors::telemetry::wire::{self, WireType};
use awaken_actors::telemetry::{Attributes, Shown};
use opentelemetry::Value;
use opentelemetry_sdk::Resource;

/// The instrumentation scope every span of the process is written under.
const SCOPE_NAME: &str = "awaken";

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
        let mut attributes = Attributes::new(&mut body, 1);
        for (key, value) in resource.iter() {
            match value {
                Value::String(text) => attributes.set(key.as_str(), text.as_str()),
                Value::Bool(flag) => attributes.set(key.as_str(), *flag),
                Value::I64(number) => attributes.set(key.as_str(), *number),
                Value::F64(number) => attributes.set(key.as_str(), *number),
                // Arrays (and kinds newer than this code) as their text.
                other => attributes.set(key.as_str(), Shown(other)),
            };
        }
        Self {
            body,
            schema_url: resource.schema_url().map(str::to_owned),
        }
    }
}

/// Appends the span whose `Span` message body is `body` as one
/// `ScopeSpans.spans` field (key, length, body).
pub(super) fn push_scope_span(out: &mut Vec<u8>, body: &[u8]) {
    wire::oneof_bytes(out, 2, body);
}

/// Writes `spans` (`ScopeSpans.spans` fields, as [`push_scope_span`] writes
/// them) under the process's scope and `resource` as an
/// `ExportTraceServiceRequest` into `out`.
pub(super) fn export_request(spans: &[u8], resource: &EncodedResource, out: &mut Vec<u8>) {
    let version = env!("CARGO_PKG_VERSION");
    let scope_len = string_len(1, SCOPE_NAME) + string_len(2, version);
    let scope_spans_len = wire::field_len(1, scope_len) + spans.len();
    let resource_len = if resource.body.is_empty() {
        0
    } else {
        wire::field_len(1, resource.body.len())
    };
    let resource_spans_len = resource_len
        + if spans.is_empty() {
            0
        } else {
            wire::field_len(2, scope_spans_len)
        }
        + resource
            .schema_url
            .as_deref()
            .map_or(0, |url| string_len(3, url));
    out.reserve(wire::field_len(1, resource_spans_len));
    length_prefix(out, 1, resource_spans_len);
    wire::bytes(out, 1, &resource.body);
    if !spans.is_empty() {
        length_prefix(out, 2, scope_spans_len);
        length_prefix(out, 1, scope_len);
        wire::string(out, 1, SCOPE_NAME);
        wire::string(out, 2, version);
        out.extend_from_slice(spans);
    }
    if let Some(url) = &resource.schema_url {
        wire::string(out, 3, url);
    }
}

/// The key and length of a length-delimited field whose body follows.
fn length_prefix(out: &mut Vec<u8>, tag: u32, len: usize) {
    wire::key(out, tag, WireType::LengthDelimited);
    wire::varint_bytes(out, len as u64);
}

/// The bytes of a `string` field, none when it is empty.
fn string_len(tag: u32, text: &str) -> usize {
    if text.is_empty() {
        0
    } else {
        wire::field_len(tag, text.len())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::{SystemTime, UNIX_EPOCH};

    use awaken_actors::contract::TraceContext;
    use awaken_actors::telemetry::{Parent, Sampling, SpanKind, SpanSink, Strings, Tracer};
    use opentelemetry::KeyValue;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
    use opentelemetry_proto::tonic::common::v1::{AnyValue, ArrayValue, KeyValue as Pair};
    use opentelemetry_proto::tonic::trace::v1::span::SpanKind as Kind;
    use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
    use prost::Message;

    use super::*;

    /// `ScopeSpans.spans` fields, as the batcher queues them.
    #[derive(Clone, Default)]
    struct Queued(Arc<Mutex<Vec<u8>>>);

    impl SpanSink for Queued {
        fn export(&self, span: &[u8]) {
            push_scope_span(&mut self.0.lock().unwrap(), span);
        }
    }

    fn value(value: Any) -> Option<AnyValue> {
        Some(AnyValue { value: Some(value) })
    }

    fn pair(key: &str, any: Any) -> Pair {
        Pair {
            key: key.to_owned(),
            value: value(any),
            ..Pair::default()
        }
    }

    fn now() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
    }

    #[test]
    fn recorded_spans_decode_to_what_was_set_on_them() {
        let queued = Queued::default();
        let tracer: &'static Tracer =
            Box::leak(Box::new(Tracer::new(Sampling::AlwaysOn, queued.clone())));
        let caller =
            TraceContext::parse("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01").unwrap();
        let sender = TraceContext::root();
        let before = now();
        let run = tracer.start(
            &["invoke_agent ", "writer"],
            SpanKind::Internal,
            Parent::Remote(&caller),
            |attributes| {
                attributes
                    .set("gen_ai.operation.name", "invoke_agent")
                    .set("awaken.run.id", Shown(42));
            },
        );
        let chat = tracer.start(&["chat m"], SpanKind::Client, Parent::Local(&run), |_| {});
        chat.set("gen_ai.usage.input_tokens", 1_i64 << 40);
        chat.set("ok", false);
        chat.set("ratio", 0.25);
        chat.set("empty", "");
        chat.set("gen_ai.response.finish_reasons", Strings(&["stop"]));
        chat.set("long", "x".repeat(300));
        chat.event("awaken.decision", |attributes| {
            attributes.set("awaken.decision.id", "d-1");
        });
        chat.link(&sender);
        chat.failed("rejected");
        let (run_context, chat_context) = (run.context().unwrap(), chat.context().unwrap());
        drop(chat);
        drop(run);
        let after = now();

        let resource = Resource::builder_empty()
            .with_attribute(KeyValue::new("service.name", "awaken"))
            .with_attribute(KeyValue::new("service.instance.id", "node-a"))
            .with_attribute(KeyValue::new("process.pid", 7_i64))
            .build();
        let mut bytes = Vec::new();
        export_request(
            &queued.0.lock().unwrap(),
            &EncodedResource::new(&resource),
            &mut bytes,
        );
        let request = ExportTraceServiceRequest::decode(bytes.as_slice()).unwrap();
        assert_eq!(request.resource_spans.len(), 1);
        let resource_spans = &request.resource_spans[0];
        let mut resource_attributes = resource_spans.resource.as_ref().unwrap().attributes.clone();
        resource_attributes.sort_by(|a, b| a.key.cmp(&b.key));
        assert_eq!(
            resource_attributes,
            [
                pair("process.pid", Any::IntValue(7)),
                pair("service.instance.id", Any::StringValue("node-a".into())),
                pair("service.name", Any::StringValue("awaken".into())),
            ]
        );
        assert_eq!(resource_spans.scope_spans.len(), 1);
        let scope = &resource_spans.scope_spans[0];
        let name = scope.scope.as_ref().unwrap();
        assert_eq!(
            (name.name.as_str(), name.version.as_str()),
            ("awaken", env!("CARGO_PKG_VERSION"))
        );
        let [chat, run] = scope.spans.as_slice() else {
            panic!("two spans: {:?}", scope.spans);
        };

        let (trace_id, run_id, _) = run_context.to_parts();
        let (_, chat_id, _) = chat_context.to_parts();
        let (caller_trace, caller_span, _) = caller.to_parts();
        assert_eq!(trace_id, caller_trace);
        assert_eq!(run.trace_id, trace_id);
        assert_eq!(run.span_id, run_id);
        assert_eq!(run.parent_span_id, caller_span);
        assert_eq!(run.name, "invoke_agent writer");
        assert_eq!(run.kind, Kind::Internal as i32);
        assert_eq!(run.flags, 0x301, "sampled, parent known to be remote");
        assert_eq!(
            run.attributes,
            [
                pair(
                    "gen_ai.operation.name",
                    Any::StringValue("invoke_agent".into())
                ),
                pair("awaken.run.id", Any::StringValue("42".into())),
            ]
        );
        assert!(before <= run.start_time_unix_nano);
        assert!(run.start_time_unix_nano <= chat.start_time_unix_nano);
        assert!(chat.end_time_unix_nano <= run.end_time_unix_nano);
        assert!(run.end_time_unix_nano <= after);
        assert_eq!(run.status, None);

        assert_eq!(chat.trace_id, trace_id);
        assert_eq!(chat.span_id, chat_id);
        assert_eq!(chat.parent_span_id, run_id);
        assert_eq!(chat.kind, Kind::Client as i32);
        assert_eq!(chat.flags, 0x101, "sampled, parent known to be local");
        assert_eq!(
            chat.attributes,
            [
                pair("gen_ai.usage.input_tokens", Any::IntValue(1 << 40)),
                pair("ok", Any::BoolValue(false)),
                pair("ratio", Any::DoubleValue(0.25)),
                pair("empty", Any::StringValue(String::new())),
                pair(
                    "gen_ai.response.finish_reasons",
                    Any::ArrayValue(ArrayValue {
                        values: vec![value(Any::StringValue("stop".into())).unwrap()],
                    }),
                ),
                pair("long", Any::StringValue("x".repeat(300))),
                pair("error.type", Any::StringValue("rejected".into())),
            ]
        );
        assert_eq!(chat.events.len(), 1);
        let event = &chat.events[0];
        assert_eq!(event.name, "awaken.decision");
        assert!(chat.start_time_unix_nano <= event.time_unix_nano);
        assert_eq!(
            event.attributes,
            [pair("awaken.decision.id", Any::StringValue("d-1".into()))]
        );
        assert_eq!(chat.links.len(), 1);
        let (sender_trace, sender_span, _) = sender.to_parts();
        assert_eq!(chat.links[0].trace_id, sender_trace);
        assert_eq!(chat.links[0].span_id, sender_span);
        assert_eq!(chat.links[0].flags, 0x301);
        let status = chat.status.as_ref().unwrap();
        assert_eq!(status.code, StatusCode::Error as i32);
        assert_eq!(status.message, "rejected");
    }

    #[test]
    fn an_empty_batch_is_one_resource_without_spans() {
        let mut bytes = Vec::new();
        export_request(&[], &EncodedResource::default(), &mut bytes);
        let decoded = ExportTraceServiceRequest::decode(bytes.as_slice()).unwrap();
        assert_eq!(decoded.resource_spans.len(), 1);
        assert!(decoded.resource_spans[0].scope_spans.is_empty());
    }
}
