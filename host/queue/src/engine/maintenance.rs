//! Maintenance services of one worker, each with a `run_once` tests call
//! directly: the reconciler (aborts local runs whose rows are no longer
//! ours — cancelled or taken over), the rescuer (recovers expired leases
//! fleet-wide), and the opt-in retention pruner.
//!
//! Invariant: all three only act through the port; they run every
//! `poll_interval` (retention on its own `sweep_interval`) and a failure is
//! logged and retried at the next tick, never fatal.

use std::sync::Arc;

use chrono::Utc;
use tokio_util::sync::CancellationToken;

use super::Engine;
use crate::inflight::AbortReason;
use crate::job::JobStatus;
use crate::observer::{LifecycleEvent, LifecycleOutcome};
use crate::store::{PruneParams, RescueParams, StoreError};
use crate::time;

/// Most rows one rescue pass recovers.
const RESCUE_BATCH: u32 = 1000;

/// Handle on a worker's maintenance services.
#[derive(Clone)]
pub struct Maintenance {
    pub(crate) engine: Arc<Engine>,
}

impl Maintenance {
    /// Aborts local runs whose rows are no longer running under this
    /// worker's lease in the run's own claim. Returns how many were aborted.
    ///
    /// # Errors
    /// The store failed.
    pub async fn reconcile_once(&self) -> Result<usize, StoreError> {
        let e = &self.engine;
        let claims = e.queue.inflight().claims();
        if claims.is_empty() {
            return Ok(0);
        }
        let owned = e.store.still_owned(&e.opts.worker_id, &claims).await?;
        let mut n = 0;
        for c in claims.iter().filter(|c| !owned.contains(&c.id)) {
            if e.queue.inflight().abort(&c.id, AbortReason::LeaseLost) {
                n += 1;
            }
        }
        Ok(n)
    }

    /// Recovers expired leases (any worker's). Returns how many rows.
    ///
    /// # Errors
    /// The store failed.
    pub async fn rescue_once(&self) -> Result<usize, StoreError> {
        let e = &self.engine;
        let rescued = e
            .store
            .rescue(RescueParams {
                limit: RESCUE_BATCH,
            })
            .await?;
        for r in &rescued {
            let failed = r.status == JobStatus::Failed;
            e.queue.emit(LifecycleEvent {
                job_id: r.id.clone(),
                job_type: r.job_type.clone(),
                scope: r.scope.clone(),
                outcome: LifecycleOutcome::Stalled,
                attempts: r.attempts,
                error: r.last_error.clone(),
                duration: None,
            });
            if failed {
                e.queue.emit(LifecycleEvent {
                    job_id: r.id.clone(),
                    job_type: r.job_type.clone(),
                    scope: r.scope.clone(),
                    outcome: LifecycleOutcome::FailedTerminal,
                    attempts: r.attempts,
                    error: r.last_error.clone(),
                    duration: None,
                });
            }
        }
        if !rescued.is_empty() {
            e.queue.wake();
        }
        Ok(rescued.len())
    }

    /// Prunes per the retention policy; `Ok(0)` when retention is off.
    ///
    /// # Errors
    /// The store failed.
    pub async fn prune_once(&self) -> Result<u64, StoreError> {
        let e = &self.engine;
        let Some(r) = &e.opts.retention else {
            return Ok(0);
        };
        let older_than = time::before(Utc::now(), r.older_than);
        e.store
            .prune(PruneParams {
                older_than,
                statuses: r.statuses.clone(),
            })
            .await
    }

    pub(crate) async fn run(self, stop: CancellationToken) {
        let e = self.engine.clone();
        let mut tick = tokio::time::interval(e.opts.poll_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let sweep_every = e.opts.retention.as_ref().map(|r| r.sweep_interval);
        let mut sweep = tokio::time::interval(sweep_every.unwrap_or(e.opts.poll_interval));
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = tick.tick() => {
                    if let Err(err) = self.reconcile_once().await {
                        tracing::warn!(error = %err, "reconcile pass failed");
                    }
                    if let Err(err) = self.rescue_once().await {
                        tracing::warn!(error = %err, "rescue pass failed");
                    }
                }
                _ = sweep.tick(), if sweep_every.is_some() => {
                    match self.prune_once().await {
                        Ok(n) if n > 0 => tracing::info!(pruned = n, "retention sweep"),
                        Ok(_) => {}
                        Err(err) => tracing::warn!(error = %err, "retention sweep failed"),
                    }
                }
            }
        }
    }
}
