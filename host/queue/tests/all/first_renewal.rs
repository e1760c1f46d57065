//! A run that starts with little of its lease left (its claim was slow, or
//! its process paused between the claim and the start) renews before the
//! lease ends instead of one renewal interval after its start, so a lease
//! the store still holds is not lost to the interval.

use std::sync::Arc;
use std::time::Duration;

use boxcar_queue::store::sqlite::SqliteStore;
use boxcar_queue::{
    HandlerSettings, JobStatus, JobStore, LifecycleOutcome, NewJob, Outcome, Queue, QueueOptions,
    Registry, Worker, WorkerOptions,
};
use serde_json::json;

use crate::support::{eventually, handler, Recorder};

const LEASE: Duration = Duration::from_millis(600);
const RENEW_EVERY: Duration = Duration::from_millis(300);
/// How long another process holds the database's write lock: the claim
/// waits that long, so the run starts with 150 ms of its 600 ms lease.
const CLAIM_STALL: Duration = Duration::from_millis(450);
const DUE_IN: Duration = Duration::from_millis(200);

/// The job is due while another connection holds SQLite's write lock, so
/// its claim (counted from before it was sent) returns with less than one
/// renewal interval of lease left. The run renews at once and finishes as
/// its first attempt; renewing one interval after the start would come
/// after the lease ended and lose it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_started_late_in_its_lease_renews_before_the_lease_ends() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("renewal.db").display());
    let store = SqliteStore::open(&url).await.unwrap();
    store.migrate().await.unwrap();
    let queue = Queue::new(Arc::new(store.clone()), QueueOptions::default()).unwrap();
    let rec = Arc::new(Recorder::default());
    queue.observe(rec.clone());

    let h = handler(|_job, _ctx| async {
        tokio::time::sleep(Duration::from_millis(700)).await;
        Outcome::Succeeded { result: None }
    });
    let mut settings = HandlerSettings::default();
    settings.timeout = Duration::from_secs(30);
    settings.lease_duration = Some(LEASE);
    settings.lease_renew_interval = Some(RENEW_EVERY);
    let registry = Registry::new();
    registry.register("late", h, settings).unwrap();
    let mut opts = WorkerOptions::default();
    opts.poll_interval = Duration::from_millis(20);
    let worker = Worker::start(queue.clone(), registry, opts).unwrap();

    let id = queue
        .add(NewJob::new("late", &json!({})).delay(DUE_IN))
        .await
        .unwrap()
        .id;
    let other_process = SqliteStore::open(&url).await.unwrap();
    let mut conn = other_process.pool().acquire().await.unwrap();
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut *conn)
        .await
        .unwrap();
    tokio::time::sleep(DUE_IN + CLAIM_STALL).await;
    sqlx::query("COMMIT").execute(&mut *conn).await.unwrap();

    assert!(
        eventually(Duration::from_secs(10), || async {
            store
                .get(&id)
                .await
                .unwrap()
                .is_some_and(|j| j.status == JobStatus::Succeeded)
        })
        .await,
        "the job succeeded: {:?}",
        rec.outcomes(&id)
    );
    worker.shutdown().await;
    let job = store.get(&id).await.unwrap().unwrap();
    assert_eq!(
        job.attempts,
        1,
        "the first run kept its lease and finished: {:?}",
        rec.outcomes(&id)
    );
    assert!(!rec.outcomes(&id).contains(&LifecycleOutcome::LeaseLost));
}
