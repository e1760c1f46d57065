//! The completer's and the failure path's fallback when the database
//! refuses a row, on a real Postgres (whose `text` refuses NUL). Outcomes
//! normally pass `handler_output::admit` first and cannot hold a NUL; these
//! tests hand the writers such rows directly to prove one bad row never
//! costs the others their completion and never leaves its job `running`.

use std::sync::Arc;
use std::time::Duration;

use super::completer::{self, Done};
use super::unstorable::UNSTORABLE_OUTCOME;
use super::{run, Worker, WorkerHandle};
use crate::attempt::AttemptEnd;
use crate::guards::ClaimGuards;
use crate::job::{Job, JobStatus, NewJob};
use crate::options::{QueueOptions, WorkerOptions};
use crate::queue::Queue;
use crate::registry::Registry;
use crate::store::postgres::PostgresStore;
use crate::store::{ClaimParams, ClaimRef, JobStore};

/// A Postgres store in a fresh schema, or `None` (printed) without
/// `DATABASE_URL`; with `CI=true` a missing database fails the test.
pub(crate) async fn postgres() -> Option<Arc<PostgresStore>> {
    let Some(url) = std::env::var("DATABASE_URL").ok().filter(|u| !u.is_empty()) else {
        assert!(
            std::env::var("CI").map_or(true, |v| v != "true"),
            "DATABASE_URL is not set but CI=true: Postgres tests must run in CI"
        );
        eprintln!("skipping Postgres test: DATABASE_URL is not set");
        return None;
    };
    let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
    let store = PostgresStore::connect(&url, &schema)
        .await
        .expect("connect");
    store.migrate().await.expect("migrate");
    Some(Arc::new(store))
}

/// A worker that claims nothing by itself (no registered handler), and
/// `n` jobs of type `t` claimed under its lease.
async fn claimed_jobs(store: Arc<dyn JobStore>, n: u32) -> (WorkerHandle, Queue, Vec<Job>) {
    let queue = Queue::new(store.clone(), QueueOptions::default()).expect("queue");
    for i in 0..n {
        queue
            .add(NewJob::new("t", &serde_json::json!({ "i": i })))
            .await
            .expect("add");
    }
    let registry = Registry::new();
    registry.declare_elsewhere(["t".to_string()]);
    let worker = Worker::start(queue.clone(), registry, WorkerOptions::default()).expect("worker");
    let claim = store
        .claim_batch(ClaimParams {
            worker_id: worker.worker_id().to_string(),
            job_type: "t".into(),
            limit: n,
            lease: Duration::from_secs(600),
            handler_version: None,
            guards: ClaimGuards::default(),
        })
        .await
        .expect("claim");
    assert_eq!(claim.claimed.len(), n as usize);
    (worker, queue, claim.claimed)
}

fn done(job: &Job, result: String) -> Done {
    Done {
        claim: ClaimRef::of(job),
        result: Some(result),
        job_type: job.job_type.clone(),
        scope: None,
        duration: Duration::from_millis(1),
        has_parent: false,
        ending: AttemptEnd::default(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_row_fails_alone_and_its_batch_completes() {
    let Some(pg) = postgres().await else { return };
    let (worker, queue, jobs) = claimed_jobs(pg.clone(), 50).await;
    let poisoned = jobs[17].id.clone();
    let batch: Vec<Done> = jobs
        .iter()
        .map(|j| {
            let result = if j.id == poisoned {
                "{\"text\":\"a\0b\"}".to_string()
            } else {
                format!("{{\"id\":\"{}\"}}", j.id)
            };
            done(j, result)
        })
        .collect();
    completer::write(&worker.engine, batch).await;
    for job in &jobs {
        let row = queue.get(&job.id).await.expect("get").expect("row");
        if job.id == poisoned {
            assert_eq!(row.status, JobStatus::Failed, "{row:?}");
            assert_eq!(row.error_code.as_deref(), Some(UNSTORABLE_OUTCOME));
            let error = row.last_error.unwrap_or_default();
            assert!(error.contains("refused the job's result"), "{error}");
        } else {
            assert_eq!(row.status, JobStatus::Succeeded, "{}", row.id);
            assert_eq!(row.result, Some(format!("{{\"id\":\"{}\"}}", row.id)));
        }
    }
    worker.shutdown().await;
    pg.drop_schema().await.expect("drop schema");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_failure_or_retry_still_ends_the_run() {
    let Some(pg) = postgres().await else { return };
    let (worker, queue, jobs) = claimed_jobs(pg.clone(), 2).await;
    let engine = &worker.engine;
    let coded = (Some("bad\0code".to_string()), Some("{}".to_string()));
    run::fail(
        engine,
        &jobs[0],
        "fails\0here".into(),
        coded,
        AttemptEnd::default(),
        Duration::ZERO,
    )
    .await;
    run::retry(
        engine,
        &jobs[1],
        "again\0".into(),
        (None, true),
        AttemptEnd::default(),
        Duration::ZERO,
    )
    .await;
    for job in &jobs {
        let row = queue.get(&job.id).await.expect("get").expect("row");
        assert_eq!(row.status, JobStatus::Failed, "{row:?}");
        assert_eq!(row.error_code.as_deref(), Some(UNSTORABLE_OUTCOME));
    }
    worker.shutdown().await;
    pg.drop_schema().await.expect("drop schema");
}
