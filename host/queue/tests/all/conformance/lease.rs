//! Leases: every write after a claim is fenced on the lease owner, renewal on
//! an unexpired lease; an expired lease is rescued, or failed when no
//! attempts are left.

use boxcar_queue::store::{
    CompleteParams, Completed, FailParams, RenewParams, RescueParams, RetryParams,
    LEASE_EXPIRED_ERROR,
};
use boxcar_queue::JobStatus;

use super::*;
use crate::support::Fixture;

async fn fenced(fx: &Fixture) {
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
                attempt: Default::default(),
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
        attempt: Default::default(),
    };
    assert!(!fx.store.retry(retry).await.unwrap());
    let fail = FailParams {
        worker_id: W1.into(),
        id: id.clone(),
        error: "x".into(),
        code: None,
        details: None,
        attempt: Default::default(),
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

async fn exhausted(fx: &Fixture) {
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

backends!(fenced, exhausted);
