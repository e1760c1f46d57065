//! The store conformance suite: one function, [`run_suite`], run against
//! every backend. Every store change must extend it.

use std::time::Duration;

use boxcar_queue::guards::{ClaimGuards, PoolGuard, PoolStatus};
use boxcar_queue::store::{
    CancelParams, CancelTarget, ClaimParams, CompleteParams, Completed, FailParams, RenewParams,
    RescueParams, RetryParams, EXPIRED_CODE, EXPIRED_ERROR, LEASE_EXPIRED_ERROR,
};
use boxcar_queue::{
    EnqueueError, HandlerEventKind, JobFilter, JobStatus, NewJob, PoolConfig, Queue, QueueError,
    Registry, Scope,
};
use chrono::Utc;
use serde_json::json;

use crate::support::{Backend, Fixture};

const W1: &str = "worker-1";
const W2: &str = "worker-2";

fn claim(job_type: &str, worker: &str, limit: u32, lease: Duration) -> ClaimParams {
    ClaimParams {
        worker_id: worker.into(),
        job_type: job_type.into(),
        limit,
        lease,
        handler_version: Some("v1".into()),
        guards: ClaimGuards::default(),
    }
}

fn guarded(job_type: &str, limit: u32, guards: ClaimGuards) -> ClaimParams {
    ClaimParams {
        guards,
        ..claim(job_type, W1, limit, Duration::from_secs(60))
    }
}

async fn add(q: &Queue, job: NewJob) -> String {
    q.add(job).await.expect("add").id
}

fn job(t: &str) -> NewJob {
    NewJob::new(t, &json!({"k": 1}))
}

async fn claim_order(fx: &Fixture) {
    let q = fx.queue();
    let past = Utc::now() - chrono::Duration::seconds(10);
    let low_late = add(&q, job("t").priority(5)).await;
    let high_late = add(&q, job("t").priority(-1)).await;
    let low_early = add(&q, job("t").priority(5).run_at(past)).await;
    let future = add(&q, job("t").delay(Duration::from_secs(3600))).await;
    let got = fx
        .store
        .claim_batch(claim("t", W1, 10, Duration::from_secs(60)))
        .await
        .unwrap();
    let ids: Vec<&str> = got.claimed.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(
        ids,
        vec![high_late.as_str(), low_early.as_str(), low_late.as_str()]
    );
    assert!(
        !ids.contains(&future.as_str()),
        "a future run_at must not be claimed"
    );
    let j = &got.claimed[0];
    assert_eq!(j.status, JobStatus::Running);
    assert_eq!(j.attempts, 1);
    assert_eq!(j.lease_owner.as_deref(), Some(W1));
    assert_eq!(j.handler_version.as_deref(), Some("v1"));
    assert!(j.started_at.is_some() && j.lease_expires_at.is_some());
    let again = fx
        .store
        .claim_batch(claim("t", W2, 10, Duration::from_secs(60)))
        .await
        .unwrap();
    assert!(
        again.claimed.is_empty(),
        "claimed jobs are not claimed twice"
    );
    let other = fx
        .store
        .claim_batch(claim("other", W2, 10, Duration::from_secs(60)))
        .await
        .unwrap();
    assert!(other.claimed.is_empty(), "claims are per type");
}

async fn claim_limit(fx: &Fixture) {
    let q = fx.queue();
    let jobs: Vec<NewJob> = (0..5).map(|_| job("t")).collect();
    q.add_many(jobs).await.unwrap();
    let a = fx
        .store
        .claim_batch(claim("t", W1, 3, Duration::from_secs(60)))
        .await
        .unwrap();
    let b = fx
        .store
        .claim_batch(claim("t", W2, 3, Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!((a.claimed.len(), b.claimed.len()), (3, 2));
}

async fn dedupe(fx: &Fixture) {
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let store = fx.reopen().await;
        tasks.push(tokio::spawn(async move {
            let q = Queue::new(store, Default::default()).unwrap();
            q.add(job("t").dedupe_key("same")).await.unwrap()
        }));
    }
    let mut results = Vec::new();
    for t in tasks {
        results.push(t.await.unwrap());
    }
    let fresh: Vec<_> = results.iter().filter(|r| !r.deduplicated).collect();
    assert_eq!(fresh.len(), 1, "exactly one add wins: {results:?}");
    assert!(results.iter().all(|r| r.id == fresh[0].id));
    let live = fx.store.count_by_status().await.unwrap();
    assert_eq!(live.pending, 1);
    let c = fx
        .store
        .claim_batch(claim("t", W1, 1, Duration::from_secs(60)))
        .await
        .unwrap();
    let q = fx.queue();
    assert!(
        q.add(job("t").dedupe_key("same"))
            .await
            .unwrap()
            .deduplicated,
        "running jobs dedupe too"
    );
    let done = fx
        .store
        .complete(CompleteParams {
            worker_id: W1.into(),
            jobs: vec![Completed {
                id: c.claimed[0].id.clone(),
                result: Some("{\"ok\":true}".into()),
            }],
        })
        .await
        .unwrap();
    assert_eq!(done.len(), 1);
    let again = q.add(job("t").dedupe_key("same")).await.unwrap();
    assert!(!again.deduplicated, "the key is free once the job finished");
    assert_ne!(again.id, fresh[0].id);
    let batch = q
        .add_many(vec![job("t").dedupe_key("b"), job("t").dedupe_key("b")])
        .await
        .unwrap();
    assert!(!batch[0].deduplicated && batch[1].deduplicated && batch[0].id == batch[1].id);
}

async fn fenced_completion(fx: &Fixture) {
    let q = fx.queue();
    let id = add(&q, job("t").max_attempts(5)).await;
    fx.store
        .claim_batch(claim("t", W1, 1, Duration::from_millis(30)))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(80)).await;
    let renewed = fx
        .store
        .renew_leases(RenewParams {
            worker_id: W1.into(),
            ids: vec![id.clone()],
            lease: Duration::from_secs(60),
        })
        .await
        .unwrap();
    assert!(renewed.is_empty(), "an expired lease cannot be renewed");
    let rescued = fx.store.rescue(RescueParams { limit: 100 }).await.unwrap();
    assert_eq!(rescued.len(), 1);
    let c = fx
        .store
        .claim_batch(claim("t", W2, 1, Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!(c.claimed.len(), 1);
    assert_eq!(
        c.claimed[0].attempts, 2,
        "the recovering claim is a new attempt"
    );
    let before = fx.store.get(&id).await.unwrap().unwrap();
    let done = fx
        .store
        .complete(CompleteParams {
            worker_id: W1.into(),
            jobs: vec![Completed {
                id: id.clone(),
                result: None,
            }],
        })
        .await
        .unwrap();
    assert!(done.is_empty(), "the old owner's completion is rejected");
    let retry = RetryParams {
        worker_id: W1.into(),
        id: id.clone(),
        delay: Duration::ZERO,
        error: "x".into(),
        consumes_attempt: true,
    };
    assert!(!fx.store.retry(retry).await.unwrap());
    let fail = FailParams {
        worker_id: W1.into(),
        id: id.clone(),
        error: "x".into(),
        code: None,
        details: None,
    };
    assert!(!fx.store.fail(fail).await.unwrap());
    assert!(!fx.store.set_progress(W1, &id, "{}").await.unwrap());
    let after = fx.store.get(&id).await.unwrap().unwrap();
    assert_eq!(before, after, "a rejected write changes nothing");
    let renewed = fx
        .store
        .renew_leases(RenewParams {
            worker_id: W2.into(),
            ids: vec![id.clone()],
            lease: Duration::from_secs(60),
        })
        .await
        .unwrap();
    assert_eq!(renewed, vec![id.clone()], "the owner renews a live lease");
    assert_eq!(
        fx.store
            .still_owned(W2, std::slice::from_ref(&id))
            .await
            .unwrap(),
        vec![id.clone()]
    );
    assert!(fx
        .store
        .still_owned(W1, std::slice::from_ref(&id))
        .await
        .unwrap()
        .is_empty());
}

async fn lease_exhausted(fx: &Fixture) {
    let q = fx.queue();
    let id = add(&q, job("t").max_attempts(1)).await;
    fx.store
        .claim_batch(claim("t", W1, 1, Duration::from_millis(20)))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(60)).await;
    let rescued = fx.store.rescue(RescueParams { limit: 100 }).await.unwrap();
    assert_eq!(rescued.len(), 1);
    let j = fx.store.get(&id).await.unwrap().unwrap();
    assert_eq!(j.status, JobStatus::Failed);
    assert_eq!(j.last_error.as_deref(), Some(LEASE_EXPIRED_ERROR));
    assert!(j.finished_at.is_some() && j.lease_owner.is_none());
}

async fn outcomes(fx: &Fixture) {
    let q = fx.queue();
    let id = add(&q, job("t").max_attempts(3)).await;
    fx.store
        .claim_batch(claim("t", W1, 1, Duration::from_secs(60)))
        .await
        .unwrap();
    assert!(fx
        .store
        .set_progress(W1, &id, "{\"pct\":50}")
        .await
        .unwrap());
    let r = RetryParams {
        worker_id: W1.into(),
        id: id.clone(),
        delay: Duration::from_secs(3600),
        error: "rate limited".into(),
        consumes_attempt: false,
    };
    assert!(fx.store.retry(r).await.unwrap());
    let j = fx.store.get(&id).await.unwrap().unwrap();
    assert_eq!(
        (j.status, j.attempts),
        (JobStatus::Pending, 0),
        "consumes_attempt=false gives it back"
    );
    assert_eq!(j.last_error.as_deref(), Some("rate limited"));
    assert_eq!(j.progress.as_deref(), Some("{\"pct\":50}"));
    assert!(j.run_at > Utc::now() + chrono::Duration::seconds(3000));
    let c = fx
        .store
        .claim_batch(claim("t", W1, 1, Duration::from_secs(60)))
        .await
        .unwrap();
    assert!(c.claimed.is_empty(), "a job in backoff is not due");
    let id2 = add(&q, job("u")).await;
    fx.store
        .claim_batch(claim("u", W1, 1, Duration::from_secs(60)))
        .await
        .unwrap();
    let f = FailParams {
        worker_id: W1.into(),
        id: id2.clone(),
        error: "bad input".into(),
        code: None,
        details: None,
    };
    assert!(fx.store.fail(f).await.unwrap());
    let j = fx.store.get(&id2).await.unwrap().unwrap();
    assert_eq!(j.status, JobStatus::Failed);
    assert_eq!(j.last_error.as_deref(), Some("bad input"));
    let id3 = add(&q, job("v")).await;
    fx.store
        .claim_batch(claim("v", W1, 1, Duration::from_secs(60)))
        .await
        .unwrap();
    let released = fx
        .store
        .release(boxcar_queue::store::ReleaseParams {
            worker_id: W1.into(),
            ids: vec![id3.clone()],
        })
        .await
        .unwrap();
    assert_eq!(released, 1);
    let j = fx.store.get(&id3).await.unwrap().unwrap();
    assert_eq!(
        (j.status, j.attempts, j.lease_owner.clone()),
        (JobStatus::Pending, 0, None)
    );
    let done = fx
        .store
        .complete(CompleteParams {
            worker_id: W1.into(),
            jobs: vec![Completed {
                id: id3.clone(),
                result: None,
            }],
        })
        .await
        .unwrap();
    assert!(done.is_empty(), "a released job cannot be completed");
}

async fn expiry(fx: &Fixture) {
    let q = fx.queue();
    let id = add(
        &q,
        job("t").expires_at(Utc::now() - chrono::Duration::seconds(1)),
    )
    .await;
    let ok = add(&q, job("t").ttl(Duration::from_secs(3600))).await;
    let c = fx
        .store
        .claim_batch(claim("t", W1, 10, Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!(c.claimed.len(), 1);
    assert_eq!(c.claimed[0].id, ok);
    assert_eq!(c.expired.len(), 1);
    let j = fx.store.get(&id).await.unwrap().unwrap();
    assert_eq!(j.status, JobStatus::Failed);
    assert_eq!(j.last_error.as_deref(), Some(EXPIRED_ERROR));
    assert_eq!(j.error_code.as_deref(), Some(EXPIRED_CODE));
    assert_eq!(j.attempts, 0, "an expired job never started");

    // The guarded claim path expires the same way.
    let late = add(
        &q,
        job("g").expires_at(Utc::now() - chrono::Duration::seconds(1)),
    )
    .await;
    let c = fx
        .store
        .claim_batch(guarded("g", 10, live_scope_guard()))
        .await
        .unwrap();
    assert!(c.claimed.is_empty());
    assert_eq!(c.expired.len(), 1);
    let j = fx.store.get(&late).await.unwrap().unwrap();
    assert_eq!(j.status, JobStatus::Failed);
    assert_eq!(j.last_error.as_deref(), Some(EXPIRED_ERROR));
    assert_eq!(j.error_code.as_deref(), Some(EXPIRED_CODE));
}

async fn retry_failed_and_prune(fx: &Fixture) {
    let q = fx.queue();
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(add(&q, job("t").max_attempts(1).scope(Scope::new("acct", "1"))).await);
    }
    let c = fx
        .store
        .claim_batch(claim("t", W1, 10, Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!(c.claimed.len(), 5);
    for id in &ids {
        fx.store
            .fail(FailParams {
                worker_id: W1.into(),
                id: id.clone(),
                error: "boom".into(),
                code: None,
                details: None,
            })
            .await
            .unwrap();
    }
    let page = JobFilter {
        limit: Some(2),
        ..JobFilter::default()
    };
    assert_eq!(
        q.retry_failed(&page).await.unwrap(),
        2,
        "paginated with a limit"
    );
    assert_eq!(
        q.retry_failed(&JobFilter::default()).await.unwrap(),
        3,
        "all the rest without one"
    );
    for id in &ids {
        let j = fx.store.get(id).await.unwrap().unwrap();
        assert_eq!(
            (j.status, j.attempts, j.last_error.clone()),
            (JobStatus::Pending, 0, None)
        );
    }
    let c = fx
        .store
        .claim_batch(claim("t", W1, 10, Duration::from_secs(60)))
        .await
        .unwrap();
    let jobs: Vec<Completed> = c
        .claimed
        .iter()
        .map(|j| Completed {
            id: j.id.clone(),
            result: None,
        })
        .collect();
    fx.store
        .complete(CompleteParams {
            worker_id: W1.into(),
            jobs,
        })
        .await
        .unwrap();
    let live = add(&q, job("t")).await;
    let before = Utc::now() - chrono::Duration::seconds(60);
    assert_eq!(
        q.prune(before, &[]).await.unwrap(),
        0,
        "recent rows are kept"
    );
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        q.prune(Utc::now(), &[JobStatus::Failed]).await.unwrap(),
        0,
        "only the named statuses"
    );
    assert_eq!(q.prune(Utc::now(), &[]).await.unwrap(), 5);
    assert!(
        fx.store.get(&live).await.unwrap().is_some(),
        "live rows are never pruned"
    );
    assert_eq!(q.prune(Utc::now(), &[JobStatus::Pending]).await.unwrap(), 0);
}

async fn cancels(fx: &Fixture) {
    let q = fx.queue();
    let s = Scope::new("doc", "7");
    let p1 = add(&q, job("t").scope(s.clone())).await;
    let r1 = add(&q, job("r").scope(s.clone())).await;
    fx.store
        .claim_batch(claim("r", W1, 1, Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!(
        q.cancel_pending_for_scope(s.clone(), "superseded")
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        fx.store.get(&p1).await.unwrap().unwrap().status,
        JobStatus::Cancelled
    );
    assert_eq!(
        fx.store.get(&r1).await.unwrap().unwrap().status,
        JobStatus::Running,
        "running left alone"
    );
    let c = fx
        .store
        .cancel(CancelParams {
            target: CancelTarget::Scope {
                scope: s.clone(),
                include_running: true,
            },
            reason: "deleted".into(),
        })
        .await
        .unwrap();
    assert_eq!(c.len(), 1);
    assert!(c[0].was_running);
    let j = fx.store.get(&r1).await.unwrap().unwrap();
    assert_eq!(
        (j.status, j.last_error.as_deref()),
        (JobStatus::Cancelled, Some("deleted"))
    );
    let done = fx
        .store
        .complete(CompleteParams {
            worker_id: W1.into(),
            jobs: vec![Completed {
                id: r1.clone(),
                result: None,
            }],
        })
        .await
        .unwrap();
    assert!(done.is_empty(), "no completion resurrects a cancelled job");
    let k1 = add(&q, job("t").dedupe_key("k1")).await;
    let k2 = add(&q, job("t").dedupe_key("k2")).await;
    let n = q
        .cancel_by_dedupe_keys("t", &["k1".into(), "zz".into()], "voice changed")
        .await
        .unwrap();
    assert_eq!(n, 1);
    assert_eq!(
        fx.store.get(&k1).await.unwrap().unwrap().status,
        JobStatus::Cancelled
    );
    assert_eq!(
        fx.store.get(&k2).await.unwrap().unwrap().status,
        JobStatus::Pending
    );
    assert!(q.cancel(&k2, "by id").await.unwrap());
    assert!(
        !q.cancel(&k2, "again").await.unwrap(),
        "terminal jobs stay terminal"
    );
}

async fn flows(fx: &Fixture) {
    let q = fx.queue();
    let parent = q
        .add_flow(job("parent"), vec![job("child"), job("child")])
        .await
        .unwrap();
    let c = fx
        .store
        .claim_batch(claim("parent", W1, 1, Duration::from_secs(60)))
        .await
        .unwrap();
    assert!(c.claimed.is_empty(), "a parent waits for its children");
    let kids = fx
        .store
        .claim_batch(claim("child", W1, 2, Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!(kids.claimed.len(), 2);
    assert!(kids
        .claimed
        .iter()
        .all(|k| k.parent_id.as_deref() == Some(parent.as_str())));
    fx.store
        .complete(CompleteParams {
            worker_id: W1.into(),
            jobs: vec![Completed {
                id: kids.claimed[0].id.clone(),
                result: Some("1".into()),
            }],
        })
        .await
        .unwrap();
    fx.store
        .fail(FailParams {
            worker_id: W1.into(),
            id: kids.claimed[1].id.clone(),
            error: "no".into(),
            code: None,
            details: None,
        })
        .await
        .unwrap();
    let c = fx
        .store
        .claim_batch(claim("parent", W1, 1, Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!(c.claimed.len(), 1, "claimable once every child is terminal");
    let p2 = q.add_flow(job("parent"), vec![job("child")]).await.unwrap();
    q.cancel(&p2, "stop").await.unwrap();
    let kids = q
        .find(&JobFilter {
            parent_id: Some(p2),
            ..JobFilter::default()
        })
        .await
        .unwrap();
    assert!(
        kids.iter().all(|k| k.status == JobStatus::Cancelled),
        "cancelling a parent cancels its children"
    );
    let err = q.add(job("child").parent("nope")).await.unwrap_err();
    assert!(
        matches!(err, QueueError::Enqueue(EnqueueError::UnknownParent { .. })),
        "{err}"
    );
}

async fn inspection(fx: &Fixture) {
    let q = fx.queue();
    let s = Scope::new("a", "1");
    add(&q, job("x").scope(s.clone())).await;
    add(&q, job("y")).await;
    add(&q, job("y")).await;
    assert_eq!(q.find_for_scope(s).await.unwrap().len(), 1);
    let f = JobFilter {
        types: vec!["y".into()],
        statuses: vec![JobStatus::Pending],
        ..JobFilter::default()
    };
    assert_eq!(q.find(&f).await.unwrap().len(), 2);
    let f = JobFilter {
        limit: Some(1),
        offset: Some(1),
        ..JobFilter::default()
    };
    assert_eq!(q.find(&f).await.unwrap().len(), 1);
    assert_eq!(q.count_by_status().await.unwrap().pending, 3);
    q.record_handler_event(
        HandlerEventKind::Deployed,
        Some("x"),
        Some("x.wasm"),
        Some("abc"),
        None,
    )
    .await
    .unwrap();
    q.record_handler_event(
        HandlerEventKind::Rejected,
        Some("x"),
        Some("x.wasm"),
        None,
        Some("bad manifest"),
    )
    .await
    .unwrap();
    let ev = q.handler_events(10).await.unwrap();
    assert_eq!(ev.len(), 2);
    assert_eq!(ev[0].kind, HandlerEventKind::Rejected, "newest first");
    assert_eq!(ev[0].reason.as_deref(), Some("bad manifest"));
}

async fn validation(fx: &Fixture) {
    let q = fx.queue();
    let t = |e: QueueError| match e {
        QueueError::Enqueue(e) => e,
        other => panic!("expected a validation error, got {other}"),
    };
    let secret = "hunter2-secret";
    type Check = fn(&EnqueueError) -> bool;
    let cases: Vec<(NewJob, Check)> = vec![
        (job(""), |e| matches!(e, EnqueueError::EmptyJobType)),
        (job("t").dedupe_key(""), |e| {
            matches!(e, EnqueueError::EmptyDedupeKey { .. })
        }),
        (job("t").scope(Scope::new("", "1")), |e| {
            matches!(e, EnqueueError::EmptyScope { part: "type", .. })
        }),
        (job("t").scope(Scope::new("a", "")), |e| {
            matches!(e, EnqueueError::EmptyScope { part: "id", .. })
        }),
        (job("t").max_attempts(0), |e| {
            matches!(e, EnqueueError::InvalidMaxAttempts { .. })
        }),
        (
            NewJob::from_text("t", format!("{{\"pw\": \"{secret}\"")),
            |e| matches!(e, EnqueueError::PayloadNotJson { .. }),
        ),
        (NewJob::from_text("t", format!("[\"{secret}\"]")), |e| {
            matches!(e, EnqueueError::PayloadNotObject { .. })
        }),
        (NewJob::from_text("t", "{\"n\": 1e999}"), |e| {
            matches!(e, EnqueueError::PayloadNonFinite { .. })
        }),
        (
            NewJob::from_text(
                "t",
                format!("{{\"a\":{}1{}}}", "[".repeat(100), "]".repeat(100)),
            ),
            |e| matches!(e, EnqueueError::PayloadTooDeep { .. }),
        ),
        (
            NewJob::from_text(
                "t",
                format!("{{\"a\":\"{}\"}}", "x".repeat(1024 * 1024 + 1)),
            ),
            |e| matches!(e, EnqueueError::PayloadTooLarge { .. }),
        ),
        (job("t").run_at(chrono::DateTime::<Utc>::MIN_UTC), |e| {
            matches!(
                e,
                EnqueueError::InvalidTime {
                    field: "run_at",
                    ..
                }
            )
        }),
        (job("t").delay(Duration::from_secs(u64::MAX)), |e| {
            matches!(e, EnqueueError::InvalidTime { field: "delay", .. })
        }),
    ];
    for (j, check) in cases {
        let e = t(q.add(j).await.unwrap_err());
        assert!(check(&e), "unexpected error {e:?}");
        let msg = e.to_string();
        assert!(!msg.contains(secret), "payload leaked into `{msg}`");
        if !matches!(e, EnqueueError::EmptyJobType) {
            assert!(msg.contains("`t`"), "error names the job type: {msg}");
        }
    }
    let registry = Registry::new();
    registry.declare_elsewhere(["known".to_string()]);
    q.attach_registry(registry);
    let e = t(q.add(job("unknown")).await.unwrap_err());
    assert!(matches!(e, EnqueueError::UnknownJobType { .. }), "{e}");
    q.add(job("known")).await.unwrap();
    assert_eq!(
        fx.store.count_by_status().await.unwrap().pending,
        1,
        "refused jobs write nothing"
    );
}

fn live_scope_guard() -> ClaimGuards {
    ClaimGuards {
        serialize_by_scope: true,
        ..ClaimGuards::default()
    }
}

async fn guard_scope(fx: &Fixture) {
    let q = fx.queue();
    let a = Scope::new("acct", "a");
    add(&q, job("s").scope(a.clone())).await;
    add(&q, job("s").scope(a.clone())).await;
    add(&q, job("s").scope(Scope::new("acct", "b"))).await;
    add(&q, job("s")).await;
    add(&q, job("s")).await;
    let c = fx
        .store
        .claim_batch(guarded("s", 10, live_scope_guard()))
        .await
        .unwrap();
    assert_eq!(
        c.claimed.len(),
        4,
        "one per scope, scope-less jobs unaffected: {:?}",
        c.claimed
    );
    assert_eq!(
        c.claimed
            .iter()
            .filter(|j| j.scope.as_ref() == Some(&a))
            .count(),
        1
    );
    let c2 = fx
        .store
        .claim_batch(guarded("s", 10, live_scope_guard()))
        .await
        .unwrap();
    assert!(c2.claimed.is_empty());
    assert!(c2.blocked_by.unwrap_or_default().contains("acct"));
    let held = c
        .claimed
        .iter()
        .find(|j| j.scope.as_ref() == Some(&a))
        .unwrap()
        .id
        .clone();
    let q2 = fx.queue();
    let other = add(&q2, job("s2").scope(a.clone())).await;
    let c3 = fx
        .store
        .claim_batch(guarded("s2", 10, live_scope_guard()))
        .await
        .unwrap();
    assert!(
        c3.claimed.is_empty(),
        "any type's live lease in the scope blocks"
    );
    let _ = other;
    let _ = held;
    let id = add(&q, job("e").scope(Scope::new("x", "1"))).await;
    let mut short = guarded("e", 1, live_scope_guard());
    short.lease = Duration::from_millis(20);
    fx.store.claim_batch(short).await.unwrap();
    add(&q, job("e").scope(Scope::new("x", "1"))).await;
    tokio::time::sleep(Duration::from_millis(60)).await;
    let c4 = fx
        .store
        .claim_batch(guarded("e", 1, live_scope_guard()))
        .await
        .unwrap();
    assert_eq!(
        c4.claimed.len(),
        1,
        "an expired lease does not block its scope"
    );
    assert_ne!(c4.claimed[0].id, id);
}

async fn guard_types(fx: &Fixture) {
    let q = fx.queue();
    add(&q, job("import")).await;
    add(&q, job("hydrate")).await;
    let nwr = |other: &str| ClaimGuards {
        not_while_running: vec![other.into()],
        ..ClaimGuards::default()
    };
    let c = fx
        .store
        .claim_batch(guarded("import", 1, nwr("hydrate")))
        .await
        .unwrap();
    assert_eq!(c.claimed.len(), 1);
    let c = fx
        .store
        .claim_batch(guarded("hydrate", 1, nwr("import")))
        .await
        .unwrap();
    assert!(
        c.claimed.is_empty(),
        "not while a listed type holds a live lease"
    );
    let waits = ClaimGuards {
        waits_for: vec!["ingest".into()],
        ..ClaimGuards::default()
    };
    add(&q, job("rollup")).await;
    add(&q, job("ingest").delay(Duration::from_secs(3600))).await;
    let c = fx
        .store
        .claim_batch(guarded("rollup", 1, waits.clone()))
        .await
        .unwrap();
    assert_eq!(c.claimed.len(), 1, "future ingest work does not block");
    add(&q, job("rollup")).await;
    add(&q, job("ingest")).await;
    let c = fx
        .store
        .claim_batch(guarded("rollup", 1, waits.clone()))
        .await
        .unwrap();
    assert!(c.claimed.is_empty(), "due ingest work blocks");
    assert!(c.blocked_by.unwrap_or_default().contains("ingest"));
}

async fn guard_pools(fx: &Fixture) {
    let q = fx.queue();
    let pool = |t: &str, cost: u32| PoolGuard {
        name: "api".into(),
        concurrency: Some(4),
        rate_per_minute: Some(5),
        member_costs: vec![("big".into(), 2), ("small".into(), 1)],
        cost,
        rate_cost: if t == "big" { 2 } else { 1 },
    };
    let g = |t: &str, cost| ClaimGuards {
        pools: vec![pool(t, cost)],
        ..ClaimGuards::default()
    };
    for _ in 0..3 {
        add(&q, job("big")).await;
        add(&q, job("small")).await;
    }
    let c = fx
        .store
        .claim_batch(guarded("big", 3, g("big", 2)))
        .await
        .unwrap();
    assert_eq!(c.claimed.len(), 2, "2 × cost 2 fills 4 slots");
    let c = fx
        .store
        .claim_batch(guarded("small", 3, g("small", 1)))
        .await
        .unwrap();
    assert!(c.claimed.is_empty(), "pool full");
    assert!(c.blocked_by.unwrap_or_default().contains("pool"));
    let q2 = fx.queue();
    let big: Vec<String> = q2
        .find(&JobFilter {
            types: vec!["big".into()],
            statuses: vec![JobStatus::Running],
            ..JobFilter::default()
        })
        .await
        .unwrap()
        .into_iter()
        .map(|j| j.id)
        .collect();
    q.cancel(&big[0], "free a slot").await.unwrap();
    let c = fx
        .store
        .claim_batch(guarded("small", 3, g("small", 1)))
        .await
        .unwrap();
    assert_eq!(
        c.claimed.len(),
        1,
        "rate budget 5: 2+2 spent, 1 left (cancel refunds nothing)"
    );
    let c = fx
        .store
        .claim_batch(guarded("small", 3, g("small", 1)))
        .await
        .unwrap();
    assert!(c.claimed.is_empty());
    assert!(c.blocked_by.unwrap_or_default().contains("rate"));
}

/// `pool_status`: occupancy from live leases only (costs summed, expired
/// leases and other types ignored), spend and window from the guard row,
/// nothing refunded by a cancel, pools reported in the order asked.
async fn pool_status(fx: &Fixture) {
    let q = fx.queue();
    let api = PoolConfig {
        name: "api".into(),
        concurrency: Some(6),
        rate_per_minute: Some(10),
        types: vec!["big".into(), "small".into()],
        costs: [("big".to_string(), 2)].into(),
        rate_costs: [("big".to_string(), 3)].into(),
    };
    let slots = PoolConfig {
        name: "slots".into(),
        concurrency: Some(1),
        rate_per_minute: None,
        types: vec!["other".into()],
        ..PoolConfig::default()
    };
    let both = [slots.clone(), api.clone()];
    let st = q.pool_status(&both).await.unwrap();
    assert_eq!(st.len(), 2);
    assert_eq!(st[0].name, "slots");
    assert_eq!(
        st[1],
        PoolStatus {
            name: "api".into(),
            occupied: 0,
            concurrency: Some(6),
            spent: 0,
            rate_per_minute: Some(10),
            window_resets_at: None,
        }
    );
    for _ in 0..2 {
        add(&q, job("big")).await;
    }
    add(&q, job("small")).await;
    add(&q, job("unrelated")).await;
    let registry = Registry::new();
    registry.set_pools(vec![api.clone()]).unwrap();
    // SQLite stores milliseconds: allow `before`'s sub-millisecond part.
    let before = fx.store.now().await.unwrap();
    let c = fx
        .store
        .claim_batch(guarded("big", 2, registry.guards_for("big")))
        .await
        .unwrap();
    assert_eq!(c.claimed.len(), 2);
    // An expired lease occupies nothing; an unrelated type neither.
    let c = fx
        .store
        .claim_batch(claim("small", W2, 1, Duration::from_millis(1)))
        .await
        .unwrap();
    assert_eq!(c.claimed.len(), 1);
    let c = fx
        .store
        .claim_batch(claim("unrelated", W2, 1, Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!(c.claimed.len(), 1);
    tokio::time::sleep(Duration::from_millis(20)).await;
    let st = q.pool_status(&both).await.unwrap();
    assert_eq!(st[0].occupied, 0);
    assert_eq!((st[0].spent, st[0].window_resets_at), (0, None));
    assert_eq!(st[1].occupied, 4, "two live big jobs at cost 2");
    assert_eq!(st[1].spent, 6, "two starts at rate cost 3");
    assert_eq!(st[1].budget_left(), Some(4));
    let resets = st[1].window_resets_at.expect("an open window");
    let after = fx.store.now().await.unwrap();
    assert!(
        resets > before + chrono::Duration::milliseconds(59_999)
            && resets <= after + chrono::Duration::seconds(60),
        "the window resets a minute after its first start: {before} .. {resets} .. {after}"
    );
    let big = q
        .find(&JobFilter {
            types: vec!["big".into()],
            statuses: vec![JobStatus::Running],
            ..JobFilter::default()
        })
        .await
        .unwrap();
    q.cancel(&big[0].id, "free a slot").await.unwrap();
    let st = q.pool_status(&[api]).await.unwrap();
    assert_eq!(st[0].occupied, 2, "the cancelled job holds no slot");
    assert_eq!(st[0].spent, 6, "cancelling refunds no budget");
}

/// `blocked_by`: a due pending job names the guard that holds it back, the
/// same predicate a claim evaluates; not-due, non-pending and unguarded jobs
/// report nothing, and the answer clears once the blocker is gone.
async fn blocked_by(fx: &Fixture) {
    let q = fx.queue();
    let scope = Scope::new("account", "7");
    let running = add(&q, job("mail").scope(scope.clone())).await;
    let c = fx
        .store
        .claim_batch(claim("mail", W2, 1, Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!(c.claimed.len(), 1);
    let waiting = add(&q, job("mail").scope(scope.clone())).await;
    let later = add(
        &q,
        job("mail").scope(scope).delay(Duration::from_secs(3600)),
    )
    .await;
    let guards = live_scope_guard();
    let get = |id: String| {
        let q = q.clone();
        async move { q.get(&id).await.unwrap().unwrap() }
    };
    let why = q
        .blocked_by(&get(waiting.clone()).await, &guards)
        .await
        .unwrap();
    assert!(
        why.as_deref()
            .is_some_and(|w| w.contains("scope type `account`")),
        "{why:?}"
    );
    assert_eq!(
        q.blocked_by(&get(later).await, &guards).await.unwrap(),
        None,
        "not due yet: nothing to explain"
    );
    assert_eq!(
        q.blocked_by(&get(running.clone()).await, &guards)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        q.blocked_by(&get(waiting.clone()).await, &ClaimGuards::default())
            .await
            .unwrap(),
        None
    );
    q.cancel(&running, "done").await.unwrap();
    assert_eq!(
        q.blocked_by(&get(waiting).await, &guards).await.unwrap(),
        None,
        "the scope is free"
    );
}

/// Runs every conformance check against `backend`, each on a fresh database.
pub async fn run_suite(backend: Backend) {
    macro_rules! check {
        ($f:ident) => {{
            let Some(fx) = Fixture::new(backend).await else {
                return;
            };
            eprintln!("conformance {backend:?}: {}", stringify!($f));
            $f(&fx).await;
            fx.finish().await;
        }};
    }
    check!(claim_order);
    check!(claim_limit);
    check!(dedupe);
    check!(fenced_completion);
    check!(lease_exhausted);
    check!(outcomes);
    check!(expiry);
    check!(retry_failed_and_prune);
    check!(cancels);
    check!(flows);
    check!(inspection);
    check!(validation);
    check!(guard_scope);
    check!(guard_types);
    check!(guard_pools);
    check!(pool_status);
    check!(blocked_by);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_memory() {
    run_suite(Backend::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_sqlite() {
    run_suite(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_postgres() {
    run_suite(Backend::Postgres).await;
}
