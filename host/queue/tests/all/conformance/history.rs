//! Attempt history and stored logs: every transition that ends an attempt
//! records it (fenced like the transition), the running attempt and an
//! expiry are read from the job row, logs are stored with their attempt,
//! and pruning removes a job's attempts and logs.

use boxcar_queue::attempt::AttemptEnd;
use boxcar_queue::store::{
    CancelParams, CancelTarget, ClaimParams, ClaimRef, CompleteParams, Completed, FailParams,
    ReleaseParams, RescueParams, RetryParams,
};
use boxcar_queue::{AttemptOutcome, AttemptUsage, JobStatus, LogLine, LogQuery};
use chrono::Utc;

use super::*;
use crate::support::Fixture;

const LONG: Duration = Duration::from_secs(60);

fn claim_as(job_type: &str, worker: &str, digest: &str, lease: Duration) -> ClaimParams {
    ClaimParams {
        handler_version: Some(digest.into()),
        ..claim(job_type, worker, 1, lease)
    }
}

fn lines(id: &str, attempt: u32, n: u32) -> Vec<LogLine> {
    (0..n)
        .map(|seq| LogLine {
            job_id: id.into(),
            attempt,
            seq,
            at: Utc::now(),
            level: "info".into(),
            message: format!("attempt {attempt} line {seq}"),
        })
        .collect()
}

fn retry(worker: &str, id: &str, attempt: u32, end: AttemptEnd) -> RetryParams {
    RetryParams {
        worker_id: worker.into(),
        id: id.into(),
        attempt,
        delay: Duration::ZERO,
        error: format!("boom from {worker}"),
        consumes_attempt: true,
        ending: end,
    }
}

fn complete(worker: &str, id: &str, attempt: u32, end: AttemptEnd) -> CompleteParams {
    CompleteParams {
        worker_id: worker.into(),
        jobs: vec![Completed {
            id: id.into(),
            attempt,
            result: Some("{\"ok\":true}".into()),
            ending: end,
        }],
    }
}

async fn two_failures_then_success(fx: &Fixture) {
    let q = fx.queue();
    let id = add(&q, job("t").max_attempts(3)).await;
    let s = &fx.store;
    s.claim_batch(claim_as("t", W1, "sha-a", LONG))
        .await
        .unwrap();
    let running = q.attempts(&id).await.unwrap().unwrap();
    assert_eq!(running.len(), 1, "{running:?}");
    assert_eq!(running[0].outcome, AttemptOutcome::Running);
    assert_eq!(running[0].worker.as_deref(), Some(W1));
    assert_eq!(running[0].digest.as_deref(), Some("sha-a"));
    assert!(running[0].started_at.is_some() && running[0].finished_at.is_none());
    let first = AttemptEnd {
        logs: lines(&id, 1, 3),
        ..AttemptEnd::default()
    };
    assert!(s.retry(retry(W1, &id, 1, first)).await.unwrap());
    s.claim_batch(claim_as("t", W2, "sha-b", LONG))
        .await
        .unwrap();
    let second = AttemptEnd {
        outcome: Some(AttemptOutcome::TimedOut),
        logs: lines(&id, 2, 3),
        ..AttemptEnd::default()
    };
    assert!(s.retry(retry(W2, &id, 2, second)).await.unwrap());
    s.claim_batch(claim_as("t", W1, "sha-c", LONG))
        .await
        .unwrap();
    let usage = AttemptUsage {
        wall_ms: Some(7),
        peak_memory_bytes: Some(1 << 20),
        fuel: None,
        log_bytes: Some(42),
        result_bytes: Some(11),
        http_requests: Some(2),
        http_bytes: Some(300),
        enqueues: Some(1),
    };
    let third = AttemptEnd {
        usage: usage.clone(),
        logs: lines(&id, 3, 3),
        ..AttemptEnd::default()
    };
    let done = s.complete(complete(W1, &id, 3, third)).await.unwrap();
    assert_eq!(done, vec![id.clone()]);

    let attempts = q.attempts(&id).await.unwrap().unwrap();
    let summary: Vec<_> = attempts
        .iter()
        .map(|a| {
            (
                a.attempt,
                a.outcome,
                a.worker.as_deref(),
                a.digest.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (1, AttemptOutcome::Retried, Some(W1), Some("sha-a")),
            (2, AttemptOutcome::TimedOut, Some(W2), Some("sha-b")),
            (3, AttemptOutcome::Succeeded, Some(W1), Some("sha-c")),
        ]
    );
    assert_eq!(attempts[0].error.as_deref(), Some("boom from worker-1"));
    assert_eq!(attempts[2].error, None);
    assert_eq!(attempts[2].usage, usage);
    for a in &attempts {
        let (start, end) = (a.started_at.unwrap(), a.finished_at.unwrap());
        assert!(start <= end, "{a:?}");
    }

    let all = q
        .logs(&LogQuery {
            job_id: id.clone(),
            ..LogQuery::default()
        })
        .await
        .unwrap();
    let texts: Vec<_> = all.iter().map(|l| l.line.message.as_str()).collect();
    assert_eq!(texts.len(), 9, "{texts:?}");
    assert_eq!(texts[0], "attempt 1 line 0");
    assert_eq!(texts[8], "attempt 3 line 2");
    assert!(all.windows(2).all(|w| w[0].cursor < w[1].cursor));
    let second_only = q
        .logs(&LogQuery {
            job_id: id.clone(),
            attempt: Some(2),
            ..LogQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(second_only.len(), 3);
    assert!(second_only.iter().all(|l| l.line.attempt == 2));
    let after = q
        .logs(&LogQuery {
            job_id: id.clone(),
            after: Some(all[6].cursor),
            limit: Some(1),
            ..LogQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].line.message, "attempt 3 line 1");
}

async fn failure_records_code_and_details(fx: &Fixture) {
    let q = fx.queue();
    let id = add(&q, job("t")).await;
    fx.store
        .claim_batch(claim_as("t", W1, "sha-a", LONG))
        .await
        .unwrap();
    let fail = FailParams {
        worker_id: W1.into(),
        id: id.clone(),
        attempt: 1,
        error: "no such user".into(),
        code: Some("not-found".into()),
        details: Some("{\"user\":7}".into()),
        ending: AttemptEnd::default(),
    };
    assert!(fx.store.fail(fail).await.unwrap());
    let a = q.attempts(&id).await.unwrap().unwrap();
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].outcome, AttemptOutcome::Failed);
    assert_eq!(a[0].error_code.as_deref(), Some("not-found"));
    assert_eq!(a[0].error_details.as_deref(), Some("{\"user\":7}"));
}

async fn lease_lost_is_its_own_attempt(fx: &Fixture) {
    let q = fx.queue();
    let id = add(&q, job("t").max_attempts(3)).await;
    let s = &fx.store;
    s.claim_batch(claim_as("t", W1, "sha-a", Duration::from_millis(30)))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(80)).await;
    assert_eq!(
        s.rescue(RescueParams { limit: 100 }).await.unwrap().len(),
        1
    );
    assert!(
        !s.retry(retry(W1, &id, 1, AttemptEnd::default()))
            .await
            .unwrap(),
        "the dead worker's late write is fenced"
    );
    s.claim_batch(claim_as("t", W2, "sha-a", LONG))
        .await
        .unwrap();
    let late = s
        .complete(complete(W1, &id, 1, AttemptEnd::default()))
        .await
        .unwrap();
    assert!(late.is_empty());
    s.complete(complete(W2, &id, 2, AttemptEnd::default()))
        .await
        .unwrap();
    let a = q.attempts(&id).await.unwrap().unwrap();
    let summary: Vec<_> = a
        .iter()
        .map(|a| (a.attempt, a.outcome, a.worker.as_deref()))
        .collect();
    assert_eq!(
        summary,
        vec![
            (1, AttemptOutcome::LeaseLost, Some(W1)),
            (2, AttemptOutcome::Succeeded, Some(W2)),
        ]
    );
}

async fn release_gives_the_number_back(fx: &Fixture) {
    let q = fx.queue();
    let id = add(&q, job("t")).await;
    let s = &fx.store;
    s.claim_batch(claim_as("t", W1, "sha-a", LONG))
        .await
        .unwrap();
    let release = ReleaseParams {
        worker_id: W1.into(),
        claims: vec![ClaimRef {
            id: id.clone(),
            attempt: 1,
        }],
    };
    assert_eq!(s.release(release).await.unwrap(), 1);
    s.claim_batch(claim_as("t", W2, "sha-a", LONG))
        .await
        .unwrap();
    s.complete(complete(W2, &id, 1, AttemptEnd::default()))
        .await
        .unwrap();
    let a = q.attempts(&id).await.unwrap().unwrap();
    let summary: Vec<_> = a.iter().map(|a| (a.attempt, a.outcome)).collect();
    assert_eq!(
        summary,
        vec![
            (1, AttemptOutcome::Released),
            (1, AttemptOutcome::Succeeded)
        ]
    );
}

async fn cancel_and_expiry_show(fx: &Fixture) {
    let q = fx.queue();
    let running = add(&q, job("t")).await;
    let pending = add(&q, job("p")).await;
    fx.store
        .claim_batch(claim_as("t", W1, "sha-a", LONG))
        .await
        .unwrap();
    let cancelled = fx
        .store
        .cancel(CancelParams {
            target: CancelTarget::Ids(vec![running.clone(), pending.clone()]),
            reason: "operator said stop".into(),
        })
        .await
        .unwrap();
    assert_eq!(cancelled.len(), 2);
    let a = q.attempts(&running).await.unwrap().unwrap();
    assert_eq!(a.len(), 1, "{a:?}");
    assert_eq!(a[0].outcome, AttemptOutcome::Cancelled);
    assert_eq!(a[0].worker.as_deref(), Some(W1));
    assert_eq!(a[0].error.as_deref(), Some("operator said stop"));
    assert!(
        q.attempts(&pending).await.unwrap().unwrap().is_empty(),
        "a job cancelled before it ran has no attempt"
    );
    let late = fx
        .store
        .complete(complete(W1, &running, 1, AttemptEnd::default()))
        .await
        .unwrap();
    assert!(late.is_empty());
    assert_eq!(q.attempts(&running).await.unwrap().unwrap().len(), 1);

    let expired = add(
        &q,
        job("e").expires_at(Utc::now() - chrono::Duration::seconds(1)),
    )
    .await;
    let c = fx
        .store
        .claim_batch(claim_as("e", W1, "sha-a", LONG))
        .await
        .unwrap();
    assert_eq!(c.expired.len(), 1);
    let a = q.attempts(&expired).await.unwrap().unwrap();
    assert_eq!(a.len(), 1, "{a:?}");
    assert_eq!((a[0].attempt, a[0].outcome), (1, AttemptOutcome::Expired));
    assert!(q.attempts("no-such-job").await.unwrap().is_none());
}

async fn pruning_removes_attempts_and_logs(fx: &Fixture) {
    let q = fx.queue();
    let old = add(&q, job("t")).await;
    let second = add(&q, job("k")).await;
    for (t, id) in [("t", &old), ("k", &second)] {
        fx.store
            .claim_batch(claim_as(t, W1, "sha-a", LONG))
            .await
            .unwrap();
        let end = AttemptEnd {
            logs: lines(id, 1, 2),
            ..AttemptEnd::default()
        };
        fx.store.complete(complete(W1, id, 1, end)).await.unwrap();
    }
    let logs_of = |id: &str| LogQuery {
        job_id: id.into(),
        ..LogQuery::default()
    };
    fx.store.append_logs(lines(&old, 1, 1)).await.unwrap();
    assert_eq!(q.logs(&logs_of(&old)).await.unwrap().len(), 3);
    let n = q
        .prune(
            Utc::now() + chrono::Duration::seconds(5),
            &[JobStatus::Succeeded],
        )
        .await
        .unwrap();
    assert_eq!(n, 2);
    assert!(fx.store.attempts(&old).await.unwrap().is_empty());
    assert!(q.logs(&logs_of(&old)).await.unwrap().is_empty());
    assert!(fx.store.attempts(&second).await.unwrap().is_empty());

    let alive = add(&q, job("a")).await;
    fx.store.append_logs(lines(&alive, 0, 2)).await.unwrap();
    q.prune(Utc::now() + chrono::Duration::seconds(5), &[])
        .await
        .unwrap();
    assert_eq!(
        q.logs(&logs_of(&alive)).await.unwrap().len(),
        2,
        "a live job's logs survive a prune"
    );
}

backends!(
    two_failures_then_success,
    failure_records_code_and_details,
    lease_lost_is_its_own_attempt,
    release_gives_the_number_back,
    cancel_and_expiry_show,
    pruning_removes_attempts_and_logs,
);
