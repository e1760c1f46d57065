//! [`QueueMetrics`]: what this process measured of the queue's work — per
//! job type, how long runs took, how long due jobs waited to start, what
//! the sandbox cost per run and how attempts ended; per store operation,
//! the round-trip time; and the deploys and rejections of handlers. Read by
//! the host's `/metrics`.
//!
//! Invariants:
//! - Counting never blocks the queue: histograms and counters are relaxed
//!   atomics; a job type's entry is found under a read lock and created
//!   under the write lock only the first time the type is seen.
//! - Labels are bounded: job types the engine ran (or deployed), the fixed
//!   [`StoreOp`] names and [`AttemptOutcome`] names; never ids or scopes.
//! - How an attempt ended is the attempt history's [`AttemptOutcome`], the
//!   same classification the stored attempt carries.

mod histogram;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};

use crate::attempt::AttemptOutcome;
use crate::job::HandlerEventKind;

pub use histogram::{
    Histogram, HistogramSnapshot, OVERHEAD_BUCKETS, STORE_BUCKETS, WAIT_AND_RUN_BUCKETS,
};

/// The store operations whose round trips are timed, where the engine (or
/// the enqueue path) calls the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreOp {
    /// Inserting jobs (`Queue::add`, `add_many`, a flow, a guest's enqueue).
    Enqueue,
    /// Claiming due jobs (one call for the unguarded types, one per guarded type).
    Claim,
    /// A batch of completions.
    Complete,
    /// A retry transition.
    Retry,
    /// A terminal failure transition.
    Fail,
    /// A lease renewal.
    Renew,
    /// Giving leases back at shutdown.
    Release,
    /// Storing a running job's log lines.
    Logs,
}

impl StoreOp {
    /// Every operation.
    pub const ALL: [Self; 8] = [
        Self::Enqueue,
        Self::Claim,
        Self::Complete,
        Self::Retry,
        Self::Fail,
        Self::Renew,
        Self::Release,
        Self::Logs,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Enqueue => "enqueue",
            Self::Claim => "claim",
            Self::Complete => "complete",
            Self::Retry => "retry",
            Self::Fail => "fail",
            Self::Renew => "renew",
            Self::Release => "release",
            Self::Logs => "logs",
        }
    }
}

/// One job type's figures.
#[derive(Debug)]
pub struct TypeMetrics {
    /// Wall time of each run, from its start to its outcome.
    pub run: Histogram,
    /// From `run_at` (when the job became due) to the start of its run.
    pub wait: Histogram,
    /// Host time per run outside the guest's handler call (see
    /// [`RunRecord::guest_time`](crate::RunRecord::guest_time)).
    pub overhead: Histogram,
    outcomes: [AtomicU64; AttemptOutcome::ALL.len()],
}

impl TypeMetrics {
    fn new() -> Self {
        Self {
            run: Histogram::new(WAIT_AND_RUN_BUCKETS),
            wait: Histogram::new(WAIT_AND_RUN_BUCKETS),
            overhead: Histogram::new(OVERHEAD_BUCKETS),
            outcomes: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// Attempts by how they ended (every ending, zeros included; not
    /// `running`, which is no ending).
    pub fn outcomes(&self) -> Vec<(AttemptOutcome, u64)> {
        AttemptOutcome::ALL
            .iter()
            .zip(self.outcomes.iter())
            .filter(|(o, _)| **o != AttemptOutcome::Running)
            .map(|(o, n)| (*o, n.load(Ordering::Relaxed)))
            .collect()
    }
}

/// Counts of handler deploys on this host.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeployCounts {
    /// New versions deployed, per job type.
    pub deployed: BTreeMap<String, u64>,
    /// Modules or manifests refused (the previous version kept serving).
    pub rejected: u64,
    /// Handlers undeployed.
    pub removed: u64,
}

/// This process's queue metrics. See the module docs.
#[derive(Debug)]
pub struct QueueMetrics {
    types: RwLock<BTreeMap<String, Arc<TypeMetrics>>>,
    store: [Histogram; StoreOp::ALL.len()],
    deploys: Mutex<DeployCounts>,
}

impl Default for QueueMetrics {
    fn default() -> Self {
        Self {
            types: RwLock::new(BTreeMap::new()),
            store: std::array::from_fn(|_| Histogram::new(STORE_BUCKETS)),
            deploys: Mutex::new(DeployCounts::default()),
        }
    }
}

impl QueueMetrics {
    fn of_type(&self, job_type: &str) -> Arc<TypeMetrics> {
        if let Some(m) = self.types.read().get(job_type) {
            return Arc::clone(m);
        }
        Arc::clone(
            self.types
                .write()
                .entry(job_type.to_string())
                .or_insert_with(|| Arc::new(TypeMetrics::new())),
        )
    }

    /// A run of `job_type` started after the job had been due for `wait`.
    pub fn started(&self, job_type: &str, wait: Duration) {
        self.of_type(job_type).wait.observe(wait);
    }

    /// An attempt of `job_type` ended as `outcome`; `run` is its wall time
    /// (when it ran), `overhead` the host's time outside the guest (when
    /// the handler measured its guest time).
    pub fn ended(
        &self,
        job_type: &str,
        outcome: AttemptOutcome,
        run: Option<Duration>,
        overhead: Option<Duration>,
    ) {
        let m = self.of_type(job_type);
        if let Some(i) = AttemptOutcome::ALL.iter().position(|o| *o == outcome) {
            m.outcomes[i].fetch_add(1, Ordering::Relaxed);
        }
        if let Some(run) = run {
            m.run.observe(run);
        }
        if let Some(overhead) = overhead {
            m.overhead.observe(overhead);
        }
    }

    /// Awaits `call`, one round trip of `op`, and counts its time.
    pub async fn timed<T>(&self, op: StoreOp, call: impl Future<Output = T>) -> T {
        let sent = Instant::now();
        let out = call.await;
        if let Some(h) = StoreOp::ALL
            .iter()
            .position(|o| *o == op)
            .and_then(|i| self.store.get(i))
        {
            h.observe(sent.elapsed());
        }
        out
    }

    /// Counts a handler event.
    pub fn handler_event(&self, kind: HandlerEventKind, job_type: Option<&str>) {
        let mut d = self.deploys.lock();
        match kind {
            HandlerEventKind::Deployed => {
                let t = job_type.unwrap_or("unknown").to_string();
                *d.deployed.entry(t).or_default() += 1;
            }
            HandlerEventKind::Rejected => d.rejected += 1,
            HandlerEventKind::Removed => d.removed += 1,
        }
    }

    /// Every job type seen, in name order, with its figures.
    pub fn types(&self) -> Vec<(String, Arc<TypeMetrics>)> {
        self.types
            .read()
            .iter()
            .map(|(t, m)| (t.clone(), Arc::clone(m)))
            .collect()
    }

    /// Round-trip times per store operation.
    pub fn store_latency(&self) -> Vec<(StoreOp, HistogramSnapshot)> {
        StoreOp::ALL
            .iter()
            .zip(self.store.iter())
            .map(|(op, h)| (*op, h.snapshot()))
            .collect()
    }

    /// Handler deploys so far.
    pub fn deploys(&self) -> DeployCounts {
        self.deploys.lock().clone()
    }
}
