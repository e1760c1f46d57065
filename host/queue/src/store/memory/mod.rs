//! In-memory [`JobStore`]: same semantics as the database stores, including
//! guards, with an injectable [`Clock`] so tests can move time.
//!
//! Invariant: every method takes the single state mutex once, so each state
//! change is atomic exactly like one conditional write in SQL. The shared
//! policies (guarded claims, rescue, schedule reconcile) run on
//! [`tx::MemTx`] — the state under that mutex — exactly as they run on a
//! database transaction: the same decision code, not a copy.
//!
//! Modules: `writes` (insert and the engine's transitions), `admin`
//! (inspect, cancel, retry failed, prune), `history` (attempts and logs),
//! `schedules`, `deployed_types`,
//! `tx` (the policy primitives).

mod admin;
mod deployed_types;
mod history;
mod schedules;
mod tx;
mod writes;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tokio::sync::{broadcast, Mutex};

use super::deployed_types::{DeployedTypeRecord, RecordDeployedTypes};
use super::due::{ClaimManyParams, DueTypes};
use super::event_hub::EventHub;
use super::policy::{guards as guard_policy, rescue as rescue_policy};
use super::schedules::{FireSchedule, ReconcileReport, ReconcileSchedules};
use super::{
    CancelParams, CancelledJob, ClaimParams, ClaimRef, ClaimResult, CompleteParams, FailParams,
    InsertJob, JobStore, PruneParams, ReleaseParams, RenewParams, RescueParams, RetryParams,
    StoreError, StoreEvent, TxConn,
};
use crate::attempt::{Attempt, LogLine, LogQuery, StoredLogLine};
use crate::clock::{Clock, SystemClock};
use crate::guards::{Blocker, ClaimGuards, PoolGuard, PoolStatus, RateWindow};
use crate::job::{AddResult, HandlerEvent, Job, JobFilter, JobStatus, StatusCounts, TypeCounts};
use crate::schedule::ScheduleRecord;
use tx::MemTx;

#[derive(Default)]
struct State {
    jobs: BTreeMap<String, Job>,
    /// Rate windows by guard row key.
    windows: HashMap<String, RateWindow>,
    events: Vec<HandlerEvent>,
    schedules: BTreeMap<String, ScheduleRecord>,
    /// Deployed types by (job type, host).
    deployed_types: BTreeMap<(String, String), DeployedTypeRecord>,
    /// Attempt rows and log lines.
    history: history::History,
}

/// A store that lives in this process only.
pub struct MemoryStore {
    state: Mutex<State>,
    clock: Arc<dyn Clock>,
    events: EventHub,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// A store on the system clock.
    pub fn new() -> Self {
        Self::with_clock(Arc::new(SystemClock))
    }

    /// A store on the given clock.
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        Self {
            state: Mutex::new(State::default()),
            clock,
            events: EventHub::new(1024),
        }
    }

    fn notify(&self, event: StoreEvent) {
        self.events.send(event);
    }
}

/// Running under a lease that has not expired at `now`.
fn live(job: &Job, now: DateTime<Utc>) -> bool {
    job.status == JobStatus::Running && job.lease_expires_at.is_some_and(|t| t > now)
}

/// Running under `worker`'s lease (expired or not) in the claim that made
/// attempt `attempt`: the fence of every write after a claim.
fn in_claim(job: &Job, worker: &str, attempt: u32) -> bool {
    job.status == JobStatus::Running
        && job.lease_owner.as_deref() == Some(worker)
        && job.attempts == attempt
}

/// Pending or running.
fn unfinished(job: &Job) -> bool {
    matches!(job.status, JobStatus::Pending | JobStatus::Running)
}

/// Moves `job` to a terminal `status`, clearing its lease.
fn finish(job: &mut Job, status: JobStatus, error: Option<String>, now: DateTime<Utc>) {
    job.status = status;
    if error.is_some() {
        job.last_error = error;
    }
    job.lease_owner = None;
    job.lease_expires_at = None;
    job.finished_at = Some(now);
    job.updated_at = now;
}

#[async_trait]
impl JobStore for MemoryStore {
    fn backend(&self) -> &'static str {
        "memory"
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        Ok(())
    }

    async fn now(&self) -> Result<DateTime<Utc>, StoreError> {
        Ok(self.clock.now())
    }

    async fn add_many(&self, jobs: Vec<InsertJob>) -> Result<Vec<AddResult>, StoreError> {
        writes::add_many(self, jobs).await
    }

    async fn add_in_tx(
        &self,
        _conn: TxConn<'_>,
        _jobs: Vec<InsertJob>,
    ) -> Result<Vec<AddResult>, StoreError> {
        Err(StoreError::Unsupported(
            "the memory store has no database transactions: use a SQLite or Postgres store".into(),
        ))
    }

    async fn claim_batch(&self, p: ClaimParams) -> Result<ClaimResult, StoreError> {
        let res = {
            let mut st = self.state.lock().await;
            guard_policy::claim(&mut MemTx::new(&mut st, self.clock.now()), &p).await?
        };
        for job in &res.expired {
            self.notify(StoreEvent::Finished(job.id.clone()));
        }
        Ok(res)
    }

    async fn claim_many(&self, p: ClaimManyParams) -> Result<ClaimResult, StoreError> {
        let mut all = ClaimResult::default();
        {
            let mut st = self.state.lock().await;
            let now = self.clock.now();
            for t in p.types {
                let one = ClaimParams {
                    worker_id: p.worker_id.clone(),
                    job_type: t.job_type,
                    limit: t.limit,
                    lease: t.lease,
                    handler_version: t.handler_version,
                    guards: ClaimGuards::default(),
                };
                let res = guard_policy::claim(&mut MemTx::new(&mut st, now), &one).await?;
                all.claimed.extend(res.claimed);
                all.expired.extend(res.expired);
            }
        }
        for job in &all.expired {
            self.notify(StoreEvent::Finished(job.id.clone()));
        }
        Ok(all)
    }

    async fn due_types(&self, job_types: &[String]) -> Result<DueTypes, StoreError> {
        let now = self.clock.now();
        let st = self.state.lock().await;
        let mut earliest: HashMap<&str, DateTime<Utc>> = HashMap::new();
        for j in st.jobs.values() {
            if j.status == JobStatus::Pending && job_types.contains(&j.job_type) {
                let e = earliest.entry(j.job_type.as_str()).or_insert(j.run_at);
                *e = (*e).min(j.run_at);
            }
        }
        Ok(DueTypes::from_waits(earliest.into_iter().map(|(t, at)| {
            let wait = if at > now {
                (at - now).num_milliseconds().max(1)
            } else {
                0
            };
            (t.to_string(), wait)
        })))
    }

    async fn renew_leases(&self, p: RenewParams) -> Result<Vec<String>, StoreError> {
        Ok(writes::renew_leases(self, p).await)
    }

    async fn complete(&self, p: CompleteParams) -> Result<Vec<String>, StoreError> {
        Ok(writes::complete(self, p).await)
    }

    async fn retry(&self, p: RetryParams) -> Result<bool, StoreError> {
        Ok(writes::retry(self, p).await)
    }

    async fn fail(&self, p: FailParams) -> Result<bool, StoreError> {
        Ok(writes::fail(self, p).await)
    }

    async fn release(&self, p: ReleaseParams) -> Result<u64, StoreError> {
        Ok(writes::release(self, p).await)
    }

    async fn cancel(&self, p: CancelParams) -> Result<Vec<CancelledJob>, StoreError> {
        Ok(admin::cancel(self, p).await)
    }

    async fn rescue(&self, p: RescueParams) -> Result<Vec<Job>, StoreError> {
        let jobs = {
            let mut st = self.state.lock().await;
            rescue_policy::rescue(&mut MemTx::new(&mut st, self.clock.now()), p.limit).await?
        };
        for j in &jobs {
            if j.status == JobStatus::Failed {
                self.notify(StoreEvent::Finished(j.id.clone()));
            } else {
                self.notify(StoreEvent::Inserted(j.job_type.clone()));
            }
        }
        Ok(jobs)
    }

    async fn still_owned(
        &self,
        worker_id: &str,
        claims: &[ClaimRef],
    ) -> Result<Vec<String>, StoreError> {
        let st = self.state.lock().await;
        Ok(claims
            .iter()
            .filter(|c| {
                st.jobs
                    .get(&c.id)
                    .is_some_and(|j| in_claim(j, worker_id, c.attempt))
            })
            .map(|c| c.id.clone())
            .collect())
    }

    async fn set_progress(
        &self,
        worker_id: &str,
        claim: &ClaimRef,
        json: &str,
    ) -> Result<bool, StoreError> {
        Ok(writes::set_progress(self, worker_id, claim, json).await)
    }

    async fn get(&self, id: &str) -> Result<Option<Job>, StoreError> {
        Ok(self.state.lock().await.jobs.get(id).cloned())
    }

    async fn find(&self, f: &JobFilter) -> Result<Vec<Job>, StoreError> {
        Ok(admin::find(self, f).await)
    }

    async fn count_by_status(&self) -> Result<StatusCounts, StoreError> {
        let st = self.state.lock().await;
        let mut c = StatusCounts::default();
        for j in st.jobs.values() {
            c.add(j.status, 1);
        }
        Ok(c)
    }

    async fn count_live_by_type(&self) -> Result<Vec<TypeCounts>, StoreError> {
        let now = self.clock.now();
        let st = self.state.lock().await;
        let mut by_type: BTreeMap<&str, TypeCounts> = BTreeMap::new();
        let live = st
            .jobs
            .values()
            .filter(|j| matches!(j.status, JobStatus::Pending | JobStatus::Running));
        for j in live {
            let c = by_type.entry(&j.job_type).or_insert_with(|| TypeCounts {
                job_type: j.job_type.clone(),
                ..TypeCounts::default()
            });
            match j.status {
                JobStatus::Running => c.running += 1,
                _ if j.run_at <= now => c.due += 1,
                _ => c.scheduled += 1,
            }
        }
        Ok(by_type.into_values().collect())
    }

    async fn retry_failed(&self, f: &JobFilter) -> Result<u64, StoreError> {
        Ok(admin::retry_failed(self, f).await)
    }

    async fn prune(&self, p: PruneParams) -> Result<u64, StoreError> {
        Ok(admin::prune(self, p).await)
    }

    async fn record_handler_event(&self, mut event: HandlerEvent) -> Result<(), StoreError> {
        event.at = self.clock.now();
        self.state.lock().await.events.push(event);
        Ok(())
    }

    async fn handler_events(&self, limit: u32) -> Result<Vec<HandlerEvent>, StoreError> {
        let st = self.state.lock().await;
        Ok(st
            .events
            .iter()
            .rev()
            .take(limit as usize)
            .cloned()
            .collect())
    }

    async fn pool_status(&self, pools: &[PoolGuard]) -> Result<Vec<PoolStatus>, StoreError> {
        let mut st = self.state.lock().await;
        guard_policy::pool_status(&mut MemTx::new(&mut st, self.clock.now()), pools).await
    }

    async fn reconcile_schedules(
        &self,
        params: ReconcileSchedules,
    ) -> Result<ReconcileReport, StoreError> {
        schedules::reconcile(self, params).await
    }

    async fn list_schedules(&self) -> Result<Vec<ScheduleRecord>, StoreError> {
        Ok(schedules::list(self).await)
    }

    async fn due_schedules(
        &self,
        now: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<ScheduleRecord>, StoreError> {
        Ok(schedules::due(self, now, limit).await)
    }

    async fn fire_schedule(&self, params: FireSchedule) -> Result<Option<AddResult>, StoreError> {
        schedules::fire(self, params).await
    }

    async fn blocked_by(
        &self,
        job: &Job,
        guards: &ClaimGuards,
    ) -> Result<Option<Blocker>, StoreError> {
        let mut st = self.state.lock().await;
        guard_policy::blocked_by(&mut MemTx::new(&mut st, self.clock.now()), job, guards).await
    }

    fn subscribe(&self) -> broadcast::Receiver<StoreEvent> {
        self.events.subscribe()
    }

    fn subscribe_wakeups(&self) -> broadcast::Receiver<StoreEvent> {
        self.events.subscribe_wakeups()
    }

    async fn record_deployed_types(&self, p: RecordDeployedTypes) -> Result<(), StoreError> {
        deployed_types::record(self, p).await
    }

    async fn deployed_types(&self) -> Result<Vec<DeployedTypeRecord>, StoreError> {
        Ok(deployed_types::list(self).await)
    }

    async fn attempts(&self, job_id: &str) -> Result<Vec<Attempt>, StoreError> {
        Ok(self.state.lock().await.history.attempts(job_id))
    }

    async fn append_logs(&self, lines: Vec<LogLine>) -> Result<(), StoreError> {
        self.state.lock().await.history.append(lines);
        Ok(())
    }

    async fn logs(&self, query: &LogQuery) -> Result<Vec<StoredLogLine>, StoreError> {
        Ok(self.state.lock().await.history.logs(query))
    }
}
