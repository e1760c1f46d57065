//! The tracing decorator: a store opened from a URL emits one
//! `store.<method>` span per call, carrying the backend and the call's key
//! fields (the conformance suite, which runs through the decorator, proves
//! it delegates faithfully).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use boxcar_queue::store::ClaimParams;
use boxcar_queue::{open_store, NewJob, Queue, QueueOptions};
use tracing::span::{Attributes, Id};
use tracing::Subscriber;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

/// Records each new span as `name{field=value,…}`.
#[derive(Clone, Default)]
struct SpanLog(Arc<Mutex<Vec<String>>>);

struct FieldText(String);

impl tracing::field::Visit for FieldText {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!("{}={:?},", field.name(), value));
    }
}

impl<S: Subscriber> Layer<S> for SpanLog {
    fn on_new_span(&self, attrs: &Attributes<'_>, _id: &Id, _ctx: Context<'_, S>) {
        let mut fields = FieldText(String::new());
        attrs.record(&mut fields);
        self.0
            .lock()
            .unwrap()
            .push(format!("{}{{{}}}", attrs.metadata().name(), fields.0));
    }
}

#[tokio::test(flavor = "current_thread")]
async fn every_store_call_is_a_span() {
    let log = SpanLog::default();
    let subscriber = tracing_subscriber::registry().with(
        log.clone()
            .with_filter(tracing_subscriber::filter::LevelFilter::DEBUG),
    );
    // Registered first, so this thread's subscriber never sees its
    // callsites cached as unwanted (see `global_log`).
    crate::tracing_capture::global_log();
    let _guard = tracing::subscriber::set_default(subscriber);

    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("traced.db").display());
    let store = open_store(&url).await.unwrap();
    store.migrate().await.unwrap();
    let queue = Queue::new(store.clone(), QueueOptions::default()).unwrap();
    queue
        .add(NewJob::new("mail", &serde_json::json!({"to": "a"})))
        .await
        .unwrap();
    let claimed = store
        .claim_batch(ClaimParams {
            worker_id: "w1".into(),
            job_type: "mail".into(),
            limit: 5,
            lease: Duration::from_secs(30),
            handler_version: None,
            guards: Default::default(),
        })
        .await
        .unwrap();
    assert_eq!(claimed.claimed.len(), 1);

    let spans = log.0.lock().unwrap().clone();
    let find = |name: &str| {
        spans
            .iter()
            .find(|s| s.starts_with(&format!("{name}{{")))
            .unwrap_or_else(|| panic!("no `{name}` span among {spans:#?}"))
            .clone()
    };
    assert!(find("store.migrate").contains("backend=\"sqlite\""));
    assert!(find("store.add_many").contains("jobs=1"));
    let claim = find("store.claim_batch");
    for field in [
        "backend=\"sqlite\"",
        "job_type=mail",
        "worker=w1",
        "limit=5",
        "guarded=false",
    ] {
        assert!(claim.contains(field), "{field} missing from {claim}");
    }
}
