//! Leases: every write after a claim is fenced on the claim — the lease
//! owner and the claim's attempt — renewal also on an unexpired lease; an
//! expired lease is rescued, or failed when no attempts are left.

use boxcar_queue::store::{
    ClaimRef, FailParams, ReleaseParams, RenewParams, RescueParams, RetryParams,
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
            claims: vec![at(&id, 1)],
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
    let done = fx.store.complete(completion(&id, 1, None)).await.unwrap();
    assert!(done.is_empty(), "the old owner's completion is rejected");
    let retry = RetryParams {
        worker_id: W1.into(),
        id: id.clone(),
        attempt: 1,
        delay: Duration::ZERO,
        error: "x".into(),
        consumes_attempt: true,
        ending: Default::default(),
    };
    assert!(!fx.store.retry(retry).await.unwrap());
    let fail = FailParams {
        worker_id: W1.into(),
        id: id.clone(),
        attempt: 1,
        error: "x".into(),
        code: None,
        details: None,
        ending: Default::default(),
    };
    assert!(!fx.store.fail(fail).await.unwrap());
    assert!(!fx.store.set_progress(W1, &at(&id, 1), "{}").await.unwrap());
    let after = fx.store.get(&id).await.unwrap().unwrap();
    assert_eq!(before, after, "a rejected write changes nothing");
    let renewed = fx
        .store
        .renew_leases(RenewParams {
            worker_id: W2.into(),
            claims: vec![at(&id, 2)],
            lease: Duration::from_secs(60),
        })
        .await
        .unwrap();
    assert_eq!(renewed, vec![id.clone()], "the owner renews a live lease");
    assert_eq!(
        fx.store.still_owned(W2, &[at(&id, 2)]).await.unwrap(),
        vec![id.clone()]
    );
    assert!(fx
        .store
        .still_owned(W1, &[at(&id, 1)])
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

/// Four jobs claimed by `W1` under a lease that expires, rescued, and
/// claimed again by `W1`: each is now in its second claim (attempt 2), by
/// the worker that also holds the expired first claim.
async fn reclaimed_by_same_worker(fx: &Fixture) -> Vec<String> {
    let q = fx.queue();
    let mut ids = Vec::new();
    for _ in 0..4 {
        ids.push(add(&q, job("t").max_attempts(5)).await);
    }
    let first = fx
        .store
        .claim_batch(claim("t", W1, 4, Duration::from_millis(30)))
        .await
        .unwrap();
    assert_eq!(first.claimed.len(), 4);
    assert!(first.claimed.iter().all(|j| j.attempts == 1));
    tokio::time::sleep(Duration::from_millis(80)).await;
    let rescued = fx.store.rescue(RescueParams { limit: 100 }).await.unwrap();
    assert_eq!(rescued.len(), 4);
    let second = fx
        .store
        .claim_batch(claim("t", W1, 4, Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!(second.claimed.len(), 4);
    assert!(
        second
            .claimed
            .iter()
            .all(|j| j.attempts == 2 && j.lease_owner.as_deref() == Some(W1)),
        "the same worker's new claim is attempt 2"
    );
    ids
}

/// A worker whose lease expired and that claimed the job again cannot
/// write the old run's outcome over the new claim: every write of attempt
/// 1 is refused and changes nothing; the same writes of attempt 2 land.
async fn fenced_on_attempt(fx: &Fixture) {
    let ids = reclaimed_by_same_worker(fx).await;
    let (done, retried, failed, released) = (&ids[0], &ids[1], &ids[2], &ids[3]);
    let mut before = Vec::new();
    for id in &ids {
        before.push(fx.store.get(id).await.unwrap().unwrap());
    }

    let stale_completion = completion(done, 1, Some("\"old run\""));
    let applied = fx.store.complete(stale_completion).await.unwrap();
    assert!(applied.is_empty(), "the old run's completion is refused");
    let retry = |attempt| RetryParams {
        worker_id: W1.into(),
        id: retried.clone(),
        attempt,
        delay: Duration::ZERO,
        error: "old run".into(),
        consumes_attempt: true,
        ending: Default::default(),
    };
    assert!(
        !fx.store.retry(retry(1)).await.unwrap(),
        "old retry refused"
    );
    let fail = |attempt| FailParams {
        worker_id: W1.into(),
        id: failed.clone(),
        attempt,
        error: "old run".into(),
        code: None,
        details: None,
        ending: Default::default(),
    };
    assert!(
        !fx.store.fail(fail(1)).await.unwrap(),
        "old failure refused"
    );
    let release = |attempt| ReleaseParams {
        worker_id: W1.into(),
        claims: vec![at(released, attempt)],
    };
    assert_eq!(fx.store.release(release(1)).await.unwrap(), 0);
    assert!(!fx
        .store
        .set_progress(W1, &at(done, 1), "{\"old\":true}")
        .await
        .unwrap());
    let renew = |attempt| RenewParams {
        worker_id: W1.into(),
        claims: vec![at(done, attempt)],
        lease: Duration::from_secs(600),
    };
    assert!(fx.store.renew_leases(renew(1)).await.unwrap().is_empty());
    let stale: Vec<ClaimRef> = ids.iter().map(|id| at(id, 1)).collect();
    assert!(fx.store.still_owned(W1, &stale).await.unwrap().is_empty());
    for (id, was) in ids.iter().zip(&before) {
        let now = fx.store.get(id).await.unwrap().unwrap();
        assert_eq!(&now, was, "a refused write of attempt 1 changes nothing");
    }

    let current: Vec<ClaimRef> = ids.iter().map(|id| at(id, 2)).collect();
    assert_eq!(
        fx.store.still_owned(W1, &current).await.unwrap().len(),
        4,
        "attempt 2 is the live claim"
    );
    assert_eq!(
        fx.store.renew_leases(renew(2)).await.unwrap(),
        vec![done.clone()]
    );
    assert!(fx
        .store
        .set_progress(W1, &at(done, 2), "{\"new\":true}")
        .await
        .unwrap());
    let new_run = completion(done, 2, Some("\"new run\""));
    assert_eq!(
        fx.store.complete(new_run).await.unwrap(),
        vec![done.clone()]
    );
    let j = fx.store.get(done).await.unwrap().unwrap();
    assert_eq!(j.status, JobStatus::Succeeded);
    assert_eq!(j.result.as_deref(), Some("\"new run\""));
    assert_eq!(j.progress.as_deref(), Some("{\"new\":true}"));
    assert!(fx.store.retry(retry(2)).await.unwrap());
    let j = fx.store.get(retried).await.unwrap().unwrap();
    assert_eq!((j.status, j.attempts), (JobStatus::Pending, 2));
    assert!(fx.store.fail(fail(2)).await.unwrap());
    let j = fx.store.get(failed).await.unwrap().unwrap();
    assert_eq!(j.status, JobStatus::Failed);
    assert_eq!(fx.store.release(release(2)).await.unwrap(), 1);
    let j = fx.store.get(released).await.unwrap().unwrap();
    assert_eq!((j.status, j.attempts), (JobStatus::Pending, 1));
}

/// One call fences each claim on its own attempt: with job `a` in its
/// second claim and job `b` in its first, both held by `W1`, the pairs
/// (a, 2) and (b, 1) are owned, renewed and released, and the crossed
/// pairs (a, 1) and (b, 2) are not.
async fn claims_pair_each_id_with_its_own_attempt(fx: &Fixture) {
    let a = reclaimed_by_same_worker(fx).await.swap_remove(0);
    let b = add(&fx.queue(), job("t").max_attempts(5)).await;
    let claimed = fx
        .store
        .claim_batch(claim("t", W1, 1, Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!(
        claimed
            .claimed
            .iter()
            .map(|j| (j.id.as_str(), j.attempts))
            .collect::<Vec<_>>(),
        vec![(b.as_str(), 1)]
    );
    let sorted = |mut ids: Vec<String>| {
        ids.sort();
        ids
    };
    let both = sorted(vec![a.clone(), b.clone()]);
    let live = [at(&a, 2), at(&b, 1)];
    let crossed = [at(&a, 1), at(&b, 2)];
    assert_eq!(sorted(fx.store.still_owned(W1, &live).await.unwrap()), both);
    assert!(fx.store.still_owned(W1, &crossed).await.unwrap().is_empty());
    let renew = |claims: &[ClaimRef]| RenewParams {
        worker_id: W1.into(),
        claims: claims.to_vec(),
        lease: Duration::from_secs(600),
    };
    assert!(fx
        .store
        .renew_leases(renew(&crossed))
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        sorted(fx.store.renew_leases(renew(&live)).await.unwrap()),
        both
    );
    let release = |claims: &[ClaimRef]| ReleaseParams {
        worker_id: W1.into(),
        claims: claims.to_vec(),
    };
    assert_eq!(fx.store.release(release(&crossed)).await.unwrap(), 0);
    assert_eq!(fx.store.release(release(&live)).await.unwrap(), 2);
}

backends!(
    fenced,
    exhausted,
    fenced_on_attempt,
    claims_pair_each_id_with_its_own_attempt
);
