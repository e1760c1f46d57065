//! The `inflight` workload: many jobs that each wait. `drain_jobs` jobs
//! carrying `payload` (for the sleep handlers: how long to wait) run on one
//! worker at concurrency `drain_concurrency`; the line reports the rate,
//! the most jobs seen inside their handler at once (`peak_inflight`) and
//! what the process's resident memory grew by at its peak, per job in
//! flight then (`rss_per_inflight_kib`, from `/proc/self/status`, so `null`
//! off Linux). A host with 2,000 slots and 1 s jobs sustains at most 2,000
//! jobs/s; what falls short of that is the queue's and the sandbox's cost.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::FutureExt;

use super::{add_in_batches, counter, fresh_type, settings, wait_done, worker_opts};
use super::{BenchConfig, BenchError, BenchResult};
use crate::handler::{Handler, JobContext, JobRun, Outcome};
use crate::job::NewJob;
use crate::options::QueueOptions;
use crate::queue::Queue;
use crate::registry::Registry;
use crate::store::JobStore;

/// How often resident memory and the in-flight count are sampled.
const SAMPLE_EVERY: Duration = Duration::from_millis(20);

/// A native handler that waits `ms` from the payload (`{"ms": 1000}`;
/// 0 when absent) without holding a thread, like the sleep guest.
pub struct SleepHandler;

impl Handler for SleepHandler {
    fn handle(&self, job: JobRun, _ctx: JobContext) -> BoxFuture<'static, Outcome> {
        let ms = serde_json::from_str::<serde_json::Value>(&job.payload)
            .ok()
            .and_then(|p| p.get("ms").and_then(serde_json::Value::as_u64))
            .unwrap_or(0);
        async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Outcome::Succeeded { result: None }
        }
        .boxed()
    }
}

/// Wraps a handler and counts the jobs inside it.
struct Gauge {
    inner: Arc<dyn Handler>,
    now: Arc<AtomicUsize>,
}

/// Takes one off the count when the run's future ends or is dropped.
struct Leaving(Arc<AtomicUsize>);

impl Drop for Leaving {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Handler for Gauge {
    fn handle(&self, job: JobRun, ctx: JobContext) -> BoxFuture<'static, Outcome> {
        self.now.fetch_add(1, Ordering::Relaxed);
        let leaving = Leaving(self.now.clone());
        let run = self.inner.handle(job, ctx);
        async move {
            let outcome = run.await;
            drop(leaving);
            outcome
        }
        .boxed()
    }
    fn version(&self) -> String {
        self.inner.version()
    }
}

/// This process's resident memory in KiB (`VmRSS`); `None` off Linux.
fn resident_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The `inflight` workload (see the module docs).
///
/// # Errors
/// A store, enqueue or registration failure, or a timeout.
pub async fn inflight(
    store: Arc<dyn JobStore>,
    handler: Arc<dyn Handler>,
    cfg: &BenchConfig,
    payload: &serde_json::Value,
) -> Result<BenchResult, BenchError> {
    let job_type = fresh_type("inflight");
    let queue = Queue::new(store.clone(), QueueOptions::default())?;
    let job = |_| NewJob::new(&job_type, payload);
    let seconds = add_in_batches(&queue, cfg.drain_jobs, cfg.batch_size, job).await?;
    let enqueue_rate = cfg.drain_jobs as f64 / seconds;
    let now = Arc::new(AtomicUsize::new(0));
    let gauge = Arc::new(Gauge {
        inner: handler,
        now: now.clone(),
    });
    let registry = Registry::new();
    registry.register(&job_type, gauge, settings(cfg.drain_concurrency))?;
    let done = counter(&queue);
    let rss_before = resident_kib();
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = tokio::spawn({
        let (now, stop) = (now.clone(), stop.clone());
        async move {
            let (mut peak_inflight, mut peak_rss) = (0, None::<u64>);
            while !stop.load(Ordering::Relaxed) {
                tokio::time::sleep(SAMPLE_EVERY).await;
                peak_inflight = peak_inflight.max(now.load(Ordering::Relaxed));
                peak_rss = peak_rss.max(resident_kib());
            }
            (peak_inflight, peak_rss)
        }
    });
    let started = Instant::now();
    let worker = crate::engine::Worker::start(queue.clone(), registry, worker_opts())?;
    let res = wait_done(&queue, &done, &job_type, cfg.drain_jobs, cfg.timeout).await;
    let per_s = cfg.drain_jobs as f64 / started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let sampled = sampler.await;
    worker.shutdown().await;
    res?;
    let (peak_inflight, peak_rss) = sampled.unwrap_or((0, None));
    let rss_per_inflight_kib = match (rss_before, peak_rss) {
        (Some(before), Some(peak)) if peak_inflight > 0 => {
            Some((peak.saturating_sub(before) as f64 / peak_inflight as f64).round())
        }
        _ => None,
    };
    Ok(BenchResult {
        enqueue_batch_per_s: Some(enqueue_rate.round()),
        work_per_s: Some(per_s.round()),
        peak_inflight: Some(peak_inflight),
        rss_per_inflight_kib,
        ..BenchResult::of(
            cfg,
            store.as_ref(),
            "inflight",
            cfg.drain_jobs,
            cfg.drain_concurrency,
        )
    })
}
