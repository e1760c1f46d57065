//! The primitive queries the shared policies (`store::policy`) run on
//! Postgres: guarded claims, the read-only guard answers, and rescues.
//!
//! Invariants: a guarded claim locks one guard row per guard in sorted key
//! order (an upsert takes the row lock) *before* it locks its candidates
//! (`FOR UPDATE SKIP LOCKED`), so competing guarded claimers queue on the
//! guard rows, and under READ COMMITTED each statement after the lock sees
//! every claim the previous holder committed: two workers cannot both pass
//! a predicate. Decisions use the transaction's `now()` (the database
//! clock, fixed for the whole transaction). Rescues lock the expired rows
//! they decide on (`FOR UPDATE SKIP LOCKED`), so two rescuers never decide
//! on the same row.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use super::rows::plus_ms;
use super::PostgresStore;
use crate::guards::{Blocker, ClaimGuards, PoolGuard, PoolStatus, RateWindow};
use crate::handler::Scope;
use crate::job::Job;
use crate::store::policy::guards::{self as guard_policy, ClaimTx, GuardReads};
use crate::store::policy::rescue::{self as rescue_policy, Rescue, RescueTx};
use crate::store::sql::{jobs_from_rows, type_counts, JOB_COLS, LIVE};
use crate::store::{ClaimParams, ClaimResult, StoreError, EXPIRED_CODE, EXPIRED_ERROR};
use crate::time;

/// A connection (or open transaction) of one store, and its `now()`.
pub(super) struct PgTx<'c> {
    pub(super) conn: &'c mut PgConnection,
    /// The schema-qualified jobs table.
    pub(super) jobs: &'c str,
    /// The schema.
    pub(super) schema: &'c str,
    now: DateTime<Utc>,
}

impl<'c> PgTx<'c> {
    /// `conn` of `store`, reading the database clock once (inside a
    /// transaction that is the transaction's start time).
    pub(super) async fn new(
        conn: &'c mut PgConnection,
        store: &'c PostgresStore,
    ) -> Result<Self, StoreError> {
        let now = sqlx::query_scalar("SELECT now()")
            .fetch_one(&mut *conn)
            .await?;
        Ok(Self {
            conn,
            jobs: &store.jobs,
            schema: &store.schema,
            now,
        })
    }

    /// Those of `types` for which `exists` (binding `$1` = the types, with
    /// the candidate type as `t`) finds a row.
    async fn types_where(
        &mut self,
        types: &[String],
        exists: &str,
    ) -> Result<Vec<String>, StoreError> {
        Ok(sqlx::query_scalar(&format!(
            "SELECT t FROM unnest($1::text[]) AS u(t) WHERE EXISTS ({exists})"
        ))
        .bind(types)
        .fetch_all(&mut *self.conn)
        .await?)
    }

    fn live_of_type(&self) -> String {
        format!(
            "SELECT 1 FROM {} WHERE job_type = t AND status = 'running' AND lease_expires_at > now()",
            self.jobs
        )
    }
}

impl GuardReads for PgTx<'_> {
    fn now(&self) -> DateTime<Utc> {
        self.now
    }

    async fn scope_busy(&mut self, scope: &Scope) -> Result<bool, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT 1 FROM {} WHERE scope_type = $1 AND scope_id = $2 \
               AND status = 'running' AND lease_expires_at > now() LIMIT 1",
            self.jobs
        ))
        .bind(&scope.scope_type)
        .bind(&scope.scope_id)
        .fetch_optional(&mut *self.conn)
        .await?;
        Ok(row.is_some())
    }

    async fn live_types(&mut self, types: &[String]) -> Result<Vec<String>, StoreError> {
        let live = self.live_of_type();
        self.types_where(types, &live).await
    }

    async fn waiting_types(&mut self, types: &[String]) -> Result<Vec<String>, StoreError> {
        let exists = format!(
            "{} UNION ALL SELECT 1 FROM {} WHERE job_type = t AND status = 'pending' AND run_at <= now()",
            self.live_of_type(),
            self.jobs
        );
        self.types_where(types, &exists).await
    }

    async fn live_counts(&mut self, types: &[String]) -> Result<Vec<(String, u64)>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT job_type, COUNT(*) AS n FROM {} WHERE status = 'running' \
               AND lease_expires_at > now() AND job_type = ANY($1) GROUP BY job_type",
            self.jobs
        ))
        .bind(types)
        .fetch_all(&mut *self.conn)
        .await?;
        type_counts(&rows)
    }

    async fn rate_window(&mut self, key: &str) -> Result<RateWindow, StoreError> {
        let row: Option<(Option<DateTime<Utc>>, i64)> = sqlx::query_as(&format!(
            "SELECT window_start, spent FROM {}.job_guards WHERE key = $1",
            self.schema
        ))
        .bind(key)
        .fetch_optional(&mut *self.conn)
        .await?;
        Ok(
            row.map_or_else(RateWindow::default, |(start, spent)| RateWindow {
                start,
                spent: u64::try_from(spent).unwrap_or(0),
            }),
        )
    }
}

impl ClaimTx for PgTx<'_> {
    async fn lock_candidates(
        &mut self,
        job_type: &str,
        window: u32,
        guards: &ClaimGuards,
    ) -> Result<Vec<Job>, StoreError> {
        let (t, schema) = (self.jobs, self.schema);
        let scope_types: Vec<String> = if guards.serialize_by_scope {
            sqlx::query_scalar(&format!(
                "SELECT DISTINCT scope_type FROM (SELECT scope_type FROM {t} \
                   WHERE status = 'pending' AND job_type = $1 AND run_at <= now() \
                     AND scope_type IS NOT NULL \
                   ORDER BY priority, run_at, id LIMIT $2) s"
            ))
            .bind(job_type)
            .bind(i64::from(window))
            .fetch_all(&mut *self.conn)
            .await?
        } else {
            Vec::new()
        };
        for key in guards.lock_keys(job_type, scope_types.iter().map(String::as_str)) {
            sqlx::query(&format!(
                "INSERT INTO {schema}.job_guards (key, seq) VALUES ($1, 1) \
                 ON CONFLICT (key) DO UPDATE SET seq = job_guards.seq + 1"
            ))
            .bind(key)
            .execute(&mut *self.conn)
            .await?;
        }
        let rows = sqlx::query(&format!(
            "SELECT {cols} FROM {t} j WHERE status = 'pending' AND job_type = $1 AND run_at <= now() \
               AND NOT EXISTS (SELECT 1 FROM {t} c WHERE c.parent_id = j.id AND c.{LIVE}) \
             ORDER BY priority, run_at, id LIMIT $2 FOR UPDATE SKIP LOCKED",
            cols = *JOB_COLS
        ))
        .bind(job_type)
        .bind(i64::from(window))
        .fetch_all(&mut *self.conn)
        .await?;
        jobs_from_rows(&rows)
    }

    async fn expire(&mut self, id: &str) -> Result<Option<Job>, StoreError> {
        let rows = sqlx::query(&format!(
            "UPDATE {} SET status = 'failed', last_error = $1, error_code = $3, \
               finished_at = now(), updated_at = now() \
             WHERE id = $2 AND status = 'pending' RETURNING {cols}",
            self.jobs,
            cols = *JOB_COLS
        ))
        .bind(EXPIRED_ERROR)
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
            "UPDATE {} SET status = 'running', lease_owner = $1, lease_expires_at = {lease}, \
               started_at = now(), attempts = attempts + 1, handler_version = $3, \
               updated_at = now() \
             WHERE id = $4 AND status = 'pending' RETURNING {cols}",
            self.jobs,
            lease = plus_ms("now()", "$2"),
            cols = *JOB_COLS
        ))
        .bind(&claim.worker_id)
        .bind(time::millis(claim.lease))
        .bind(&claim.handler_version)
        .bind(id)
        .fetch_all(&mut *self.conn)
        .await?;
        Ok(jobs_from_rows(&rows)?.pop())
    }

    async fn store_rate_window(&mut self, key: &str, window: RateWindow) -> Result<(), StoreError> {
        sqlx::query(&format!(
            "UPDATE {}.job_guards SET window_start = $1, spent = $2 WHERE key = $3",
            self.schema
        ))
        .bind(window.start)
        .bind(i64::try_from(window.spent).unwrap_or(i64::MAX))
        .bind(key)
        .execute(&mut *self.conn)
        .await?;
        Ok(())
    }
}

impl RescueTx for PgTx<'_> {
    async fn expired_leases(&mut self, limit: u32) -> Result<Vec<Job>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {cols} FROM {} WHERE status = 'running' AND lease_expires_at <= now() \
             ORDER BY lease_expires_at LIMIT $1 FOR UPDATE SKIP LOCKED",
            self.jobs,
            cols = *JOB_COLS
        ))
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
            Rescue::Requeue => "status = 'pending', run_at = now(), finished_at = NULL",
            Rescue::Fail => "status = 'failed', finished_at = now()",
        };
        let rows = sqlx::query(&format!(
            "UPDATE {} SET {set}, last_error = $1, lease_owner = NULL, lease_expires_at = NULL, \
               updated_at = now() \
             WHERE id = ANY($2) AND status = 'running' RETURNING {cols}",
            self.jobs,
            cols = *JOB_COLS
        ))
        .bind(error)
        .bind(ids)
        .fetch_all(&mut *self.conn)
        .await?;
        jobs_from_rows(&rows)
    }
}

/// A guarded claim (see `store::policy::guards`) in one transaction on the
/// engine pool.
pub(super) async fn claim(
    store: &PostgresStore,
    p: &ClaimParams,
) -> Result<ClaimResult, StoreError> {
    let mut tx = store.fast.begin().await?;
    let res = guard_policy::claim(&mut PgTx::new(&mut tx, store).await?, p).await?;
    tx.commit().await?;
    Ok(res)
}

/// Recovers expired leases (see `store::policy::rescue`) in one transaction
/// on the engine pool.
pub(super) async fn rescue(store: &PostgresStore, limit: u32) -> Result<Vec<Job>, StoreError> {
    let mut tx = store.fast.begin().await?;
    let jobs = rescue_policy::rescue(&mut PgTx::new(&mut tx, store).await?, limit).await?;
    tx.commit().await?;
    Ok(jobs)
}

/// Occupancy and window spend of each pool (read-only, no guard lock).
pub(super) async fn pool_status(
    store: &PostgresStore,
    pools: &[PoolGuard],
) -> Result<Vec<PoolStatus>, StoreError> {
    let mut conn = store.pool.acquire().await?;
    guard_policy::pool_status(&mut PgTx::new(&mut conn, store).await?, pools).await
}

/// The claim predicate for one job, read-only (see `JobStore::blocked_by`).
pub(super) async fn blocked_by(
    store: &PostgresStore,
    job: &Job,
    guards: &ClaimGuards,
) -> Result<Option<Blocker>, StoreError> {
    let mut conn = store.pool.acquire().await?;
    guard_policy::blocked_by(&mut PgTx::new(&mut conn, store).await?, job, guards).await
}
