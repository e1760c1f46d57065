//! Many registered types: an idle host asks the store one question per
//! poll and claims for no type; an enqueue claims for its type alone; a
//! type whose claim filled its batch stays due until drained, without
//! waiting for a poll; a scheduled job of an idle type is claimed when it
//! becomes due, not at the next poll; a flow parent is claimed when its
//! children's outcomes land. Store calls are counted from the
//! tracing decorator's spans, so each check runs on a current-thread
//! runtime with a thread-local subscriber.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use boxcar_queue::bench::NoopHandler;
use boxcar_queue::{
    HandlerSettings, JobStatus, NewJob, Queue, Registry, Worker, WorkerHandle, WorkerOptions,
};
use tracing::span::{Attributes, Id};
use tracing::Subscriber;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

use crate::support::{eventually, Fixture};

/// Records `store.*` spans as `name{field=value,…}`.
#[derive(Clone, Default)]
struct Calls(Arc<Mutex<Vec<String>>>);

struct FieldText(String);

impl tracing::field::Visit for FieldText {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!("{}={:?},", field.name(), value));
    }
}

impl<S: Subscriber> Layer<S> for Calls {
    fn on_new_span(&self, attrs: &Attributes<'_>, _id: &Id, _ctx: Context<'_, S>) {
        let name = attrs.metadata().name();
        if name.starts_with("store.") {
            let mut fields = FieldText(String::new());
            attrs.record(&mut fields);
            self.0
                .lock()
                .unwrap()
                .push(format!("{name}{{{}}}", fields.0));
        }
    }
}

impl Calls {
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

/// Records this thread's store calls into `calls` until the guard drops.
fn install(calls: &Calls) -> tracing::subscriber::DefaultGuard {
    let subscriber = tracing_subscriber::registry().with(
        calls
            .clone()
            .with_filter(tracing_subscriber::filter::LevelFilter::DEBUG),
    );
    // Registered first, so this thread's subscriber never sees its
    // callsites cached as unwanted (see `global_log`).
    crate::tracing_capture::global_log();
    tracing::subscriber::set_default(subscriber)
}

fn count(calls: &[String], name: &str) -> usize {
    let prefix = format!("{name}{{");
    calls.iter().filter(|c| c.starts_with(&prefix)).count()
}

const TYPES: usize = 300;

fn start(q: &Queue, poll: Duration, concurrency: u32) -> WorkerHandle {
    let reg = Registry::new();
    for i in 0..TYPES {
        let mut s = HandlerSettings::default();
        s.concurrency = concurrency;
        reg.register(format!("t{i}"), Arc::new(NoopHandler), s)
            .unwrap();
    }
    let mut opts = WorkerOptions::default();
    opts.poll_interval = poll;
    opts.shutdown_grace = Duration::from_millis(200);
    Worker::start(q.clone(), reg, opts).unwrap()
}

async fn succeeded(q: &Queue, id: &str, within: Duration) -> bool {
    eventually(within, || async {
        q.get(id)
            .await
            .unwrap()
            .is_some_and(|j| j.status == JobStatus::Succeeded)
    })
    .await
}

fn job(t: &str) -> NewJob {
    NewJob::new(t, &serde_json::json!({}))
}

async fn idle_host_asks_once_per_poll(fx: Fixture, calls: Calls) {
    let q = fx.queue();
    let w = start(&q, Duration::from_millis(50), 1);
    tokio::time::sleep(Duration::from_millis(600)).await;
    let seen = calls.take();
    w.shutdown().await;
    assert_eq!(count(&seen, "store.claim_batch"), 0, "{seen:?}");
    assert_eq!(count(&seen, "store.claim_many"), 0, "{seen:?}");
    let asked = count(&seen, "store.due_types");
    assert!((1..=16).contains(&asked), "due_types asked {asked} times");
    fx.finish().await;
}

async fn enqueue_claims_its_type_alone(fx: Fixture, calls: Calls) {
    let q = fx.queue();
    let w = start(&q, Duration::from_secs(30), 1);
    tokio::time::sleep(Duration::from_millis(200)).await;
    calls.take();
    let id = q.add(job("t150")).await.unwrap().id;
    assert!(succeeded(&q, &id, Duration::from_secs(5)).await);
    let seen = calls.take();
    w.shutdown().await;
    let claims: Vec<&String> = seen
        .iter()
        .filter(|c| c.starts_with("store.claim"))
        .collect();
    assert!(!claims.is_empty());
    assert!(
        claims.iter().all(|c| c.contains("types=1,")),
        "only the enqueued type is claimed for: {claims:?}"
    );
    fx.finish().await;
}

async fn full_batches_drain_without_polls(fx: Fixture, _calls: Calls) {
    let q = fx.queue();
    let jobs = (0..12).map(|_| job("t7")).collect();
    let ids = q.add_many(jobs).await.unwrap();
    let w = start(&q, Duration::from_secs(30), 2);
    for r in &ids {
        assert!(
            succeeded(&q, &r.id, Duration::from_secs(5)).await,
            "a type whose claims fill their batch stays due until drained"
        );
    }
    w.shutdown().await;
    fx.finish().await;
}

async fn scheduled_job_is_claimed_when_due(fx: Fixture, _calls: Calls) {
    let q = fx.queue();
    let id = q
        .add(job("t42").delay(Duration::from_millis(400)))
        .await
        .unwrap()
        .id;
    let w = start(&q, Duration::from_secs(30), 1);
    assert!(
        succeeded(&q, &id, Duration::from_secs(5)).await,
        "claimed when due, long before the next poll"
    );
    w.shutdown().await;
    fx.finish().await;
}

async fn parent_is_claimed_when_its_children_land(fx: Fixture, _calls: Calls) {
    let q = fx.queue();
    let w = start(&q, Duration::from_secs(30), 1);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let parent = q
        .add_flow(job("t1"), vec![job("t2"), job("t3")])
        .await
        .unwrap();
    assert!(
        succeeded(&q, &parent, Duration::from_secs(5)).await,
        "a flow parent is claimed once its children landed, not at the next poll"
    );
    w.shutdown().await;
    fx.finish().await;
}

macro_rules! each_backend {
    ($($check:ident),+ $(,)?) => {$(
        mod $check {
            each_backend!(@test $check, memory, Memory);
            each_backend!(@test $check, sqlite, Sqlite);
            each_backend!(@test $check, postgres, Postgres);
        }
    )+};
    (@test $check:ident, $name:ident, $backend:ident) => {
        #[tokio::test(flavor = "current_thread")]
        async fn $name() {
            let calls = super::Calls::default();
            let _guard = super::install(&calls);
            let backend = crate::support::Backend::$backend;
            let Some(fx) = crate::support::Fixture::new(backend).await else {
                return;
            };
            super::$check(fx, calls).await;
        }
    };
}

each_backend!(
    idle_host_asks_once_per_poll,
    enqueue_claims_its_type_alone,
    full_batches_drain_without_polls,
    scheduled_job_is_claimed_when_due,
    parent_is_claimed_when_its_children_land,
);
