//! The producer and administration facade: enqueue, inspect, cancel, wait,
//! retry, prune, handler events. Cheap to clone; all clones share one store.
//!
//! Invariants: every job is validated here (fields, payload, known type,
//! payload schema) before it reaches the store; cancels abort matching runs of this process at once and reach
//! other processes through their reconcile pass; the facade holds no SQL.

mod history;
mod sent;
mod wait;

use std::sync::Arc;

use chrono::{DateTime, Utc};
use parking_lot::RwLock;
use tokio::sync::Notify;

use self::sent::Sent;

use crate::guards::{Blocker, ClaimGuards, PoolGuard, PoolStatus};
use crate::handler::Scope;
use crate::inflight::{AbortReason, InFlight};
use crate::job::{
    AddResult, HandlerEvent, HandlerEventKind, Job, JobFilter, JobStatus, NewJob, StatusCounts,
};
use crate::metrics::{QueueMetrics, StoreOp};
use crate::observer::{LifecycleEvent, LifecycleObserver, LifecycleOutcome, ObserverHub};
use crate::options::{OptionsError, QueueOptions};
use crate::registry::{PoolConfig, Registry};
use crate::store::{
    CancelParams, CancelTarget, CancelledJob, InsertJob, JobStore, PruneParams, StoreError, TxConn,
};
use crate::validate::{check_fields, check_payload, EnqueueError};

/// A queue operation failed.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// The job was refused before anything was written.
    #[error(transparent)]
    Enqueue(#[from] EnqueueError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// `wait` ended without a terminal job.
#[derive(Debug, thiserror::Error)]
pub enum WaitError {
    /// The job did not finish in time.
    #[error("job `{0}` did not finish within the wait timeout")]
    Timeout(String),
    /// No such job.
    #[error("job `{0}` does not exist")]
    NotFound(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

struct Inner {
    store: Arc<dyn JobStore>,
    opts: QueueOptions,
    registry: RwLock<Option<Arc<Registry>>>,
    observers: ObserverHub,
    inflight: InFlight,
    wake: Notify,
    woken: parking_lot::Mutex<Woken>,
    metrics: Arc<QueueMetrics>,
}

/// What the dispatcher was woken for since it last looked: the job types
/// enqueued in this process, or `any` when work of any type may have
/// become due (e.g. failed jobs retried).
#[derive(Debug, Default)]
pub(crate) struct Woken {
    /// Any type may have due work: ask the store.
    pub(crate) any: bool,
    /// Types that got jobs.
    pub(crate) types: std::collections::HashSet<String>,
}

/// The queue facade. See the module docs.
#[derive(Clone)]
pub struct Queue {
    inner: Arc<Inner>,
}

impl Queue {
    /// A queue over `store`.
    ///
    /// # Errors
    /// An option is invalid.
    pub fn new(store: Arc<dyn JobStore>, opts: QueueOptions) -> Result<Self, OptionsError> {
        opts.validate()?;
        Ok(Self {
            inner: Arc::new(Inner {
                store,
                opts,
                registry: RwLock::new(None),
                observers: ObserverHub::default(),
                inflight: InFlight::default(),
                wake: Notify::new(),
                woken: parking_lot::Mutex::new(Woken::default()),
                metrics: Arc::default(),
            }),
        })
    }

    /// Enables known-type and payload-schema checks against `registry`
    /// (unless `check_known_types` is off). A worker attaches its registry.
    pub fn attach_registry(&self, registry: Arc<Registry>) {
        *self.inner.registry.write() = Some(registry);
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn JobStore> {
        &self.inner.store
    }

    /// The options.
    pub fn options(&self) -> &QueueOptions {
        &self.inner.opts
    }

    /// What this process measured of the queue's work.
    pub fn metrics(&self) -> &Arc<QueueMetrics> {
        &self.inner.metrics
    }

    /// Adds a lifecycle observer.
    pub fn observe(&self, observer: Arc<dyn LifecycleObserver>) {
        self.inner.observers.add(observer);
    }

    /// Lifecycle events observers missed because they fell more than the
    /// delivery channel's capacity behind (the queue never waits for them).
    pub fn dropped_lifecycle_events(&self) -> u64 {
        self.inner.observers.dropped()
    }

    pub(crate) fn emit(&self, ev: LifecycleEvent) {
        self.inner.observers.emit(ev);
    }

    pub(crate) fn inflight(&self) -> &InFlight {
        &self.inner.inflight
    }

    pub(crate) fn wake_notify(&self) -> &Notify {
        &self.inner.wake
    }

    /// Wakes this process's dispatcher to look for due jobs of any type.
    pub fn wake(&self) {
        self.inner.woken.lock().any = true;
        self.inner.wake.notify_one();
    }

    /// Wakes this process's dispatcher for jobs of these types (done by
    /// every local enqueue), so it claims for them without asking the store
    /// which types are due.
    pub(crate) fn wake_types<'a>(&self, types: impl IntoIterator<Item = &'a str>) {
        {
            let mut w = self.inner.woken.lock();
            for t in types {
                if !w.types.contains(t) {
                    w.types.insert(t.to_string());
                }
            }
        }
        self.inner.wake.notify_one();
    }

    /// What the dispatcher was woken for since the last call.
    pub(crate) fn take_woken(&self) -> Woken {
        std::mem::take(&mut *self.inner.woken.lock())
    }

    /// Validates a new job and resolves what this process knows of its
    /// defaults: an unset attempt budget takes this host's manifest of the
    /// type, else the store takes the type's newest deploy at insert (see
    /// [`crate::store::deployed_types`]), else the queue's default.
    ///
    /// # Errors
    /// The first enqueue rule the job breaks.
    pub fn prepare(&self, job: NewJob) -> Result<InsertJob, EnqueueError> {
        check_fields(&job)?;
        let value = check_payload(&job.job_type, &job.payload, &self.inner.opts.payload_limits)?;
        let registry = self.inner.registry.read().clone();
        let mut max_attempts = job.max_attempts;
        if let Some(reg) = registry {
            if self.inner.opts.check_known_types && !reg.is_known(&job.job_type) {
                return Err(EnqueueError::UnknownJobType {
                    job_type: job.job_type,
                });
            }
            if let Some(v) = reg.validator(&job.job_type) {
                v.validate(&value)
                    .map_err(|f| EnqueueError::SchemaViolation {
                        job_type: job.job_type.clone(),
                        pointer: f.pointer,
                        reason: f.reason,
                    })?;
            }
            max_attempts = max_attempts.or_else(|| reg.max_attempts(&job.job_type));
        }
        Ok(InsertJob {
            id: uuid::Uuid::now_v7().to_string(),
            job_type: job.job_type,
            payload: job.payload,
            scope: job.scope,
            dedupe_key: job.dedupe_key,
            max_attempts,
            default_max_attempts: self.inner.opts.default_max_attempts,
            run_at: job.run_at,
            delay: job.delay.unwrap_or_default(),
            priority: job.priority,
            expires_at: job.expires_at,
            ttl: job.ttl,
            parent_id: job.parent_id,
            schedule_id: job.schedule_id,
            traceparent: job.traceparent,
        })
    }

    /// Enqueues one job.
    ///
    /// # Errors
    /// Validation failed (nothing written) or the store failed.
    pub async fn add(&self, job: NewJob) -> Result<AddResult, QueueError> {
        let mut out = self.add_many(vec![job]).await?;
        out.pop()
            .ok_or_else(|| QueueError::Store(StoreError::Corrupt("insert returned no row".into())))
    }

    /// Enqueues many jobs in one round trip; all are validated first.
    ///
    /// # Errors
    /// Any job fails validation (nothing written) or the store failed.
    pub async fn add_many(&self, jobs: Vec<NewJob>) -> Result<Vec<AddResult>, QueueError> {
        let prepared = jobs
            .into_iter()
            .map(|j| self.prepare(j))
            .collect::<Result<Vec<_>, _>>()?;
        self.add_prepared(prepared).await
    }

    /// Enqueues every valid job of `jobs` in one transaction, and answers
    /// for each, in order, its result or the enqueue rule it broke: one
    /// invalid job does not keep the others out (a producer's batch).
    ///
    /// # Errors
    /// The store failed: nothing was written.
    pub async fn add_each(
        &self,
        jobs: Vec<NewJob>,
    ) -> Result<Vec<Result<AddResult, EnqueueError>>, QueueError> {
        let mut verdicts = Vec::with_capacity(jobs.len());
        let mut prepared = Vec::with_capacity(jobs.len());
        for job in jobs {
            match self.prepare(job) {
                Ok(insert) => {
                    prepared.push(insert);
                    verdicts.push(Ok(()));
                }
                Err(refused) => verdicts.push(Err(refused)),
            }
        }
        let expected = prepared.len();
        let added = if prepared.is_empty() {
            Vec::new()
        } else {
            self.add_prepared(prepared).await?
        };
        if added.len() != expected {
            return Err(QueueError::Store(StoreError::Corrupt(format!(
                "inserting {expected} jobs returned {} rows",
                added.len()
            ))));
        }
        let mut added = added.into_iter();
        Ok(verdicts
            .into_iter()
            .filter_map(|verdict| match verdict {
                Ok(()) => added.next().map(Ok),
                Err(refused) => Some(Err(refused)),
            })
            .collect())
    }

    /// Inserts jobs that went through [`Queue::prepare`] (and were possibly
    /// adjusted since, e.g. a guest's namespaced dedupe key).
    pub(crate) async fn add_prepared(
        &self,
        prepared: Vec<InsertJob>,
    ) -> Result<Vec<AddResult>, QueueError> {
        let sent = Sent::of(&prepared);
        let out = self
            .inner
            .metrics
            .timed(StoreOp::Enqueue, self.inner.store.add_many(prepared))
            .await
            .map_err(|e| sent.error(e))?;
        self.wake_types(sent.types.iter().map(String::as_str));
        Ok(out)
    }

    /// Enqueues a parent and its children atomically; the parent becomes
    /// claimable once every child is terminal. Returns the parent's id.
    ///
    /// # Errors
    /// Validation failed or the store failed.
    pub async fn add_flow(
        &self,
        parent: NewJob,
        children: Vec<NewJob>,
    ) -> Result<String, QueueError> {
        let parent = self.prepare(parent)?;
        let parent_id = parent.id.clone();
        let mut all = vec![parent];
        for c in children {
            let mut c = self.prepare(c)?;
            c.parent_id = Some(parent_id.clone());
            all.push(c);
        }
        let sent = Sent::of(&all);
        self.inner
            .metrics
            .timed(StoreOp::Enqueue, self.inner.store.add_many(all))
            .await
            .map_err(|e| sent.error(e))?;
        self.wake_types(sent.types.iter().map(String::as_str));
        Ok(parent_id)
    }

    /// Enqueues through the caller's own transaction (SQLite or Postgres on
    /// the same database): rolled back with it, committed with it.
    ///
    /// # Errors
    /// Validation failed, the connection is of another backend, or the write
    /// failed.
    pub async fn add_in_tx<'c>(
        &self,
        conn: impl Into<TxConn<'c>>,
        job: NewJob,
    ) -> Result<AddResult, QueueError> {
        let prepared = vec![self.prepare(job)?];
        let sent = Sent::of(&prepared);
        let mut out = self
            .inner
            .store
            .add_in_tx(conn.into(), prepared)
            .await
            .map_err(|e| sent.error(e))?;
        out.pop()
            .ok_or_else(|| QueueError::Store(StoreError::Corrupt("insert returned no row".into())))
    }

    /// One job.
    ///
    /// # Errors
    /// The store failed.
    pub async fn get(&self, id: &str) -> Result<Option<Job>, StoreError> {
        self.inner.store.get(id).await
    }

    /// Jobs matching the filter (default limit 100), oldest first or
    /// newest first; pass [`JobCursor::next_page`](crate::JobCursor::next_page) of a page as the
    /// filter's `after` for the next one.
    ///
    /// # Errors
    /// The store failed.
    pub async fn find(&self, filter: &JobFilter) -> Result<Vec<Job>, StoreError> {
        self.inner.store.find(filter).await
    }

    /// Jobs of one scope.
    ///
    /// # Errors
    /// The store failed.
    pub async fn find_for_scope(&self, scope: Scope) -> Result<Vec<Job>, StoreError> {
        self.inner.store.find(&JobFilter::for_scope(scope)).await
    }

    /// Number of jobs per status.
    ///
    /// # Errors
    /// The store failed.
    pub async fn count_by_status(&self) -> Result<StatusCounts, StoreError> {
        self.inner.store.count_by_status().await
    }

    /// What keeps a due pending job from being claimed under `guards` (the
    /// guards its type's handler declares and its pools), as the claim
    /// would see it now; `None` when the job is not pending, not yet due, or
    /// admitted.
    ///
    /// # Errors
    /// The store failed.
    pub async fn blocked_by(
        &self,
        job: &Job,
        guards: &ClaimGuards,
    ) -> Result<Option<Blocker>, StoreError> {
        if job.status != JobStatus::Pending || guards.is_empty() {
            return Ok(None);
        }
        if job.run_at > self.inner.store.now().await? {
            return Ok(None);
        }
        self.inner.store.blocked_by(job, guards).await
    }

    /// Per declared pool, in the given order: current occupancy (summed
    /// cost of members holding live leases) and the rate budget spent in the
    /// open window, with when it resets.
    ///
    /// # Errors
    /// The store failed.
    pub async fn pool_status(&self, pools: &[PoolConfig]) -> Result<Vec<PoolStatus>, StoreError> {
        let guards: Vec<PoolGuard> = pools.iter().map(PoolConfig::status_guard).collect();
        self.inner.store.pool_status(&guards).await
    }

    async fn cancel_target(
        &self,
        target: CancelTarget,
        reason: &str,
    ) -> Result<Vec<CancelledJob>, StoreError> {
        let out = self
            .inner
            .store
            .cancel(CancelParams {
                target,
                reason: reason.to_string(),
            })
            .await?;
        for c in &out {
            let aborted_here =
                c.was_running && self.inner.inflight.abort(&c.id, AbortReason::Cancelled);
            if !aborted_here {
                self.emit(LifecycleEvent {
                    job_id: c.id.clone(),
                    job_type: c.job_type.clone(),
                    scope: c.scope.clone(),
                    outcome: LifecycleOutcome::Cancelled,
                    attempts: c.attempts,
                    error: Some(reason.to_string()),
                    duration: None,
                });
            }
        }
        Ok(out)
    }

    /// Cancels one job (and its unfinished children); `true` if it was live.
    ///
    /// # Errors
    /// The store failed.
    pub async fn cancel(&self, id: &str, reason: &str) -> Result<bool, StoreError> {
        let out = self
            .cancel_target(CancelTarget::Ids(vec![id.to_string()]), reason)
            .await?;
        Ok(out.iter().any(|c| c.id == id))
    }

    /// Cancels every live job of a scope; running ones are aborted (here at
    /// once, elsewhere within one poll interval). Returns how many.
    ///
    /// # Errors
    /// The store failed.
    pub async fn cancel_for_scope(&self, scope: Scope, reason: &str) -> Result<usize, StoreError> {
        let t = CancelTarget::Scope {
            scope,
            include_running: true,
        };
        Ok(self.cancel_target(t, reason).await?.len())
    }

    /// Cancels pending jobs of a scope; running work is left alone.
    ///
    /// # Errors
    /// The store failed.
    pub async fn cancel_pending_for_scope(
        &self,
        scope: Scope,
        reason: &str,
    ) -> Result<usize, StoreError> {
        let t = CancelTarget::Scope {
            scope,
            include_running: false,
        };
        Ok(self.cancel_target(t, reason).await?.len())
    }

    /// Cancels live jobs of `job_type` carrying one of `keys`.
    ///
    /// # Errors
    /// The store failed.
    pub async fn cancel_by_dedupe_keys(
        &self,
        job_type: &str,
        keys: &[String],
        reason: &str,
    ) -> Result<usize, StoreError> {
        let t = CancelTarget::DedupeKeys {
            job_type: job_type.to_string(),
            keys: keys.to_vec(),
        };
        Ok(self.cancel_target(t, reason).await?.len())
    }

    /// Failed jobs back to `pending` with a fresh attempt budget.
    ///
    /// # Errors
    /// The store failed.
    pub async fn retry_failed(&self, filter: &JobFilter) -> Result<u64, StoreError> {
        let n = self.inner.store.retry_failed(filter).await?;
        self.wake();
        Ok(n)
    }

    /// Deletes terminal jobs finished before `older_than` (default statuses:
    /// all terminal ones when `statuses` is empty).
    ///
    /// # Errors
    /// The store failed.
    pub async fn prune(
        &self,
        older_than: DateTime<Utc>,
        statuses: &[JobStatus],
    ) -> Result<u64, StoreError> {
        let statuses = if statuses.is_empty() {
            JobStatus::TERMINAL.to_vec()
        } else {
            statuses
                .iter()
                .copied()
                .filter(|s| s.is_terminal())
                .collect()
        };
        self.inner
            .store
            .prune(PruneParams {
                older_than,
                statuses,
            })
            .await
    }

    /// Records a handler deploy event.
    ///
    /// # Errors
    /// The store failed.
    pub async fn record_handler_event(
        &self,
        kind: HandlerEventKind,
        job_type: Option<&str>,
        file: Option<&str>,
        digest: Option<&str>,
        reason: Option<&str>,
    ) -> Result<(), StoreError> {
        self.inner.metrics.handler_event(kind, job_type);
        self.inner
            .store
            .record_handler_event(HandlerEvent {
                at: Utc::now(),
                job_type: job_type.map(str::to_string),
                file: file.map(str::to_string),
                digest: digest.map(str::to_string),
                kind,
                reason: reason.map(str::to_string),
            })
            .await
    }

    /// The most recent handler events, newest first.
    ///
    /// # Errors
    /// The store failed.
    pub async fn handler_events(&self, limit: u32) -> Result<Vec<HandlerEvent>, StoreError> {
        self.inner.store.handler_events(limit).await
    }
}
