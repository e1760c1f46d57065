//! Inserts and the engine's transitions on the memory store, each under
//! the state mutex, fenced on the claim (`status = running AND lease_owner
//! = worker AND attempts = the claim's attempt`) exactly as the SQL stores
//! fence their `UPDATE`s. An insert
//! takes a job's unset attempt budget from the type's newest deploy (see
//! `store::deployed_types`). Each transition records the attempt it ends
//! under the same lock (`history`).

use super::deployed_types::type_max_attempts;
use super::history::Ending;
use super::{finish, in_claim, live, unfinished, MemoryStore};
use crate::attempt::AttemptOutcome;
use crate::job::{AddResult, Job, JobStatus};
use crate::store::{
    ClaimRef, CompleteParams, FailParams, InsertJob, ReleaseParams, RenewParams, RetryParams,
    StoreError, StoreEvent,
};
use crate::time;

pub(super) async fn add_many(
    store: &MemoryStore,
    jobs: Vec<InsertJob>,
) -> Result<Vec<AddResult>, StoreError> {
    let now = store.clock.now();
    let mut types = Vec::new();
    let out = {
        let mut st = store.state.lock().await;
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
            let duplicate = j.dedupe_key.as_ref().and_then(|key| {
                st.jobs
                    .values()
                    .find(|o| o.dedupe_key.as_ref() == Some(key) && unfinished(o))
            });
            if let Some(o) = duplicate {
                out.push(AddResult {
                    id: o.id.clone(),
                    deduplicated: true,
                });
                continue;
            }
            let run_at = time::after(j.run_at.unwrap_or(now), j.delay);
            let expires_at = j.expires_at.or_else(|| j.ttl.map(|t| time::after(now, t)));
            let max_attempts = j
                .max_attempts
                .or_else(|| type_max_attempts(&st, &j.job_type))
                .unwrap_or(j.default_max_attempts);
            types.push(j.job_type.clone());
            out.push(AddResult {
                id: j.id.clone(),
                deduplicated: false,
            });
            let job = Job {
                id: j.id,
                job_type: j.job_type,
                payload: j.payload,
                scope: j.scope,
                status: JobStatus::Pending,
                priority: j.priority,
                run_at,
                attempts: 0,
                max_attempts,
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
                traceparent: j.traceparent,
                created_at: now,
                updated_at: now,
            };
            st.jobs.insert(job.id.clone(), job);
        }
        out
    };
    types.dedup();
    for t in types {
        store.notify(StoreEvent::Inserted(t));
    }
    Ok(out)
}

pub(super) async fn renew_leases(store: &MemoryStore, p: RenewParams) -> Vec<String> {
    let now = store.clock.now();
    let mut st = store.state.lock().await;
    let mut out = Vec::new();
    for claim in p.claims {
        if let Some(job) = st.jobs.get_mut(&claim.id) {
            if live(job, now) && in_claim(job, &p.worker_id, claim.attempt) {
                job.lease_expires_at = Some(time::after(now, p.lease));
                job.updated_at = now;
                out.push(claim.id);
            }
        }
    }
    out
}

pub(super) async fn complete(store: &MemoryStore, p: CompleteParams) -> Vec<String> {
    let now = store.clock.now();
    let mut out = Vec::new();
    {
        let mut guard = store.state.lock().await;
        let st = &mut *guard;
        for c in p.jobs {
            st.history.append(c.ending.logs.clone());
            if let Some(job) = st.jobs.get_mut(&c.id) {
                if in_claim(job, &p.worker_id, c.attempt) {
                    let ending = Ending {
                        outcome: AttemptOutcome::Succeeded,
                        ..Ending::of(&c.ending, AttemptOutcome::Succeeded, None)
                    };
                    st.history.record(job, ending, now);
                    finish(job, JobStatus::Succeeded, None, now);
                    job.result = c.result;
                    out.push(c.id);
                }
            }
        }
    }
    for id in &out {
        store.notify(StoreEvent::Finished(id.clone()));
    }
    out
}

pub(super) async fn retry(store: &MemoryStore, p: RetryParams) -> bool {
    let now = store.clock.now();
    let mut guard = store.state.lock().await;
    let st = &mut *guard;
    st.history.append(p.ending.logs.clone());
    let Some(job) = st
        .jobs
        .get_mut(&p.id)
        .filter(|j| in_claim(j, &p.worker_id, p.attempt))
    else {
        return false;
    };
    let ending = Ending::of(&p.ending, AttemptOutcome::Retried, Some(p.error.as_str()));
    st.history.record(job, ending, now);
    job.status = JobStatus::Pending;
    job.lease_owner = None;
    job.lease_expires_at = None;
    job.last_error = Some(p.error);
    job.run_at = time::after(now, p.delay);
    if !p.consumes_attempt {
        job.attempts = job.attempts.saturating_sub(1);
    }
    job.updated_at = now;
    true
}

pub(super) async fn fail(store: &MemoryStore, p: FailParams) -> bool {
    let now = store.clock.now();
    let ok = {
        let mut guard = store.state.lock().await;
        let st = &mut *guard;
        st.history.append(p.ending.logs.clone());
        match st
            .jobs
            .get_mut(&p.id)
            .filter(|j| in_claim(j, &p.worker_id, p.attempt))
        {
            Some(job) => {
                let ending = Ending {
                    code: p.code.as_deref(),
                    details: p.details.as_deref(),
                    ..Ending::of(&p.ending, AttemptOutcome::Failed, Some(p.error.as_str()))
                };
                st.history.record(job, ending, now);
                finish(job, JobStatus::Failed, Some(p.error), now);
                job.error_code = p.code;
                job.error_details = p.details;
                true
            }
            None => false,
        }
    };
    if ok {
        store.notify(StoreEvent::Finished(p.id));
    }
    ok
}

pub(super) async fn release(store: &MemoryStore, p: ReleaseParams) -> u64 {
    let now = store.clock.now();
    let mut guard = store.state.lock().await;
    let st = &mut *guard;
    let mut n = 0;
    for claim in p.claims {
        let job = st.jobs.get_mut(&claim.id);
        if let Some(job) = job.filter(|j| in_claim(j, &p.worker_id, claim.attempt)) {
            st.history
                .record(job, Ending::bare(AttemptOutcome::Released, None), now);
            job.status = JobStatus::Pending;
            job.lease_owner = None;
            job.lease_expires_at = None;
            job.attempts = job.attempts.saturating_sub(1);
            job.run_at = now;
            job.updated_at = now;
            n += 1;
        }
    }
    n
}

pub(super) async fn set_progress(
    store: &MemoryStore,
    worker_id: &str,
    claim: &ClaimRef,
    json: &str,
) -> bool {
    let now = store.clock.now();
    let mut st = store.state.lock().await;
    let job = st.jobs.get_mut(&claim.id);
    match job.filter(|j| in_claim(j, worker_id, claim.attempt)) {
        Some(job) => {
            job.progress = Some(json.to_string());
            job.updated_at = now;
            true
        }
        None => false,
    }
}
