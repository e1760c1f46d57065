//! The `types` workload: the cost of registered types. One busy type
//! drains `drain_jobs` while `types - 1` idle types (concurrency 1 each)
//! are registered with the same handler — what a deploy of one module with
//! `job_types = [N names]` registers — against the same drain with the
//! busy type alone; then, with all types registered and no jobs, the CPU
//! time the whole process spends over `idle` (from `/proc/self/stat`, so
//! `null` off Linux), in percent of one core.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{
    add_in_batches, counter, fresh_type, settings, wait_done, worker_opts, BenchConfig, BenchError,
    BenchResult,
};
use crate::handler::Handler;
use crate::job::NewJob;
use crate::options::QueueOptions;
use crate::queue::Queue;
use crate::registry::Registry;
use crate::store::JobStore;

/// Sizes of the `types` workload (the drain sizes come from
/// [`BenchConfig`]).
#[derive(Clone, Debug)]
pub struct TypesConfig {
    /// Job types registered, the busy one included.
    pub types: usize,
    /// How long the idle CPU use is measured.
    pub idle: Duration,
}

impl Default for TypesConfig {
    fn default() -> Self {
        Self {
            types: 500,
            idle: Duration::from_secs(5),
        }
    }
}

/// What one drain measured.
struct Drained {
    per_s: f64,
    idle_cpu_pct: Option<f64>,
}

/// This process's CPU time (user + system, all threads), from
/// `/proc/self/stat` in clock ticks of 1/100 s; `None` off Linux.
fn process_cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let after_name = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(Duration::from_millis((utime + stime) * 10))
}

async fn drain_among(
    store: Arc<dyn JobStore>,
    handler: Arc<dyn Handler>,
    cfg: &BenchConfig,
    types: usize,
    idle: Duration,
) -> Result<Drained, BenchError> {
    let busy = fresh_type("types");
    let queue = Queue::new(store, QueueOptions::default())?;
    let payload = serde_json::json!({"bench": true});
    let job = |_| NewJob::new(&busy, &payload);
    add_in_batches(&queue, cfg.drain_jobs, cfg.batch_size, job).await?;
    let registry = Registry::new();
    registry.register(&busy, handler.clone(), settings(cfg.drain_concurrency))?;
    for i in 1..types {
        registry.register(format!("{busy}.idle{i}"), handler.clone(), settings(1))?;
    }
    let done = counter(&queue);
    let t = Instant::now();
    let worker = crate::engine::Worker::start(queue.clone(), registry, worker_opts())?;
    let res = wait_done(&queue, &done, &busy, cfg.drain_jobs, cfg.timeout).await;
    let per_s = cfg.drain_jobs as f64 / t.elapsed().as_secs_f64();
    let mut idle_cpu_pct = None;
    if res.is_ok() && !idle.is_zero() {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let (c0, t0) = (process_cpu_time(), Instant::now());
        tokio::time::sleep(idle).await;
        if let (Some(c0), Some(c1)) = (c0, process_cpu_time()) {
            let pct = (c1 - c0).as_secs_f64() / t0.elapsed().as_secs_f64() * 100.0;
            idle_cpu_pct = Some((pct * 100.0).round() / 100.0);
        }
    }
    worker.shutdown().await;
    res?;
    Ok(Drained {
        per_s,
        idle_cpu_pct,
    })
}

/// The `types` workload (see the module docs): `work_per_s` is the busy
/// type's drain rate with `types.types` types registered,
/// `work_per_s_1_type` the same drain with the busy type alone.
///
/// # Errors
/// A store, enqueue or registration failure, or a timeout.
pub async fn types(
    store: Arc<dyn JobStore>,
    handler: Arc<dyn Handler>,
    cfg: &BenchConfig,
    types: &TypesConfig,
) -> Result<BenchResult, BenchError> {
    let alone = drain_among(store.clone(), handler.clone(), cfg, 1, Duration::ZERO).await?;
    let among = drain_among(store.clone(), handler, cfg, types.types.max(1), types.idle).await?;
    Ok(BenchResult {
        work_per_s: Some(among.per_s.round()),
        types: Some(types.types.max(1)),
        work_per_s_1_type: Some(alone.per_s.round()),
        idle_cpu_pct: among.idle_cpu_pct,
        ..BenchResult::of(
            cfg,
            store.as_ref(),
            "types",
            cfg.drain_jobs,
            cfg.drain_concurrency,
        )
    })
}

#[cfg(test)]
mod tests {
    use super::process_cpu_time;

    #[test]
    fn process_cpu_time_grows_with_work() {
        let Some(before) = process_cpu_time() else {
            return;
        };
        let t = std::time::Instant::now();
        let mut x = 0u64;
        while t.elapsed() < std::time::Duration::from_millis(100) {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        std::hint::black_box(x);
        let after = process_cpu_time().expect("readable twice");
        assert!(
            after >= before + std::time::Duration::from_millis(50),
            "{before:?} -> {after:?}"
        );
    }
}
