//! How long a run's lease is provably held, readable from any thread.
//!
//! The engine moves the end forward after each successful renewal; a
//! handler (the sandbox's epoch callback, a check before the guest is
//! called) reads it to stop a guest *before* its next step once the lease
//! can no longer be proved — for instance right after this process was
//! paused past its lease and resumed, before any timer has fired.
//!
//! Invariants: the end only moves when the engine renews; `has_lapsed` is
//! a monotonic-clock comparison and an atomic load, cheap enough for every
//! epoch tick; a clock with no lease never lapses.

use std::sync::{
    atomic::{AtomicU64, Ordering},
    Arc,
};
use std::time::Instant;

/// No end: the handler's type has no lease.
const UNBOUNDED: u64 = u64::MAX;

/// The shared end of a run's lease (cloning shares it).
#[derive(Clone, Debug)]
pub struct LeaseClock {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    origin: Instant,
    /// Nanoseconds after `origin`; `UNBOUNDED` for no lease.
    valid_until: AtomicU64,
}

impl LeaseClock {
    /// A clock that never lapses (a run without a lease, a test, a replay).
    pub fn unbounded() -> Self {
        Self::with_end(None)
    }

    /// A clock whose lease is provably held until `end`, if any.
    pub fn with_end(end: Option<Instant>) -> Self {
        let clock = Self {
            inner: Arc::new(Inner {
                origin: Instant::now(),
                valid_until: AtomicU64::new(UNBOUNDED),
            }),
        };
        if let Some(end) = end {
            clock.hold_until(end);
        }
        clock
    }

    /// Records that the lease is provably held until `end`.
    pub fn hold_until(&self, end: Instant) {
        let nanos = end
            .saturating_duration_since(self.inner.origin)
            .as_nanos()
            .min(u128::from(UNBOUNDED - 1));
        self.inner.valid_until.store(
            u64::try_from(nanos).unwrap_or(UNBOUNDED - 1),
            Ordering::Release,
        );
    }

    /// True once the lease can no longer be proved held.
    pub fn has_lapsed(&self) -> bool {
        let until = self.inner.valid_until.load(Ordering::Acquire);
        if until == UNBOUNDED {
            return false;
        }
        let elapsed = self.inner.origin.elapsed().as_nanos();
        elapsed >= u128::from(until)
    }
}

impl Default for LeaseClock {
    fn default() -> Self {
        Self::unbounded()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn an_unbounded_clock_never_lapses() {
        assert!(!LeaseClock::unbounded().has_lapsed());
    }

    #[test]
    fn a_clock_lapses_at_its_end_and_a_renewal_moves_the_end() {
        let clock = LeaseClock::with_end(Some(Instant::now() + Duration::from_millis(30)));
        assert!(!clock.has_lapsed());
        std::thread::sleep(Duration::from_millis(40));
        assert!(clock.has_lapsed());
        let shared = clock.clone();
        shared.hold_until(Instant::now() + Duration::from_secs(60));
        assert!(!clock.has_lapsed());
    }

    #[test]
    fn an_end_already_past_has_lapsed() {
        let clock = LeaseClock::with_end(Some(Instant::now()));
        assert!(clock.has_lapsed());
    }
}
