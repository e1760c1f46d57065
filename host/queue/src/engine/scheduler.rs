//! The scheduler service: enqueues the job of every due schedule
//! tick, fleet-wide exactly once.
//!
//! Invariants:
//! - it acts only through the port: [`JobStore::fire_schedule`] moves
//!   `next_run_at` from the tick to the next tick in the enqueue's
//!   transaction, so any number of hosts running this service produce one
//!   job per tick;
//! - time is the store's clock (the database's `now()` on Postgres);
//! - the next tick is computed strictly after now, so a schedule that was
//!   due several times while no host ran gets one catch-up job;
//! - a schedule's job is enqueued whether or not any host handles its type
//!   (it waits); the job carries `schedule_id` and is due at its tick;
//! - a pass reads only due schedules (indexed on `next_run_at`), at most
//!   [`DUE_PER_PASS`];
//! - a failure is logged and retried at the next pass, never fatal.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::queue::Queue;
use crate::schedule::{Schedule, ScheduleDef, ScheduleRecord};
use crate::store::schedules::{
    DeclaredSchedule, FireSchedule, ReconcileReport, ReconcileSchedules,
};
use crate::store::{InsertJob, JobStore, StoreError};

/// Most due schedules one pass fires; the rest are fired by the next pass.
pub const DUE_PER_PASS: u32 = 1_000;

/// A job a scheduler pass enqueued.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FiredTick {
    /// The schedule.
    pub schedule_id: String,
    /// The tick it ran.
    pub tick: chrono::DateTime<chrono::Utc>,
    /// The new job.
    pub job_id: String,
}

/// Enqueues due schedule ticks; cheap to clone.
#[derive(Clone)]
pub struct Scheduler {
    queue: Queue,
}

impl Scheduler {
    /// A scheduler enqueuing through `queue`.
    pub fn new(queue: Queue) -> Self {
        Self { queue }
    }

    fn store(&self) -> &Arc<dyn JobStore> {
        self.queue.store()
    }

    /// Stores `declared` as the schedules of `owner`: creates new ones,
    /// updates edited ones in place (their next tick recomputed from now),
    /// deletes the owner's schedules that are no longer declared.
    ///
    /// # Errors
    /// The store failed; nothing changed.
    pub async fn reconcile(
        &self,
        owner: &str,
        declared: &[Schedule],
    ) -> Result<ReconcileReport, StoreError> {
        let now = self.store().now().await?;
        let declared = declared
            .iter()
            .map(|s| DeclaredSchedule {
                def: s.def().clone(),
                first_run: s.first_run(now),
            })
            .collect();
        self.store()
            .reconcile_schedules(ReconcileSchedules {
                owner: owner.to_string(),
                declared,
            })
            .await
    }

    /// Every stored schedule, by id.
    ///
    /// # Errors
    /// The store failed.
    pub async fn list(&self) -> Result<Vec<ScheduleRecord>, StoreError> {
        self.store().list_schedules().await
    }

    /// One pass: fires the schedules whose `next_run_at` is due (at most
    /// [`DUE_PER_PASS`], earliest first; the store reads only due rows).
    /// Returns the jobs this pass enqueued (ticks another host won are
    /// skipped).
    ///
    /// # Errors
    /// The store failed; due ticks are retried at the next pass.
    pub async fn run_once(&self) -> Result<Vec<FiredTick>, StoreError> {
        let now = self.store().now().await?;
        let mut fired = Vec::new();
        for rec in self.store().due_schedules(now, DUE_PER_PASS).await? {
            let Some(tick) = rec.next_run_at.filter(|t| *t <= now) else {
                continue;
            };
            let schedule = match Schedule::from_def(&rec.def) {
                Ok(s) => s,
                Err(e) => {
                    tracing::error!(error = %e, "stored schedule is invalid; fix its declaration");
                    continue;
                }
            };
            let job = self.job_for(&rec.def, tick);
            let job_id = job.id.clone();
            let fire = FireSchedule {
                schedule_id: rec.def.id.clone(),
                tick,
                next_run_at: schedule.next_after(tick, now),
                job,
            };
            if self.store().fire_schedule(fire).await?.is_some() {
                tracing::debug!(schedule_id = %rec.def.id, %tick, %job_id, "schedule fired");
                fired.push(FiredTick {
                    schedule_id: rec.def.id.clone(),
                    tick,
                    job_id,
                });
            }
        }
        if !fired.is_empty() {
            self.queue.wake();
        }
        Ok(fired)
    }

    /// The tick's job: due at the tick (a catch-up job is due at once).
    fn job_for(&self, def: &ScheduleDef, tick: chrono::DateTime<chrono::Utc>) -> InsertJob {
        InsertJob {
            id: uuid::Uuid::now_v7().to_string(),
            job_type: def.job_type.clone(),
            payload: def.payload.clone(),
            scope: None,
            dedupe_key: None,
            max_attempts: None,
            default_max_attempts: self.queue.options().default_max_attempts,
            run_at: Some(tick),
            delay: Duration::ZERO,
            priority: 0,
            expires_at: None,
            ttl: None,
            parent_id: None,
            schedule_id: Some(def.id.clone()),
            traceparent: None,
        }
    }

    /// Runs [`Scheduler::run_once`] every `interval` until the returned
    /// handle is shut down.
    pub fn start(self, interval: Duration) -> SchedulerHandle {
        let stop = CancellationToken::new();
        let token = stop.clone();
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = token.cancelled() => break,
                    _ = tick.tick() => {
                        if let Err(e) = self.run_once().await {
                            tracing::warn!(error = %e, "scheduler pass failed; retrying at the next tick");
                        }
                    }
                }
            }
        });
        SchedulerHandle { stop, task }
    }
}

/// A running scheduler service.
pub struct SchedulerHandle {
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl SchedulerHandle {
    /// Stops the service after its current pass.
    pub async fn shutdown(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}
