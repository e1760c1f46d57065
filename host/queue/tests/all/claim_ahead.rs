//! Claim-ahead on every store: jobs claimed beyond a short-running type's
//! free slots wait in the worker and are never started once cancelled
//! (in this process or from another one) and are given back, unrun, at
//! shutdown — as are jobs a claim still in flight at shutdown brings back.

use std::sync::Arc;
use std::time::Duration;

use boxcar_queue::store::{CancelParams, CancelTarget};
use boxcar_queue::{
    HandlerSettings, JobContext, JobRun, JobStatus, NewJob, Outcome, Queue, Registry, Worker,
    WorkerHandle, WorkerOptions,
};
use parking_lot::Mutex;
use serde_json::json;
use tokio::sync::watch;

use crate::support::{eventually, handler, Backend, Fixture};

const TYPE: &str = "ahead";

/// A worker for [`TYPE`] at concurrency 2 whose `block` jobs wait for the
/// gate (or their cancel) and whose other jobs succeed at once; every
/// started job's tag is recorded.
fn start(q: &Queue, started: Arc<Mutex<Vec<String>>>, gate: watch::Receiver<bool>) -> WorkerHandle {
    let h = handler(move |job: JobRun, ctx: JobContext| {
        let started = started.clone();
        let mut gate = gate.clone();
        async move {
            let payload: serde_json::Value = serde_json::from_str(&job.payload).unwrap();
            let tag = payload["tag"].as_str().unwrap_or_default().to_string();
            started.lock().push(tag.clone());
            if tag.starts_with("block") {
                tokio::select! {
                    _ = gate.wait_for(|open| *open) => {}
                    () = ctx.cancel.cancelled() => return Outcome::Cancelled,
                }
            }
            Outcome::Succeeded { result: None }
        }
    });
    let mut settings = HandlerSettings::default();
    settings.concurrency = 2;
    settings.timeout = Duration::from_secs(30);
    let reg = Registry::new();
    reg.register(TYPE, h, settings).unwrap();
    let mut opts = WorkerOptions::default();
    opts.poll_interval = Duration::from_millis(50);
    opts.abandon_grace = Duration::from_millis(100);
    opts.shutdown_grace = Duration::from_millis(200);
    Worker::start(q.clone(), reg, opts).unwrap()
}

async fn add(q: &Queue, tag: &str) -> String {
    q.add(NewJob::new(TYPE, &json!({ "tag": tag })))
        .await
        .unwrap()
        .id
}

async fn all_in(q: &Queue, ids: &[String], status: JobStatus) -> bool {
    eventually(Duration::from_secs(10), || async {
        for id in ids {
            if q.get(id).await.unwrap().map(|j| j.status) != Some(status) {
                return false;
            }
        }
        true
    })
    .await
}

/// Runs quick jobs one at a time, so the type's average run is short
/// (claim-ahead sizes itself by it; a gated job's long run raised it).
async fn warm(q: &Queue) {
    for i in 0..20 {
        let id = add(q, &format!("warm-{i}")).await;
        let job = q.wait(&id, Duration::from_secs(10)).await.unwrap();
        assert_eq!(job.status, JobStatus::Succeeded);
    }
}

/// Fills both slots with gated jobs, then adds `tags` and waits until
/// they are all claimed (running in the store) without having started;
/// returns the gated jobs' ids and theirs.
async fn claimed_ahead(
    q: &Queue,
    started: &Mutex<Vec<String>>,
    tags: &[&str],
) -> ([String; 2], Vec<String>) {
    warm(q).await;
    started.lock().clear();
    let blockers = [add(q, "block-1").await, add(q, "block-2").await];
    assert!(all_in(q, &blockers, JobStatus::Running).await);
    let both_started = eventually(Duration::from_secs(10), || async {
        started
            .lock()
            .iter()
            .filter(|t| t.starts_with("block"))
            .count()
            == 2
    })
    .await;
    assert!(both_started, "both gated jobs start: {:?}", started.lock());
    let mut ids = Vec::new();
    for tag in tags {
        ids.push(add(q, tag).await);
    }
    assert!(
        all_in(q, &ids, JobStatus::Running).await,
        "jobs are claimed ahead while every slot is busy"
    );
    let seen = started.lock().clone();
    assert!(
        tags.iter().all(|t| !seen.iter().any(|s| s == t)),
        "claimed ahead, not started: {seen:?}"
    );
    (blockers, ids)
}

async fn cancelled_or_released_jobs_never_start(fx: &Fixture) {
    let q = fx.queue();
    let started = Arc::new(Mutex::new(Vec::new()));
    let (open, gate) = watch::channel(false);
    let w = start(&q, started.clone(), gate);

    let (blockers, ids) =
        claimed_ahead(&q, &started, &["here", "elsewhere", "run-1", "run-2"]).await;
    assert!(q.cancel(&ids[0], "cancelled here").await.unwrap());
    let other = Queue::new(fx.reopen().await, Default::default()).unwrap();
    let elsewhere = CancelParams {
        target: CancelTarget::Ids(vec![ids[1].clone()]),
        reason: "cancelled from another process".into(),
    };
    other.store().cancel(elsewhere).await.unwrap();
    // Several reconcile passes, so the other process's cancel is seen.
    tokio::time::sleep(Duration::from_millis(400)).await;
    open.send_replace(true);
    for id in blockers.iter().chain(&ids[2..]) {
        let job = q.wait(id, Duration::from_secs(10)).await.unwrap();
        assert_eq!(job.status, JobStatus::Succeeded);
    }
    for id in &ids[..2] {
        let job = q.get(id).await.unwrap().unwrap();
        assert_eq!(job.status, JobStatus::Cancelled);
    }
    let seen = started.lock().clone();
    assert!(
        !seen.iter().any(|t| t == "here" || t == "elsewhere"),
        "a cancelled job claimed ahead never starts: {seen:?}"
    );

    open.send_replace(false);
    let (_, ids) = claimed_ahead(&q, &started, &["release-1", "release-2", "release-3"]).await;
    w.shutdown().await;
    for id in &ids {
        let job = q.get(id).await.unwrap().unwrap();
        assert_eq!(
            (job.status, job.attempts, job.lease_owner.as_deref()),
            (JobStatus::Pending, 0, None),
            "given back at shutdown, attempt and lease"
        );
    }
    let seen = started.lock().clone();
    assert!(
        !seen.iter().any(|t| t.starts_with("release")),
        "a job claimed ahead is not started at shutdown: {seen:?}"
    );
}

/// A claim held up by another connection's write lock is still in flight
/// when the worker is told to stop; the job it then brings back is given
/// back unrun (attempt and lease), not started.
async fn a_claim_in_flight_at_shutdown_starts_nothing(fx: &Fixture) {
    use sqlx::{Connection, Executor};
    let q = fx.queue();
    let id = add(&q, "late").await;
    let mut blocker = sqlx::SqliteConnection::connect(&fx.url).await.unwrap();
    blocker.execute("BEGIN IMMEDIATE").await.unwrap();
    let started = Arc::new(Mutex::new(Vec::new()));
    let (_open, gate) = watch::channel(true);
    let w = start(&q, started.clone(), gate);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stopping = tokio::spawn(w.shutdown());
    tokio::time::sleep(Duration::from_millis(300)).await;
    blocker.execute("COMMIT").await.unwrap();
    stopping.await.unwrap();
    let job = q.get(&id).await.unwrap().unwrap();
    assert_eq!(
        (job.status, job.attempts, job.lease_owner.as_deref()),
        (JobStatus::Pending, 0, None),
        "given back unrun"
    );
    let seen = started.lock().clone();
    assert!(seen.is_empty(), "nothing starts after the stop: {seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_in_flight_at_shutdown_starts_nothing_on_sqlite() {
    let Some(fx) = Fixture::new(Backend::Sqlite).await else {
        return;
    };
    a_claim_in_flight_at_shutdown_starts_nothing(&fx).await;
    fx.finish().await;
}

async fn run(backend: Backend) {
    let Some(fx) = Fixture::new(backend).await else {
        return;
    };
    cancelled_or_released_jobs_never_start(&fx).await;
    fx.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_ahead_memory() {
    run(Backend::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_ahead_sqlite() {
    run(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_ahead_postgres() {
    run(Backend::Postgres).await;
}
