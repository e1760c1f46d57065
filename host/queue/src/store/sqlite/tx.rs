//! The primitive queries the shared policies (`store::policy`) run on
//! SQLite: guarded claims, the read-only guard answers, and rescues. The
//! statements are the shared ones (`store::sql::statements`); this module
//! binds SQLite's values (times as milliseconds, lists as JSON, now last).
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
use super::{history, SqliteStore};
use crate::attempt::AttemptOutcome;
use crate::guards::{Blocker, ClaimGuards, PoolGuard, PoolStatus, RateWindow};
use crate::handler::Scope;
use crate::job::Job;
use crate::store::policy::guards::{self as guard_policy, Candidate, ClaimTx, GuardReads};
use crate::store::policy::rescue::{self as rescue_policy, Rescue, RescueTx};
use crate::store::sql::{candidates_from_rows, jobs_from_rows, type_counts, Dialect, SqlEnding};
use crate::store::{ClaimParams, ClaimResult, StoreError, StoreEvent, EXPIRED_CODE, EXPIRED_ERROR};
use crate::time;

/// A connection (or open transaction), the store's dialect, and the instant
/// its decisions use.
pub(super) struct SqliteTx<'c> {
    pub(super) conn: &'c mut SqliteConnection,
    pub(super) sql: &'c Dialect,
    /// Now, in stored milliseconds.
    pub(super) now: i64,
}

impl<'c> SqliteTx<'c> {
    /// `conn` of `store` at the process clock's now.
    pub(super) fn new(conn: &'c mut SqliteConnection, store: &'c SqliteStore) -> Self {
        Self {
            conn,
            sql: &store.sql,
            now: ms(Utc::now()),
        }
    }

    /// Of `types`, those `statement` (`$1` the types, `$2` now) returns.
    async fn types(
        &mut self,
        statement: String,
        types: &[String],
    ) -> Result<Vec<String>, StoreError> {
        Ok(sqlx::query_scalar(&statement)
            .bind(json_list(types))
            .bind(self.now)
            .fetch_all(&mut *self.conn)
            .await?)
    }
}

impl GuardReads for SqliteTx<'_> {
    fn now(&self) -> DateTime<Utc> {
        from_ms(self.now)
    }

    async fn scope_busy(&mut self, scope: &Scope) -> Result<bool, StoreError> {
        let row = sqlx::query(&self.sql.scope_busy())
            .bind(&scope.scope_type)
            .bind(&scope.scope_id)
            .bind(self.now)
            .fetch_optional(&mut *self.conn)
            .await?;
        Ok(row.is_some())
    }

    async fn busy_scope_ids(
        &mut self,
        scope_type: &str,
        limit: usize,
    ) -> Result<Option<Vec<String>>, StoreError> {
        Ok(Some(
            sqlx::query_scalar(&self.sql.busy_scope_ids())
                .bind(scope_type)
                .bind(i64::try_from(limit).unwrap_or(i64::MAX))
                .bind(self.now)
                .fetch_all(&mut *self.conn)
                .await?,
        ))
    }

    async fn live_types(&mut self, types: &[String]) -> Result<Vec<String>, StoreError> {
        self.types(self.sql.live_types(), types).await
    }

    async fn waiting_types(&mut self, types: &[String]) -> Result<Vec<String>, StoreError> {
        self.types(self.sql.waiting_types(), types).await
    }

    async fn live_counts(&mut self, types: &[String]) -> Result<Vec<(String, u64)>, StoreError> {
        let rows = sqlx::query(&self.sql.live_counts())
            .bind(json_list(types))
            .bind(self.now)
            .fetch_all(&mut *self.conn)
            .await?;
        type_counts(&rows)
    }

    async fn rate_window(&mut self, key: &str) -> Result<RateWindow, StoreError> {
        let row = sqlx::query(&self.sql.rate_window())
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
    ) -> Result<Vec<Candidate>, StoreError> {
        let rows = sqlx::query(&self.sql.candidates())
            .bind(job_type)
            .bind(i64::from(window))
            .bind(self.now)
            .fetch_all(&mut *self.conn)
            .await?;
        let candidates = candidates_from_rows(&rows)?;
        let scope_types = candidates
            .iter()
            .filter_map(|c| c.scope.as_ref())
            .map(|s| s.scope_type.as_str());
        let keys = guards.lock_keys(job_type, scope_types);
        if !keys.is_empty() {
            sqlx::query(&self.sql.lock_guards())
                .bind(json_list(&keys))
                .execute(&mut *self.conn)
                .await?;
        }
        Ok(candidates)
    }

    async fn expire(&mut self, id: &str) -> Result<Option<Job>, StoreError> {
        let rows = sqlx::query(&self.sql.expire_one())
            .bind(EXPIRED_ERROR)
            .bind(EXPIRED_CODE)
            .bind(id)
            .bind(self.now)
            .fetch_all(&mut *self.conn)
            .await?;
        Ok(jobs_from_rows(&rows)?.pop())
    }

    async fn claim_ids(
        &mut self,
        ids: &[String],
        claim: &ClaimParams,
    ) -> Result<Vec<Job>, StoreError> {
        let rows = sqlx::query(&self.sql.claim_ids())
            .bind(&claim.worker_id)
            .bind(time::millis(claim.lease))
            .bind(&claim.handler_version)
            .bind(json_list(ids))
            .bind(self.now)
            .fetch_all(&mut *self.conn)
            .await?;
        jobs_from_rows(&rows)
    }

    async fn store_rate_window(&mut self, key: &str, window: RateWindow) -> Result<(), StoreError> {
        sqlx::query(&self.sql.store_rate_window())
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
        let rows = sqlx::query(&self.sql.expired_leases())
            .bind(i64::from(limit))
            .bind(self.now)
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
        let endings: Vec<SqlEnding<'_>> = ids
            .iter()
            .map(|id| SqlEnding::bare(id, AttemptOutcome::LeaseLost, Some(error)))
            .collect();
        history::record(self.conn, self.sql, &endings, None, self.now).await?;
        let rows = sqlx::query(&self.sql.apply_rescue(outcome))
            .bind(error)
            .bind(json_list(ids))
            .bind(self.now)
            .fetch_all(&mut *self.conn)
            .await?;
        jobs_from_rows(&rows)
    }
}

/// A guarded claim (see `store::policy::guards`) in one `BEGIN IMMEDIATE`
/// transaction. The caller holds the writer mutex.
pub(super) async fn claim(store: &SqliteStore, p: &ClaimParams) -> Result<ClaimResult, StoreError> {
    let mut conn = store.own.begin_with("BEGIN IMMEDIATE").await?;
    let res = guard_policy::claim(&mut SqliteTx::new(&mut conn, store), p).await?;
    conn.commit().await?;
    for j in &res.expired {
        store.notify(StoreEvent::Finished(j.id.clone()));
    }
    Ok(res)
}

/// Recovers expired leases (see `store::policy::rescue`) in one
/// `BEGIN IMMEDIATE` transaction.
pub(super) async fn rescue(store: &SqliteStore, limit: u32) -> Result<Vec<Job>, StoreError> {
    let mut write = store.write.lock().await;
    let mut conn = store.own.begin_with("BEGIN IMMEDIATE").await?;
    let jobs = rescue_policy::rescue(&mut SqliteTx::new(&mut conn, store), limit).await?;
    conn.commit().await?;
    if jobs.is_empty() {
        write.changed_nothing();
    }
    store.notify_rescued(&jobs);
    Ok(jobs)
}

/// Occupancy and window spend of each pool (read-only, no guard lock).
pub(super) async fn pool_status(
    store: &SqliteStore,
    pools: &[PoolGuard],
) -> Result<Vec<PoolStatus>, StoreError> {
    let mut conn = store.own.acquire().await?;
    guard_policy::pool_status(&mut SqliteTx::new(&mut conn, store), pools).await
}

/// The claim predicate for one job, read-only (see `JobStore::blocked_by`).
pub(super) async fn blocked_by(
    store: &SqliteStore,
    job: &Job,
    guards: &ClaimGuards,
) -> Result<Option<Blocker>, StoreError> {
    let mut conn = store.own.acquire().await?;
    guard_policy::blocked_by(&mut SqliteTx::new(&mut conn, store), job, guards).await
}
