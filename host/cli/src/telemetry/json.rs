//! The host's log as JSON lines, for log shippers: one object per event
//! with `timestamp` (RFC 3339, UTC, microseconds), `level`, `target`, the
//! event's fields (`message` among them) and the fields of every span the
//! event is in — a job run's `job_id`, `job_type`, `attempt` and `digest` —
//! as top-level keys.
//!
//! Invariants: every line is one complete JSON object (the text of a field
//! is escaped by serde_json, so no field can break the line); an event's
//! own field wins over a span field of the same name, an inner span's over
//! an outer one's, and `timestamp`, `level` and `target` over both.

use std::fmt;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{JsonFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

/// Formats events as JSON lines; use with [`JsonFields`] as the span field
/// formatter (it stores each span's fields as a JSON object).
pub struct JsonLines;

impl<S> FormatEvent<S, JsonFields> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, JsonFields>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut object = Map::new();
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                let extensions = span.extensions();
                let Some(fields) = extensions.get::<FormattedFields<JsonFields>>() else {
                    continue;
                };
                if let Ok(Value::Object(fields)) = serde_json::from_str(&fields.fields) {
                    object.extend(fields);
                }
            }
        }
        event.record(&mut Fields(&mut object));
        let meta = event.metadata();
        object.insert(
            "timestamp".into(),
            chrono::Utc::now()
                .to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
                .into(),
        );
        object.insert("level".into(), meta.level().as_str().into());
        object.insert("target".into(), meta.target().into());
        writeln!(writer, "{}", Value::Object(object))
    }
}

/// An event's fields into a JSON object.
struct Fields<'a>(&'a mut Map<String, Value>);

impl Visit for Fields<'_> {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.0.insert(field.name().into(), value.to_string().into());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0
            .insert(field.name().into(), format!("{value:?}").into());
    }
}
