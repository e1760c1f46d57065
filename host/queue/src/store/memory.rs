//! In-memory [`JobStore`]: same semantics as the database stores, including
//! guards, with an injectable [`Clock`] so tests can move time.
//!
//! Invariant: every method takes the single state mutex once, so each state
//! change is atomic exactly like one conditional write in SQL.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use parking_lot::Mutex;
use tokio::sync::broadcast;

use super::{
    chrono_dur, CancelParams, CancelTarget, CancelledJob, ClaimParams, ClaimResult, CompleteParams,
    FailParams, InsertJob, JobStore, PruneParams, ReleaseParams, RenewParams, RescueParams,
    RetryParams, StoreError, StoreEvent, TxConn, EXPIRED_CODE, EXPIRED_ERROR, LEASE_EXPIRED_ERROR,
};
use crate::clock::{Clock, SystemClock};
use crate::guards::{pool_full_reason, ClaimGuards, PoolGuard, PoolStatus};
use crate::job::{AddResult, HandlerEvent, Job, JobFilter, JobStatus, StatusCounts};
use crate::schedule::ScheduleRecord;
use crate::store::schedules::{FireSchedule, ReconcileReport, ReconcileSchedules};

mod schedules;

#[derive(Default)]
struct GuardRow {
    seq: i64,
    window_start: Option<DateTime<Utc>>,
    spent: i64,
}

#[derive(Default)]
struct State {
    jobs: BTreeMap<String, Job>,
    guards: HashMap<String, GuardRow>,
    events: Vec<HandlerEvent>,
    schedules: BTreeMap<String, ScheduleRecord>,
}

/// A store that lives in this process only.
pub struct MemoryStore {
    state: Mutex<State>,
    clock: Arc<dyn Clock>,
    events: broadcast::Sender<StoreEvent>,
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
            events: broadcast::channel(1024).0,
        }
    }

    fn notify(&self, event: StoreEvent) {
        let _ = self.events.send(event);
    }

    /// The rate spend recorded on a guard row (tests, inspection).
    pub fn guard_spent(&self, key: &str) -> Option<i64> {
        self.state.lock().guards.get(key).map(|g| g.spent)
    }
}

fn live(job: &Job, now: DateTime<Utc>) -> bool {
    job.status == JobStatus::Running && job.lease_expires_at.is_some_and(|t| t > now)
}

fn matches(job: &Job, f: &JobFilter) -> bool {
    (f.types.is_empty() || f.types.contains(&job.job_type))
        && (f.statuses.is_empty() || f.statuses.contains(&job.status))
        && (f.scope.is_none() || f.scope == job.scope)
        && (f.parent_id.is_none() || f.parent_id == job.parent_id)
}

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

impl State {
    /// Evaluates the guard predicate for one candidate; `Some(reason)` if blocked.
    fn blocked(&mut self, cand: &Job, guards: &ClaimGuards, now: DateTime<Utc>) -> Option<String> {
        if guards.serialize_by_scope {
            if let Some(scope) = &cand.scope {
                let busy = self
                    .jobs
                    .values()
                    .any(|j| j.scope.as_ref() == Some(scope) && live(j, now));
                if busy {
                    return Some(format!("scope type `{}`", scope.scope_type));
                }
            }
        }
        for other in &guards.not_while_running {
            if self
                .jobs
                .values()
                .any(|j| &j.job_type == other && live(j, now))
            {
                return Some(format!("type `{other}` (not_while_running)"));
            }
        }
        for other in &guards.waits_for {
            let outstanding = self.jobs.values().any(|j| {
                &j.job_type == other
                    && (live(j, now) || (j.status == JobStatus::Pending && j.run_at <= now))
            });
            if outstanding {
                return Some(format!("type `{other}` (waits_for)"));
            }
        }
        for pool in &guards.pools {
            if let Some(limit) = pool.concurrency {
                let used: u64 = self
                    .jobs
                    .values()
                    .filter(|j| live(j, now))
                    .filter_map(|j| {
                        pool.member_costs
                            .iter()
                            .find(|(t, _)| t == &j.job_type)
                            .map(|(_, c)| u64::from(*c))
                    })
                    .sum();
                if used + u64::from(pool.cost) > u64::from(limit) {
                    return Some(pool_full_reason(&pool.name));
                }
            }
            if let Some(rate) = pool.rate_per_minute {
                let row = self
                    .guards
                    .entry(format!("pool:{}", pool.name))
                    .or_default();
                let window_open = row
                    .window_start
                    .is_some_and(|s| now - s < chrono::Duration::minutes(1));
                let spent = if window_open { row.spent } else { 0 };
                if spent + i64::from(pool.rate_cost) > i64::from(rate) {
                    return Some(format!("pool `{}` (rate budget spent)", pool.name));
                }
            }
        }
        None
    }

    fn spend(&mut self, guards: &ClaimGuards, now: DateTime<Utc>) {
        for pool in &guards.pools {
            if pool.rate_per_minute.is_none() {
                continue;
            }
            let row = self
                .guards
                .entry(format!("pool:{}", pool.name))
                .or_default();
            let window_open = row
                .window_start
                .is_some_and(|s| now - s < chrono::Duration::minutes(1));
            if !window_open {
                row.window_start = Some(now);
                row.spent = 0;
            }
            row.spent += i64::from(pool.rate_cost);
        }
    }

    fn has_live_children(&self, id: &str) -> bool {
        self.jobs.values().any(|j| {
            j.parent_id.as_deref() == Some(id)
                && matches!(j.status, JobStatus::Pending | JobStatus::Running)
        })
    }
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
        let now = self.clock.now();
        let mut types = Vec::new();
        let out = {
            let mut st = self.state.lock();
            for j in &jobs {
                if let Some(p) = &j.parent_id {
                    let in_batch = jobs.iter().any(|o| &o.id == p);
                    if !in_batch && !st.jobs.contains_key(p) {
                        return Err(StoreError::UnknownParent(p.clone()));
                    }
                }
            }
            let mut out = Vec::with_capacity(jobs.len());
            for j in jobs {
                if let Some(key) = &j.dedupe_key {
                    let existing = st.jobs.values().find(|o| {
                        o.dedupe_key.as_ref() == Some(key)
                            && matches!(o.status, JobStatus::Pending | JobStatus::Running)
                    });
                    if let Some(o) = existing {
                        out.push(AddResult {
                            id: o.id.clone(),
                            deduplicated: true,
                        });
                        continue;
                    }
                }
                let run_at = j.run_at.unwrap_or(now) + chrono_dur(j.delay);
                let expires_at = j.expires_at.or_else(|| j.ttl.map(|t| now + chrono_dur(t)));
                types.push(j.job_type.clone());
                out.push(AddResult {
                    id: j.id.clone(),
                    deduplicated: false,
                });
                st.jobs.insert(
                    j.id.clone(),
                    Job {
                        id: j.id,
                        job_type: j.job_type,
                        payload: j.payload,
                        scope: j.scope,
                        status: JobStatus::Pending,
                        priority: j.priority,
                        run_at,
                        attempts: 0,
                        max_attempts: j.max_attempts,
                        last_error: None,
                        error_code: None,
                        error_details: None,
                        dedupe_key: j.dedupe_key,
                        lease_owner: None,
                        lease_expires_at: None,
                        started_at: None,
                        finished_at: None,
                        result: None,
                        progress: None,
                        parent_id: j.parent_id,
                        schedule_id: j.schedule_id,
                        expires_at,
                        handler_version: None,
                        created_at: now,
                        updated_at: now,
                    },
                );
            }
            out
        };
        types.dedup();
        for t in types {
            self.notify(StoreEvent::Inserted(t));
        }
        Ok(out)
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
        let now = self.clock.now();
        let mut st = self.state.lock();
        let mut cands: Vec<(i32, DateTime<Utc>, String)> = st
            .jobs
            .values()
            .filter(|j| {
                j.status == JobStatus::Pending && j.job_type == p.job_type && j.run_at <= now
            })
            .map(|j| (j.priority, j.run_at, j.id.clone()))
            .collect();
        cands.sort();
        for key in p.guards.keys(&p.job_type) {
            st.guards.entry(key).or_default().seq += 1;
        }
        let mut res = ClaimResult::default();
        let mut finished = Vec::new();
        for (_, _, id) in cands {
            if res.claimed.len() >= p.limit as usize {
                break;
            }
            if st.has_live_children(&id) {
                continue;
            }
            let Some(cand) = st.jobs.get(&id).cloned() else {
                continue;
            };
            if cand.expires_at.is_some_and(|e| e <= now) {
                if let Some(job) = st.jobs.get_mut(&id) {
                    finish(job, JobStatus::Failed, Some(EXPIRED_ERROR.into()), now);
                    job.error_code = Some(EXPIRED_CODE.into());
                    res.expired.push(job.clone());
                    finished.push(id.clone());
                }
                continue;
            }
            if !p.guards.is_empty() {
                if let Some(scope) = cand.scope.as_ref().filter(|_| p.guards.serialize_by_scope) {
                    st.guards
                        .entry(crate::guards::scope_key(&scope.scope_type))
                        .or_default()
                        .seq += 1;
                }
                if let Some(reason) = st.blocked(&cand, &p.guards, now) {
                    res.blocked_by = Some(reason);
                    continue;
                }
                st.spend(&p.guards, now);
            }
            if let Some(job) = st.jobs.get_mut(&id) {
                job.status = JobStatus::Running;
                job.lease_owner = Some(p.worker_id.clone());
                job.lease_expires_at = Some(now + chrono_dur(p.lease));
                job.started_at = Some(now);
                job.attempts += 1;
                job.handler_version.clone_from(&p.handler_version);
                job.updated_at = now;
                res.claimed.push(job.clone());
            }
        }
        drop(st);
        for id in finished {
            self.notify(StoreEvent::Finished(id));
        }
        Ok(res)
    }

    async fn renew_leases(&self, p: RenewParams) -> Result<Vec<String>, StoreError> {
        let now = self.clock.now();
        let mut st = self.state.lock();
        let mut out = Vec::new();
        for id in p.ids {
            if let Some(job) = st.jobs.get_mut(&id) {
                if live(job, now) && job.lease_owner.as_deref() == Some(&p.worker_id) {
                    job.lease_expires_at = Some(now + chrono_dur(p.lease));
                    job.updated_at = now;
                    out.push(id);
                }
            }
        }
        Ok(out)
    }

    async fn complete(&self, p: CompleteParams) -> Result<Vec<String>, StoreError> {
        let now = self.clock.now();
        let mut out = Vec::new();
        {
            let mut st = self.state.lock();
            for c in p.jobs {
                if let Some(job) = st.jobs.get_mut(&c.id) {
                    if job.status == JobStatus::Running
                        && job.lease_owner.as_deref() == Some(&p.worker_id)
                    {
                        finish(job, JobStatus::Succeeded, None, now);
                        job.result = c.result;
                        out.push(c.id);
                    }
                }
            }
        }
        for id in &out {
            self.notify(StoreEvent::Finished(id.clone()));
        }
        Ok(out)
    }

    async fn retry(&self, p: RetryParams) -> Result<bool, StoreError> {
        let now = self.clock.now();
        let mut st = self.state.lock();
        let Some(job) = st.jobs.get_mut(&p.id) else {
            return Ok(false);
        };
        if job.status != JobStatus::Running || job.lease_owner.as_deref() != Some(&p.worker_id) {
            return Ok(false);
        }
        job.status = JobStatus::Pending;
        job.lease_owner = None;
        job.lease_expires_at = None;
        job.last_error = Some(p.error);
        job.run_at = now + chrono_dur(p.delay);
        if !p.consumes_attempt {
            job.attempts = job.attempts.saturating_sub(1);
        }
        job.updated_at = now;
        Ok(true)
    }

    async fn fail(&self, p: FailParams) -> Result<bool, StoreError> {
        let now = self.clock.now();
        let ok = {
            let mut st = self.state.lock();
            match st.jobs.get_mut(&p.id) {
                Some(job)
                    if job.status == JobStatus::Running
                        && job.lease_owner.as_deref() == Some(&p.worker_id) =>
                {
                    finish(job, JobStatus::Failed, Some(p.error), now);
                    job.error_code = p.code;
                    job.error_details = p.details;
                    true
                }
                _ => false,
            }
        };
        if ok {
            self.notify(StoreEvent::Finished(p.id));
        }
        Ok(ok)
    }

    async fn release(&self, p: ReleaseParams) -> Result<u64, StoreError> {
        let now = self.clock.now();
        let mut st = self.state.lock();
        let mut n = 0;
        for id in p.ids {
            if let Some(job) = st.jobs.get_mut(&id) {
                if job.status == JobStatus::Running
                    && job.lease_owner.as_deref() == Some(&p.worker_id)
                {
                    job.status = JobStatus::Pending;
                    job.lease_owner = None;
                    job.lease_expires_at = None;
                    job.attempts = job.attempts.saturating_sub(1);
                    job.run_at = now;
                    job.updated_at = now;
                    n += 1;
                }
            }
        }
        Ok(n)
    }

    async fn cancel(&self, p: CancelParams) -> Result<Vec<CancelledJob>, StoreError> {
        let now = self.clock.now();
        let mut out = Vec::new();
        {
            let mut st = self.state.lock();
            let is_target = |j: &Job| -> bool {
                let live_status = matches!(j.status, JobStatus::Pending | JobStatus::Running);
                live_status
                    && match &p.target {
                        CancelTarget::Ids(ids) => ids.contains(&j.id),
                        CancelTarget::Scope {
                            scope,
                            include_running,
                        } => {
                            j.scope.as_ref() == Some(scope)
                                && (*include_running || j.status == JobStatus::Pending)
                        }
                        CancelTarget::DedupeKeys { job_type, keys } => {
                            &j.job_type == job_type
                                && j.dedupe_key.as_ref().is_some_and(|k| keys.contains(k))
                        }
                    }
            };
            let mut ids: Vec<String> = st
                .jobs
                .values()
                .filter(|j| is_target(j))
                .map(|j| j.id.clone())
                .collect();
            while let Some(id) = ids.pop() {
                let Some(job) = st.jobs.get_mut(&id) else {
                    continue;
                };
                if !matches!(job.status, JobStatus::Pending | JobStatus::Running) {
                    continue;
                }
                let was_running = job.status == JobStatus::Running;
                finish(job, JobStatus::Cancelled, Some(p.reason.clone()), now);
                out.push(CancelledJob {
                    id: id.clone(),
                    job_type: job.job_type.clone(),
                    scope: job.scope.clone(),
                    was_running,
                    attempts: job.attempts,
                });
                let children = st
                    .jobs
                    .values()
                    .filter(|c| {
                        c.parent_id.as_deref() == Some(id.as_str())
                            && matches!(c.status, JobStatus::Pending | JobStatus::Running)
                    })
                    .map(|c| c.id.clone());
                ids.extend(children.collect::<Vec<_>>());
            }
        }
        for c in &out {
            self.notify(StoreEvent::Finished(c.id.clone()));
        }
        Ok(out)
    }

    async fn rescue(&self, p: RescueParams) -> Result<Vec<Job>, StoreError> {
        let now = self.clock.now();
        let mut out = Vec::new();
        {
            let mut st = self.state.lock();
            for job in st.jobs.values_mut() {
                if out.len() >= p.limit as usize {
                    break;
                }
                let expired = job.status == JobStatus::Running
                    && job.lease_expires_at.is_none_or(|t| t <= now);
                if !expired {
                    continue;
                }
                job.lease_owner = None;
                if job.attempts >= job.max_attempts {
                    finish(
                        job,
                        JobStatus::Failed,
                        Some(LEASE_EXPIRED_ERROR.into()),
                        now,
                    );
                } else {
                    job.status = JobStatus::Pending;
                    job.lease_expires_at = None;
                    job.run_at = now;
                    job.last_error = Some("lease expired; recovered for another attempt".into());
                    job.updated_at = now;
                }
                out.push(job.clone());
            }
        }
        for r in &out {
            if r.status == JobStatus::Failed {
                self.notify(StoreEvent::Finished(r.id.clone()));
            } else {
                self.notify(StoreEvent::Inserted(r.job_type.clone()));
            }
        }
        Ok(out)
    }

    async fn still_owned(
        &self,
        worker_id: &str,
        ids: &[String],
    ) -> Result<Vec<String>, StoreError> {
        let st = self.state.lock();
        Ok(ids
            .iter()
            .filter(|id| {
                st.jobs.get(*id).is_some_and(|j| {
                    j.status == JobStatus::Running && j.lease_owner.as_deref() == Some(worker_id)
                })
            })
            .cloned()
            .collect())
    }

    async fn set_progress(
        &self,
        worker_id: &str,
        id: &str,
        json: &str,
    ) -> Result<bool, StoreError> {
        let now = self.clock.now();
        let mut st = self.state.lock();
        match st.jobs.get_mut(id) {
            Some(job)
                if job.status == JobStatus::Running
                    && job.lease_owner.as_deref() == Some(worker_id) =>
            {
                job.progress = Some(json.to_string());
                job.updated_at = now;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn get(&self, id: &str) -> Result<Option<Job>, StoreError> {
        Ok(self.state.lock().jobs.get(id).cloned())
    }

    async fn find(&self, f: &JobFilter) -> Result<Vec<Job>, StoreError> {
        let st = self.state.lock();
        Ok(st
            .jobs
            .values()
            .filter(|j| matches(j, f))
            .skip(f.offset.unwrap_or(0) as usize)
            .take(f.limit.unwrap_or(JobFilter::DEFAULT_LIMIT) as usize)
            .cloned()
            .collect())
    }

    async fn count_by_status(&self) -> Result<StatusCounts, StoreError> {
        let st = self.state.lock();
        let mut c = StatusCounts::default();
        for j in st.jobs.values() {
            c.add(j.status, 1);
        }
        Ok(c)
    }

    async fn retry_failed(&self, f: &JobFilter) -> Result<u64, StoreError> {
        let now = self.clock.now();
        let mut f = f.clone();
        f.statuses = vec![JobStatus::Failed];
        let types = {
            let mut st = self.state.lock();
            let ids: Vec<String> = st
                .jobs
                .values()
                .filter(|j| matches(j, &f))
                .skip(f.offset.unwrap_or(0) as usize)
                .take(f.limit.map_or(usize::MAX, |l| l as usize))
                .map(|j| j.id.clone())
                .collect();
            let mut types = Vec::new();
            for id in ids {
                if let Some(job) = st.jobs.get_mut(&id) {
                    job.status = JobStatus::Pending;
                    job.attempts = 0;
                    job.last_error = None;
                    job.error_code = None;
                    job.error_details = None;
                    job.finished_at = None;
                    job.run_at = now;
                    job.updated_at = now;
                    types.push(job.job_type.clone());
                }
            }
            types
        };
        let n = types.len() as u64;
        for t in types {
            self.notify(StoreEvent::Inserted(t));
        }
        Ok(n)
    }

    async fn prune(&self, p: PruneParams) -> Result<u64, StoreError> {
        let mut st = self.state.lock();
        let before = st.jobs.len();
        st.jobs.retain(|_, j| {
            !(j.status.is_terminal()
                && p.statuses.contains(&j.status)
                && j.finished_at.is_some_and(|t| t < p.older_than))
        });
        Ok((before - st.jobs.len()) as u64)
    }

    async fn record_handler_event(&self, mut event: HandlerEvent) -> Result<(), StoreError> {
        event.at = self.clock.now();
        self.state.lock().events.push(event);
        Ok(())
    }

    async fn handler_events(&self, limit: u32) -> Result<Vec<HandlerEvent>, StoreError> {
        let st = self.state.lock();
        Ok(st
            .events
            .iter()
            .rev()
            .take(limit as usize)
            .cloned()
            .collect())
    }

    async fn pool_status(&self, pools: &[PoolGuard]) -> Result<Vec<PoolStatus>, StoreError> {
        let now = self.clock.now();
        let st = self.state.lock();
        Ok(pools
            .iter()
            .map(|pool| {
                let occupied = st
                    .jobs
                    .values()
                    .filter(|j| live(j, now))
                    .filter_map(|j| {
                        pool.member_costs
                            .iter()
                            .find(|(t, _)| t == &j.job_type)
                            .map(|(_, c)| u64::from(*c))
                    })
                    .sum();
                let window = chrono::Duration::minutes(1);
                let open = st
                    .guards
                    .get(&format!("pool:{}", pool.name))
                    .and_then(|row| row.window_start.map(|s| (s, row.spent)))
                    .filter(|(s, _)| now - *s < window);
                PoolStatus {
                    name: pool.name.clone(),
                    occupied,
                    concurrency: pool.concurrency,
                    spent: open.map_or(0, |(_, spent)| u64::try_from(spent).unwrap_or(0)),
                    rate_per_minute: pool.rate_per_minute,
                    window_resets_at: open.map(|(s, _)| s + window),
                }
            })
            .collect())
    }

    async fn reconcile_schedules(
        &self,
        params: ReconcileSchedules,
    ) -> Result<ReconcileReport, StoreError> {
        Ok(self.reconcile_schedules_mem(params))
    }

    async fn list_schedules(&self) -> Result<Vec<ScheduleRecord>, StoreError> {
        Ok(self.list_schedules_mem())
    }

    async fn due_schedules(
        &self,
        now: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<ScheduleRecord>, StoreError> {
        Ok(self.due_schedules_mem(now, limit))
    }

    async fn fire_schedule(&self, params: FireSchedule) -> Result<Option<AddResult>, StoreError> {
        self.fire_schedule_mem(params).await
    }

    async fn blocked_by(
        &self,
        job: &Job,
        guards: &ClaimGuards,
    ) -> Result<Option<String>, StoreError> {
        let now = self.clock.now();
        Ok(self.state.lock().blocked(job, guards, now))
    }

    fn subscribe(&self) -> broadcast::Receiver<StoreEvent> {
        self.events.subscribe()
    }
}
