//! The rescue decision, once for every store: what becomes of a running job
//! whose lease expired (its worker crashed, hung or lost the database).
//!
//! The rule ([`decide`]): with attempts left the job goes back to
//! `pending`, due now, with [`LEASE_RECOVERED_ERROR`] as its last error; a
//! job whose attempts are used up (`attempts >= max_attempts`) becomes
//! `failed` with [`LEASE_EXPIRED_ERROR`]. Either way the lease is cleared.
//! The store only executes: it reads the expired leases inside its
//! transaction (locked), and applies the two outcomes to the ids it is
//! given, fenced on the row still running.

use std::future::Future;

use crate::job::Job;
use crate::store::StoreError;

/// The error stored on a job that ran out of attempts.
pub const LEASE_EXPIRED_ERROR: &str =
    "lease expired: the worker running this job stopped renewing it (crash or partition) and no attempts are left";

/// The error stored on a job put back for another attempt.
pub const LEASE_RECOVERED_ERROR: &str = "lease expired; recovered for another attempt";

/// What happens to one job whose lease expired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rescue {
    /// Back to `pending`, due now.
    Requeue,
    /// `failed` with the lease-expired error.
    Fail,
}

/// The rescue decision for `job` (running, lease expired).
pub(crate) fn decide(job: &Job) -> Rescue {
    if job.attempts >= job.max_attempts {
        Rescue::Fail
    } else {
        Rescue::Requeue
    }
}

/// The primitives a rescue runs on, inside the store's transaction.
pub(crate) trait RescueTx: Send {
    /// Up to `limit` running jobs whose lease expired, oldest lease first,
    /// locked until the transaction ends.
    fn expired_leases(
        &mut self,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<Job>, StoreError>> + Send;

    /// Applies `outcome` to the jobs `ids` that are still running, with
    /// `error` as their last error; returns them as they are now.
    fn apply_rescue(
        &mut self,
        ids: &[String],
        outcome: Rescue,
        error: &str,
    ) -> impl Future<Output = Result<Vec<Job>, StoreError>> + Send;
}

/// Recovers up to `limit` expired leases; returns the jobs as they are
/// after the rescue.
pub(crate) async fn rescue<T: RescueTx>(tx: &mut T, limit: u32) -> Result<Vec<Job>, StoreError> {
    let stuck = tx.expired_leases(limit).await?;
    let (failing, requeued): (Vec<&Job>, Vec<&Job>) =
        stuck.iter().partition(|j| decide(j) == Rescue::Fail);
    let ids = |jobs: Vec<&Job>| jobs.into_iter().map(|j| j.id.clone()).collect::<Vec<_>>();
    let mut out = Vec::with_capacity(stuck.len());
    let requeued = ids(requeued);
    if !requeued.is_empty() {
        out.extend(
            tx.apply_rescue(&requeued, Rescue::Requeue, LEASE_RECOVERED_ERROR)
                .await?,
        );
    }
    let failing = ids(failing);
    if !failing.is_empty() {
        out.extend(
            tx.apply_rescue(&failing, Rescue::Fail, LEASE_EXPIRED_ERROR)
                .await?,
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(attempts: u32, max_attempts: u32) -> Job {
        let now = chrono::Utc::now();
        Job {
            id: "j".into(),
            job_type: "t".into(),
            payload: "{}".into(),
            scope: None,
            status: crate::job::JobStatus::Running,
            priority: 0,
            run_at: now,
            attempts,
            max_attempts,
            last_error: None,
            error_code: None,
            error_details: None,
            dedupe_key: None,
            lease_owner: Some("w".into()),
            lease_expires_at: Some(now),
            started_at: Some(now),
            finished_at: None,
            result: None,
            progress: None,
            parent_id: None,
            schedule_id: None,
            expires_at: None,
            handler_version: None,
            traceparent: None,
            created_at: now,
            updated_at: now,
        }
    }

    #[test]
    fn attempts_left_requeue_and_exhausted_fail() {
        assert_eq!(decide(&job(1, 3)), Rescue::Requeue);
        assert_eq!(decide(&job(3, 3)), Rescue::Fail);
        assert_eq!(
            decide(&job(4, 3)),
            Rescue::Fail,
            "over budget after a lowered max"
        );
    }
}
