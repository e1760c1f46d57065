//! Time arithmetic on enormous durations: a delay, TTL, lease or retry
//! delay of `u64::MAX` seconds saturates at the far future
//! (9999-12-31T23:59:59.999Z) — no panic, no overflowed integer, no
//! out-of-range database error — and reads back as that instant.

use boxcar_queue::store::{ClaimRef, InsertJob, RenewParams, RetryParams};
use boxcar_queue::{far_future, JobStatus};

use super::*;
use crate::support::Fixture;

const FOREVER: Duration = Duration::from_secs(u64::MAX);

/// A job the store inserts as given (no enqueue validation in the way).
pub(super) fn raw(job_type: &str) -> InsertJob {
    InsertJob {
        id: uuid::Uuid::now_v7().to_string(),
        job_type: job_type.into(),
        payload: "{}".into(),
        scope: None,
        dedupe_key: None,
        max_attempts: Some(3),
        default_max_attempts: 3,
        run_at: None,
        delay: Duration::ZERO,
        priority: 0,
        expires_at: None,
        ttl: None,
        parent_id: None,
        schedule_id: None,
        traceparent: None,
    }
}

async fn enormous_durations(fx: &Fixture) {
    let far = far_future();
    let later = InsertJob {
        delay: FOREVER,
        ttl: Some(FOREVER),
        ..raw("later")
    };
    let id = later.id.clone();
    fx.store.add_many(vec![later]).await.unwrap();
    let j = fx.store.get(&id).await.unwrap().unwrap();
    assert_eq!((j.run_at, j.expires_at), (far, Some(far)));

    let q = fx.queue();
    let id = add(&q, job("t")).await;
    let c = fx
        .store
        .claim_batch(claim("t", W1, 1, FOREVER))
        .await
        .unwrap();
    assert_eq!(c.claimed.len(), 1);
    assert_eq!(c.claimed[0].lease_expires_at, Some(far));
    let renewed = fx
        .store
        .renew_leases(RenewParams {
            worker_id: W1.into(),
            claims: vec![ClaimRef::of(&c.claimed[0])],
            lease: FOREVER,
        })
        .await
        .unwrap();
    assert_eq!(renewed, vec![id.clone()]);
    let retried = fx
        .store
        .retry(RetryParams {
            worker_id: W1.into(),
            id: id.clone(),
            attempt: c.claimed[0].attempts,
            delay: FOREVER,
            error: "come back much later".into(),
            consumes_attempt: true,
            ending: Default::default(),
        })
        .await
        .unwrap();
    assert!(retried);
    let j = fx.store.get(&id).await.unwrap().unwrap();
    assert_eq!((j.status, j.run_at), (JobStatus::Pending, far));
    assert_eq!(j.run_at.to_rfc3339(), "9999-12-31T23:59:59.999+00:00");
    let c = fx
        .store
        .claim_batch(claim("t", W1, 1, Duration::from_secs(60)))
        .await
        .unwrap();
    assert!(c.claimed.is_empty(), "a far-future job is not due");

    let g = guarded("g", 1, live_scope_guard());
    add(&q, job("g")).await;
    let c = fx
        .store
        .claim_batch(ClaimParams {
            lease: FOREVER,
            ..g
        })
        .await
        .unwrap();
    assert_eq!(
        c.claimed[0].lease_expires_at,
        Some(far),
        "the guarded path too"
    );
}

backends!(enormous_durations);
