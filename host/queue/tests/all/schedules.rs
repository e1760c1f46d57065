//! Schedules and results that cross the hop (code, details) on every
//! store: reconcile semantics, one job per tick across concurrent
//! schedulers on separate connections, one catch-up job after downtime, a
//! due-only read of the schedule table,
//! terminal error codes and details, expiry before the first start.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use boxcar_queue::schedule::{Schedule, ScheduleSpec};
use boxcar_queue::store::schedules::ReconcileReport;
use boxcar_queue::{
    Handler, HandlerSettings, JobContext, JobFilter, JobRun, JobStatus, LifecycleOutcome, NewJob,
    Outcome, Queue, QueueOptions, Registry, Scheduler, Worker, WorkerOptions,
};
use futures::future::BoxFuture;
use futures::FutureExt;

use crate::support::{Backend, Fixture, Recorder};

const ALL: [Backend; 3] = [Backend::Memory, Backend::Sqlite, Backend::Postgres];

fn every(id: &str, every: Duration) -> Schedule {
    let mut spec = ScheduleSpec::new(id, "tick", serde_json::json!({"id": id}));
    spec.every = Some(every);
    spec.validate().unwrap()
}

fn cron(id: &str, expr: &str, immediately: bool) -> Schedule {
    let mut spec = ScheduleSpec::new(id, "tick", serde_json::json!({}));
    spec.cron = Some(expr.into());
    spec.tz = Some("Europe/Berlin".into());
    spec.immediately = immediately;
    spec.validate().unwrap()
}

fn ids(v: &[&str]) -> Vec<String> {
    v.iter().map(ToString::to_string).collect()
}

async fn scheduled_jobs(q: &Queue) -> Vec<boxcar_queue::Job> {
    let mut ticks = JobFilter::default();
    ticks.types = vec!["tick".into()];
    ticks.limit = Some(1000);
    q.find(&ticks).await.unwrap()
}

async fn reconcile_semantics(backend: Backend) {
    let Some(fx) = Fixture::new(backend).await else {
        return;
    };
    let s = Scheduler::new(fx.queue());
    let hourly = every("hourly", Duration::from_secs(3600));
    let nightly = cron("nightly", "17 3 * * *", false);
    let r = s
        .reconcile("cfg", &[hourly.clone(), nightly])
        .await
        .unwrap();
    assert_eq!(r.created, ids(&["hourly", "nightly"]), "{backend:?}");
    let first = s.list().await.unwrap();
    assert_eq!(first.len(), 2);
    assert!(first.iter().all(|r| r.next_run_at.is_some()));
    assert_eq!(first[0].owner.as_deref(), Some("cfg"));

    // Unchanged declarations change nothing, not even next_run_at.
    let again = s
        .reconcile(
            "cfg",
            &[hourly.clone(), cron("nightly", "17 3 * * *", false)],
        )
        .await
        .unwrap();
    assert_eq!(again, ReconcileReport::default(), "{backend:?}");
    assert_eq!(s.list().await.unwrap(), first, "{backend:?}");

    // Another owner's reconcile leaves cfg's schedules alone.
    let other = s.reconcile("other", &[]).await.unwrap();
    assert!(other.removed.is_empty(), "{backend:?}");

    // Edit the cron, drop hourly: updated in place and removed.
    let edited = cron("nightly", "45 4 * * *", false);
    let r = s.reconcile("cfg", &[edited]).await.unwrap();
    assert_eq!(r.updated, ids(&["nightly"]), "{backend:?}");
    assert_eq!(r.removed, ids(&["hourly"]), "{backend:?}");
    let now = s.list().await.unwrap();
    assert_eq!(now.len(), 1);
    assert_eq!(now[0].def.cron.as_deref(), Some("45 4 * * *"));
    assert_ne!(now[0].next_run_at, first[1].next_run_at, "{backend:?}");
    assert_eq!(
        now[0].created_at, first[1].created_at,
        "same row: {backend:?}"
    );
    fx.finish().await;
}

/// The scheduler's read: only due rows, earliest first, bounded.
async fn due_schedules_only(backend: Backend) {
    let Some(fx) = Fixture::new(backend).await else {
        return;
    };
    let s = Scheduler::new(fx.queue());
    // Due one and two seconds after creation; `later` in an hour. The store
    // is asked about ten seconds from now.
    s.reconcile(
        "cfg",
        &[
            every("a-due", Duration::from_secs(2)),
            every("b-due", Duration::from_secs(1)),
            every("later", Duration::from_secs(3600)),
        ],
    )
    .await
    .unwrap();
    let now = fx.store.now().await.unwrap() + chrono::Duration::seconds(10);
    let got = fx.store.due_schedules(now, 10).await.unwrap();
    let names: Vec<&str> = got.iter().map(|r| r.def.id.as_str()).collect();
    assert_eq!(
        names,
        ["b-due", "a-due"],
        "{backend:?}: due only, earliest first"
    );
    let first = fx.store.due_schedules(now, 1).await.unwrap();
    assert_eq!(first.len(), 1, "{backend:?}: bounded");
    assert_eq!(first[0].def.id, "b-due", "{backend:?}");
    let later = now + chrono::Duration::hours(2);
    assert_eq!(
        fx.store.due_schedules(later, 10).await.unwrap().len(),
        3,
        "{backend:?}"
    );
    fx.finish().await;
}

#[tokio::test]
async fn due_schedules_reads_only_due_rows_earliest_first() {
    for backend in ALL {
        due_schedules_only(backend).await;
    }
}

#[tokio::test]
async fn reconcile_creates_updates_in_place_and_removes_memory() {
    reconcile_semantics(Backend::Memory).await;
}

#[tokio::test]
async fn reconcile_creates_updates_in_place_and_removes_sqlite() {
    reconcile_semantics(Backend::Sqlite).await;
}

#[tokio::test]
async fn reconcile_creates_updates_in_place_and_removes_postgres() {
    reconcile_semantics(Backend::Postgres).await;
}

/// Five schedulers, each on its own store connections (as five hosts),
/// race for the same due tick: exactly one job.
async fn one_job_per_tick(backend: Backend) {
    let Some(fx) = Fixture::new(backend).await else {
        return;
    };
    let s = Scheduler::new(fx.queue());
    s.reconcile("cfg", &[cron("now", "0 0 1 1 *", true)])
        .await
        .unwrap();
    let mut schedulers = Vec::new();
    for _ in 0..5 {
        let q = Queue::new(fx.reopen().await, QueueOptions::default()).unwrap();
        schedulers.push(Scheduler::new(q));
    }
    let tasks: Vec<_> = schedulers
        .iter()
        .cloned()
        .map(|s| tokio::spawn(async move { s.run_once().await.unwrap().len() }))
        .collect();
    let mut fired = 0;
    for t in tasks {
        fired += t.await.unwrap();
    }
    assert_eq!(fired, 1, "{backend:?}");
    let jobs = scheduled_jobs(&fx.queue()).await;
    assert_eq!(jobs.len(), 1, "{backend:?}");
    assert_eq!(jobs[0].schedule_id.as_deref(), Some("now"));
    for s in &schedulers {
        assert!(s.run_once().await.unwrap().is_empty(), "{backend:?}");
    }
    fx.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_schedulers_enqueue_one_job_per_tick() {
    for backend in ALL {
        one_job_per_tick(backend).await;
    }
}

/// Three `every = 1s` ticks pass with no scheduler running: one catch-up
/// job, due at the first missed tick; the next tick is after now.
async fn one_catch_up(backend: Backend) {
    let Some(fx) = Fixture::new(backend).await else {
        return;
    };
    let q = fx.queue();
    // A queue that knows no types still enqueues scheduled jobs.
    q.attach_registry(Registry::new());
    let s = Scheduler::new(q.clone());
    s.reconcile("cfg", &[every("fast", Duration::from_secs(1))])
        .await
        .unwrap();
    let first_tick = s.list().await.unwrap()[0].next_run_at.unwrap();
    tokio::time::sleep(Duration::from_millis(3600)).await;
    let fired = s.run_once().await.unwrap();
    assert_eq!(fired.len(), 1, "{backend:?}");
    assert_eq!(fired[0].tick, first_tick);
    assert!(s.run_once().await.unwrap().is_empty(), "{backend:?}");
    let rec = &s.list().await.unwrap()[0];
    let now = fx.store.now().await.unwrap();
    assert!(rec.next_run_at.unwrap() > now, "{backend:?}");
    assert_eq!(rec.last_run_at, Some(first_tick));
    let jobs = scheduled_jobs(&q).await;
    assert_eq!(jobs.len(), 1, "{backend:?}");
    assert_eq!(jobs[0].run_at, first_tick, "due at its tick: {backend:?}");
    assert_eq!(jobs[0].status, JobStatus::Pending);
    assert_eq!(jobs[0].payload, r#"{"id":"fast"}"#);
    fx.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missed_ticks_produce_one_catch_up_job() {
    let tasks: Vec<_> = ALL
        .into_iter()
        .map(|b| tokio::spawn(one_catch_up(b)))
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
}

struct Counted {
    calls: Arc<AtomicU32>,
    outcome: Outcome,
}

impl Handler for Counted {
    fn handle(&self, _job: JobRun, _ctx: JobContext) -> BoxFuture<'static, Outcome> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let outcome = self.outcome.clone();
        async move { outcome }.boxed()
    }
}

fn fast() -> WorkerOptions {
    let mut opts = WorkerOptions::default();
    opts.poll_interval = Duration::from_millis(50);
    opts.shutdown_grace = Duration::from_millis(200);
    opts
}

async fn terminal_code_reaches_waiter(backend: Backend) {
    let Some(fx) = Fixture::new(backend).await else {
        return;
    };
    let q = fx.queue();
    let reg = Registry::new();
    let calls = Arc::new(AtomicU32::new(0));
    let refuse = Counted {
        calls: calls.clone(),
        outcome: Outcome::Terminal {
            message: "refused".into(),
            code: Some("content-refused".into()),
            details: Some(r#"{"word":"forbidden"}"#.into()),
        },
    };
    reg.register("refuse", Arc::new(refuse), HandlerSettings::default())
        .unwrap();
    let worker = Worker::start(q.clone(), reg, fast()).unwrap();
    let id = q
        .add(NewJob::new("refuse", &serde_json::json!({})))
        .await
        .unwrap()
        .id;
    let job = q.wait(&id, Duration::from_secs(10)).await.unwrap();
    assert_eq!(job.status, JobStatus::Failed, "{backend:?}");
    assert_eq!(job.last_error.as_deref(), Some("refused"));
    assert_eq!(job.error_code.as_deref(), Some("content-refused"));
    assert_eq!(
        job.error_details.as_deref(),
        Some(r#"{"word":"forbidden"}"#)
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    worker.shutdown().await;
    assert_eq!(
        q.retry_failed(&JobFilter::default()).await.unwrap(),
        1,
        "{backend:?}"
    );
    let again = q.get(&id).await.unwrap().unwrap();
    assert!(
        again.error_code.is_none() && again.error_details.is_none(),
        "{backend:?}"
    );
    fx.finish().await;
}

#[tokio::test]
async fn terminal_error_code_and_details_reach_the_waiter() {
    for backend in ALL {
        terminal_code_reaches_waiter(backend).await;
    }
}

async fn expires_before_any_worker(backend: Backend) {
    let Some(fx) = Fixture::new(backend).await else {
        return;
    };
    let q = fx.queue();
    let recorder = Arc::new(Recorder::default());
    q.observe(recorder.clone());
    let id = q
        .add(NewJob::new("late", &serde_json::json!({})).ttl(Duration::from_secs(1)))
        .await
        .unwrap()
        .id;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let calls = Arc::new(AtomicU32::new(0));
    let reg = Registry::new();
    let ok = Counted {
        calls: calls.clone(),
        outcome: Outcome::Succeeded { result: None },
    };
    reg.register("late", Arc::new(ok), HandlerSettings::default())
        .unwrap();
    let worker = Worker::start(q.clone(), reg, fast()).unwrap();
    let job = q.wait(&id, Duration::from_secs(10)).await.unwrap();
    worker.shutdown().await;
    assert_eq!(job.status, JobStatus::Failed, "{backend:?}");
    assert!(job.last_error.unwrap_or_default().starts_with("expired"));
    assert_eq!(job.attempts, 0);
    assert!(job.started_at.is_none());
    assert_eq!(calls.load(Ordering::SeqCst), 0, "the handler never ran");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        recorder.outcomes(&id),
        vec![LifecycleOutcome::Expired],
        "{backend:?}"
    );
    fx.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_past_its_ttl_before_any_worker_expires_unrun() {
    let tasks: Vec<_> = ALL
        .into_iter()
        .map(|b| tokio::spawn(expires_before_any_worker(b)))
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
}
