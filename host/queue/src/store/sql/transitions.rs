//! The statements of the engine's fenced transitions (renew, retry, fail,
//! release, progress — each fenced on the claim: running, leased to the
//! worker, at the claim's attempt), of inspection (one job, counts,
//! unfinished jobs per type, ownership), pruning and handler events,
//! written once for both SQL backends over a [`Dialect`]. Each comment
//! lists the parameters in order; on SQLite the statement's now is bound
//! after them (see [`Dialect::now`]). Inserts,
//! the unguarded claim, batched completions, cancels and filtered
//! queries stay with each backend: their SQL is what differs.

use super::{Dialect, EVENT_COLS, JOB_COLS, LIVE};

impl Dialect {
    /// Extends by `$1` milliseconds the still live leases of worker `$4`
    /// among the claims (ids `$2`, attempts `$3`); returns the renewed ids.
    pub(in crate::store) fn renew(&self) -> String {
        let now = self.now(5);
        format!(
            "UPDATE {} SET lease_expires_at = {}, updated_at = {now} \
             WHERE {} AND {} = 'running' AND lease_owner = $4 AND {} > {now} RETURNING id",
            self.jobs,
            self.plus_ms(&now, "$1"),
            self.in_claims(2),
            self.unindexed("status"),
            self.unindexed("lease_expires_at")
        )
    }

    /// Puts job `$4` of worker `$5`'s claim at attempt `$6` back to
    /// pending, due in `$1` milliseconds, with last error `$2`; `$3` false
    /// gives the attempt back.
    pub(in crate::store) fn retry(&self) -> String {
        let now = self.now(7);
        format!(
            "UPDATE {} SET status = 'pending', run_at = {}, last_error = $2, \
               attempts = CASE WHEN $3 THEN attempts ELSE {} END, \
               lease_owner = NULL, lease_expires_at = NULL, updated_at = {now} \
             WHERE id = $4 AND {} = 'running' AND lease_owner = $5 AND attempts = $6",
            self.jobs,
            self.plus_ms(&now, "$1"),
            self.greatest("attempts - 1", "0"),
            self.unindexed("status")
        )
    }

    /// Fails job `$2` of worker `$3`'s claim at attempt `$6` with error
    /// `$1`, code `$4` and details `$5`.
    pub(in crate::store) fn fail(&self) -> String {
        let now = self.now(7);
        format!(
            "UPDATE {} SET status = 'failed', last_error = $1, finished_at = {now}, \
               lease_owner = NULL, lease_expires_at = NULL, updated_at = {now}, \
               error_code = $4, error_details = $5 \
             WHERE id = $2 AND {} = 'running' AND lease_owner = $3 AND attempts = $6",
            self.jobs,
            self.unindexed("status")
        )
    }

    /// Gives worker `$3`'s claims (ids `$1`, attempts `$2`) back: pending,
    /// due now, attempt returned.
    pub(in crate::store) fn release(&self) -> String {
        let now = self.now(4);
        format!(
            "UPDATE {} SET status = 'pending', run_at = {now}, attempts = {}, \
               lease_owner = NULL, lease_expires_at = NULL, updated_at = {now} \
             WHERE {} AND {} = 'running' AND lease_owner = $3",
            self.jobs,
            self.greatest("attempts - 1", "0"),
            self.in_claims(1),
            self.unindexed("status")
        )
    }

    /// Stores progress `$1` of job `$2` run by worker `$3`'s claim at
    /// attempt `$4`.
    pub(in crate::store) fn set_progress(&self) -> String {
        format!(
            "UPDATE {} SET progress = $1, updated_at = {} \
             WHERE id = $2 AND {} = 'running' AND lease_owner = $3 AND attempts = $4",
            self.jobs,
            self.now(5),
            self.unindexed("status")
        )
    }

    /// Job `$1`.
    pub(in crate::store) fn job(&self) -> String {
        format!(
            "SELECT {cols} FROM {} WHERE id = $1",
            self.jobs,
            cols = *JOB_COLS
        )
    }

    /// `status, n` for every status.
    pub(in crate::store) fn status_counts(&self) -> String {
        format!(
            "SELECT status, COUNT(*) AS n FROM {} GROUP BY status",
            self.jobs
        )
    }

    /// `job_type, due, scheduled, running` for every type with unfinished
    /// jobs, in type order. On SQLite, now is `$1`.
    pub(in crate::store) fn live_type_counts(&self) -> String {
        let now = self.now(1);
        format!(
            "SELECT job_type, \
               SUM(CASE WHEN status = 'pending' AND run_at <= {now} THEN 1 ELSE 0 END) AS due, \
               SUM(CASE WHEN status = 'pending' AND run_at > {now} THEN 1 ELSE 0 END) AS scheduled, \
               SUM(CASE WHEN status = 'running' THEN 1 ELSE 0 END) AS running \
             FROM {} WHERE {LIVE} GROUP BY job_type ORDER BY job_type",
            self.jobs
        )
    }

    /// Of the claims (ids `$1`, attempts `$2`), the ids of those running
    /// under worker `$3`'s lease.
    pub(in crate::store) fn still_owned(&self) -> String {
        format!(
            "SELECT id FROM {} WHERE {} AND {} = 'running' AND lease_owner = $3",
            self.jobs,
            self.in_claims(1),
            self.unindexed("status")
        )
    }

    /// Deletes jobs in the statuses `$1` finished before `$2`.
    pub(in crate::store) fn prune(&self) -> String {
        format!(
            "DELETE FROM {} WHERE {} AND finished_at < $2",
            self.jobs,
            self.in_list("status", 1)
        )
    }

    /// Appends a handler event (`$1` job type, `$2` file, `$3` digest, `$4`
    /// kind, `$5` reason), at now.
    pub(in crate::store) fn record_event(&self) -> String {
        format!(
            "INSERT INTO {} (job_type, file, digest, kind, reason, at) \
             VALUES ($1, $2, $3, $4, $5, {})",
            self.events,
            self.now(6)
        )
    }

    /// The `$1` most recent handler events, newest first.
    pub(in crate::store) fn recent_events(&self) -> String {
        format!(
            "SELECT {EVENT_COLS} FROM {} ORDER BY id DESC LIMIT $1",
            self.events
        )
    }
}
