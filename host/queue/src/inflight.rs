//! Runs in flight in this process, so a cancel issued here aborts them at
//! once and the reconcile pass can find runs whose rows are no longer ours.
//!
//! Invariant: the first abort reason wins; a run's cancellation token fires
//! exactly when a reason is recorded.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

/// Why the engine stopped a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AbortReason {
    /// Cancelled by id, scope or dedupe key (the row is already `cancelled`).
    Cancelled,
    /// Renewal failed or the row is no longer ours.
    LeaseLost,
    /// Shutdown grace ran out.
    Shutdown,
}

/// One run's abort handle.
#[derive(Clone)]
pub struct RunHandle {
    /// Fires when the run must stop.
    pub token: CancellationToken,
    reason: Arc<Mutex<Option<AbortReason>>>,
}

impl RunHandle {
    fn new() -> Self {
        Self {
            token: CancellationToken::new(),
            reason: Arc::new(Mutex::new(None)),
        }
    }

    /// Records the reason (first one wins) and fires the token.
    pub fn abort(&self, reason: AbortReason) {
        let mut r = self.reason.lock();
        if r.is_none() {
            *r = Some(reason);
        }
        drop(r);
        self.token.cancel();
    }

    /// Why the run was aborted, if it was.
    pub fn reason(&self) -> Option<AbortReason> {
        *self.reason.lock()
    }
}

/// Map of job id → run handle for this process.
#[derive(Clone, Default)]
pub struct InFlight(Arc<Mutex<HashMap<String, RunHandle>>>);

impl InFlight {
    /// Registers a run and returns its handle.
    pub fn insert(&self, id: &str) -> RunHandle {
        let h = RunHandle::new();
        self.0.lock().insert(id.to_string(), h.clone());
        h
    }

    /// Forgets a run.
    pub fn remove(&self, id: &str) {
        self.0.lock().remove(id);
    }

    /// Aborts one run if it is here.
    pub fn abort(&self, id: &str, reason: AbortReason) -> bool {
        let h = self.0.lock().get(id).cloned();
        h.map(|h| h.abort(reason)).is_some()
    }

    /// Ids of runs in flight.
    pub fn ids(&self) -> Vec<String> {
        self.0.lock().keys().cloned().collect()
    }

    /// Number of runs in flight.
    pub fn len(&self) -> usize {
        self.0.lock().len()
    }

    /// Aborts every run.
    pub fn abort_all(&self, reason: AbortReason) {
        let all: Vec<RunHandle> = self.0.lock().values().cloned().collect();
        for h in all {
            h.abort(reason);
        }
    }
}
