//! The policy primitives (`store::policy`) over the memory store's state,
//! held under its one mutex for the whole decision — the memory store's
//! counterpart of a database transaction.

use std::collections::{BTreeSet, HashSet};

use chrono::{DateTime, Utc};

use super::history::Ending;
use super::{finish, live, unfinished, State};
use crate::attempt::AttemptOutcome;
use crate::guards::{ClaimGuards, RateWindow};
use crate::handler::Scope;
use crate::job::{Job, JobStatus};
use crate::schedule::ScheduleRecord;
use crate::store::policy::guards::{Candidate, ClaimTx, GuardReads};
use crate::store::policy::rescue::{Rescue, RescueTx};
use crate::store::policy::schedules::ScheduleTx;
use crate::store::schedules::DeclaredSchedule;
use crate::store::{ClaimParams, StoreError, EXPIRED_CODE, EXPIRED_ERROR};
use crate::time;

/// The locked state and the instant its decisions use.
pub(super) struct MemTx<'a> {
    st: &'a mut State,
    now: DateTime<Utc>,
}

impl<'a> MemTx<'a> {
    pub(super) fn new(st: &'a mut State, now: DateTime<Utc>) -> Self {
        Self { st, now }
    }

    /// Of `types`, those with a job matching `pred`, in `types`' order.
    fn types_with(&self, types: &[String], pred: impl Fn(&Job) -> bool) -> Vec<String> {
        types
            .iter()
            .filter(|t| self.st.jobs.values().any(|j| &j.job_type == *t && pred(j)))
            .cloned()
            .collect()
    }

    /// A pending job moved by `change`; `None` when it is not pending.
    fn change_pending(&mut self, id: &str, change: impl FnOnce(&mut Job)) -> Option<Job> {
        let job = self.st.jobs.get_mut(id)?;
        if job.status != JobStatus::Pending {
            return None;
        }
        change(job);
        Some(job.clone())
    }
}

impl GuardReads for MemTx<'_> {
    fn now(&self) -> DateTime<Utc> {
        self.now
    }

    async fn scope_busy(&mut self, scope: &Scope) -> Result<bool, StoreError> {
        let now = self.now;
        Ok(self
            .st
            .jobs
            .values()
            .any(|j| j.scope.as_ref() == Some(scope) && live(j, now)))
    }

    async fn busy_scope_ids(
        &mut self,
        scope_type: &str,
        limit: usize,
    ) -> Result<Option<Vec<String>>, StoreError> {
        let now = self.now;
        let busy: BTreeSet<&str> = self
            .st
            .jobs
            .values()
            .filter(|j| live(j, now))
            .filter_map(|j| j.scope.as_ref())
            .filter(|s| s.scope_type == scope_type)
            .map(|s| s.scope_id.as_str())
            .collect();
        Ok(Some(
            busy.into_iter().take(limit).map(str::to_string).collect(),
        ))
    }

    async fn live_types(&mut self, types: &[String]) -> Result<Vec<String>, StoreError> {
        let now = self.now;
        Ok(self.types_with(types, |j| live(j, now)))
    }

    async fn waiting_types(&mut self, types: &[String]) -> Result<Vec<String>, StoreError> {
        let now = self.now;
        Ok(self.types_with(types, |j| {
            live(j, now) || (j.status == JobStatus::Pending && j.run_at <= now)
        }))
    }

    async fn live_counts(&mut self, types: &[String]) -> Result<Vec<(String, u64)>, StoreError> {
        let now = self.now;
        Ok(types
            .iter()
            .map(|t| {
                let n = self
                    .st
                    .jobs
                    .values()
                    .filter(|j| &j.job_type == t && live(j, now))
                    .count();
                (t.clone(), n as u64)
            })
            .filter(|(_, n)| *n > 0)
            .collect())
    }

    async fn rate_window(&mut self, key: &str) -> Result<RateWindow, StoreError> {
        Ok(self.st.windows.get(key).copied().unwrap_or_default())
    }
}

impl ClaimTx for MemTx<'_> {
    async fn lock_candidates(
        &mut self,
        job_type: &str,
        window: u32,
        _guards: &ClaimGuards,
    ) -> Result<Vec<Candidate>, StoreError> {
        let now = self.now;
        let parents: HashSet<&str> = self
            .st
            .jobs
            .values()
            .filter(|j| unfinished(j))
            .filter_map(|j| j.parent_id.as_deref())
            .collect();
        let mut candidates: Vec<&Job> = self
            .st
            .jobs
            .values()
            .filter(|j| j.status == JobStatus::Pending && j.job_type == job_type && j.run_at <= now)
            .filter(|j| !parents.contains(j.id.as_str()))
            .collect();
        candidates
            .sort_by(|a, b| (a.priority, a.run_at, &a.id).cmp(&(b.priority, b.run_at, &b.id)));
        Ok(candidates
            .into_iter()
            .take(window as usize)
            .map(|j| Candidate {
                id: j.id.clone(),
                scope: j.scope.clone(),
                expires_at: j.expires_at,
            })
            .collect())
    }

    async fn expire(&mut self, id: &str) -> Result<Option<Job>, StoreError> {
        let now = self.now;
        Ok(self.change_pending(id, |job| {
            finish(job, JobStatus::Failed, Some(EXPIRED_ERROR.into()), now);
            job.error_code = Some(EXPIRED_CODE.into());
        }))
    }

    async fn claim_ids(
        &mut self,
        ids: &[String],
        claim: &ClaimParams,
    ) -> Result<Vec<Job>, StoreError> {
        let now = self.now;
        Ok(ids
            .iter()
            .filter_map(|id| {
                self.change_pending(id, |job| {
                    job.status = JobStatus::Running;
                    job.lease_owner = Some(claim.worker_id.clone());
                    job.lease_expires_at = Some(time::after(now, claim.lease));
                    job.started_at = Some(now);
                    job.attempts += 1;
                    job.handler_version.clone_from(&claim.handler_version);
                    job.updated_at = now;
                })
            })
            .collect())
    }

    async fn store_rate_window(&mut self, key: &str, window: RateWindow) -> Result<(), StoreError> {
        self.st.windows.insert(key.to_string(), window);
        Ok(())
    }
}

impl RescueTx for MemTx<'_> {
    async fn expired_leases(&mut self, limit: u32) -> Result<Vec<Job>, StoreError> {
        let now = self.now;
        let mut stuck: Vec<&Job> = self
            .st
            .jobs
            .values()
            .filter(|j| {
                j.status == JobStatus::Running && j.lease_expires_at.is_some_and(|t| t <= now)
            })
            .collect();
        stuck.sort_by_key(|j| j.lease_expires_at);
        Ok(stuck.into_iter().take(limit as usize).cloned().collect())
    }

    async fn apply_rescue(
        &mut self,
        ids: &[String],
        outcome: Rescue,
        error: &str,
    ) -> Result<Vec<Job>, StoreError> {
        let now = self.now;
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let Some(job) = self.st.jobs.get_mut(id) else {
                continue;
            };
            if job.status != JobStatus::Running {
                continue;
            }
            let ending = Ending::bare(AttemptOutcome::LeaseLost, Some(error));
            self.st.history.record(job, ending, now);
            match outcome {
                Rescue::Fail => finish(job, JobStatus::Failed, Some(error.into()), now),
                Rescue::Requeue => {
                    job.status = JobStatus::Pending;
                    job.run_at = now;
                    job.finished_at = None;
                    job.last_error = Some(error.into());
                    job.lease_owner = None;
                    job.lease_expires_at = None;
                    job.updated_at = now;
                }
            }
            out.push(job.clone());
        }
        Ok(out)
    }
}

impl ScheduleTx for MemTx<'_> {
    async fn stored(&mut self, ids: &[String]) -> Result<Vec<ScheduleRecord>, StoreError> {
        Ok(ids
            .iter()
            .filter_map(|id| self.st.schedules.get(id).cloned())
            .collect())
    }

    async fn create(&mut self, owner: &str, d: &DeclaredSchedule) -> Result<(), StoreError> {
        let record = ScheduleRecord {
            def: d.def.clone(),
            next_run_at: d.first_run,
            last_run_at: None,
            owner: Some(owner.to_string()),
            created_at: self.now,
            updated_at: self.now,
        };
        self.st.schedules.insert(d.def.id.clone(), record);
        Ok(())
    }

    async fn redefine(&mut self, owner: &str, d: &DeclaredSchedule) -> Result<(), StoreError> {
        if let Some(existing) = self.st.schedules.get_mut(&d.def.id) {
            existing.def = d.def.clone();
            existing.next_run_at = d.first_run;
            existing.owner = Some(owner.to_string());
            existing.updated_at = self.now;
        }
        Ok(())
    }

    async fn adopt(&mut self, owner: &str, id: &str) -> Result<(), StoreError> {
        if let Some(existing) = self.st.schedules.get_mut(id) {
            existing.owner = Some(owner.to_string());
            existing.updated_at = self.now;
        }
        Ok(())
    }

    async fn remove_undeclared(
        &mut self,
        owner: &str,
        keep: &[String],
    ) -> Result<Vec<String>, StoreError> {
        let gone: Vec<String> = self
            .st
            .schedules
            .values()
            .filter(|s| s.owner.as_deref() == Some(owner) && !keep.contains(&s.def.id))
            .map(|s| s.def.id.clone())
            .collect();
        for id in &gone {
            self.st.schedules.remove(id);
        }
        Ok(gone)
    }
}
