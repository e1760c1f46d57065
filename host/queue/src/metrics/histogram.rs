//! [`Histogram`]: a fixed-bucket histogram of durations, counted with
//! relaxed atomics, and its [`HistogramSnapshot`] for rendering.
//!
//! Invariants: observing is a bounded scan of the bucket bounds and two
//! relaxed atomic adds, never a lock; a snapshot's `count` is the sum of its
//! buckets, so the rendered `_count` always equals the `+Inf` bucket even
//! while observations race with the scrape.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds (seconds) of run durations and queue waits.
pub const WAIT_AND_RUN_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    300.0, 900.0, 3600.0,
];

/// Upper bounds (seconds) of store round trips.
pub const STORE_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

/// Upper bounds (seconds) of the sandbox's per-run overhead.
pub const OVERHEAD_BUCKETS: &[f64] = &[
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
    0.1, 0.25, 1.0,
];

/// Counts of durations per bucket, their sum in nanoseconds.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    /// One per bound, then the overflow (`+Inf`) bucket; not cumulative.
    buckets: Box<[AtomicU64]>,
    sum_nanos: AtomicU64,
}

/// A histogram read at one moment.
#[derive(Clone, Debug, PartialEq)]
pub struct HistogramSnapshot {
    /// `(le, cumulative count)` for every finite bound, ascending.
    pub buckets: Vec<(f64, u64)>,
    /// Every observation (the `+Inf` bucket).
    pub count: u64,
    /// The sum of the observations, in seconds.
    pub sum_seconds: f64,
}

impl Histogram {
    /// An empty histogram over `bounds` (ascending seconds).
    pub fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            buckets: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_nanos: AtomicU64::new(0),
        }
    }

    /// Counts one observation.
    pub fn observe(&self, value: Duration) {
        let seconds = value.as_secs_f64();
        let i = self
            .bounds
            .iter()
            .position(|le| seconds <= *le)
            .unwrap_or(self.bounds.len());
        if let Some(bucket) = self.buckets.get(i) {
            bucket.fetch_add(1, Ordering::Relaxed);
        }
        let nanos = u64::try_from(value.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// The counts so far.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut running = 0u64;
        let mut buckets = Vec::with_capacity(self.bounds.len());
        for (le, bucket) in self.bounds.iter().zip(self.buckets.iter()) {
            running = running.saturating_add(bucket.load(Ordering::Relaxed));
            buckets.push((*le, running));
        }
        let overflow = self.buckets.last().map_or(0, |b| b.load(Ordering::Relaxed));
        HistogramSnapshot {
            buckets,
            count: running.saturating_add(overflow),
            sum_seconds: self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_and_count_includes_overflow() {
        let h = Histogram::new(&[0.01, 0.1]);
        h.observe(Duration::from_millis(5));
        h.observe(Duration::from_millis(10));
        h.observe(Duration::from_millis(50));
        h.observe(Duration::from_secs(3));
        let s = h.snapshot();
        assert_eq!(s.buckets, vec![(0.01, 2), (0.1, 3)]);
        assert_eq!(s.count, 4);
        assert!((s.sum_seconds - 3.065).abs() < 1e-9, "{}", s.sum_seconds);
    }
}
