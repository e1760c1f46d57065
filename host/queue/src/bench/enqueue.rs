//! The `enqueue` workload: the batch-enqueue rate of [`Queue::add_many`]
//! (one transaction per batch) — `drain_jobs` small jobs in batches of
//! `batch_size` — and the one-by-one rate of `single_jobs` jobs. Nothing
//! runs them: they carry a scope of their own and are cancelled together
//! afterwards (outside the timing), so they are never claimed; prune them
//! like any cancelled job.

use std::sync::Arc;
use std::time::Instant;

use super::{fresh_type, rust_backtrace, BenchConfig, BenchError, BenchResult};
use crate::handler::Scope;
use crate::job::NewJob;
use crate::options::QueueOptions;
use crate::queue::Queue;
use crate::store::JobStore;

/// The `enqueue` workload (see the module docs): `enqueue_batch_per_s` at
/// `batch_size` jobs per call, `enqueue_single_per_s` one by one.
///
/// # Errors
/// A store or enqueue failure.
pub async fn enqueue(
    store: Arc<dyn JobStore>,
    cfg: &BenchConfig,
) -> Result<BenchResult, BenchError> {
    let job_type = fresh_type("enqueue");
    let queue = Queue::new(store.clone(), QueueOptions::default())?;
    let payload = serde_json::json!({"bench": true, "n": 0});
    let scope = Scope::new("bench.enqueue", uuid::Uuid::new_v4().simple().to_string());
    let job = || NewJob::new(&job_type, &payload).scope(scope.clone());
    let batch_size = cfg.batch_size.max(1);
    let started = Instant::now();
    let mut left = cfg.drain_jobs;
    while left > 0 {
        let k = left.min(batch_size);
        queue.add_many((0..k).map(|_| job()).collect()).await?;
        left -= k;
    }
    let batch_rate = cfg.drain_jobs as f64 / started.elapsed().as_secs_f64();
    let started = Instant::now();
    for _ in 0..cfg.single_jobs {
        queue.add(job()).await?;
    }
    let single_rate = cfg.single_jobs as f64 / started.elapsed().as_secs_f64();
    queue
        .cancel_pending_for_scope(scope, "enqueue benchmark")
        .await?;
    Ok(BenchResult {
        system: cfg.system.clone(),
        store: store.backend().to_string(),
        workload: "enqueue".into(),
        n: cfg.drain_jobs,
        c: u32::try_from(batch_size).unwrap_or(u32::MAX),
        enqueue_batch_per_s: Some(batch_rate.round()),
        enqueue_single_per_s: Some(single_rate.round()),
        work_per_s: None,
        p50_ms: None,
        p95_ms: None,
        p99_ms: None,
        rust_backtrace: rust_backtrace(),
        types: None,
        work_per_s_1_type: None,
        idle_cpu_pct: None,
        claim_calls: None,
        complete_calls: None,
        store_seconds: None,
    })
}
