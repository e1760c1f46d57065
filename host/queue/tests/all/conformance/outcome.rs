//! Outcomes of a run: retry (with or without consuming an attempt), fail,
//! release, progress.

use boxcar_queue::store::{FailParams, RetryParams};
use boxcar_queue::JobStatus;
use chrono::Utc;

use super::*;
use crate::support::Fixture;

async fn transitions(fx: &Fixture) {
    let q = fx.queue();
    let id = add(&q, job("t").max_attempts(3)).await;
    fx.store
        .claim_batch(claim("t", W1, 1, Duration::from_secs(60)))
        .await
        .unwrap();
    assert!(fx
        .store
        .set_progress(W1, &at(&id, 1), "{\"pct\":50}")
        .await
        .unwrap());
    let r = RetryParams {
        worker_id: W1.into(),
        id: id.clone(),
        attempt: 1,
        delay: Duration::from_secs(3600),
        error: "rate limited".into(),
        consumes_attempt: false,
        ending: Default::default(),
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
        attempt: 1,
        error: "bad input".into(),
        code: None,
        details: None,
        ending: Default::default(),
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
            claims: vec![at(&id3, 1)],
        })
        .await
        .unwrap();
    assert_eq!(released, 1);
    let j = fx.store.get(&id3).await.unwrap().unwrap();
    assert_eq!(
        (j.status, j.attempts, j.lease_owner.clone()),
        (JobStatus::Pending, 0, None)
    );
    let done = fx.store.complete(completion(&id3, 1, None)).await.unwrap();
    assert!(done.is_empty(), "a released job cannot be completed");
}

backends!(transitions);
