//! Prometheus metrics: lifecycle counters fed by a [`LifecycleObserver`] and
//! job-status gauges read from the store at scrape time.
//!
//! Invariant: counting never blocks the queue (atomics only).

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    sync::atomic::{AtomicU64, Ordering},
};

use boxcar_queue::{LifecycleEvent, LifecycleObserver, StatusCounts};
use parking_lot::Mutex;

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

impl Metrics {
    /// The Prometheus text exposition.
    pub fn render(&self, counts: &StatusCounts) -> String {
        let mut out = String::new();
        out.push_str("# HELP boxcar_jobs Jobs in the store by status.\n# TYPE boxcar_jobs gauge\n");
        for (status, n) in [
            ("pending", counts.pending),
            ("running", counts.running),
            ("succeeded", counts.succeeded),
            ("failed", counts.failed),
            ("cancelled", counts.cancelled),
        ] {
            let _ = writeln!(out, "boxcar_jobs{{status=\"{status}\"}} {n}");
        }
        out.push_str("# HELP boxcar_transitions_total Job lifecycle transitions seen by this host.\n# TYPE boxcar_transitions_total counter\n");
        for ((job_type, outcome), n) in self.transitions.lock().iter() {
            let _ = writeln!(
                out,
                "boxcar_transitions_total{{job_type=\"{}\",outcome=\"{outcome}\"}} {n}",
                escape(job_type)
            );
        }
        out.push_str("# HELP boxcar_run_seconds_total Time spent running jobs on this host.\n# TYPE boxcar_run_seconds_total counter\n");
        let micros = self.run_seconds_total.load(Ordering::Relaxed);
        let _ = writeln!(out, "boxcar_run_seconds_total {}", micros as f64 / 1e6);
        out
    }
}

fn escape(label: &str) -> String {
    label
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
