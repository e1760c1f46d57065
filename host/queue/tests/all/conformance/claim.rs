//! Claims: priority then `run_at` order, the per-call limit, and due jobs past
//! `expires_at` failing as expired on the unguarded and guarded paths.

use boxcar_queue::store::{EXPIRED_CODE, EXPIRED_ERROR};
use boxcar_queue::JobStatus;
use chrono::Utc;

use super::*;
use crate::support::Fixture;

async fn order(fx: &Fixture) {
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

async fn limit(fx: &Fixture) {
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

backends!(order, limit, expiry);
