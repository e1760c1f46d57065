//! Claims that do not grow with the number of types: one claim for many
//! unguarded types (each type's share capped by its own limit, claim order
//! and expiry as in a one-type claim, per-type lease and version, parents
//! with live children held back, any number of types), the due-types
//! answer (due now, or how long until the earliest pending job is due),
//! and the wake-up events a dispatcher listens to (inserts, never a
//! finished job).

use boxcar_queue::store::{ClaimManyParams, StoreEvent, TypeClaim, EXPIRED_ERROR};
use boxcar_queue::JobStatus;
use chrono::Utc;
use tokio::sync::broadcast::Receiver;

use super::*;
use crate::support::Fixture;

fn share(job_type: &str, limit: u32, lease_secs: u64, version: &str) -> TypeClaim {
    TypeClaim {
        job_type: job_type.into(),
        limit,
        lease: Duration::from_secs(lease_secs),
        handler_version: Some(version.into()),
    }
}

fn many(worker: &str, types: Vec<TypeClaim>) -> ClaimManyParams {
    ClaimManyParams {
        worker_id: worker.into(),
        types,
    }
}

async fn shares(fx: &Fixture) {
    let q = fx.queue();
    let a_low = add(&q, job("a").priority(5)).await;
    let a_high = add(&q, job("a").priority(-1)).await;
    let a_mid = add(&q, job("a").priority(1)).await;
    q.add_many((0..5).map(|_| job("b")).collect())
        .await
        .unwrap();
    let c_ok = add(&q, job("c")).await;
    let c_late = add(
        &q,
        job("c").expires_at(Utc::now() - chrono::Duration::seconds(1)),
    )
    .await;
    let d_future = add(&q, job("d").delay(Duration::from_secs(3600))).await;
    let got = fx
        .store
        .claim_many(many(
            W1,
            vec![
                share("a", 2, 60, "va"),
                share("b", 10, 600, "vb"),
                share("c", 5, 60, "vc"),
                share("d", 5, 60, "vd"),
                share("none", 5, 60, "vn"),
            ],
        ))
        .await
        .unwrap();
    let of = |t: &str| -> Vec<&str> {
        got.claimed
            .iter()
            .filter(|j| j.job_type == t)
            .map(|j| j.id.as_str())
            .collect()
    };
    assert_eq!(
        of("a"),
        vec![a_high.as_str(), a_mid.as_str()],
        "a's limit, in claim order"
    );
    assert_eq!(of("b").len(), 5);
    assert_eq!(of("c"), vec![c_ok.as_str()]);
    assert!(of("d").is_empty(), "a future job is not claimed");
    assert_eq!(got.expired.len(), 1);
    assert_eq!(got.expired[0].id, c_late);
    assert_eq!(got.expired[0].last_error.as_deref(), Some(EXPIRED_ERROR));
    for j in &got.claimed {
        assert_eq!(j.status, JobStatus::Running);
        assert_eq!(j.attempts, 1);
        assert_eq!(j.lease_owner.as_deref(), Some(W1));
        let version = format!("v{}", j.job_type);
        assert_eq!(j.handler_version.as_deref(), Some(version.as_str()));
    }
    let lease_of = |t: &str| {
        let j = got.claimed.iter().find(|j| j.job_type == t).unwrap();
        j.lease_expires_at.unwrap() - j.started_at.unwrap()
    };
    assert!(lease_of("a") <= chrono::Duration::seconds(61));
    assert!(
        lease_of("b") >= chrono::Duration::seconds(599),
        "each type's own lease"
    );
    let again = fx
        .store
        .claim_many(many(
            W2,
            vec![share("a", 5, 60, "va"), share("b", 5, 60, "vb")],
        ))
        .await
        .unwrap();
    let ids: Vec<&str> = again.claimed.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(
        ids,
        vec![a_low.as_str()],
        "claimed jobs are not claimed twice"
    );
    assert_eq!(
        fx.store.get(&d_future).await.unwrap().unwrap().status,
        JobStatus::Pending
    );
}

async fn parents_wait(fx: &Fixture) {
    let q = fx.queue();
    let parent = q.add_flow(job("parent"), vec![job("child")]).await.unwrap();
    let got = fx
        .store
        .claim_many(many(
            W1,
            vec![share("parent", 5, 60, "v"), share("child", 5, 60, "v")],
        ))
        .await
        .unwrap();
    assert_eq!(got.claimed.len(), 1);
    assert_eq!(got.claimed[0].job_type, "child");
    assert_ne!(got.claimed[0].id, parent, "a parent waits for its children");
}

async fn hundreds_of_types(fx: &Fixture) {
    let q = fx.queue();
    let types: Vec<String> = (0..250).map(|i| format!("t{i}")).collect();
    let jobs = types.iter().flat_map(|t| [job(t), job(t)]).collect();
    q.add_many(jobs).await.unwrap();
    let got = fx
        .store
        .claim_many(many(
            W1,
            types.iter().map(|t| share(t, 1, 60, "v")).collect(),
        ))
        .await
        .unwrap();
    assert_eq!(
        got.claimed.len(),
        250,
        "one job of each type, however many types"
    );
    let mut seen: Vec<&str> = got.claimed.iter().map(|j| j.job_type.as_str()).collect();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), 250);
}

async fn due_types(fx: &Fixture) {
    let q = fx.queue();
    add(&q, job("now")).await;
    add(&q, job("later").delay(Duration::from_secs(3600))).await;
    add(&q, job("soon").delay(Duration::from_secs(120))).await;
    add(&q, job("unasked")).await;
    add(&q, job("taken")).await;
    let taken = fx
        .store
        .claim_batch(claim("taken", W1, 5, Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!(taken.claimed.len(), 1);
    let asked: Vec<String> = ["now", "later", "soon", "taken", "empty"]
        .iter()
        .map(|s| (*s).to_string())
        .collect();
    let d = fx.store.due_types(&asked).await.unwrap();
    assert_eq!(d.due, vec!["now".to_string()]);
    let next = d.next_due_in.expect("a pending job in the future");
    assert!(
        next > Duration::from_secs(110) && next <= Duration::from_secs(120),
        "{next:?}"
    );
    fx.store
        .claim_batch(claim("now", W1, 5, Duration::from_secs(60)))
        .await
        .unwrap();
    let d = fx.store.due_types(&asked).await.unwrap();
    assert!(d.due.is_empty());
    assert!(fx.store.due_types(&[]).await.unwrap().due.is_empty());
}

/// Events from `events` until one matches `wanted` (Postgres relays them
/// from its listener, so they may come a little after the write).
async fn until(events: &mut Receiver<StoreEvent>, wanted: &StoreEvent) -> Vec<StoreEvent> {
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !seen.contains(wanted) {
        match tokio::time::timeout_at(deadline, events.recv()).await {
            Ok(Ok(event)) => seen.push(event),
            Ok(Err(e)) => panic!("events ended or lagged: {e}; seen {seen:?}"),
            Err(_) => panic!("no {wanted:?} within 10 s; seen {seen:?}"),
        }
    }
    seen
}

/// A dispatcher's wake-up events carry inserts and leave out finished
/// jobs, which the full event stream (a waiter's) carries.
async fn wakeups_leave_out_finished_jobs(fx: &Fixture) {
    let mut all = fx.store.subscribe();
    let mut wakeups = fx.store.subscribe_wakeups();
    let q = fx.queue();
    let id = add(&q, job("woken")).await;
    let inserted = StoreEvent::Inserted("woken".into());
    until(&mut wakeups, &inserted).await;
    let claimed = fx
        .store
        .claim_batch(claim("woken", W1, 1, Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!(claimed.claimed.len(), 1);
    let done = fx.store.complete(completion(&id, 1, None)).await.unwrap();
    assert_eq!(done, vec![id.clone()]);
    let finished = StoreEvent::Finished(id);
    let seen = until(&mut all, &finished).await;
    assert!(seen.contains(&inserted), "{seen:?}");
    add(&q, job("woken.again")).await;
    let woken = until(&mut wakeups, &StoreEvent::Inserted("woken.again".into())).await;
    assert!(
        !woken.iter().any(|e| matches!(e, StoreEvent::Finished(_))),
        "a finished job is no wake-up: {woken:?}"
    );
}

backends!(
    shares,
    parents_wait,
    hundreds_of_types,
    due_types,
    wakeups_leave_out_finished_jobs
);
