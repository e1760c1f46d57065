//! Claim-ahead: for an unguarded type whose runs are short, the dispatcher
//! claims more jobs than it has free slots and keeps the extra ones in a
//! bounded local buffer, started as slots free. Claims then come in larger
//! batches (one write per several slots' worth of jobs instead of one per
//! freed slot or two), and the next jobs are at hand while the claim for
//! the ones after them is on its way to the store.
//!
//! How many a type may hold ahead ([`ahead_for`]): as many as its slots
//! are expected to start within the worker's `claim_ahead` horizon, from
//! the type's recent run times (an exponential average of this process's
//! runs), capped at [`AHEAD_PER_SLOT`] per slot and [`MAX_AHEAD_PER_TYPE`]
//! per type. A type with no finished run yet, with runs longer than the
//! horizon, or with renewed leases (`lease_duration`) holds nothing ahead:
//! a buffered job's lease is not renewed, and a long job's buffered
//! successors would only wait here while another host could run them.
//!
//! Invariants:
//! - A buffered job is in the in-flight table from its claim on, so a
//!   cancel, or a lost lease found by reconcile, reaches it; `run_job`
//!   never starts a job whose handle was aborted or whose claim's lease
//!   (counted from before the claim was sent) has run out.
//! - Buffered jobs are started in claim order, each with the handler entry
//!   (and so the version) it was claimed for.
//! - When the dispatcher stops, every buffered job is released (its lease
//!   and attempt given back) and leaves the in-flight table.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::inflight::RunHandle;
use crate::job::Job;
use crate::registry::{HandlerEntry, HandlerSettings};

/// At most this many jobs per concurrency slot are held ahead. Claims
/// come in batches of at least half of what a type may hold, and a claim
/// costs the store mostly per statement, not per job: at concurrency 16, a
/// cap of 32 (claims of about 256 instead of 64) drained faster than 7 in
/// six of six paired rounds on SQLite (median pair +13 %) and four of six
/// on Postgres (+4 %). Within the cap, the horizon decides ([`ahead_for`]).
pub(super) const AHEAD_PER_SLOT: u32 = 32;

/// At most this many jobs of one type are held ahead, whatever its
/// concurrency: the buffered jobs' payloads are in this process's memory,
/// their leases are not renewed, and other hosts cannot run them.
pub(super) const MAX_AHEAD_PER_TYPE: u32 = 1024;

/// Weight of the newest run in a type's average run time.
const NEWEST_RUN_WEIGHT: f64 = 0.2;

/// A claimed job waiting here for a free slot.
pub(super) struct Buffered {
    pub job: Job,
    pub entry: Arc<HandlerEntry>,
    pub handle: RunHandle,
    pub lease_deadline: Option<Instant>,
}

/// The buffered jobs ([`Buffered`]; generic for tests), per type, in claim
/// order.
pub(super) struct ClaimAhead<T = Buffered> {
    buffers: HashMap<String, VecDeque<T>>,
}

impl<T> Default for ClaimAhead<T> {
    fn default() -> Self {
        Self {
            buffers: HashMap::new(),
        }
    }
}

impl<T> ClaimAhead<T> {
    /// Jobs of `job_type` waiting here.
    pub(super) fn buffered(&self, job_type: &str) -> u32 {
        self.buffers
            .get(job_type)
            .map_or(0, |b| u32::try_from(b.len()).unwrap_or(u32::MAX))
    }

    /// Adds claimed jobs of `job_type` behind those already waiting.
    pub(super) fn push(&mut self, job_type: &str, jobs: impl IntoIterator<Item = T>) {
        let buffer = self.buffers.entry(job_type.to_string()).or_default();
        buffer.extend(jobs);
        if buffer.is_empty() {
            self.buffers.remove(job_type);
        }
    }

    /// Takes up to `n` of `job_type`'s oldest waiting jobs.
    pub(super) fn take(&mut self, job_type: &str, n: u32) -> Vec<T> {
        let Some(buffer) = self.buffers.get_mut(job_type) else {
            return Vec::new();
        };
        let n = buffer.len().min(usize::try_from(n).unwrap_or(usize::MAX));
        let taken: Vec<T> = buffer.drain(..n).collect();
        if buffer.is_empty() {
            self.buffers.remove(job_type);
        }
        taken
    }

    /// The types with waiting jobs, in name order.
    pub(super) fn types(&self) -> Vec<String> {
        let mut types: Vec<String> = self.buffers.keys().cloned().collect();
        types.sort();
        types
    }

    /// Takes every waiting job of `job_type`.
    pub(super) fn take_type(&mut self, job_type: &str) -> Vec<T> {
        self.buffers
            .remove(job_type)
            .map(Vec::from)
            .unwrap_or_default()
    }

    /// Takes every waiting job.
    pub(super) fn take_all(&mut self) -> Vec<T> {
        self.buffers.drain().flat_map(|(_, b)| b).collect()
    }
}

/// How many jobs a type may hold ahead of its slots: those its slots are
/// expected to start within `horizon` at `average_run` each, capped at
/// [`AHEAD_PER_SLOT`] per slot and [`MAX_AHEAD_PER_TYPE`] in all; none
/// without an average, with a zero horizon, or with renewed leases.
pub(super) fn ahead_for(
    settings: &HandlerSettings,
    average_run: Option<Duration>,
    horizon: Duration,
) -> u32 {
    if settings.lease_duration.is_some() || horizon.is_zero() {
        return 0;
    }
    let Some(average) = average_run else {
        return 0;
    };
    let cap = settings
        .concurrency
        .saturating_mul(AHEAD_PER_SLOT)
        .min(MAX_AHEAD_PER_TYPE);
    let per_slot = horizon.as_secs_f64() / average.as_secs_f64().max(1e-6);
    let expected = f64::from(settings.concurrency) * per_slot;
    if expected >= f64::from(cap) {
        cap
    } else {
        // In range: 0 ≤ expected < cap ≤ u32::MAX.
        expected as u32
    }
}

/// Whether a type with `running` runs, `buffered` waiting jobs and room
/// for `ahead` more should claim now, and how many: it claims when a slot
/// is free and nothing waits, or when what it holds has fallen to half of
/// what it may hold, so that claims come in batches of at least half.
pub(super) fn claim_size(concurrency: u32, running: u32, buffered: u32, ahead: u32) -> u32 {
    let capacity = concurrency.saturating_add(ahead);
    let held = running.saturating_add(buffered);
    let want = capacity.saturating_sub(held);
    let free = concurrency.saturating_sub(running);
    let slot_idle = free > 0 && buffered == 0;
    let half_empty = held.saturating_mul(2) <= capacity;
    if want > 0 && (slot_idle || half_empty) {
        want
    } else {
        0
    }
}

/// Folds one run's duration into a type's average run time.
pub(super) fn average_with(previous: Option<Duration>, run: Duration) -> Duration {
    match previous {
        None => run,
        Some(avg) => avg.mul_f64(1.0 - NEWEST_RUN_WEIGHT) + run.mul_f64(NEWEST_RUN_WEIGHT),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(concurrency: u32) -> HandlerSettings {
        HandlerSettings {
            concurrency,
            ..HandlerSettings::default()
        }
    }

    const HORIZON: Duration = Duration::from_millis(20);

    #[test]
    fn short_runs_hold_up_to_the_cap_and_long_runs_nothing() {
        let s = settings(16);
        assert_eq!(ahead_for(&s, Some(Duration::from_micros(50)), HORIZON), 512);
        assert_eq!(ahead_for(&s, Some(Duration::from_millis(1)), HORIZON), 320);
        assert_eq!(ahead_for(&s, Some(Duration::from_millis(10)), HORIZON), 32);
        assert_eq!(ahead_for(&s, Some(Duration::from_millis(200)), HORIZON), 1);
        assert_eq!(ahead_for(&s, Some(Duration::from_secs(1)), HORIZON), 0);
        assert_eq!(ahead_for(&s, Some(Duration::ZERO), HORIZON), 512);
    }

    #[test]
    fn a_wide_type_holds_no_more_than_the_per_type_cap() {
        let short = Some(Duration::from_micros(50));
        assert_eq!(
            ahead_for(&settings(2_000), short, HORIZON),
            MAX_AHEAD_PER_TYPE
        );
        assert_eq!(
            ahead_for(&settings(u32::MAX), short, HORIZON),
            MAX_AHEAD_PER_TYPE
        );
    }

    #[test]
    fn nothing_ahead_before_a_run_with_renewed_leases_or_when_off() {
        let mut s = settings(16);
        assert_eq!(ahead_for(&s, None, HORIZON), 0);
        assert_eq!(ahead_for(&s, Some(Duration::ZERO), Duration::ZERO), 0);
        s.lease_duration = Some(Duration::from_secs(30));
        assert_eq!(ahead_for(&s, Some(Duration::ZERO), HORIZON), 0);
    }

    #[test]
    fn claims_come_when_a_slot_idles_or_half_is_gone() {
        // Without claim-ahead: exactly the free slots, whenever one is free.
        assert_eq!(claim_size(16, 15, 0, 0), 1);
        assert_eq!(claim_size(16, 16, 0, 0), 0);
        // All slots busy, nothing waiting: claim the whole buffer ahead.
        assert_eq!(claim_size(16, 16, 0, 112), 112);
        // Buffer above half: wait, even with free slots (they start from it).
        assert_eq!(claim_size(16, 10, 60, 112), 0);
        // Down to half of the 128 it may hold: refill.
        assert_eq!(claim_size(16, 16, 48, 112), 64);
        // A free slot with nothing waiting always claims.
        assert_eq!(claim_size(16, 15, 0, 2), 3);
    }

    #[test]
    fn buffers_keep_claim_order_per_type() {
        let mut ahead: ClaimAhead<u32> = ClaimAhead::default();
        assert!(ahead.take("a", 3).is_empty());
        ahead.push("b", [1, 2, 3]);
        ahead.push("a", [10]);
        ahead.push("b", [4]);
        ahead.push("c", []);
        assert_eq!(ahead.types(), ["a", "b"]);
        assert_eq!(ahead.buffered("b"), 4);
        assert_eq!(ahead.take("b", 2), [1, 2]);
        assert_eq!(ahead.take("b", 5), [3, 4]);
        assert_eq!(ahead.types(), ["a"]);
        assert_eq!(ahead.take_type("a"), [10]);
        ahead.push("d", [7]);
        assert_eq!(ahead.take_all(), [7]);
        assert!(ahead.types().is_empty());
    }

    #[test]
    fn the_average_moves_a_fifth_of_the_way_to_each_run() {
        let first = average_with(None, Duration::from_millis(10));
        assert_eq!(first, Duration::from_millis(10));
        let next = average_with(Some(first), Duration::from_millis(20));
        assert_eq!(next, Duration::from_millis(12));
    }
}
