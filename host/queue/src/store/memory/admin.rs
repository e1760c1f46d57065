//! Administration on the memory store: find (in (`created_at`, `id`)
//! order, like the SQL stores), cancel (with unfinished
//! descendants), retry failed jobs, prune — each under the state mutex.

use super::history::Ending;
use super::{finish, unfinished, MemoryStore};
use crate::attempt::AttemptOutcome;
use crate::job::{Job, JobFilter, JobStatus};
use crate::store::{CancelParams, CancelTarget, CancelledJob, PruneParams, StoreEvent};

/// Whether `job` matches `f`'s conditions (paging aside).
fn matches(job: &Job, f: &JobFilter) -> bool {
    (f.types.is_empty() || f.types.contains(&job.job_type))
        && (f.statuses.is_empty() || f.statuses.contains(&job.status))
        && (f.scope.is_none() || f.scope == job.scope)
        && (f.parent_id.is_none() || f.parent_id == job.parent_id)
        && f.id.as_ref().is_none_or(|id| *id == job.id)
}

/// Whether `job` is a target of the cancel `target`.
fn targeted(job: &Job, target: &CancelTarget) -> bool {
    unfinished(job)
        && match target {
            CancelTarget::Ids(ids) => ids.contains(&job.id),
            CancelTarget::Scope {
                scope,
                include_running,
            } => {
                job.scope.as_ref() == Some(scope)
                    && (*include_running || job.status == JobStatus::Pending)
            }
            CancelTarget::DedupeKeys { job_type, keys } => {
                &job.job_type == job_type
                    && job.dedupe_key.as_ref().is_some_and(|k| keys.contains(k))
            }
        }
}

pub(super) async fn find(store: &MemoryStore, f: &JobFilter) -> Vec<Job> {
    let st = store.state.lock().await;
    let key = |j: &Job| (j.created_at, j.id.clone());
    let after = f.after.as_ref().map(|c| (c.created_at, c.id.clone()));
    let mut hits: Vec<&Job> = st
        .jobs
        .values()
        .filter(|j| matches(j, f))
        .filter(|j| match &after {
            None => true,
            Some(a) if f.newest_first => key(j) < *a,
            Some(a) => key(j) > *a,
        })
        .collect();
    hits.sort_by_key(|j| key(j));
    if f.newest_first {
        hits.reverse();
    }
    hits.into_iter()
        .skip(f.offset.unwrap_or(0) as usize)
        .take(f.limit.unwrap_or(JobFilter::DEFAULT_LIMIT) as usize)
        .cloned()
        .collect()
}

pub(super) async fn cancel(store: &MemoryStore, p: CancelParams) -> Vec<CancelledJob> {
    let now = store.clock.now();
    let mut out = Vec::new();
    {
        let mut guard = store.state.lock().await;
        let st = &mut *guard;
        let mut ids: Vec<String> = st
            .jobs
            .values()
            .filter(|j| targeted(j, &p.target))
            .map(|j| j.id.clone())
            .collect();
        while let Some(id) = ids.pop() {
            let Some(job) = st.jobs.get_mut(&id).filter(|j| unfinished(j)) else {
                continue;
            };
            let was_running = job.status == JobStatus::Running;
            if was_running {
                let ending = Ending::bare(AttemptOutcome::Cancelled, Some(p.reason.as_str()));
                st.history.record(job, ending, now);
            }
            finish(job, JobStatus::Cancelled, Some(p.reason.clone()), now);
            out.push(CancelledJob {
                id: id.clone(),
                job_type: job.job_type.clone(),
                scope: job.scope.clone(),
                was_running,
                attempts: job.attempts,
            });
            ids.extend(
                st.jobs
                    .values()
                    .filter(|c| c.parent_id.as_deref() == Some(id.as_str()) && unfinished(c))
                    .map(|c| c.id.clone()),
            );
        }
    }
    for c in &out {
        store.notify(StoreEvent::Finished(c.id.clone()));
    }
    out
}

pub(super) async fn retry_failed(store: &MemoryStore, f: &JobFilter) -> u64 {
    let now = store.clock.now();
    let mut f = f.clone();
    f.statuses = vec![JobStatus::Failed];
    let types = {
        let mut st = store.state.lock().await;
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
                job.max_attempts = job
                    .attempts
                    .saturating_add(job.max_attempts)
                    .min(i32::MAX as u32);
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
        store.notify(StoreEvent::Inserted(t));
    }
    n
}

pub(super) async fn prune(store: &MemoryStore, p: PruneParams) -> u64 {
    let mut st = store.state.lock().await;
    let doomed: Vec<String> = st
        .jobs
        .values()
        .filter(|j| {
            j.status.is_terminal()
                && p.statuses.contains(&j.status)
                && j.finished_at.is_some_and(|t| t < p.older_than)
        })
        .map(|j| j.id.clone())
        .collect();
    for id in &doomed {
        st.jobs.remove(id);
        st.history.forget(id);
    }
    doomed.len() as u64
}
