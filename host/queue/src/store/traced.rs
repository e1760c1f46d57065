//! [`TracedStore`]: the [`JobStore`] port wrapped so that every database
//! round trip is a `tracing` span — `store.<method>` at DEBUG level, with
//! the backend, the call's key fields and, when the call fails, an `error`
//! event inside the span. [`open_store`](super::connect::open_store) wraps
//! every store it opens.
//!
//! Invariant: pure delegation. The decorator adds no behaviour, holds no
//! state and never changes an argument or a result, so everything the
//! conformance suite proves of a store holds through it (the suite runs
//! through it). With DEBUG disabled a span costs one callsite check.

use std::{fmt::Display, future::Future, sync::Arc};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tokio::sync::broadcast;
use tracing::{debug_span, Instrument, Span};

use super::deployed_types::{DeployedTypeRecord, RecordDeployedTypes};
use super::due::{ClaimManyParams, DueTypes};
use super::schedules::{FireSchedule, ReconcileReport, ReconcileSchedules};
use super::{
    CancelParams, CancelledJob, ClaimParams, ClaimRef, ClaimResult, CompleteParams, FailParams,
    InsertJob, JobStore, PruneParams, ReleaseParams, RenewParams, RescueParams, RetryParams,
    StoreError, StoreEvent, TxConn,
};
use crate::attempt::{Attempt, LogLine, LogQuery, StoredLogLine};
use crate::guards::{Blocker, ClaimGuards, PoolGuard, PoolStatus};
use crate::job::{AddResult, HandlerEvent, Job, JobFilter, StatusCounts, TypeCounts};
use crate::schedule::ScheduleRecord;

/// A [`JobStore`] that runs each call of the inner store inside a span.
pub struct TracedStore {
    inner: Arc<dyn JobStore>,
}

impl TracedStore {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn JobStore>) -> Self {
        Self { inner }
    }
}

/// Runs `call` inside `span`; a failure is logged inside the span.
async fn traced<T, E: Display>(
    span: Span,
    call: impl Future<Output = Result<T, E>>,
) -> Result<T, E> {
    let result = call.instrument(span.clone()).await;
    if let Err(e) = &result {
        span.in_scope(|| tracing::debug!(error = %e, "store call failed"));
    }
    result
}

#[async_trait]
impl JobStore for TracedStore {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        let span = debug_span!("store.migrate", backend = self.backend());
        traced(span, self.inner.migrate()).await
    }

    async fn now(&self) -> Result<DateTime<Utc>, StoreError> {
        let span = debug_span!("store.now", backend = self.backend());
        traced(span, self.inner.now()).await
    }

    async fn add_many(&self, jobs: Vec<InsertJob>) -> Result<Vec<AddResult>, StoreError> {
        let span = debug_span!(
            "store.add_many",
            backend = self.backend(),
            jobs = jobs.len()
        );
        traced(span, self.inner.add_many(jobs)).await
    }

    async fn add_in_tx(
        &self,
        conn: TxConn<'_>,
        jobs: Vec<InsertJob>,
    ) -> Result<Vec<AddResult>, StoreError> {
        let span = debug_span!(
            "store.add_in_tx",
            backend = self.backend(),
            jobs = jobs.len()
        );
        traced(span, self.inner.add_in_tx(conn, jobs)).await
    }

    async fn claim_batch(&self, params: ClaimParams) -> Result<ClaimResult, StoreError> {
        let span = debug_span!(
            "store.claim_batch",
            backend = self.backend(),
            job_type = %params.job_type,
            worker = %params.worker_id,
            limit = params.limit,
            guarded = !params.guards.is_empty(),
        );
        traced(span, self.inner.claim_batch(params)).await
    }

    async fn claim_many(&self, params: ClaimManyParams) -> Result<ClaimResult, StoreError> {
        let span = debug_span!(
            "store.claim_many",
            backend = self.backend(),
            worker = %params.worker_id,
            types = params.types.len(),
        );
        traced(span, self.inner.claim_many(params)).await
    }

    async fn due_types(&self, job_types: &[String]) -> Result<DueTypes, StoreError> {
        let span = debug_span!(
            "store.due_types",
            backend = self.backend(),
            types = job_types.len(),
        );
        traced(span, self.inner.due_types(job_types)).await
    }

    async fn renew_leases(&self, params: RenewParams) -> Result<Vec<String>, StoreError> {
        let span = debug_span!(
            "store.renew_leases",
            backend = self.backend(),
            worker = %params.worker_id,
            jobs = params.claims.len(),
        );
        traced(span, self.inner.renew_leases(params)).await
    }

    async fn complete(&self, params: CompleteParams) -> Result<Vec<String>, StoreError> {
        let span = debug_span!(
            "store.complete",
            backend = self.backend(),
            worker = %params.worker_id,
            jobs = params.jobs.len(),
        );
        traced(span, self.inner.complete(params)).await
    }

    async fn retry(&self, params: RetryParams) -> Result<bool, StoreError> {
        let span = debug_span!(
            "store.retry",
            backend = self.backend(),
            job = %params.id,
            attempt = params.attempt
        );
        traced(span, self.inner.retry(params)).await
    }

    async fn fail(&self, params: FailParams) -> Result<bool, StoreError> {
        let span = debug_span!(
            "store.fail",
            backend = self.backend(),
            job = %params.id,
            attempt = params.attempt
        );
        traced(span, self.inner.fail(params)).await
    }

    async fn release(&self, params: ReleaseParams) -> Result<u64, StoreError> {
        let span = debug_span!(
            "store.release",
            backend = self.backend(),
            worker = %params.worker_id,
            jobs = params.claims.len(),
        );
        traced(span, self.inner.release(params)).await
    }

    async fn cancel(&self, params: CancelParams) -> Result<Vec<CancelledJob>, StoreError> {
        let span = debug_span!("store.cancel", backend = self.backend(), target = ?params.target);
        traced(span, self.inner.cancel(params)).await
    }

    async fn rescue(&self, params: RescueParams) -> Result<Vec<Job>, StoreError> {
        let span = debug_span!(
            "store.rescue",
            backend = self.backend(),
            limit = params.limit
        );
        traced(span, self.inner.rescue(params)).await
    }

    async fn still_owned(
        &self,
        worker_id: &str,
        claims: &[ClaimRef],
    ) -> Result<Vec<String>, StoreError> {
        let span = debug_span!(
            "store.still_owned",
            backend = self.backend(),
            worker = %worker_id,
            jobs = claims.len(),
        );
        traced(span, self.inner.still_owned(worker_id, claims)).await
    }

    async fn set_progress(
        &self,
        worker_id: &str,
        claim: &ClaimRef,
        json: &str,
    ) -> Result<bool, StoreError> {
        let span = debug_span!(
            "store.set_progress",
            backend = self.backend(),
            job = %claim.id,
            attempt = claim.attempt
        );
        traced(span, self.inner.set_progress(worker_id, claim, json)).await
    }

    async fn get(&self, id: &str) -> Result<Option<Job>, StoreError> {
        let span = debug_span!("store.get", backend = self.backend(), job = %id);
        traced(span, self.inner.get(id)).await
    }

    async fn find(&self, filter: &JobFilter) -> Result<Vec<Job>, StoreError> {
        let span = debug_span!("store.find", backend = self.backend());
        traced(span, self.inner.find(filter)).await
    }

    async fn count_by_status(&self) -> Result<StatusCounts, StoreError> {
        let span = debug_span!("store.count_by_status", backend = self.backend());
        traced(span, self.inner.count_by_status()).await
    }

    async fn count_live_by_type(&self) -> Result<Vec<TypeCounts>, StoreError> {
        let span = debug_span!("store.count_live_by_type", backend = self.backend());
        traced(span, self.inner.count_live_by_type()).await
    }

    async fn retry_failed(&self, filter: &JobFilter) -> Result<u64, StoreError> {
        let span = debug_span!("store.retry_failed", backend = self.backend());
        traced(span, self.inner.retry_failed(filter)).await
    }

    async fn prune(&self, params: PruneParams) -> Result<u64, StoreError> {
        let span = debug_span!("store.prune", backend = self.backend());
        traced(span, self.inner.prune(params)).await
    }

    async fn record_handler_event(&self, event: HandlerEvent) -> Result<(), StoreError> {
        let span = debug_span!("store.record_handler_event", backend = self.backend());
        traced(span, self.inner.record_handler_event(event)).await
    }

    async fn handler_events(&self, limit: u32) -> Result<Vec<HandlerEvent>, StoreError> {
        let span = debug_span!("store.handler_events", backend = self.backend(), limit);
        traced(span, self.inner.handler_events(limit)).await
    }

    async fn pool_status(&self, pools: &[PoolGuard]) -> Result<Vec<PoolStatus>, StoreError> {
        let span = debug_span!(
            "store.pool_status",
            backend = self.backend(),
            pools = pools.len()
        );
        traced(span, self.inner.pool_status(pools)).await
    }

    async fn reconcile_schedules(
        &self,
        params: ReconcileSchedules,
    ) -> Result<ReconcileReport, StoreError> {
        let span = debug_span!("store.reconcile_schedules", backend = self.backend());
        traced(span, self.inner.reconcile_schedules(params)).await
    }

    async fn list_schedules(&self) -> Result<Vec<ScheduleRecord>, StoreError> {
        let span = debug_span!("store.list_schedules", backend = self.backend());
        traced(span, self.inner.list_schedules()).await
    }

    async fn due_schedules(
        &self,
        now: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<ScheduleRecord>, StoreError> {
        let span = debug_span!("store.due_schedules", backend = self.backend(), limit);
        traced(span, self.inner.due_schedules(now, limit)).await
    }

    async fn fire_schedule(&self, params: FireSchedule) -> Result<Option<AddResult>, StoreError> {
        let span = debug_span!(
            "store.fire_schedule",
            backend = self.backend(),
            schedule = %params.schedule_id,
        );
        traced(span, self.inner.fire_schedule(params)).await
    }

    async fn blocked_by(
        &self,
        job: &Job,
        guards: &ClaimGuards,
    ) -> Result<Option<Blocker>, StoreError> {
        let span = debug_span!("store.blocked_by", backend = self.backend(), job = %job.id);
        traced(span, self.inner.blocked_by(job, guards)).await
    }

    fn subscribe(&self) -> broadcast::Receiver<StoreEvent> {
        self.inner.subscribe()
    }

    fn subscribe_wakeups(&self) -> broadcast::Receiver<StoreEvent> {
        self.inner.subscribe_wakeups()
    }

    async fn record_deployed_types(&self, params: RecordDeployedTypes) -> Result<(), StoreError> {
        let span = debug_span!(
            "store.record_deployed_types",
            backend = self.backend(),
            host = %params.host,
            types = params.types.len()
        );
        traced(span, self.inner.record_deployed_types(params)).await
    }

    async fn deployed_types(&self) -> Result<Vec<DeployedTypeRecord>, StoreError> {
        let span = debug_span!("store.deployed_types", backend = self.backend());
        traced(span, self.inner.deployed_types()).await
    }

    async fn attempts(&self, job_id: &str) -> Result<Vec<Attempt>, StoreError> {
        let span = debug_span!("store.attempts", backend = self.backend(), job_id);
        traced(span, self.inner.attempts(job_id)).await
    }

    async fn append_logs(&self, lines: Vec<LogLine>) -> Result<(), StoreError> {
        let span = debug_span!(
            "store.append_logs",
            backend = self.backend(),
            n = lines.len()
        );
        traced(span, self.inner.append_logs(lines)).await
    }

    async fn logs(&self, query: &LogQuery) -> Result<Vec<StoredLogLine>, StoreError> {
        let span = debug_span!("store.logs", backend = self.backend(), job_id = %query.job_id);
        traced(span, self.inner.logs(query)).await
    }
}
