//! The `enqueue` workload: the batch-enqueue rate of [`Queue::add_many`]
//! (one transaction per batch) — `drain_jobs` small jobs in batches of
//! `batch_size`, by `producers` concurrent callers that share them (the
//! rate is all their jobs over the time until the last caller is done) —
//! and the one-by-one rate of `single_jobs` jobs by one caller. Nothing
//! runs them: they carry a scope of their own and are cancelled together
//! afterwards (outside the timing), so they are never claimed; prune them
//! like any cancelled job.

use std::sync::Arc;
use std::time::Instant;

use super::{add_in_batches, add_one_by_one, fresh_type, BenchConfig, BenchError, BenchResult};
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
    let producers = cfg.producers.clamp(1, cfg.drain_jobs.max(1));
    let started = Instant::now();
    let shares = (0..producers).map(|p| {
        let share = cfg.drain_jobs / producers + usize::from(p < cfg.drain_jobs % producers);
        add_in_batches(&queue, share, batch_size, |_| job())
    });
    futures::future::try_join_all(shares).await?;
    let batch_rate = cfg.drain_jobs as f64 / started.elapsed().as_secs_f64();
    let single_rate = add_one_by_one(&queue, cfg.single_jobs, |_| job()).await?;
    queue
        .cancel_pending_for_scope(scope, "enqueue benchmark")
        .await?;
    Ok(BenchResult {
        enqueue_batch_per_s: Some(batch_rate.round()),
        enqueue_single_per_s: Some(single_rate.round()),
        producers: Some(producers),
        ..BenchResult::of(
            cfg,
            store.as_ref(),
            "enqueue",
            cfg.drain_jobs,
            u32::try_from(batch_size).unwrap_or(u32::MAX),
        )
    })
}
