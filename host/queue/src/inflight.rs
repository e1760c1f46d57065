//! Runs in flight in this process, so a cancel issued here aborts them at
//! once and the reconcile pass can find runs whose rows are no longer ours.
//!
//! Invariants: the first abort reason wins; a run's cancellation token fires
//! exactly when a reason is recorded. A run is known by its claim (job id
//! and attempt): when this worker claims a job again while an older run of
//! it is still winding down, the newer claim replaces the entry, and the
//! older run's exit does not remove it.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use crate::store::ClaimRef;

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

/// Map of job id → (the run's attempt, its handle) for this process.
#[derive(Clone, Default)]
pub struct InFlight(Arc<Mutex<HashMap<String, (u32, RunHandle)>>>);

impl InFlight {
    /// Registers the run of `claim` and returns its handle.
    pub fn insert(&self, claim: &ClaimRef) -> RunHandle {
        let h = RunHandle::new();
        self.0
            .lock()
            .insert(claim.id.clone(), (claim.attempt, h.clone()));
        h
    }

    /// Forgets the run of `claim` (not a newer claim's run of the job).
    pub fn remove(&self, claim: &ClaimRef) {
        let mut runs = self.0.lock();
        if runs
            .get(&claim.id)
            .is_some_and(|(a, _)| *a == claim.attempt)
        {
            runs.remove(&claim.id);
        }
    }

    /// Aborts the job's run if it is here.
    pub fn abort(&self, id: &str, reason: AbortReason) -> bool {
        let h = self.0.lock().get(id).map(|(_, h)| h.clone());
        h.map(|h| h.abort(reason)).is_some()
    }

    /// The claims of the runs in flight.
    pub fn claims(&self) -> Vec<ClaimRef> {
        self.0
            .lock()
            .iter()
            .map(|(id, (attempt, _))| ClaimRef {
                id: id.clone(),
                attempt: *attempt,
            })
            .collect()
    }

    /// Number of runs in flight.
    pub fn len(&self) -> usize {
        self.0.lock().len()
    }

    /// Aborts every run.
    pub fn abort_all(&self, reason: AbortReason) {
        let all: Vec<RunHandle> = self.0.lock().values().map(|(_, h)| h.clone()).collect();
        for h in all {
            h.abort(reason);
        }
    }
}
