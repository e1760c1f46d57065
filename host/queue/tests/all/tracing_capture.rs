//! A process-wide tracing subscriber for this test binary, and the event
//! log it keeps (see [`global_log`]).

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use parking_lot::Mutex;
use tracing::span::{Attributes, Id};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// One event: when it was recorded, its target and fields, and its span's
/// name and fields.
#[derive(Clone, Debug)]
pub struct Logged {
    pub at: Instant,
    pub target: String,
    pub fields: String,
    pub span: String,
}

/// Records every event with its span.
#[derive(Clone, Default)]
pub struct EventLog(Arc<Mutex<Vec<Logged>>>);

impl EventLog {
    /// The events recorded so far whose fields contain `text`.
    pub fn containing(&self, text: &str) -> Vec<Logged> {
        self.0
            .lock()
            .iter()
            .filter(|l| l.fields.contains(text))
            .cloned()
            .collect()
    }
}

#[derive(Default)]
struct FieldText(String);

impl tracing::field::Visit for FieldText {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!("{}={:?} ", field.name(), value));
    }
}

/// A span's fields as recorded when it was made.
struct SpanFields(String);

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for EventLog {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = FieldText::default();
        attrs.record(&mut fields);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(SpanFields(fields.0));
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut fields = FieldText::default();
        event.record(&mut fields);
        let span = ctx
            .event_span(event)
            .map(|s| {
                let ext = s.extensions();
                let text = ext.get::<SpanFields>().map_or("", |f| f.0.as_str());
                format!("{}{{{text}}}", s.name())
            })
            .unwrap_or_default();
        self.0.lock().push(Logged {
            at: Instant::now(),
            target: event.metadata().target().to_string(),
            fields: fields.0,
            span,
        });
    }
}

/// The process's event log: the global subscriber, installed once, before
/// any test of the binary sets a subscriber of its own for its thread
/// (`tracing::subscriber::set_default`); every such test calls this first.
///
/// Why: tracing-core caches, per callsite, whether any subscriber wants it.
/// While exactly one subscriber is registered it assumes that one is the
/// global default, so with no global default set, a callsite first met
/// while one test's thread-local subscriber was the only one alive was
/// cached as wanted by nobody, and that test lost its spans (a store call
/// counted zero times, a run's span missing from its events). With a
/// global subscriber registered first, the thread-local ones are never
/// alone and each callsite asks the current subscriber.
///
/// It records only the runs' spans and warnings, so the other tests pay
/// next to nothing for it; a test reading it filters by its own job ids.
pub fn global_log() -> &'static EventLog {
    static LOG: OnceLock<EventLog> = OnceLock::new();
    LOG.get_or_init(|| {
        let log = EventLog::default();
        let wanted = filter_fn(|meta| {
            if meta.is_span() {
                meta.name() == "job"
            } else {
                *meta.level() <= Level::WARN
            }
        });
        tracing::subscriber::set_global_default(
            tracing_subscriber::registry().with(log.clone().with_filter(wanted)),
        )
        .expect("no other test of this binary sets the global subscriber");
        log
    })
}
