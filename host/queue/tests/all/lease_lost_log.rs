//! A run that loses its lease says so in its own span at the moment its
//! handler stops being polled: the line is the evidence (for an operator,
//! and for the chaos harness) of when the guest took its last step, which
//! the run's close line only bounds from much later (after the host has
//! read the job back and stored the run's last log lines).

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use boxcar_queue::{
    HandlerSettings, JobRun, LifecycleOutcome, NewJob, Outcome, Queue, QueueOptions, Registry,
    Worker, WorkerOptions,
};
use parking_lot::Mutex;
use serde_json::json;
use tracing::span::{Attributes, Id};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

use crate::support::{eventually, handler, Recorder};

/// One event: when it was recorded, its target and fields, and its span's
/// name and fields.
#[derive(Clone, Debug)]
struct Logged {
    at: Instant,
    target: String,
    fields: String,
    span: String,
}

/// Records every event with its span.
#[derive(Clone, Default)]
struct EventLog(Arc<Mutex<Vec<Logged>>>);

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

/// The process's event log: the global subscriber, set once. A subscriber
/// set for one thread missed the run's span whenever tests ran on other
/// threads (tracing caches which subscribers want a callsite); the global
/// one sees every thread. It records only the runs' spans and warnings,
/// so the other tests of the binary pay next to nothing for it.
fn event_log() -> &'static EventLog {
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

fn options() -> WorkerOptions {
    let mut opts = WorkerOptions::default();
    opts.poll_interval = Duration::from_millis(50);
    opts.abandon_grace = Duration::from_millis(100);
    opts.shutdown_grace = Duration::from_millis(200);
    opts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_is_logged_in_the_run_span_once_its_handler_stopped() {
    let log = event_log();

    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("lease.db").display());
    let store = boxcar_queue::open_store(&url).await.unwrap();
    store.migrate().await.unwrap();
    let queue = Queue::new(store, QueueOptions::default()).unwrap();
    let rec = Arc::new(Recorder::default());
    queue.observe(rec.clone());

    // Steps every 2 ms until it is stopped; a renewal never comes within
    // the 300 ms lease, so the lease lapses mid-run.
    let last_step: Arc<Mutex<Option<Instant>>> = Arc::default();
    let steps = Arc::clone(&last_step);
    let h = handler(move |job: JobRun, ctx| {
        let steps = Arc::clone(&steps);
        async move {
            while !ctx.cancel.is_cancelled() {
                // The job runs again once its lapsed lease is rescued: only
                // the first run's steps count.
                if job.attempt == 1 {
                    *steps.lock() = Some(Instant::now());
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            Outcome::Cancelled
        }
    });
    let mut settings = HandlerSettings::default();
    settings.timeout = Duration::from_secs(60);
    settings.lease_duration = Some(Duration::from_millis(300));
    settings.lease_renew_interval = Some(Duration::from_secs(30));
    let registry = Registry::new();
    registry.register("lapsing", h, settings).unwrap();
    let worker = Worker::start(queue.clone(), registry, options()).unwrap();

    let id = queue
        .add(NewJob::new("lapsing", &json!({})))
        .await
        .unwrap()
        .id;
    assert!(
        eventually(Duration::from_secs(10), || async {
            rec.outcomes(&id).contains(&LifecycleOutcome::LeaseLost)
        })
        .await,
        "the run ends as a lost lease: {:?}",
        rec.outcomes(&id)
    );
    worker.shutdown().await;

    let lost: Vec<Logged> = log
        .0
        .lock()
        .iter()
        .filter(|l| l.fields.contains("lease lost:"))
        .cloned()
        .collect();
    let ours: Vec<&Logged> = lost
        .iter()
        .filter(|l| {
            l.span.starts_with("job{")
                && l.span.contains(&format!("job_id={id} "))
                && l.span.contains("attempt=1 ")
        })
        .collect();
    assert_eq!(
        ours.len(),
        1,
        "one `lease lost` line in the first run's span; the lines: {lost:#?}"
    );
    let line = ours[0];
    assert!(
        line.fields.contains("it could no longer be proved")
            && line.target == boxcar_queue::RUN_SPAN_TARGET,
        "the line says why, under the run span's target: {line:?}"
    );
    let stepped = last_step.lock().expect("the handler ran");
    assert!(
        stepped <= line.at,
        "the handler stepped {:?} after the `lease lost` line",
        stepped - line.at
    );
}
