//! Engine behaviour with native handlers: outcomes, retries, timeouts,
//! cancellation, renewal, reconcile, shutdown, observers, services.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use boxcar_queue::{
    ChildJobRequest, Handler, HandlerSettings, JobContext, JobFilter, JobRun, JobStatus,
    LifecycleEvent, LifecycleObserver, LifecycleOutcome, NewJob, Outcome, Queue, Registry,
    ServiceError, Worker, WorkerHandle, WorkerOptions,
};
use parking_lot::Mutex;
use serde_json::json;
use tokio::sync::Notify;

use crate::support::{eventually, handler, Backend, Fixture, Recorder};
use crate::tracing_capture::{global_log, Logged};

fn fast_opts() -> WorkerOptions {
    let mut opts = WorkerOptions::default();
    opts.poll_interval = Duration::from_millis(50);
    opts.base_backoff = Duration::from_millis(10);
    opts.max_backoff = Duration::from_millis(50);
    opts.abandon_grace = Duration::from_millis(100);
    opts.shutdown_grace = Duration::from_millis(200);
    opts
}

fn start(q: &Queue, job_type: &str, h: Arc<dyn Handler>, s: HandlerSettings) -> WorkerHandle {
    let reg = Registry::new();
    reg.register(job_type, h, s).unwrap();
    Worker::start(q.clone(), reg, fast_opts()).unwrap()
}

fn settings(timeout_ms: u64) -> HandlerSettings {
    let mut settings = HandlerSettings::default();
    settings.concurrency = 4;
    settings.timeout = Duration::from_millis(timeout_ms);
    settings
}

async fn wait_status(q: &Queue, id: &str, status: JobStatus) -> bool {
    eventually(Duration::from_secs(10), || async {
        q.get(id).await.unwrap().is_some_and(|j| j.status == status)
    })
    .await
}

async fn outcomes_and_retries(fx: &Fixture) {
    let q = fx.queue();
    let rec = Arc::new(Recorder::default());
    q.observe(rec.clone());
    let calls = Arc::new(AtomicU32::new(0));
    let c2 = calls.clone();
    let h = handler(move |job: JobRun, _ctx| {
        let calls = c2.clone();
        async move {
            calls.fetch_add(1, Ordering::SeqCst);
            let p: serde_json::Value = serde_json::from_str(&job.payload).unwrap();
            match p["kind"].as_str().unwrap() {
                "ok" => Outcome::Succeeded {
                    result: Some("{\"answer\":42}".into()),
                },
                "flaky" if job.attempt < 2 => Outcome::Trapped {
                    message: "boom".into(),
                },
                "flaky" => Outcome::Succeeded { result: None },
                "last-try" if job.attempt == job.max_attempts => Outcome::Succeeded {
                    result: Some("\"degraded\"".into()),
                },
                "terminal" => Outcome::Terminal {
                    message: "gone".into(),
                    code: None,
                    details: None,
                },
                "floor" => Outcome::Retryable {
                    message: "later".into(),
                    retry_after: Some(Duration::from_secs(3600)),
                    consumes_attempt: true,
                },
                "free" if job.attempt == 1 && job.max_attempts == 1 => Outcome::Retryable {
                    message: "rate".into(),
                    retry_after: Some(Duration::from_millis(20)),
                    consumes_attempt: false,
                },
                _ => Outcome::Retryable {
                    message: "try again".into(),
                    retry_after: None,
                    consumes_attempt: true,
                },
            }
        }
    });
    let w = start(&q, "job", h, settings(5_000));
    let add = |kind: &str, attempts: u32| {
        NewJob::new("job", &json!({ "kind": kind })).max_attempts(attempts)
    };
    let ok = q.add(add("ok", 3)).await.unwrap().id;
    let flaky = q.add(add("flaky", 3)).await.unwrap().id;
    let last = q.add(add("last-try", 3)).await.unwrap().id;
    let terminal = q.add(add("terminal", 3)).await.unwrap().id;
    let exhaust = q.add(add("never", 2)).await.unwrap().id;
    let floor = q.add(add("floor", 3)).await.unwrap().id;
    let free = q.add(add("free", 1)).await.unwrap().id;

    let done = q.wait(&ok, Duration::from_secs(10)).await.unwrap();
    assert_eq!(done.status, JobStatus::Succeeded);
    assert_eq!(done.result.as_deref(), Some("{\"answer\":42}"));
    assert_eq!(done.handler_version.as_deref(), Some("sha256:test"));
    let j = q.wait(&flaky, Duration::from_secs(10)).await.unwrap();
    assert_eq!((j.status, j.attempts), (JobStatus::Succeeded, 2));
    let j = q.wait(&last, Duration::from_secs(10)).await.unwrap();
    assert_eq!(
        (j.status, j.attempts, j.result.as_deref()),
        (JobStatus::Succeeded, 3, Some("\"degraded\""))
    );
    let j = q.wait(&terminal, Duration::from_secs(10)).await.unwrap();
    assert_eq!(
        (j.status, j.attempts, j.last_error.as_deref()),
        (JobStatus::Failed, 1, Some("gone"))
    );
    let j = q.wait(&exhaust, Duration::from_secs(10)).await.unwrap();
    assert_eq!(
        (j.status, j.attempts, j.last_error.as_deref()),
        (JobStatus::Failed, 2, Some("try again"))
    );
    assert!(
        eventually(Duration::from_secs(5), || async {
            q.get(&floor)
                .await
                .unwrap()
                .is_some_and(|j| j.status == JobStatus::Pending && j.attempts == 1)
        })
        .await
    );
    let j = q.get(&floor).await.unwrap().unwrap();
    assert!(
        j.run_at > chrono::Utc::now() + chrono::Duration::minutes(50),
        "retry_after is a floor above max_backoff"
    );
    assert!(
        eventually(Duration::from_secs(5), || async {
            q.get(&free)
                .await
                .unwrap()
                .is_some_and(|j| j.last_error.as_deref() == Some("rate"))
        })
        .await
    );
    let j = q.get(&free).await.unwrap().unwrap();
    assert!(
        j.status != JobStatus::Failed && j.attempts <= 1,
        "consumes_attempt=false never exhausts: {j:?}"
    );
    let err = q
        .wait(&floor, Duration::from_millis(100))
        .await
        .unwrap_err();
    assert!(matches!(err, boxcar_queue::WaitError::Timeout(_)), "{err}");
    w.shutdown().await;
    assert!(
        eventually(Duration::from_secs(2), || async {
            rec.outcomes(&flaky)
                == vec![
                    LifecycleOutcome::Started,
                    LifecycleOutcome::RetryScheduled,
                    LifecycleOutcome::Started,
                    LifecycleOutcome::Succeeded,
                ]
        })
        .await,
        "events: {:?}",
        rec.outcomes(&flaky)
    );
    assert!(rec
        .outcomes(&terminal)
        .contains(&LifecycleOutcome::FailedTerminal));
}

async fn timeout_and_cancel(fx: &Fixture) {
    let q = fx.queue();
    let stopped = Arc::new(Notify::new());
    let s2 = stopped.clone();
    let h = handler(move |job: JobRun, ctx: JobContext| {
        let stopped = s2.clone();
        async move {
            if job.payload.contains("stubborn") {
                futures::future::pending::<()>().await;
            }
            ctx.cancel.cancelled().await;
            stopped.notify_one();
            Outcome::Cancelled
        }
    });
    let w = start(&q, "slow", h, settings(300));
    let stubborn = q
        .add(NewJob::new("slow", &json!({"stubborn": true})).max_attempts(1))
        .await
        .unwrap()
        .id;
    let j = q.wait(&stubborn, Duration::from_secs(5)).await.unwrap();
    assert_eq!(j.status, JobStatus::Failed);
    assert!(
        j.last_error.unwrap().contains("timed out"),
        "a handler that never returns is stopped"
    );
    let polite = q
        .add(NewJob::new("slow", &json!({})).max_attempts(1))
        .await
        .unwrap()
        .id;
    assert!(wait_status(&q, &polite, JobStatus::Running).await);
    let t0 = std::time::Instant::now();
    assert!(q.cancel(&polite, "user asked").await.unwrap());
    tokio::time::timeout(Duration::from_secs(1), stopped.notified())
        .await
        .expect("cancel reaches the handler");
    assert!(
        t0.elapsed() < Duration::from_millis(200),
        "in-process cancel is immediate"
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    let j = q.get(&polite).await.unwrap().unwrap();
    assert_eq!(
        (j.status, j.last_error.as_deref()),
        (JobStatus::Cancelled, Some("user asked"))
    );
    w.shutdown().await;
}

async fn shutdown_releases(fx: &Fixture) {
    let q = fx.queue();
    let h = handler(|_job, _ctx| async {
        futures::future::pending::<()>().await;
        Outcome::Succeeded { result: None }
    });
    let w = start(&q, "forever", h, settings(60_000));
    let id = q.add(NewJob::new("forever", &json!({}))).await.unwrap().id;
    assert!(wait_status(&q, &id, JobStatus::Running).await);
    let t0 = std::time::Instant::now();
    w.shutdown().await;
    assert!(
        t0.elapsed() < Duration::from_secs(2),
        "shutdown is bounded by the graces"
    );
    let j = q.get(&id).await.unwrap().unwrap();
    assert_eq!(
        (j.status, j.attempts, j.lease_owner.clone()),
        (JobStatus::Pending, 0, None),
        "released, attempt given back"
    );
}

async fn renewal_and_reconcile(fx: &Fixture) {
    let q = fx.queue();
    let lost = Arc::new(Notify::new());
    let l2 = lost.clone();
    let h = handler(move |job: JobRun, ctx: JobContext| {
        let lost = l2.clone();
        async move {
            let ms = if job.payload.contains("long") {
                900
            } else {
                60_000
            };
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(ms)) => Outcome::Succeeded { result: None },
                () = ctx.cancel.cancelled() => { lost.notify_one(); Outcome::Cancelled }
            }
        }
    });
    let s = {
        let mut settings = settings(60_000);
        settings.lease_duration = Some(Duration::from_millis(300));
        settings
    };
    let w = start(&q, "long", h, s);
    let id = q
        .add(NewJob::new("long", &json!({"long": true})))
        .await
        .unwrap()
        .id;
    assert!(wait_status(&q, &id, JobStatus::Running).await);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        w.maintenance().rescue_once().await.unwrap(),
        0,
        "a renewed lease is not rescued"
    );
    let j = q.wait(&id, Duration::from_secs(5)).await.unwrap();
    assert_eq!(
        (j.status, j.attempts),
        (JobStatus::Succeeded, 1),
        "outlived its lease thanks to renewal"
    );
    let other = Queue::new(fx.reopen().await, Default::default()).unwrap();
    let id = q.add(NewJob::new("long", &json!({}))).await.unwrap().id;
    assert!(wait_status(&q, &id, JobStatus::Running).await);
    let by_other = boxcar_queue::store::CancelParams {
        target: boxcar_queue::store::CancelTarget::Ids(vec![id.clone()]),
        reason: "from another process".into(),
    };
    other.store().cancel(by_other).await.unwrap();
    tokio::time::timeout(Duration::from_secs(2), lost.notified())
        .await
        .expect("the reconcile pass aborts a run whose row is no longer ours");
    assert_eq!(
        q.get(&id).await.unwrap().unwrap().status,
        JobStatus::Cancelled
    );
    w.shutdown().await;
}

struct SlowObserver;
impl LifecycleObserver for SlowObserver {
    fn on_transition(&self, _e: &LifecycleEvent) {
        std::thread::sleep(Duration::from_millis(200));
    }
}
struct PanickyObserver;
impl LifecycleObserver for PanickyObserver {
    fn on_transition(&self, _e: &LifecycleEvent) {
        panic!("observer bug");
    }
}

async fn observers_cannot_stall(fx: &Fixture) {
    let q = fx.queue();
    q.observe(Arc::new(PanickyObserver));
    q.observe(Arc::new(SlowObserver));
    let h = handler(|_j, _c| async { Outcome::Succeeded { result: None } });
    let w = start(&q, "obs", h, settings(5_000));
    let t0 = std::time::Instant::now();
    let jobs = (0..200).map(|_| NewJob::new("obs", &json!({}))).collect();
    q.add_many(jobs).await.unwrap();
    let store = fx.store.clone();
    assert!(
        eventually(Duration::from_secs(10), || {
            let store = store.clone();
            async move { store.count_by_status().await.unwrap().succeeded == 200 }
        })
        .await
    );
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "a slow observer (200 ms per event) did not slow the queue"
    );
    w.shutdown().await;
}

async fn services(fx: &Fixture) {
    let q = fx.queue();
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let s2 = seen.clone();
    let h = handler(move |job: JobRun, ctx: JobContext| {
        let seen = s2.clone();
        async move {
            if job.job_type == "parent" {
                ctx.services.progress("{\"step\":1}".into()).await.unwrap();
                let kids = ctx.services.children().await.unwrap();
                seen.lock()
                    .extend(kids.iter().map(|k| format!("{}:{}", k.job_type, k.status)));
                let refused = ctx
                    .services
                    .enqueue(ChildJobRequest {
                        job_type: "secret".into(),
                        payload: "{}".into(),
                        ..Default::default()
                    })
                    .await;
                assert_eq!(refused, Err(ServiceError::NotAllowed("secret".into())));
                let id = ctx
                    .services
                    .enqueue(ChildJobRequest {
                        job_type: "child".into(),
                        payload: "{}".into(),
                        ..Default::default()
                    })
                    .await
                    .unwrap();
                seen.lock().push(format!("enqueued:{}", !id.is_empty()));
            }
            Outcome::Succeeded { result: None }
        }
    });
    let reg = Registry::new();
    let parent = {
        let mut settings = settings(5_000);
        settings.may_enqueue = vec!["child".into()];
        settings
    };
    reg.register("parent", h.clone(), parent).unwrap();
    reg.register("child", h, settings(5_000)).unwrap();
    let w = Worker::start(q.clone(), reg, fast_opts()).unwrap();
    let pid = q
        .add_flow(
            NewJob::new("parent", &json!({})),
            vec![NewJob::new("child", &json!({}))],
        )
        .await
        .unwrap();
    let j = q.wait(&pid, Duration::from_secs(10)).await.unwrap();
    assert_eq!(j.status, JobStatus::Succeeded);
    assert_eq!(j.progress.as_deref(), Some("{\"step\":1}"));
    assert_eq!(
        *seen.lock(),
        vec!["child:succeeded".to_string(), "enqueued:true".to_string()]
    );
    let err = q.add(NewJob::new("nobody", &json!({}))).await.unwrap_err();
    assert!(
        err.to_string().contains("unknown job type"),
        "a worker's registry makes enqueue check types: {err}"
    );
    w.shutdown().await;
}

/// Waits (up to 10 s) until every job matching `filter` has `status`.
async fn all_children_reach(q: &Queue, filter: &JobFilter, status: JobStatus) -> bool {
    eventually(Duration::from_secs(10), || {
        let q = q.clone();
        let filter = filter.clone();
        async move {
            q.find(&filter)
                .await
                .unwrap()
                .iter()
                .all(|k| k.status == status)
        }
    })
    .await
}

/// Flows: a parent with five children of two types, one failing
/// terminally, runs only after all five are terminal and sees 4 results and
/// 1 failure; cancelling a parent aborts and cancels its running children.
async fn flows_with_mixed_children(fx: &Fixture) {
    let q = fx.queue();
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let s2 = seen.clone();
    let h = handler(move |job: JobRun, ctx: JobContext| {
        let seen = s2.clone();
        async move {
            match job.job_type.as_str() {
                "flow.parent" => {
                    let kids = ctx.services.children().await.unwrap();
                    let mut seen = seen.lock();
                    seen.push(format!("children:{}", kids.len()));
                    seen.push(format!(
                        "results:{}",
                        kids.iter()
                            .filter(|k| k.status == "succeeded" && k.result.is_some())
                            .count()
                    ));
                    seen.push(format!(
                        "failures:{}",
                        kids.iter()
                            .filter(|k| k.status == "failed" && k.error.is_some())
                            .count()
                    ));
                    Outcome::Succeeded { result: None }
                }
                "flow.b" if job.payload.contains("refuse") => Outcome::Terminal {
                    message: "refused".into(),
                    code: None,
                    details: None,
                },
                "flow.hang" => {
                    ctx.cancel.cancelled().await;
                    Outcome::Cancelled
                }
                _ => Outcome::Succeeded {
                    result: Some("1".into()),
                },
            }
        }
    });
    let reg = Registry::new();
    for job_type in ["flow.parent", "flow.a", "flow.b", "flow.hang"] {
        reg.register(job_type, h.clone(), settings(10_000)).unwrap();
    }
    let w = Worker::start(q.clone(), reg, fast_opts()).unwrap();
    let children = vec![
        NewJob::new("flow.a", &json!({})),
        NewJob::new("flow.a", &json!({})),
        NewJob::new("flow.b", &json!({})),
        NewJob::new("flow.b", &json!({})),
        NewJob::new("flow.b", &json!({"refuse": true})),
    ];
    let parent = q
        .add_flow(NewJob::new("flow.parent", &json!({})), children)
        .await
        .unwrap();
    let done = q.wait(&parent, Duration::from_secs(15)).await.unwrap();
    assert_eq!(
        done.status,
        JobStatus::Succeeded,
        "a failed child does not fail the parent"
    );
    let mut children = JobFilter::default();
    children.parent_id = Some(parent.clone());
    let kids = q.find(&children).await.unwrap();
    let parent_started = done.started_at.unwrap();
    // What the parent saw when it ran (checked below) is the ordering
    // itself. The stored times agree with it where the host's clock writes
    // them under one write lock (SQLite, memory); on Postgres each is its
    // transaction's start, and a claim's transaction may start a moment
    // before a child's completion commits yet read after it.
    assert!(
        fx.postgres().is_some()
            || kids
                .iter()
                .all(|k| k.finished_at.is_some_and(|f| f <= parent_started)),
        "the parent ran only after every child was terminal: parent started {parent_started}, \
         children (status, attempts, finished) {:?}",
        kids.iter()
            .map(|k| (k.status, k.attempts, k.finished_at))
            .collect::<Vec<_>>()
    );
    assert_eq!(
        *seen.lock(),
        vec![
            "children:5".to_string(),
            "results:4".to_string(),
            "failures:1".to_string()
        ]
    );

    let second = q
        .add_flow(
            NewJob::new("flow.parent", &json!({})),
            vec![
                NewJob::new("flow.hang", &json!({})),
                NewJob::new("flow.hang", &json!({})),
            ],
        )
        .await
        .unwrap();
    let mut filter = JobFilter::default();
    filter.parent_id = Some(second.clone());
    assert!(
        all_children_reach(&q, &filter, JobStatus::Running).await,
        "both children started"
    );
    q.cancel(&second, "stop the flow").await.unwrap();
    assert!(
        all_children_reach(&q, &filter, JobStatus::Cancelled).await,
        "cancelling the parent cancelled its running children"
    );
    assert!(
        eventually(Duration::from_secs(5), || {
            let n = w.in_flight();
            async move { n == 0 }
        })
        .await,
        "and aborted their runs"
    );
    w.shutdown().await;
}

/// Runs one job of `h` under a 300 ms lease whose renewal never comes in
/// time, until its run ends as a lost lease; answers the job's id.
async fn run_until_its_lease_is_lost(q: &Queue, rec: &Recorder, h: Arc<dyn Handler>) -> String {
    let mut lapsing = settings(60_000);
    lapsing.lease_duration = Some(Duration::from_millis(300));
    lapsing.lease_renew_interval = Some(Duration::from_secs(30));
    let w = start(q, "lapsing", h, lapsing);
    let id = q.add(NewJob::new("lapsing", &json!({}))).await.unwrap().id;
    assert!(
        eventually(Duration::from_secs(10), || async {
            rec.outcomes(&id).contains(&LifecycleOutcome::LeaseLost)
        })
        .await,
        "the run ends as a lost lease: {:?}",
        rec.outcomes(&id)
    );
    w.shutdown().await;
    id
}

/// A handler that stops its guest itself when the run's lease lapses (as
/// the sandbox does) ends the attempt as a lost lease: no retry, failure
/// or cancel is written, and the job is left to the rescue.
async fn a_handler_stopped_by_its_lapsed_lease_loses_the_lease(fx: &Fixture) {
    let q = fx.queue();
    let rec = Arc::new(Recorder::default());
    q.observe(rec.clone());
    // Like a guest, it runs within one poll (no await) until the lapse.
    let h = handler(|_job: JobRun, ctx: JobContext| async move {
        while !ctx.lease.has_lapsed() {
            std::thread::sleep(Duration::from_millis(5));
        }
        Outcome::Cancelled
    });
    let id = run_until_its_lease_is_lost(&q, &rec, h).await;
    let outcomes = rec.outcomes(&id);
    assert!(
        !outcomes.contains(&LifecycleOutcome::RetryScheduled)
            && !outcomes.contains(&LifecycleOutcome::FailedTerminal)
            && !outcomes.contains(&LifecycleOutcome::Cancelled),
        "nothing but the lost lease was recorded for the lapsed runs: {outcomes:?}"
    );
    let job = q.get(&id).await.unwrap().unwrap();
    assert_ne!(job.status, JobStatus::Cancelled, "{job:?}");
}

/// A run that loses its lease says so in its own span once its handler is
/// no longer polled: the line is the evidence (for an operator, and for
/// the chaos harness) of when the guest took its last step, which the
/// run's close line only bounds from much later (after the host has read
/// the job back and stored the run's last log lines).
async fn a_lost_lease_is_logged_in_the_run_span_once_its_handler_stopped(fx: &Fixture) {
    let log = global_log();
    let q = fx.queue();
    let rec = Arc::new(Recorder::default());
    q.observe(rec.clone());
    // Steps every 2 ms until it is stopped.
    let last_step: Arc<Mutex<Option<Instant>>> = Arc::default();
    let steps = Arc::clone(&last_step);
    let h = handler(move |job: JobRun, ctx: JobContext| {
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
    let id = run_until_its_lease_is_lost(&q, &rec, h).await;

    let lost = log.containing("lease lost:");
    let first_run = |l: &&Logged| {
        l.span.starts_with("job{")
            && l.span.contains(&format!("job_id={id} "))
            && l.span.contains("attempt=1 ")
    };
    let ours: Vec<&Logged> = lost.iter().filter(first_run).collect();
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

async fn run_engine_suite(backend: Backend) {
    macro_rules! check {
        ($f:ident) => {{
            let Some(fx) = Fixture::new(backend).await else {
                return;
            };
            eprintln!("engine {backend:?}: {}", stringify!($f));
            $f(&fx).await;
            fx.finish().await;
        }};
    }
    check!(outcomes_and_retries);
    check!(timeout_and_cancel);
    check!(shutdown_releases);
    check!(renewal_and_reconcile);
    check!(a_handler_stopped_by_its_lapsed_lease_loses_the_lease);
    check!(a_lost_lease_is_logged_in_the_run_span_once_its_handler_stopped);
    check!(observers_cannot_stall);
    check!(services);
    check!(flows_with_mixed_children);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_memory() {
    run_engine_suite(Backend::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_sqlite() {
    run_engine_suite(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_postgres() {
    run_engine_suite(Backend::Postgres).await;
}
