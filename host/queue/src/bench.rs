//! The queue benchmarks, callable with any [`Handler`] (a native no-op in
//! `cargo bench`, the WASM no-op in `boxcar bench`). Each run prints one
//! JSON line with the keys `system, store, workload, n, c,
//! enqueue_batch_per_s, enqueue_single_per_s, work_per_s, p50_ms, p95_ms,
//! p99_ms, rust_backtrace` (a figure a workload does not measure is
//! `null`; `rust_backtrace` is the variable's value, `null` when unset,
//! since a set variable can cost the host); the `types` workload adds
//! `types, work_per_s_1_type, idle_cpu_pct`; `backlog` and `retained` add
//! `rows, work_per_s_baseline`; `inflight` adds `peak_inflight,
//! rss_per_inflight_kib`; the drains add `claim_calls,
//! complete_calls, store_seconds` (the worker's store round trips, and
//! the seconds spent in claims and in completions).
//!
//! - **drain**: enqueue `drain_jobs` in batches of `batch_size` and
//!   `single_jobs` one by one, then one worker at concurrency `drain_concurrency`
//!   drains all of them.
//! - **latency**: with an idle worker at concurrency `latency_concurrency`,
//!   enqueue `latency_jobs` one at a time `latency_gap` apart; report pickup
//!   latency: handler start − the moment `add` returned (the job's row is
//!   committed then). The enqueue's own commit time is the single-enqueue
//!   rate, reported separately.
//!
//! - **enqueue** ([`enqueue`]): `add_many` in batches of `batch_size`, and
//!   one by one; nothing runs the jobs.
//! - **types** ([`types`]): one busy type drains while many idle types are
//!   registered, against the same drain with the busy type alone; then the
//!   host's CPU use while idle with all those types.
//! - **backlog** and **retained** ([`backlog`], [`retained`]): a drain from
//!   the head of a deep queue, and beside many finished rows, against the
//!   same drain with nothing else queued.
//! - **inflight** ([`inflight`]): many jobs that each wait, at a high
//!   concurrency; the rate and the memory per job in flight.
//!
//! Each run uses a fresh job type, so earlier rows in the store do not
//! interfere.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::FutureExt;
use parking_lot::Mutex;
use serde::Serialize;
use tokio::sync::Notify;

use crate::handler::{Handler, JobContext, JobRun, Outcome};
use crate::job::{JobFilter, JobStatus, NewJob};
use crate::metrics::StoreOp;
use crate::observer::{LifecycleEvent, LifecycleObserver, LifecycleOutcome};
use crate::options::{QueueOptions, WorkerOptions};
use crate::queue::{Queue, QueueError};
use crate::registry::{HandlerSettings, Registry, RegistryError};
use crate::store::{JobStore, StoreError};

mod enqueue;
mod inflight;
mod scale;
mod types;
pub use enqueue::enqueue;
pub use inflight::{inflight, SleepHandler};
pub use scale::{backlog, retained};
pub use types::{types, TypesConfig};

/// Workload sizes (defaults: 20,000 drained, 2,000 single enqueues,
/// batches of 1,000, 500 latency jobs).
#[derive(Clone, Debug)]
pub struct BenchConfig {
    /// `system` field of the output.
    pub system: String,
    /// Jobs enqueued in batches for the drain.
    pub drain_jobs: usize,
    /// Jobs enqueued one by one (single-enqueue rate) and also drained.
    pub single_jobs: usize,
    /// Batch size of the batched enqueue.
    pub batch_size: usize,
    /// `enqueue` workload: concurrent producers sharing the batched
    /// enqueue, each calling `add_many` on its own share (1: one after
    /// another).
    pub producers: usize,
    /// Worker concurrency of the drain.
    pub drain_concurrency: u32,
    /// Jobs of the latency workload.
    pub latency_jobs: usize,
    /// Worker concurrency of the latency workload.
    pub latency_concurrency: u32,
    /// Gap between latency enqueues.
    pub latency_gap: Duration,
    /// Give up after this long.
    pub timeout: Duration,
}

impl Default for BenchConfig {
    fn default() -> Self {
        Self {
            system: "boxcar".into(),
            drain_jobs: 20_000,
            single_jobs: 2_000,
            batch_size: 1_000,
            producers: 1,
            drain_concurrency: 16,
            latency_jobs: 500,
            latency_concurrency: 4,
            latency_gap: Duration::from_millis(5),
            timeout: Duration::from_secs(300),
        }
    }
}

/// One output line.
#[derive(Clone, Debug, Serialize)]
pub struct BenchResult {
    /// E.g. `boxcar`.
    pub system: String,
    /// `sqlite`, `postgres`, `memory`.
    pub store: String,
    /// `drain` or `latency`.
    pub workload: String,
    /// Jobs processed.
    pub n: usize,
    /// Worker concurrency.
    pub c: u32,
    /// Batched enqueue rate.
    pub enqueue_batch_per_s: Option<f64>,
    /// One-by-one enqueue rate.
    pub enqueue_single_per_s: Option<f64>,
    /// Jobs completed per second.
    pub work_per_s: Option<f64>,
    /// Pickup latency percentiles.
    pub p50_ms: Option<f64>,
    /// 95th percentile.
    pub p95_ms: Option<f64>,
    /// 99th percentile.
    pub p99_ms: Option<f64>,
    /// The `RUST_BACKTRACE` environment variable of the run (`null`: unset).
    pub rust_backtrace: Option<String>,
    /// `types` workload: job types registered while one of them drains.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub types: Option<usize>,
    /// `types` workload: the same drain with only the busy type registered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub work_per_s_1_type: Option<f64>,
    /// `types` workload: the host's CPU use while idle with `types` types
    /// registered, in percent of one core.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_cpu_pct: Option<f64>,
    /// `backlog` and `retained` workloads: rows in the table beside the
    /// measured drain.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rows: Option<usize>,
    /// `backlog` and `retained` workloads: the same drain, measured first,
    /// with nothing else queued.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub work_per_s_baseline: Option<f64>,
    /// `inflight` workload: the most jobs inside their handler at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_inflight: Option<usize>,
    /// `inflight` workload: the growth of resident memory at its peak, per
    /// job in flight at the peak, in KiB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rss_per_inflight_kib: Option<f64>,
    /// `enqueue` workload: concurrent producers of the batched enqueue.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub producers: Option<usize>,
    /// `drain` workloads: the worker's claim round trips.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub claim_calls: Option<u64>,
    /// `drain` workloads: the worker's completion-batch round trips.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub complete_calls: Option<u64>,
    /// `drain` workloads: seconds spent in those claims and completions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub store_seconds: Option<[f64; 2]>,
}

/// `RUST_BACKTRACE` as this process sees it.
fn rust_backtrace() -> Option<String> {
    std::env::var("RUST_BACKTRACE").ok()
}

impl BenchResult {
    /// A line of `workload` on `store` with every figure `null` (each
    /// workload sets its own) and this process's `RUST_BACKTRACE`.
    fn of(cfg: &BenchConfig, store: &dyn JobStore, workload: &str, n: usize, c: u32) -> Self {
        Self {
            system: cfg.system.clone(),
            store: store.backend().to_string(),
            workload: workload.into(),
            n,
            c,
            enqueue_batch_per_s: None,
            enqueue_single_per_s: None,
            work_per_s: None,
            p50_ms: None,
            p95_ms: None,
            p99_ms: None,
            rust_backtrace: rust_backtrace(),
            types: None,
            work_per_s_1_type: None,
            idle_cpu_pct: None,
            rows: None,
            work_per_s_baseline: None,
            peak_inflight: None,
            rss_per_inflight_kib: None,
            producers: None,
            claim_calls: None,
            complete_calls: None,
            store_seconds: None,
        }
    }

    /// The JSON line.
    pub fn to_json_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// A benchmark could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    /// Enqueueing failed.
    #[error(transparent)]
    Queue(#[from] QueueError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The handler could not be registered.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// The worker options were refused.
    #[error(transparent)]
    Options(#[from] crate::options::OptionsError),
    /// Jobs did not finish in time.
    #[error("benchmark timed out: {done} of {n} jobs finished")]
    Timeout {
        /// Finished jobs.
        done: u64,
        /// Expected jobs.
        n: usize,
    },
}

/// A handler that does nothing and succeeds.
pub struct NoopHandler;

impl Handler for NoopHandler {
    fn handle(&self, _job: JobRun, _ctx: JobContext) -> BoxFuture<'static, Outcome> {
        futures::future::ready(Outcome::Succeeded { result: None }).boxed()
    }
}

/// Wraps a handler and records when each job started.
struct Timed {
    inner: Arc<dyn Handler>,
    starts: Arc<Mutex<HashMap<String, Instant>>>,
}

impl Handler for Timed {
    fn handle(&self, job: JobRun, ctx: JobContext) -> BoxFuture<'static, Outcome> {
        self.starts.lock().insert(job.id.clone(), Instant::now());
        self.inner.handle(job, ctx)
    }
    fn version(&self) -> String {
        self.inner.version()
    }
}

fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(idx).map(|v| (v * 1000.0).round() / 1000.0)
}

fn settings(concurrency: u32) -> HandlerSettings {
    HandlerSettings {
        concurrency,
        timeout: Duration::from_secs(60),
        ..HandlerSettings::default()
    }
}

fn worker_opts() -> WorkerOptions {
    WorkerOptions {
        shutdown_grace: Duration::from_secs(5),
        ..WorkerOptions::default()
    }
}

/// Counts `succeeded` transitions (emitted after the write landed), and
/// wakes the waiter once the count reaches its target: a wake-up per job
/// would cost the measured host a thread hand-off per job.
struct Counter {
    done: AtomicUsize,
    target: AtomicUsize,
    notify: Notify,
}

impl LifecycleObserver for Counter {
    fn on_transition(&self, event: &LifecycleEvent) {
        if event.outcome == LifecycleOutcome::Succeeded {
            let done = self.done.fetch_add(1, Ordering::Relaxed) + 1;
            if done >= self.target.load(Ordering::Relaxed) {
                self.notify.notify_one();
            }
        }
    }
}

/// Waits until `n` jobs succeeded: observer-driven, with a store check every
/// 250 ms in case an event was dropped.
async fn wait_done(
    queue: &Queue,
    counter: &Counter,
    job_type: &str,
    n: usize,
    timeout: Duration,
) -> Result<(), BenchError> {
    let deadline = Instant::now() + timeout;
    let mut last_check = Instant::now();
    counter.target.store(n, Ordering::Relaxed);
    loop {
        if counter.done.load(Ordering::Relaxed) >= n {
            return Ok(());
        }
        if last_check.elapsed() >= Duration::from_millis(250) {
            last_check = Instant::now();
            let f = JobFilter {
                types: vec![job_type.to_string()],
                statuses: vec![JobStatus::Pending, JobStatus::Running],
                limit: Some(1),
                ..JobFilter::default()
            };
            if queue.find(&f).await?.is_empty() {
                return Ok(());
            }
        }
        if Instant::now() >= deadline {
            let done = counter.done.load(Ordering::Relaxed) as u64;
            return Err(BenchError::Timeout { done, n });
        }
        let _ = tokio::time::timeout(Duration::from_millis(50), counter.notify.notified()).await;
    }
}

fn counter(queue: &Queue) -> Arc<Counter> {
    let c = Arc::new(Counter {
        done: AtomicUsize::new(0),
        target: AtomicUsize::new(usize::MAX),
        notify: Notify::new(),
    });
    queue.observe(c.clone());
    c
}

fn fresh_type(prefix: &str) -> String {
    format!("bench.{prefix}.{}", uuid::Uuid::new_v4().simple())
}

/// The drain workload.
///
/// # Errors
/// A store, enqueue or registration failure, or a timeout.
pub async fn drain(
    store: Arc<dyn JobStore>,
    handler: Arc<dyn Handler>,
    cfg: &BenchConfig,
) -> Result<BenchResult, BenchError> {
    drain_with(store, handler, cfg, false).await
}

/// The drain workload with every claim guarded: jobs spread over 100
/// scopes with `serialize_by_scope`, and the type in one pool (whose limit
/// does not bind). Reported as workload `drain-guarded`.
///
/// # Errors
/// A store, enqueue or registration failure, or a timeout.
pub async fn drain_guarded(
    store: Arc<dyn JobStore>,
    handler: Arc<dyn Handler>,
    cfg: &BenchConfig,
) -> Result<BenchResult, BenchError> {
    drain_with(store, handler, cfg, true).await
}

fn bench_job(job_type: &str, payload: &serde_json::Value, guarded: bool, i: usize) -> NewJob {
    let job = NewJob::new(job_type, payload);
    if guarded {
        job.scope(crate::handler::Scope::new("bench", (i % 100).to_string()))
    } else {
        job
    }
}

/// Enqueues `n` jobs made by `job` (given indexes `1..=n`) in `add_many`
/// calls of `batch_size` (one transaction each); returns the seconds it
/// took.
async fn add_in_batches(
    queue: &Queue,
    n: usize,
    batch_size: usize,
    job: impl Fn(usize) -> NewJob,
) -> Result<f64, BenchError> {
    let started = Instant::now();
    let mut left = n;
    while left > 0 {
        let k = left.min(batch_size.max(1));
        queue
            .add_many((0..k).map(|i| job(left - k + 1 + i)).collect())
            .await?;
        left -= k;
    }
    Ok(started.elapsed().as_secs_f64())
}

/// Enqueues `cfg.drain_jobs` jobs made by `job` in `add_many` batches of
/// `cfg.batch_size`, then `cfg.single_jobs` one by one; returns both rates
/// (jobs per second).
async fn enqueue_timed(
    queue: &Queue,
    cfg: &BenchConfig,
    job: impl Fn(usize) -> NewJob,
) -> Result<(f64, f64), BenchError> {
    let seconds = add_in_batches(queue, cfg.drain_jobs, cfg.batch_size, &job).await?;
    let batch_rate = cfg.drain_jobs as f64 / seconds;
    let single_rate = add_one_by_one(queue, cfg.single_jobs, job).await?;
    Ok((batch_rate, single_rate))
}

/// Enqueues `n` jobs made by `job` one `add` at a time; returns the rate
/// (jobs per second).
async fn add_one_by_one(
    queue: &Queue,
    n: usize,
    job: impl Fn(usize) -> NewJob,
) -> Result<f64, BenchError> {
    let started = Instant::now();
    for i in 0..n {
        queue.add(job(i)).await?;
    }
    Ok(n as f64 / started.elapsed().as_secs_f64())
}

async fn drain_with(
    store: Arc<dyn JobStore>,
    handler: Arc<dyn Handler>,
    cfg: &BenchConfig,
    guarded: bool,
) -> Result<BenchResult, BenchError> {
    let job_type = fresh_type("drain");
    let queue = Queue::new(store.clone(), QueueOptions::default())?;
    let payload = serde_json::json!({"bench": true});
    let (batch_rate, single_rate) =
        enqueue_timed(&queue, cfg, |i| bench_job(&job_type, &payload, guarded, i)).await?;
    let n = cfg.drain_jobs + cfg.single_jobs;
    let registry = Registry::new();
    let mut s = settings(cfg.drain_concurrency);
    if guarded {
        s.serialize_by_scope = true;
        registry.set_pools(vec![crate::registry::PoolConfig {
            name: "bench".into(),
            concurrency: Some(10_000),
            types: vec![job_type.clone()],
            ..Default::default()
        }])?;
    }
    registry.register(&job_type, handler, s)?;
    let done = counter(&queue);
    let t2 = Instant::now();
    let worker = crate::engine::Worker::start(queue.clone(), registry, worker_opts())?;
    let res = wait_done(&queue, &done, &job_type, n, cfg.timeout).await;
    let elapsed = t2.elapsed().as_secs_f64();
    worker.shutdown().await;
    res?;
    let latency = queue.metrics().store_latency();
    let of = |op: StoreOp| latency.iter().find(|(o, _)| *o == op).map(|(_, h)| h);
    let calls = |op: StoreOp| of(op).map(|h| h.count);
    let seconds = |op: StoreOp| of(op).map_or(0.0, |h| (h.sum_seconds * 1000.0).round() / 1000.0);
    Ok(BenchResult {
        enqueue_batch_per_s: Some(batch_rate.round()),
        enqueue_single_per_s: Some(single_rate.round()),
        work_per_s: Some((n as f64 / elapsed).round()),
        claim_calls: calls(StoreOp::Claim),
        complete_calls: calls(StoreOp::Complete),
        store_seconds: Some([seconds(StoreOp::Claim), seconds(StoreOp::Complete)]),
        ..BenchResult::of(
            cfg,
            store.as_ref(),
            if guarded { "drain-guarded" } else { "drain" },
            n,
            cfg.drain_concurrency,
        )
    })
}

/// The latency workload, producer and worker in one process (an enqueue
/// wakes the local dispatcher directly).
///
/// # Errors
/// A store, enqueue or registration failure, or a timeout.
pub async fn latency(
    store: Arc<dyn JobStore>,
    handler: Arc<dyn Handler>,
    cfg: &BenchConfig,
) -> Result<BenchResult, BenchError> {
    latency_with_producer(store.clone(), store, handler, cfg, "latency").await
}

/// The latency workload with the producer on its own store connection
/// (`producer`, opened separately on the same database), so only the
/// store's own wake-up (LISTEN/NOTIFY on Postgres) reaches the worker.
/// Reported as workload `latency-notify`.
///
/// # Errors
/// A store, enqueue or registration failure, or a timeout.
pub async fn latency_notify(
    store: Arc<dyn JobStore>,
    producer: Arc<dyn JobStore>,
    handler: Arc<dyn Handler>,
    cfg: &BenchConfig,
) -> Result<BenchResult, BenchError> {
    latency_with_producer(store, producer, handler, cfg, "latency-notify").await
}

async fn latency_with_producer(
    store: Arc<dyn JobStore>,
    producer: Arc<dyn JobStore>,
    handler: Arc<dyn Handler>,
    cfg: &BenchConfig,
    workload: &str,
) -> Result<BenchResult, BenchError> {
    let job_type = fresh_type("latency");
    let queue = Queue::new(store.clone(), QueueOptions::default())?;
    let producer = Queue::new(producer, QueueOptions::default())?;
    let starts = Arc::new(Mutex::new(HashMap::new()));
    let timed = Arc::new(Timed {
        inner: handler,
        starts: starts.clone(),
    });
    let registry = Registry::new();
    registry.register(&job_type, timed, settings(cfg.latency_concurrency))?;
    let done = counter(&queue);
    let worker = crate::engine::Worker::start(queue.clone(), registry, worker_opts())?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let payload = serde_json::json!({"bench": true});
    let mut enqueued = Vec::with_capacity(cfg.latency_jobs);
    let t0 = Instant::now();
    let mut single = Duration::ZERO;
    for _ in 0..cfg.latency_jobs {
        let before = Instant::now();
        let id = producer.add(NewJob::new(&job_type, &payload)).await?.id;
        let committed = Instant::now();
        single += committed - before;
        enqueued.push((id, committed));
        tokio::time::sleep(cfg.latency_gap).await;
    }
    let res = wait_done(&queue, &done, &job_type, cfg.latency_jobs, cfg.timeout).await;
    let elapsed = t0.elapsed().as_secs_f64();
    worker.shutdown().await;
    res?;
    let starts = starts.lock();
    let mut lat: Vec<f64> = enqueued
        .iter()
        .filter_map(|(id, at)| {
            starts
                .get(id)
                .map(|s| s.duration_since(*at).as_secs_f64() * 1000.0)
        })
        .collect();
    lat.sort_by(f64::total_cmp);
    Ok(BenchResult {
        enqueue_single_per_s: Some((cfg.latency_jobs as f64 / single.as_secs_f64()).round()),
        work_per_s: Some((cfg.latency_jobs as f64 / elapsed).round()),
        p50_ms: percentile(&lat, 0.50),
        p95_ms: percentile(&lat, 0.95),
        p99_ms: percentile(&lat, 0.99),
        ..BenchResult::of(
            cfg,
            store.as_ref(),
            workload,
            cfg.latency_jobs,
            cfg.latency_concurrency,
        )
    })
}
