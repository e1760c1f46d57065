//! The SQLite store's pool hands out connections outside any transaction,
//! whatever the previous user left open on them.

use std::sync::Arc;
use std::time::Duration;

use boxcar_queue::store::sqlite::SqliteStore;
use boxcar_queue::store::{ClaimParams, CompleteParams, Completed};
use boxcar_queue::{ClaimGuards, JobStatus, JobStore, NewJob, Queue, QueueOptions};
use serde_json::json;

/// A connection given back inside a transaction its user began by hand (and
/// wrote in) is rolled back before anyone else gets it: the store's next
/// writes neither fail inside that transaction nor wait on its write lock,
/// they commit, and the abandoned write is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_returned_inside_a_transaction_is_rolled_back_before_reuse() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("boxcar.db").display());
    let store = SqliteStore::open(&url).await.unwrap();
    store.migrate().await.unwrap();
    {
        let mut conn = store.pool().acquire().await.unwrap();
        sqlx::query("BEGIN IMMEDIATE")
            .execute(&mut *conn)
            .await
            .unwrap();
        sqlx::query(
            "INSERT INTO boxcar_handler_events (job_type, file, digest, kind, reason, at) \
             VALUES ('abandoned', 'f', 'd', 'deployed', NULL, 0)",
        )
        .execute(&mut *conn)
        .await
        .unwrap();
    }
    let queue = Queue::new(Arc::new(store.clone()), QueueOptions::default()).unwrap();
    for n in 0..3 {
        let add = queue.add(NewJob::new("t", &json!({ "n": n })));
        let added = tokio::time::timeout(Duration::from_secs(10), add)
            .await
            .expect("the write does not wait on the abandoned transaction's lock")
            .expect("the write does not run inside the abandoned transaction");
        let elsewhere = SqliteStore::open(&url).await.unwrap();
        assert!(
            elsewhere.get(&added.id).await.unwrap().is_some(),
            "the job is committed, visible to another connection"
        );
    }
    let events = store.handler_events(100).await.unwrap();
    assert!(
        events
            .iter()
            .all(|e| e.job_type.as_deref() != Some("abandoned")),
        "the abandoned write was rolled back: {events:?}"
    );
}

fn claim_all(job_type: &str) -> ClaimParams {
    ClaimParams {
        worker_id: "w1".into(),
        job_type: job_type.into(),
        limit: 10,
        lease: Duration::from_secs(60),
        handler_version: Some("v1".into()),
        guards: ClaimGuards::default(),
    }
}

fn success(job: &boxcar_queue::Job) -> Completed {
    crate::support::success(job, Some("{\"ok\":true}"))
}

/// A batch of successes is written in one request (log lines, then jobs):
/// when a statement of it fails, the whole batch is rolled back — no
/// attempt, no finished job — and the
/// connection it ran on serves the next batch outside any transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_batch_that_fails_midway_keeps_nothing_and_frees_its_connection() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("boxcar.db").display());
    let store = SqliteStore::open(&url).await.unwrap();
    store.migrate().await.unwrap();
    let queue = Queue::new(Arc::new(store.clone()), QueueOptions::default()).unwrap();
    let doomed = queue.add(NewJob::new("t", &json!({}))).await.unwrap().id;
    let fine = queue.add(NewJob::new("t", &json!({}))).await.unwrap().id;
    sqlx::query(&format!(
        "CREATE TRIGGER refuse_doomed BEFORE UPDATE OF status ON boxcar_jobs \
         WHEN NEW.id = '{doomed}' AND NEW.status = 'succeeded' \
         BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
    ))
    .execute(store.pool())
    .await
    .unwrap();
    let claimed = store.claim_batch(claim_all("t")).await.unwrap().claimed;
    assert_eq!(claimed.len(), 2);
    let refused = store
        .complete(CompleteParams {
            worker_id: "w1".into(),
            jobs: claimed.iter().map(success).collect(),
        })
        .await;
    assert!(
        refused.is_err(),
        "the trigger refuses the batch: {refused:?}"
    );
    for job in &claimed {
        assert!(
            store.attempts(&job.id).await.unwrap().is_empty(),
            "no attempt of the refused batch is kept"
        );
        assert_eq!(
            store.get(&job.id).await.unwrap().unwrap().status,
            JobStatus::Running
        );
    }
    let fine_job = claimed.iter().find(|j| j.id == fine).unwrap();
    for _ in 0..8 {
        // Every connection of the pool is used at least once.
        let landed = tokio::time::timeout(
            Duration::from_secs(10),
            store.complete(CompleteParams {
                worker_id: "w1".into(),
                jobs: vec![success(fine_job)],
            }),
        )
        .await
        .expect("no write waits on a transaction left open");
        landed.unwrap();
    }
    let elsewhere = SqliteStore::open(&url).await.unwrap();
    let row = elsewhere.get(&fine).await.unwrap().unwrap();
    assert_eq!(
        row.status,
        JobStatus::Succeeded,
        "committed, seen elsewhere"
    );
    let attempts = elsewhere.attempts(&fine).await.unwrap();
    assert_eq!(
        attempts.len(),
        1,
        "one attempt, from the first landed write"
    );
    assert!(elsewhere.attempts(&doomed).await.unwrap().is_empty());
}
