//! The primitive queries the shared policies (`store::policy`) run on
//! SQLite: guarded claims, the read-only guard answers, and rescues.
//!
//! Invariant: claims and rescues run inside one `BEGIN IMMEDIATE`
//! transaction behind this process's writer mutex, so SQLite's write lock is
//! held from the first read to the commit and no other process can claim
//! between a predicate and its write. A guarded claim reads its candidates,
//! then bumps every guard row it needs (sorted keys) so that concurrent
//! claims needing the same guards are visibly serialized on those rows.

use chrono::{DateTime, Utc};
use sqlx::{Row, SqliteConnection};

use super::rows::{from_ms, json_list, ms};
use super::SqliteStore;
use crate::guards::{Blocker, ClaimGuards, PoolGuard, PoolStatus, RateWindow};
use crate::handler::Scope;
use crate::job::Job;
use crate::store::policy::guards::{self as guard_policy, ClaimTx, GuardReads};
use crate::store::policy::rescue::{self as rescue_policy, Rescue, RescueTx};
use crate::store::sql::{jobs_from_rows, type_counts, JOB_COLS, LIVE};
use crate::store::{ClaimParams, ClaimResult, StoreError, StoreEvent, EXPIRED_CODE, EXPIRED_ERROR};
use crate::time;

/// A connection (or open transaction) and the instant its decisions use.
pub(super) struct SqliteTx<'c> {
    pub(super) conn: &'c mut SqliteConnection,
    /// Now, in stored milliseconds.
    pub(super) now: i64,
}

impl<'c> SqliteTx<'c> {
    /// `conn` at the process clock's now.
    pub(super) fn new(conn: &'c mut SqliteConnection) -> Self {
        Self {
            conn,
            now: ms(Utc::now()),
        }
    }

    /// Those of `types` for which `exists` (binding `?1` = the type, `?2` =
    /// now) finds a row.
    async fn types_where(
        &mut self,
        types: &[String],
        exists: &str,
    ) -> Result<Vec<String>, StoreError> {
        Ok(sqlx::query_scalar(&format!(
            "SELECT t.value FROM json_each(?1) t WHERE EXISTS ({exists})"
        ))
        .bind(json_list(types))
        .bind(self.now)
        .fetch_all(&mut *self.conn)
        .await?)
    }
}

const LIVE_OF_TYPE: &str = "SELECT 1 FROM boxcar_jobs \
    WHERE job_type = t.value AND status = 'running' AND lease_expires_at > ?2";

impl GuardReads for SqliteTx<'_> {
    fn now(&self) -> DateTime<Utc> {
        from_ms(self.now)
    }

    async fn scope_busy(&mut self, scope: &Scope) -> Result<bool, StoreError> {
        let row = sqlx::query(
            "SELECT 1 FROM boxcar_jobs WHERE scope_type = ?1 AND scope_id = ?2 \
               AND status = 'running' AND lease_expires_at > ?3 LIMIT 1",
        )
        .bind(&scope.scope_type)
        .bind(&scope.scope_id)
        .bind(self.now)
        .fetch_optional(&mut *self.conn)
        .await?;
        Ok(row.is_some())
    }

    async fn live_types(&mut self, types: &[String]) -> Result<Vec<String>, StoreError> {
        self.types_where(types, LIVE_OF_TYPE).await
    }

    async fn waiting_types(&mut self, types: &[String]) -> Result<Vec<String>, StoreError> {
        let due = "SELECT 1 FROM boxcar_jobs \
            WHERE job_type = t.value AND status = 'pending' AND run_at <= ?2";
        self.types_where(types, &format!("{LIVE_OF_TYPE} UNION ALL {due}"))
            .await
    }

    async fn live_counts(&mut self, types: &[String]) -> Result<Vec<(String, u64)>, StoreError> {
        let rows = sqlx::query(
            "SELECT job_type, COUNT(*) AS n FROM boxcar_jobs WHERE status = 'running' \
               AND lease_expires_at > ?1 AND job_type IN (SELECT value FROM json_each(?2)) \
             GROUP BY job_type",
        )
        .bind(self.now)
        .bind(json_list(types))
        .fetch_all(&mut *self.conn)
        .await?;
        type_counts(&rows)
    }

    async fn rate_window(&mut self, key: &str) -> Result<RateWindow, StoreError> {
        let row = sqlx::query("SELECT window_start, spent FROM boxcar_job_guards WHERE key = ?")
            .bind(key)
            .fetch_optional(&mut *self.conn)
            .await?;
        let Some(row) = row else {
            return Ok(RateWindow::default());
        };
        let start: Option<i64> = row.try_get("window_start")?;
        let spent: i64 = row.try_get("spent")?;
        Ok(RateWindow {
            start: start.map(from_ms),
            spent: u64::try_from(spent).unwrap_or(0),
        })
    }
}

impl ClaimTx for SqliteTx<'_> {
    async fn lock_candidates(
        &mut self,
        job_type: &str,
        window: u32,
        guards: &ClaimGuards,
    ) -> Result<Vec<Job>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {cols} FROM boxcar_jobs j \
             WHERE status = 'pending' AND job_type = ?1 AND run_at <= ?2 \
               AND NOT EXISTS (SELECT 1 FROM boxcar_jobs c WHERE c.parent_id = j.id AND c.{LIVE}) \
             ORDER BY priority, run_at, id LIMIT ?3",
            cols = *JOB_COLS
        ))
        .bind(job_type)
        .bind(self.now)
        .bind(i64::from(window))
        .fetch_all(&mut *self.conn)
        .await?;
        let candidates = jobs_from_rows(&rows)?;
        let scope_types = candidates
            .iter()
            .filter_map(|c| c.scope.as_ref())
            .map(|s| s.scope_type.as_str());
        for key in guards.lock_keys(job_type, scope_types) {
            sqlx::query(
                "INSERT INTO boxcar_job_guards (key, seq) VALUES (?, 1) \
                 ON CONFLICT (key) DO UPDATE SET seq = seq + 1",
            )
            .bind(key)
            .execute(&mut *self.conn)
            .await?;
        }
        Ok(candidates)
    }

    async fn expire(&mut self, id: &str) -> Result<Option<Job>, StoreError> {
        let rows = sqlx::query(&format!(
            "UPDATE boxcar_jobs SET status = 'failed', last_error = ?1, error_code = ?4, \
               finished_at = ?2, updated_at = ?2 \
             WHERE id = ?3 AND status = 'pending' RETURNING {cols}",
            cols = *JOB_COLS
        ))
        .bind(EXPIRED_ERROR)
        .bind(self.now)
        .bind(id)
        .bind(EXPIRED_CODE)
        .fetch_all(&mut *self.conn)
        .await?;
        Ok(jobs_from_rows(&rows)?.pop())
    }

    async fn claim_one(
        &mut self,
        id: &str,
        claim: &ClaimParams,
    ) -> Result<Option<Job>, StoreError> {
        let rows = sqlx::query(&format!(
            "UPDATE boxcar_jobs SET status = 'running', lease_owner = ?1, lease_expires_at = ?2, \
               started_at = ?3, attempts = attempts + 1, handler_version = ?4, updated_at = ?3 \
             WHERE id = ?5 AND status = 'pending' RETURNING {cols}",
            cols = *JOB_COLS
        ))
        .bind(&claim.worker_id)
        .bind(time::after_ms(self.now, claim.lease))
        .bind(self.now)
        .bind(&claim.handler_version)
        .bind(id)
        .fetch_all(&mut *self.conn)
        .await?;
        Ok(jobs_from_rows(&rows)?.pop())
    }

    async fn store_rate_window(&mut self, key: &str, window: RateWindow) -> Result<(), StoreError> {
        sqlx::query("UPDATE boxcar_job_guards SET window_start = ?1, spent = ?2 WHERE key = ?3")
            .bind(window.start.map(ms))
            .bind(i64::try_from(window.spent).unwrap_or(i64::MAX))
            .bind(key)
            .execute(&mut *self.conn)
            .await?;
        Ok(())
    }
}

impl RescueTx for SqliteTx<'_> {
    async fn expired_leases(&mut self, limit: u32) -> Result<Vec<Job>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {cols} FROM boxcar_jobs WHERE status = 'running' AND lease_expires_at <= ?1 \
             ORDER BY lease_expires_at LIMIT ?2",
            cols = *JOB_COLS
        ))
        .bind(self.now)
        .bind(i64::from(limit))
        .fetch_all(&mut *self.conn)
        .await?;
        jobs_from_rows(&rows)
    }

    async fn apply_rescue(
        &mut self,
        ids: &[String],
        outcome: Rescue,
        error: &str,
    ) -> Result<Vec<Job>, StoreError> {
        let set = match outcome {
            Rescue::Requeue => "status = 'pending', run_at = ?1, finished_at = NULL",
            Rescue::Fail => "status = 'failed', finished_at = ?1",
        };
        let rows = sqlx::query(&format!(
            "UPDATE boxcar_jobs SET {set}, last_error = ?2, lease_owner = NULL, \
               lease_expires_at = NULL, updated_at = ?1 \
             WHERE id IN (SELECT value FROM json_each(?3)) AND +status = 'running' \
             RETURNING {cols}",
            cols = *JOB_COLS
        ))
        .bind(self.now)
        .bind(error)
        .bind(json_list(ids))
        .fetch_all(&mut *self.conn)
        .await?;
        jobs_from_rows(&rows)
    }
}

/// A guarded claim (see `store::policy::guards`) in one `BEGIN IMMEDIATE`
/// transaction. The caller holds the writer mutex.
pub(super) async fn claim(store: &SqliteStore, p: &ClaimParams) -> Result<ClaimResult, StoreError> {
    let mut conn = store.pool.begin_with("BEGIN IMMEDIATE").await?;
    let res = guard_policy::claim(&mut SqliteTx::new(&mut conn), p).await?;
    conn.commit().await?;
    for j in &res.expired {
        store.notify(StoreEvent::Finished(j.id.clone()));
    }
    Ok(res)
}

/// Recovers expired leases (see `store::policy::rescue`) in one
/// `BEGIN IMMEDIATE` transaction.
pub(super) async fn rescue(store: &SqliteStore, limit: u32) -> Result<Vec<Job>, StoreError> {
    let _w = store.write.lock().await;
    let mut conn = store.pool.begin_with("BEGIN IMMEDIATE").await?;
    let jobs = rescue_policy::rescue(&mut SqliteTx::new(&mut conn), limit).await?;
    conn.commit().await?;
    store.notify_rescued(&jobs);
    Ok(jobs)
}

/// Occupancy and window spend of each pool (read-only, no guard lock).
pub(super) async fn pool_status(
    store: &SqliteStore,
    pools: &[PoolGuard],
) -> Result<Vec<PoolStatus>, StoreError> {
    let mut conn = store.pool.acquire().await?;
    guard_policy::pool_status(&mut SqliteTx::new(&mut conn), pools).await
}

/// The claim predicate for one job, read-only (see `JobStore::blocked_by`).
pub(super) async fn blocked_by(
    store: &SqliteStore,
    job: &Job,
    guards: &ClaimGuards,
) -> Result<Option<Blocker>, StoreError> {
    let mut conn = store.pool.acquire().await?;
    guard_policy::blocked_by(&mut SqliteTx::new(&mut conn), job, guards).await
}
