//! Clocks. The in-memory store takes a [`Clock`] so tests can move time
//! (lease expiry, backoff, pool windows) without sleeping. SQLite uses the
//! system clock; Postgres uses the database's `now()` for leases.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use parking_lot::Mutex;

/// A source of "now".
pub trait Clock: Send + Sync + 'static {
    /// The current instant.
    fn now(&self) -> DateTime<Utc>;
}

/// The system clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock that only moves when told to. Cheap to clone; clones share time.
#[derive(Clone, Debug)]
pub struct ManualClock(Arc<Mutex<DateTime<Utc>>>);

impl ManualClock {
    /// A clock stopped at `start`.
    pub fn new(start: DateTime<Utc>) -> Self {
        Self(Arc::new(Mutex::new(start)))
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: std::time::Duration) {
        let mut now = self.0.lock();
        *now += chrono::Duration::from_std(by).unwrap_or(chrono::Duration::MAX);
    }

    /// Sets the clock.
    pub fn set(&self, to: DateTime<Utc>) {
        *self.0.lock() = to;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock()
    }
}
