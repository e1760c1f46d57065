//! Administration: retry of failed jobs and pruning, cancels (with
//! children), flows, inspection and handler events.

use boxcar_queue::store::{CancelParams, CancelTarget, CompleteParams, Completed, FailParams};
use boxcar_queue::{
    EnqueueError, HandlerEventKind, JobFilter, JobStatus, Queue, QueueError, Scope,
};
use chrono::Utc;

use super::*;
use crate::support::{success, Fixture};

/// `n` jobs of type `t` in scope `acct:1`, claimed by [`W1`] and failed on
/// their only attempt; their ids, oldest first.
async fn failed_jobs(fx: &Fixture, q: &Queue, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for _ in 0..n {
        ids.push(add(q, job("t").max_attempts(1).scope(Scope::new("acct", "1"))).await);
    }
    let c = fx
        .store
        .claim_batch(claim("t", W1, 10, Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!(c.claimed.len(), n);
    for id in &ids {
        fx.store
            .fail(FailParams {
                worker_id: W1.into(),
                id: id.clone(),
                attempt: 1,
                error: "boom".into(),
                code: None,
                details: None,
                ending: Default::default(),
            })
            .await
            .unwrap();
    }
    ids
}

/// A filter by id reaches that job alone: `find` lists it, `retry_failed`
/// retries it and leaves the other failed jobs of its type failed.
async fn one_job_by_id(fx: &Fixture) {
    let q = fx.queue();
    let ids = failed_jobs(fx, &q, 3).await;
    let mut one = JobFilter::default();
    one.id = Some(ids[1].clone());
    let found: Vec<String> = q
        .find(&one)
        .await
        .unwrap()
        .into_iter()
        .map(|j| j.id)
        .collect();
    assert_eq!(found, vec![ids[1].clone()], "find by id");
    let mut pending_only = one.clone();
    pending_only.statuses = vec![JobStatus::Pending];
    assert!(
        q.find(&pending_only).await.unwrap().is_empty(),
        "the id and the other conditions all hold"
    );
    assert_eq!(q.retry_failed(&one).await.unwrap(), 1, "that job alone");
    let statuses: Vec<JobStatus> = {
        let mut out = Vec::new();
        for id in &ids {
            out.push(fx.store.get(id).await.unwrap().unwrap().status);
        }
        out
    };
    assert_eq!(
        statuses,
        vec![JobStatus::Failed, JobStatus::Pending, JobStatus::Failed],
        "the other failed jobs of the type stay failed"
    );
    assert_eq!(
        q.retry_failed(&one).await.unwrap(),
        0,
        "a job that is no longer failed is not retried again"
    );
    let mut unknown = JobFilter::default();
    unknown.id = Some("no-such-job".into());
    assert_eq!(q.retry_failed(&unknown).await.unwrap(), 0);
}

async fn retry_failed_and_prune(fx: &Fixture) {
    let q = fx.queue();
    let ids = failed_jobs(fx, &q, 5).await;
    let mut page = JobFilter::default();
    page.limit = Some(2);
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
            (j.status, j.attempts, j.max_attempts, j.last_error.clone()),
            (JobStatus::Pending, 1, 2, None),
            "attempts kept, a fresh budget of max_attempts more"
        );
    }
    let c = fx
        .store
        .claim_batch(claim("t", W1, 10, Duration::from_secs(60)))
        .await
        .unwrap();
    assert!(
        c.claimed.iter().all(|j| j.attempts == 2),
        "the retried job's next claim is attempt 2, never a second attempt 1"
    );
    let stale = fx
        .store
        .fail(FailParams {
            worker_id: W1.into(),
            id: ids[0].clone(),
            attempt: 1,
            error: "a late write of the first attempt".into(),
            code: None,
            details: None,
            ending: Default::default(),
        })
        .await
        .unwrap();
    assert!(!stale, "the first attempt's fence no longer matches");
    let jobs: Vec<Completed> = c.claimed.iter().map(|j| success(j, None)).collect();
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
    let done = fx.store.complete(completion(&r1, 1, None)).await.unwrap();
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
        .complete(completion(
            &kids.claimed[0].id,
            kids.claimed[0].attempts,
            Some("1"),
        ))
        .await
        .unwrap();
    fx.store
        .fail(FailParams {
            worker_id: W1.into(),
            id: kids.claimed[1].id.clone(),
            attempt: kids.claimed[1].attempts,
            error: "no".into(),
            code: None,
            details: None,
            ending: Default::default(),
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
    let mut children = JobFilter::default();
    children.parent_id = Some(p2);
    let kids = q.find(&children).await.unwrap();
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
    let mut f = JobFilter::default();
    f.types = vec!["y".into()];
    f.statuses = vec![JobStatus::Pending];
    assert_eq!(q.find(&f).await.unwrap().len(), 2);
    let mut f = JobFilter::default();
    f.limit = Some(1);
    f.offset = Some(1);
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

backends!(
    retry_failed_and_prune,
    one_job_by_id,
    cancels,
    flows,
    inspection
);
