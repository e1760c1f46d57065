//! What handlers and their guests hand the queue is checked at its
//! boundary, on every backend: a NUL in one result cannot poison a batch,
//! guest enqueues stay within their bounds and their own dedupe namespace,
//! a retry-after of u64::MAX is shortened, and durations are bounded.

use std::sync::Arc;
use std::time::{Duration, Instant};

use boxcar_queue::bounds::{MAX_HANDLER_TIMEOUT, MAX_RETRY_DELAY};
use boxcar_queue::{
    guest_dedupe_key, ChildJobRequest, EnqueueBounds, EnqueueError, HandlerSettings, JobContext,
    JobRun, JobStatus, NewJob, Outcome, Queue, QueueError, Registry, RetentionPolicy, ServiceError,
    Worker, WorkerOptions, INVALID_OUTPUT,
};
use chrono::Utc;
use parking_lot::Mutex;
use serde_json::json;

use crate::support::{eventually, handler, Fixture};

fn opts() -> WorkerOptions {
    let mut opts = WorkerOptions::default();
    opts.poll_interval = Duration::from_millis(50);
    opts.base_backoff = Duration::from_millis(10);
    opts.max_backoff = Duration::from_millis(50);
    opts.abandon_grace = Duration::from_millis(100);
    opts.shutdown_grace = Duration::from_millis(500);
    opts
}

fn settings(concurrency: u32) -> HandlerSettings {
    let mut settings = HandlerSettings::default();
    settings.concurrency = concurrency;
    settings.timeout = Duration::from_secs(10);
    settings.max_attempts = Some(3);
    settings
}

/// 200 echo jobs, one of which answers with a raw NUL in its result: every
/// good one succeeds on its first attempt, the bad one fails with
/// `invalid-output`, and nothing waits for a lease (10 s timeout + 30 s
/// grace) to expire.
async fn nul_result_among_good_ones(fx: &Fixture) {
    let q = fx.queue();
    let h = handler(|job: JobRun, _ctx| async move {
        let result = if job.payload.contains("\"poison\"") {
            "{\"text\":\"a\0b\"}".to_string()
        } else {
            job.payload.clone()
        };
        Outcome::Succeeded {
            result: Some(result),
        }
    });
    let reg = Registry::new();
    reg.register("echo", h, settings(32)).unwrap();
    let w = Worker::start(q.clone(), reg, opts()).unwrap();
    let started = Instant::now();
    let mut ids = Vec::new();
    for i in 0..200 {
        let payload = if i == 117 {
            json!({"i": i, "kind": "poison"})
        } else {
            json!({"i": i})
        };
        ids.push(q.add(NewJob::new("echo", &payload)).await.unwrap().id);
    }
    let all_done = eventually(Duration::from_secs(20), || async {
        let counts = q.count_by_status().await.unwrap();
        counts.pending + counts.running == 0
    })
    .await;
    assert!(all_done, "every job reached a terminal state");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "nothing waited for a lease to expire: {:?}",
        started.elapsed()
    );
    for (i, id) in ids.iter().enumerate() {
        let job = q.get(id).await.unwrap().unwrap();
        assert_eq!(job.attempts, 1, "job {i} ran once");
        if i == 117 {
            assert_eq!(job.status, JobStatus::Failed, "{job:?}");
            assert_eq!(job.error_code.as_deref(), Some(INVALID_OUTPUT));
            let error = job.last_error.unwrap_or_default();
            assert!(
                error.contains("the result is not JSON text") && !error.contains('\0'),
                "{error:?}"
            );
            assert!(job.result.is_none());
        } else {
            assert_eq!(job.status, JobStatus::Succeeded, "job {i}: {job:?}");
            assert_eq!(job.result.as_deref(), Some(job.payload.as_str()));
        }
    }
    w.shutdown().await;
}

/// A NUL (or a broken rule) in each field a handler answers with fails
/// only that job, with `invalid-output`; a trap message with a NUL keeps
/// its kind (retried) without the NUL.
async fn nul_in_every_answer_field(fx: &Fixture) {
    let q = fx.queue();
    let h = handler(|job: JobRun, _ctx| async move {
        let kind: serde_json::Value = serde_json::from_str(&job.payload).unwrap();
        let terminal =
            |message: &str, code: Option<&str>, details: Option<&str>| Outcome::Terminal {
                message: message.into(),
                code: code.map(str::to_string),
                details: details.map(str::to_string),
            };
        match kind["kind"].as_str().unwrap() {
            "not-json" => Outcome::Succeeded {
                result: Some("not json".into()),
            },
            "message" => terminal("bad\0message", None, None),
            "code" => terminal("refused", Some("c\0de"), None),
            "details" => terminal("refused", Some("c"), Some("{\"k\":\"\0\"}")),
            "retry" => Outcome::Retryable {
                message: "again\0".into(),
                retry_after: None,
                consumes_attempt: true,
            },
            "trap" => Outcome::Trapped {
                message: "panicked at \0".into(),
            },
            _ => Outcome::Succeeded { result: None },
        }
    });
    let reg = Registry::new();
    let mut one_try = settings(8);
    one_try.max_attempts = Some(1);
    reg.register("answer", h, one_try).unwrap();
    let w = Worker::start(q.clone(), reg, opts()).unwrap();
    let mut ids = Vec::new();
    for kind in [
        "not-json", "message", "code", "details", "retry", "trap", "ok",
    ] {
        let id = q
            .add(NewJob::new("answer", &json!({ "kind": kind })))
            .await
            .unwrap()
            .id;
        ids.push((kind, id));
    }
    for (kind, id) in &ids {
        let job = q.wait(id, Duration::from_secs(10)).await.unwrap();
        let error = job.last_error.clone().unwrap_or_default();
        assert!(!error.contains('\0'), "{kind}: {error:?}");
        match *kind {
            "ok" => assert_eq!(job.status, JobStatus::Succeeded),
            "trap" => {
                assert_eq!(job.status, JobStatus::Failed, "{kind}: {job:?}");
                assert!(error.starts_with("trapped: panicked at"), "{error}");
                assert_eq!(job.error_code, None);
            }
            _ => {
                assert_eq!(job.status, JobStatus::Failed, "{kind}: {job:?}");
                assert_eq!(job.error_code.as_deref(), Some(INVALID_OUTPUT), "{kind}");
                assert!(job.error_details.is_none(), "{kind}");
            }
        }
    }
    w.shutdown().await;
}

/// A guest enqueue: refused outside its bounds, its dedupe key in its own
/// namespace (a job due in a century cannot squat a producer's key), the
/// reserved prefix refused to producers, `*` granting nothing.
async fn guest_enqueue_bounds(fx: &Fixture) {
    let q = fx.queue();
    let answers = Arc::new(Mutex::new(Vec::<Result<String, ServiceError>>::new()));
    let seen = answers.clone();
    let h = handler(move |job: JobRun, ctx: JobContext| {
        let seen = seen.clone();
        async move {
            if job.job_type != "parent" {
                return Outcome::Succeeded { result: None };
            }
            let child = |f: &dyn Fn(&mut ChildJobRequest)| {
                let mut request = ChildJobRequest {
                    job_type: "child".into(),
                    payload: "{}".into(),
                    ..ChildJobRequest::default()
                };
                f(&mut request);
                request
            };
            let requests = [
                child(&|r| r.priority = Some(i32::MIN)),
                child(&|r| r.max_attempts = Some(u32::MAX)),
                child(&|r| r.delay = Some(Duration::from_secs(100 * 365 * 86_400))),
                child(&|r| r.job_type = "other".into()),
                child(&|r| r.dedupe_key = Some("boxcar:from:x/y".into())),
                child(&|r| r.dedupe_key = Some("a\0b".into())),
                child(&|r| {
                    r.dedupe_key = Some("order-7".into());
                    r.delay = Some(Duration::from_secs(86_400));
                }),
                child(&|r| r.dedupe_key = Some("order-7".into())),
                child(&|r| {
                    r.priority = Some(100);
                    r.max_attempts = Some(25);
                }),
            ];
            for request in requests {
                let answer = ctx.services.enqueue(request).await;
                seen.lock().push(answer);
            }
            Outcome::Succeeded { result: None }
        }
    });
    let reg = Registry::new();
    let mut parent = settings(2);
    parent.may_enqueue = vec!["child".into(), "*".into()];
    parent.enqueue_bounds = EnqueueBounds::default();
    reg.register("parent", h.clone(), parent).unwrap();
    reg.register("child", h.clone(), settings(2)).unwrap();
    reg.register("other", h, settings(2)).unwrap();
    let w = Worker::start(q.clone(), reg, opts()).unwrap();
    let pid = q.add(NewJob::new("parent", &json!({}))).await.unwrap().id;
    let done = q.wait(&pid, Duration::from_secs(10)).await.unwrap();
    assert_eq!(done.status, JobStatus::Succeeded, "{done:?}");
    let answers = answers.lock().clone();
    let invalid = |i: usize, needle: &str| match &answers[i] {
        Err(ServiceError::Invalid(m)) => assert!(m.contains(needle), "{i}: {m}"),
        other => panic!("{i}: expected Invalid, got {other:?}"),
    };
    invalid(0, "priority -2147483648 is outside [0, 100]");
    invalid(1, "max_attempts 4294967295 is more than 25");
    invalid(2, "limits.enqueue_max_delay");
    assert_eq!(answers[3], Err(ServiceError::NotAllowed("other".into())));
    invalid(4, "reserved");
    invalid(5, "control character");
    let squatter = answers[6].clone().expect("a key in bounds is accepted");
    assert_eq!(
        answers[7].clone().expect("same key again"),
        squatter,
        "a guest's keys dedupe within its own namespace"
    );
    let in_bounds = answers[8]
        .clone()
        .expect("the bounds themselves are accepted");
    let job = q.get(&in_bounds).await.unwrap().unwrap();
    assert_eq!((job.priority, job.max_attempts), (100, 25));

    let stored = q.get(&squatter).await.unwrap().unwrap();
    assert_eq!(
        stored.dedupe_key.as_deref(),
        Some(guest_dedupe_key("parent", "order-7").as_str())
    );
    assert_eq!(
        stored.dedupe_key.as_deref(),
        Some("boxcar:from:parent/order-7")
    );
    let producer = q
        .add(NewJob::new("child", &json!({})).dedupe_key("order-7"))
        .await
        .unwrap();
    assert!(
        !producer.deduplicated,
        "the producer's key is not swallowed by the guest's delayed job"
    );
    let err = q
        .add(NewJob::new("child", &json!({})).dedupe_key("boxcar:from:parent/order-7"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            QueueError::Enqueue(EnqueueError::ReservedDedupeKey { .. })
        ),
        "{err}"
    );
    assert_eq!(
        q.cancel_by_dedupe_keys("child", &[guest_dedupe_key("parent", "order-7")], "stop")
            .await
            .unwrap(),
        1,
        "an operator cancels a guest's job by its stored key"
    );
    w.shutdown().await;
}

/// A `retry_after` of u64::MAX milliseconds is shortened to the maximum
/// retry delay: the job is pending, due in 30 days, on every backend.
async fn retry_after_is_clamped(fx: &Fixture) {
    let q = fx.queue();
    let h = handler(|_job: JobRun, _ctx| async move {
        Outcome::Retryable {
            message: "come back never".into(),
            retry_after: Some(Duration::from_millis(u64::MAX)),
            consumes_attempt: true,
        }
    });
    let reg = Registry::new();
    reg.register("later", h, settings(1)).unwrap();
    let w = Worker::start(q.clone(), reg, opts()).unwrap();
    let before = Utc::now();
    let id = q.add(NewJob::new("later", &json!({}))).await.unwrap().id;
    let retried = eventually(Duration::from_secs(10), || async {
        q.get(&id)
            .await
            .unwrap()
            .is_some_and(|j| j.status == JobStatus::Pending && j.attempts == 1)
    })
    .await;
    assert!(retried, "the job went back to pending");
    let job = q.get(&id).await.unwrap().unwrap();
    let max = chrono::Duration::from_std(MAX_RETRY_DELAY).unwrap();
    let slack = chrono::Duration::seconds(60);
    assert!(
        job.run_at >= before + max - slack && job.run_at <= Utc::now() + max + slack,
        "run_at {} is about 30 days ahead",
        job.run_at
    );
    w.shutdown().await;
}

backends!(
    nul_result_among_good_ones,
    nul_in_every_answer_field,
    guest_enqueue_bounds,
    retry_after_is_clamped,
);

#[tokio::test]
async fn durations_are_bounded_where_they_enter() {
    let noop = handler(|_job: JobRun, _ctx| async move { Outcome::Succeeded { result: None } });
    let reg = Registry::new();
    let mut too_long = settings(1);
    too_long.timeout = MAX_HANDLER_TIMEOUT + Duration::from_secs(1);
    let mut long_lease = settings(1);
    long_lease.lease_duration = Some(Duration::from_secs(1_000_000 * 365 * 86_400));
    let mut no_priorities = settings(1);
    no_priorities.enqueue_bounds.priority = std::ops::RangeInclusive::new(1, 0);
    for (settings, name) in [
        (too_long, "timeout"),
        (long_lease, "lease_duration"),
        (no_priorities, "enqueue_priority"),
    ] {
        let error = reg.register("t", noop.clone(), settings).unwrap_err();
        assert!(error.to_string().contains(name), "{error}");
    }
    let day = Duration::from_secs(86_400);
    let worker_options = |set: &dyn Fn(&mut WorkerOptions)| {
        let mut options = WorkerOptions::default();
        set(&mut options);
        options
    };
    for (options, name) in [
        (worker_options(&|o| o.max_backoff = 31 * day), "max_backoff"),
        (worker_options(&|o| o.lease_grace = 2 * day), "lease_grace"),
        (
            worker_options(&|o| o.shutdown_grace = Duration::MAX),
            "shutdown_grace",
        ),
        (
            worker_options(&|o| o.poll_interval = 2 * day),
            "poll_interval",
        ),
        (
            worker_options(&|o| {
                o.retention = Some(RetentionPolicy::new(
                    Duration::MAX,
                    day,
                    vec![JobStatus::Succeeded],
                ));
            }),
            "retention.older_than",
        ),
    ] {
        let error = options.validate().unwrap_err();
        assert_eq!(error.option, name, "{error}");
    }

    let q = Queue::new(
        boxcar_queue::connect("memory://").await.unwrap(),
        boxcar_queue::QueueOptions::default(),
    )
    .unwrap();
    let id = q.add(NewJob::new("t", &json!({}))).await.unwrap().id;
    let waited = tokio::time::timeout(Duration::from_millis(200), q.wait(&id, Duration::MAX)).await;
    assert!(
        waited.is_err(),
        "a wait of Duration::MAX waits (and does not panic)"
    );
}
