//! The statements of the policy primitives (guarded claims, rescue,
//! schedule reconcile) and the schedule reads, written once for both SQL
//! backends over a [`Dialect`]. Each comment lists the parameters in
//! order; on SQLite the statement's now is bound after them (see
//! [`Dialect::now`]).

use super::{Dialect, JOB_COLS, SCHEDULE_COLS};
use crate::store::policy::rescue::Rescue;

impl Dialect {
    /// `1` when a job of the scope (`$1` type, `$2` id) holds a live lease.
    pub(in crate::store) fn scope_busy(&self) -> String {
        format!(
            "SELECT 1 FROM {} WHERE scope_type = $1 AND scope_id = $2 \
               AND status = 'running' AND lease_expires_at > {} LIMIT 1",
            self.jobs,
            self.now(3)
        )
    }

    /// Up to `$2` distinct ids of scopes of type `$1` with a job holding a
    /// live lease (SQLite's; see `GuardReads::busy_scope_ids`). Reads the
    /// running jobs only: `scope_type` is hidden from the planner, which
    /// would otherwise walk every job of the scope type in the scope index.
    #[cfg(feature = "sqlite")]
    pub(in crate::store) fn busy_scope_ids(&self) -> String {
        format!(
            "SELECT DISTINCT scope_id FROM {} WHERE status = 'running' \
               AND {} = $1 AND lease_expires_at > {} LIMIT $2",
            self.jobs,
            self.unindexed("scope_type"),
            self.now(3)
        )
    }

    /// A job of type `u.value` holding a live lease at `now`.
    fn live_of_type(&self, now: &str) -> String {
        format!(
            "SELECT 1 FROM {} WHERE job_type = u.value AND status = 'running' \
               AND lease_expires_at > {now}",
            self.jobs
        )
    }

    /// Of the types `$1`, those holding a live lease.
    pub(in crate::store) fn live_types(&self) -> String {
        let live = self.live_of_type(&self.now(2));
        format!(
            "SELECT u.value FROM {} WHERE EXISTS ({live})",
            self.list_rows(1)
        )
    }

    /// Of the types `$1`, those holding a live lease or with a due pending
    /// job.
    pub(in crate::store) fn waiting_types(&self) -> String {
        let now = self.now(2);
        format!(
            "SELECT u.value FROM {} WHERE EXISTS ({} UNION ALL SELECT 1 FROM {} \
               WHERE job_type = u.value AND status = 'pending' AND run_at <= {now})",
            self.list_rows(1),
            self.live_of_type(&now),
            self.jobs
        )
    }

    /// `job_type, n`: live leases per type among the types `$1`.
    pub(in crate::store) fn live_counts(&self) -> String {
        format!(
            "SELECT job_type, COUNT(*) AS n FROM {} WHERE status = 'running' \
               AND lease_expires_at > {} AND {} GROUP BY job_type",
            self.jobs,
            self.now(2),
            self.in_list("job_type", 1)
        )
    }

    /// `window_start, spent` of the guard row `$1`.
    pub(in crate::store) fn rate_window(&self) -> String {
        format!(
            "SELECT window_start, spent FROM {} WHERE key = $1",
            self.guards
        )
    }

    /// Stores the rate window (`$1` start, `$2` spent) of the guard row `$3`.
    pub(in crate::store) fn store_rate_window(&self) -> String {
        format!(
            "UPDATE {} SET window_start = $1, spent = $2 WHERE key = $3",
            self.guards
        )
    }

    /// Locks the guard rows of the keys `$1` (creating the missing ones),
    /// one statement for all, in byte order of the key: every claimer locks
    /// in that order, so two claims never wait on each other's rows.
    pub(in crate::store) fn lock_guards(&self) -> String {
        format!(
            "INSERT INTO {} AS g (key, seq) SELECT u.value, 1 FROM {} WHERE true \
             ORDER BY {} ON CONFLICT (key) DO UPDATE SET seq = g.seq + 1",
            self.guards,
            self.list_rows(1),
            self.byte_order("u.value")
        )
    }

    /// `id, scope_type, scope_id, expires_at` of up to `$2` due pending
    /// jobs of type `$1` without live children, in claim order (locked on
    /// Postgres).
    pub(in crate::store) fn candidates(&self) -> String {
        format!(
            "SELECT id, scope_type, scope_id, expires_at FROM {t} j \
             WHERE status = 'pending' AND job_type = $1 AND {run_at} <= {now} \
               AND {childless} \
             ORDER BY priority, run_at, id LIMIT $2{lock}",
            t = self.jobs,
            childless = self.no_live_children(&self.jobs),
            run_at = self.unindexed("run_at"),
            now = self.now(3),
            lock = self.lock_rows()
        )
    }

    /// Fails the pending job `$3` as expired (`$1` error, `$2` code).
    pub(in crate::store) fn expire_one(&self) -> String {
        let now = self.now(4);
        format!(
            "UPDATE {} SET status = 'failed', last_error = $1, error_code = $2, \
               finished_at = {now}, updated_at = {now} \
             WHERE id = $3 AND status = 'pending' RETURNING {cols}",
            self.jobs,
            cols = *JOB_COLS
        )
    }

    /// Claims the pending jobs among `$4` for worker `$1` under a lease of
    /// `$2` ms, handler version `$3`.
    pub(in crate::store) fn claim_ids(&self) -> String {
        let now = self.now(5);
        format!(
            "UPDATE {} SET status = 'running', lease_owner = $1, lease_expires_at = {lease}, \
               started_at = {now}, attempts = attempts + 1, handler_version = $3, \
               updated_at = {now} \
             WHERE {ids} AND {status} = 'pending' RETURNING {cols}",
            self.jobs,
            lease = self.plus_ms(&now, "$2"),
            ids = self.in_list("id", 4),
            status = self.unindexed("status"),
            cols = *JOB_COLS
        )
    }

    /// Up to `$1` running jobs whose lease expired, oldest lease first
    /// (locked on Postgres).
    pub(in crate::store) fn expired_leases(&self) -> String {
        format!(
            "SELECT {cols} FROM {} WHERE status = 'running' AND lease_expires_at <= {} \
             ORDER BY lease_expires_at LIMIT $1{}",
            self.jobs,
            self.now(2),
            self.lock_rows(),
            cols = *JOB_COLS
        )
    }

    /// Applies a rescue `outcome` to the still running jobs `$2`, with last
    /// error `$1`.
    pub(in crate::store) fn apply_rescue(&self, outcome: Rescue) -> String {
        let now = self.now(3);
        let set = match outcome {
            Rescue::Requeue => format!("status = 'pending', run_at = {now}, finished_at = NULL"),
            Rescue::Fail => format!("status = 'failed', finished_at = {now}"),
        };
        format!(
            "UPDATE {} SET {set}, last_error = $1, lease_owner = NULL, lease_expires_at = NULL, \
               updated_at = {now} \
             WHERE {} AND status = 'running' RETURNING {cols}",
            self.jobs,
            self.in_list("id", 2),
            cols = *JOB_COLS
        )
    }

    /// The stored schedules among the ids `$1`.
    pub(in crate::store) fn schedules_among(&self) -> String {
        format!(
            "SELECT {SCHEDULE_COLS} FROM {} WHERE {}",
            self.schedules,
            self.in_list("id", 1)
        )
    }

    /// Creates schedule `$11` (`$1` job type, `$2` payload, `$3` every_ms,
    /// `$4` cron, `$5` tz, `$6` immediately, `$7` start_at, `$8` end_at,
    /// `$9` next_run_at, `$10` owner).
    pub(in crate::store) fn schedule_create(&self) -> String {
        let now = self.now(12);
        format!(
            "INSERT INTO {} (job_type, payload, every_ms, cron, tz, immediately, start_at, \
               end_at, next_run_at, owner, id, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, {now}, {now})",
            self.schedules
        )
    }

    /// Redefines schedule `$11` (parameters as [`Self::schedule_create`]).
    pub(in crate::store) fn schedule_redefine(&self) -> String {
        format!(
            "UPDATE {} SET job_type = $1, payload = $2, every_ms = $3, cron = $4, tz = $5, \
               immediately = $6, start_at = $7, end_at = $8, next_run_at = $9, owner = $10, \
               updated_at = {} WHERE id = $11",
            self.schedules,
            self.now(12)
        )
    }

    /// Gives schedule `$2` to owner `$1`.
    pub(in crate::store) fn schedule_adopt(&self) -> String {
        format!(
            "UPDATE {} SET owner = $1, updated_at = {} WHERE id = $2",
            self.schedules,
            self.now(3)
        )
    }

    /// Deletes owner `$1`'s schedules whose ids are not among `$2`;
    /// returns their ids.
    pub(in crate::store) fn schedules_remove_undeclared(&self) -> String {
        format!(
            "DELETE FROM {} WHERE owner = $1 AND NOT ({}) RETURNING id",
            self.schedules,
            self.in_list("id", 2)
        )
    }

    /// Every schedule, by id.
    pub(in crate::store) fn schedules_all(&self) -> String {
        format!("SELECT {SCHEDULE_COLS} FROM {} ORDER BY id", self.schedules)
    }

    /// Up to `$2` schedules due at `$1`, earliest first.
    pub(in crate::store) fn schedules_due(&self) -> String {
        format!(
            "SELECT {SCHEDULE_COLS} FROM {} WHERE next_run_at IS NOT NULL AND next_run_at <= $1 \
             ORDER BY next_run_at, id LIMIT $2",
            self.schedules
        )
    }

    /// Moves schedule `$3` from tick `$2` to `$1` (compare-and-set).
    pub(in crate::store) fn schedule_fire(&self) -> String {
        format!(
            "UPDATE {} SET next_run_at = $1, last_run_at = $2, updated_at = {} \
             WHERE id = $3 AND next_run_at = $2",
            self.schedules,
            self.now(4)
        )
    }
}
