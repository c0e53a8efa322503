//! `log.format = "json"`: one JSON object per log line, for collectors that parse
//! lines (Loki, Elasticsearch, Cloud Logging) and join them to traces by
//! `trace_id` and `span_id` — present on every line written inside an exported
//! span (a run's activation, an inference, a tool call, a request).

use std::fmt;
use std::io::Write;

use awaken_actors::telemetry::Span;
use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::Context;

/// How log lines are written (`log.format`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// Human-readable text (coloured on a terminal).
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// `[log]` in `awaken.toml`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// `text` (default) or `json`.
    pub format: LogFormat,
}

/// Writes each event as one JSON line: `timestamp`, `level`, `target`,
/// `message`, the event's other fields under `fields`, and the `trace_id` and
/// `span_id` of the exported span the line is written in (the current
/// OpenTelemetry context: the span whose future is being polled).
pub(crate) struct JsonLines<W> {
    writer: W,
}

impl<W> JsonLines<W> {
    /// Lines written to `writer`.
    pub(crate) fn new(writer: W) -> Self {
        Self { writer }
    }
}

impl<S, W> Layer<S> for JsonLines<W>
where
    S: Subscriber,
    W: for<'w> MakeWriter<'w> + 'static,
{
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let metadata = event.metadata();
        let mut fields = Map::new();
        event.record(&mut Fields(&mut fields));
        let mut line = Map::new();
        line.insert(
            "timestamp".into(),
            humantime::format_rfc3339_micros(std::time::SystemTime::now())
                .to_string()
                .into(),
        );
        line.insert("level".into(), metadata.level().as_str().into());
        line.insert("target".into(), metadata.target().into());
        if let Some(message) = fields.remove("message") {
            line.insert("message".into(), message);
        }
        if !fields.is_empty() {
            line.insert("fields".into(), Value::Object(fields));
        }
        if let Some(trace) = Span::current().context() {
            line.insert("trace_id".into(), trace.trace_id().into());
            line.insert("span_id".into(), trace.span_id().into());
        }
        let mut text = Value::Object(line).to_string();
        text.push('\n');
        // A log line that cannot be written has nowhere else to go.
        let _ = self.writer.make_writer().write_all(text.as_bytes());
    }
}

/// Collects an event's fields as JSON values.
struct Fields<'a>(&'a mut Map<String, Value>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.into());
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().to_owned(), value.into());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_owned(), value.into());
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().to_owned(), value.into());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().to_owned(), value.into());
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.0
            .insert(field.name().to_owned(), value.to_string().into());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0
            .insert(field.name().to_owned(), format!("{value:?}").into());
    }
}
