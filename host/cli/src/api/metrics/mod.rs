//! Prometheus metrics on `/metrics`: lifecycle counters fed by a
//! [`LifecycleObserver`], the queue's own measurements
//! ([`QueueMetrics`]: run and wait histograms, attempt outcomes, sandbox
//! overhead, store round trips, deploys), and gauges read from the store
//! at scrape time (jobs by status; unfinished jobs per type).
//!
//! Invariants: counting never blocks the queue (atomics, or a map lock
//! held for one increment); labels are bounded — job types, statuses,
//! outcome kinds and store operation names, never ids or scopes. The
//! README's "Metrics" list names every family rendered here.

mod text;

use std::{
    collections::BTreeMap,
    sync::atomic::{AtomicU64, Ordering},
};

use boxcar_queue::{
    metrics::QueueMetrics, LifecycleEvent, LifecycleObserver, StatusCounts, TypeCounts,
};
use boxcar_sandbox::PoolResidency;
use parking_lot::Mutex;

use text::{Exposition, Kind};

/// Lifecycle counters per (job type, outcome) and run-time sums.
#[derive(Default)]
pub struct Metrics {
    transitions: Mutex<BTreeMap<(String, &'static str), u64>>,
    run_seconds_total: AtomicU64,
}

impl LifecycleObserver for Metrics {
    fn on_transition(&self, event: &LifecycleEvent) {
        *self
            .transitions
            .lock()
            .entry((event.job_type.clone(), event.outcome.as_str()))
            .or_default() += 1;
        if let Some(duration) = event.duration {
            self.run_seconds_total.fetch_add(
                duration.as_micros().min(u128::from(u64::MAX)) as u64,
                Ordering::Relaxed,
            );
        }
    }
}

/// What one scrape read besides this observer's counters.
pub struct Scrape<'a> {
    /// Jobs in the store by status.
    pub counts: &'a StatusCounts,
    /// Unfinished jobs per type in the store.
    pub live: &'a [TypeCounts],
    /// This process's queue measurements.
    pub queue: &'a QueueMetrics,
    /// Lifecycle events the observers missed.
    pub dropped_events: u64,
    /// What the sandbox's idle pool slots hold, on a host that runs
    /// handlers with pooling.
    pub pool: Option<PoolResidency>,
}

impl Metrics {
    /// The Prometheus text exposition.
    pub fn render(&self, scrape: &Scrape<'_>) -> String {
        let mut e = Exposition::default();
        self.render_lifecycle(&mut e, scrape);
        render_store_gauges(&mut e, scrape);
        render_runs(&mut e, scrape.queue);
        render_store_and_deploys(&mut e, scrape.queue);
        if let Some(pool) = scrape.pool {
            render_pool(&mut e, &pool);
        }
        e.finish()
    }

    fn render_lifecycle(&self, e: &mut Exposition, scrape: &Scrape<'_>) {
        let counts = scrape.counts;
        e.family("boxcar_jobs", Kind::Gauge, "Jobs in the store by status.");
        for (status, n) in [
            ("pending", counts.pending),
            ("running", counts.running),
            ("succeeded", counts.succeeded),
            ("failed", counts.failed),
            ("cancelled", counts.cancelled),
        ] {
            e.sample("boxcar_jobs", &[("status", status)], n);
        }
        e.family(
            "boxcar_transitions_total",
            Kind::Counter,
            "Job lifecycle transitions seen by this host.",
        );
        for ((job_type, outcome), n) in self.transitions.lock().iter() {
            e.sample(
                "boxcar_transitions_total",
                &[("job_type", job_type), ("outcome", outcome)],
                n,
            );
        }
        e.family(
            "boxcar_run_seconds_total",
            Kind::Counter,
            "Time spent running jobs on this host.",
        );
        let micros = self.run_seconds_total.load(Ordering::Relaxed);
        e.sample("boxcar_run_seconds_total", &[], micros as f64 / 1e6);
        e.family(
            "boxcar_lifecycle_events_dropped_total",
            Kind::Counter,
            "Lifecycle events the observers missed because they fell behind (boxcar_transitions_total undercounts by this much).",
        );
        e.sample(
            "boxcar_lifecycle_events_dropped_total",
            &[],
            scrape.dropped_events,
        );
    }
}

fn render_store_gauges(e: &mut Exposition, scrape: &Scrape<'_>) {
    e.family(
        "boxcar_jobs_pending",
        Kind::Gauge,
        "Pending jobs in the store per type: when=\"due\" may run now (run_at reached), when=\"scheduled\" waits for its run_at.",
    );
    for c in scrape.live {
        e.sample(
            "boxcar_jobs_pending",
            &[("job_type", &c.job_type), ("when", "due")],
            c.due,
        );
        e.sample(
            "boxcar_jobs_pending",
            &[("job_type", &c.job_type), ("when", "scheduled")],
            c.scheduled,
        );
    }
    e.family(
        "boxcar_jobs_running",
        Kind::Gauge,
        "Running jobs in the store per type (on every host).",
    );
    for c in scrape.live {
        e.sample(
            "boxcar_jobs_running",
            &[("job_type", &c.job_type)],
            c.running,
        );
    }
}

fn render_runs(e: &mut Exposition, queue: &QueueMetrics) {
    let types = queue.types();
    e.family(
        "boxcar_job_run_seconds",
        Kind::Histogram,
        "Wall time of each run on this host, from its start to its outcome.",
    );
    for (t, m) in &types {
        e.histogram(
            "boxcar_job_run_seconds",
            &[("job_type", t)],
            &m.run.snapshot(),
        );
    }
    e.family(
        "boxcar_job_queue_wait_seconds",
        Kind::Histogram,
        "Queue wait of each run started on this host: from the job's run_at (when it became due) to the claim that started it, on the store's clock.",
    );
    for (t, m) in &types {
        e.histogram(
            "boxcar_job_queue_wait_seconds",
            &[("job_type", t)],
            &m.wait.snapshot(),
        );
    }
    e.family(
        "boxcar_job_attempts_total",
        Kind::Counter,
        "Attempts ended on this host by outcome, as the attempt history records them (succeeded, retried, failed, and the sandbox's aborts: timed_out, out_of_memory, fuel_exhausted, limit_exceeded, trapped, host_error; cancelled, lease_lost, released, expired).",
    );
    for (t, m) in &types {
        for (outcome, n) in m.outcomes() {
            e.sample(
                "boxcar_job_attempts_total",
                &[("job_type", t), ("outcome", outcome.as_str())],
                n,
            );
        }
    }
    e.family(
        "boxcar_sandbox_overhead_seconds",
        Kind::Histogram,
        "Host time per run outside the guest's handler call: the run's wall time less the call into the guest (so: WASI context and store set-up, instantiation, result and scratch checks, teardown, and the engine's own bookkeeping). Only runs whose guest call returned.",
    );
    for (t, m) in &types {
        e.histogram(
            "boxcar_sandbox_overhead_seconds",
            &[("job_type", t)],
            &m.overhead.snapshot(),
        );
    }
}

fn render_store_and_deploys(e: &mut Exposition, queue: &QueueMetrics) {
    e.family(
        "boxcar_store_round_trip_seconds",
        Kind::Histogram,
        "Store round trips made by this host's queue, by operation (enqueue, claim, complete, retry, fail, renew, release, logs), failures included.",
    );
    for (op, h) in queue.store_latency() {
        e.histogram(
            "boxcar_store_round_trip_seconds",
            &[("op", op.as_str())],
            &h,
        );
    }
    let deploys = queue.deploys();
    e.family(
        "boxcar_handler_deploys_total",
        Kind::Counter,
        "Handler versions deployed by this host, per job type.",
    );
    for (t, n) in &deploys.deployed {
        e.sample("boxcar_handler_deploys_total", &[("job_type", t)], n);
    }
    e.family(
        "boxcar_handler_rejections_total",
        Kind::Counter,
        "Handler modules or manifests this host refused to deploy (the previous version kept serving).",
    );
    e.sample("boxcar_handler_rejections_total", &[], deploys.rejected);
    e.family(
        "boxcar_handler_removals_total",
        Kind::Counter,
        "Handlers this host undeployed.",
    );
    e.sample("boxcar_handler_removals_total", &[], deploys.removed);
}

fn render_pool(e: &mut Exposition, pool: &PoolResidency) {
    e.family(
        "boxcar_sandbox_idle_slots",
        Kind::Gauge,
        "Idle instance-pool slots that have run a job and stay warm, by kind (memory, table, stack); at most about [sandbox] warm_slots each.",
    );
    e.family(
        "boxcar_sandbox_idle_resident_bytes",
        Kind::Gauge,
        "Bytes the idle warm pool slots keep resident, by kind (memory, table, stack).",
    );
    for (kind, slots, bytes) in [
        ("memory", pool.warm_memories, pool.memory_bytes),
        ("table", pool.warm_tables, pool.table_bytes),
        ("stack", pool.warm_stacks, pool.stack_bytes),
    ] {
        e.sample("boxcar_sandbox_idle_slots", &[("kind", kind)], slots);
        e.sample(
            "boxcar_sandbox_idle_resident_bytes",
            &[("kind", kind)],
            bytes,
        );
    }
}
