//! The table-size workloads: does a drain slow down when the jobs table is
//! large? Each first drains `drain_jobs` from a type with nothing else
//! queued (`work_per_s_baseline`), then fills the table with `rows` rows
//! and drains `drain_jobs` again (`work_per_s`); `enqueue_batch_per_s` is
//! the fill's enqueue rate (the cancels of `retained` not counted).
//!
//! - **backlog**: `rows` pending jobs of the drained type, enqueued before
//!   the measured ones, so the worker claims its `drain_jobs` from the head
//!   of a queue `rows` deep. What is left pending afterwards is cancelled
//!   (outside the timing).
//! - **retained**: `rows` finished rows (jobs of another type, cancelled
//!   in chunks as soon as they are enqueued, so nothing ever claims them),
//!   then a drain of fresh jobs beside them.
//!
//! The rows stay in the store afterwards (cancelled), like any finished job
//! the retention has not yet pruned.

use std::sync::Arc;
use std::time::Instant;

use super::{add_in_batches, counter, fresh_type, settings, wait_done, worker_opts};
use super::{BenchConfig, BenchError, BenchResult};
use crate::handler::{Handler, Scope};
use crate::job::NewJob;
use crate::options::QueueOptions;
use crate::queue::Queue;
use crate::registry::Registry;
use crate::store::JobStore;

/// Rows per cancelled chunk of the `retained` fill.
const RETAINED_CHUNK: usize = 50_000;

/// A scope of its own, so one cancel reaches exactly these jobs.
fn own_scope() -> Scope {
    Scope::new("bench.scale", uuid::Uuid::new_v4().simple().to_string())
}

/// A queue that takes jobs of types no worker of it has registered (each
/// phase's worker registers only the type it drains).
fn scale_queue(store: &Arc<dyn JobStore>) -> Result<Queue, BenchError> {
    let options = QueueOptions {
        check_known_types: false,
        ..QueueOptions::default()
    };
    Ok(Queue::new(store.clone(), options)?)
}

/// Enqueues `n` jobs of `job_type` in `add_many` batches of
/// `cfg.batch_size`, all in `scope`; returns the seconds it took.
async fn fill(
    queue: &Queue,
    cfg: &BenchConfig,
    job_type: &str,
    scope: &Scope,
    n: usize,
) -> Result<f64, BenchError> {
    let payload = serde_json::json!({"bench": true});
    let job = |_| NewJob::new(job_type, &payload).scope(scope.clone());
    add_in_batches(queue, n, cfg.batch_size, job).await
}

/// Runs one worker on `job_type` (jobs already enqueued) until
/// `cfg.drain_jobs` of them have succeeded; returns jobs per second.
async fn drain_measured(
    queue: &Queue,
    handler: Arc<dyn Handler>,
    cfg: &BenchConfig,
    job_type: &str,
) -> Result<f64, BenchError> {
    let registry = Registry::new();
    registry.register(job_type, handler, settings(cfg.drain_concurrency))?;
    let done = counter(queue);
    let started = Instant::now();
    let worker = crate::engine::Worker::start(queue.clone(), registry, worker_opts())?;
    let res = wait_done(queue, &done, job_type, cfg.drain_jobs, cfg.timeout).await;
    let per_s = cfg.drain_jobs as f64 / started.elapsed().as_secs_f64();
    worker.shutdown().await;
    res?;
    Ok(per_s)
}

/// Enqueues `cfg.drain_jobs` jobs of a fresh type and drains them.
async fn baseline(
    queue: &Queue,
    handler: Arc<dyn Handler>,
    cfg: &BenchConfig,
) -> Result<f64, BenchError> {
    let job_type = fresh_type("scale");
    fill(queue, cfg, &job_type, &own_scope(), cfg.drain_jobs).await?;
    drain_measured(queue, handler, cfg, &job_type).await
}

fn result(
    cfg: &BenchConfig,
    store: &dyn JobStore,
    workload: &str,
    rows: usize,
    fill_rate: f64,
    base: f64,
    per_s: f64,
) -> BenchResult {
    BenchResult {
        enqueue_batch_per_s: Some(fill_rate.round()),
        work_per_s: Some(per_s.round()),
        work_per_s_baseline: Some(base.round()),
        rows: Some(rows),
        ..BenchResult::of(cfg, store, workload, cfg.drain_jobs, cfg.drain_concurrency)
    }
}

/// The `backlog` workload (see the module docs).
///
/// # Errors
/// A store, enqueue or registration failure, or a timeout.
pub async fn backlog(
    store: Arc<dyn JobStore>,
    handler: Arc<dyn Handler>,
    cfg: &BenchConfig,
    rows: usize,
) -> Result<BenchResult, BenchError> {
    let queue = scale_queue(&store)?;
    let base = baseline(&queue, handler.clone(), cfg).await?;
    let job_type = fresh_type("backlog");
    let scope = own_scope();
    let rows = rows.max(cfg.drain_jobs);
    let fill_rate = rows as f64 / fill(&queue, cfg, &job_type, &scope, rows).await?;
    let per_s = drain_measured(&queue, handler, cfg, &job_type).await?;
    queue
        .cancel_pending_for_scope(scope, "backlog benchmark")
        .await?;
    Ok(result(
        cfg,
        store.as_ref(),
        "backlog",
        rows,
        fill_rate,
        base,
        per_s,
    ))
}

/// The `retained` workload (see the module docs).
///
/// # Errors
/// A store, enqueue or registration failure, or a timeout.
pub async fn retained(
    store: Arc<dyn JobStore>,
    handler: Arc<dyn Handler>,
    cfg: &BenchConfig,
    rows: usize,
) -> Result<BenchResult, BenchError> {
    let queue = scale_queue(&store)?;
    let base = baseline(&queue, handler.clone(), cfg).await?;
    let finished_type = fresh_type("retained");
    let mut enqueue_seconds = 0.0;
    let mut left = rows;
    while left > 0 {
        let k = left.min(RETAINED_CHUNK);
        let scope = own_scope();
        enqueue_seconds += fill(&queue, cfg, &finished_type, &scope, k).await?;
        queue
            .cancel_pending_for_scope(scope, "retained benchmark")
            .await?;
        left -= k;
    }
    let fill_rate = rows as f64 / enqueue_seconds;
    let per_s = baseline(&queue, handler, cfg).await?;
    Ok(result(
        cfg,
        store.as_ref(),
        "retained",
        rows,
        fill_rate,
        base,
        per_s,
    ))
}
