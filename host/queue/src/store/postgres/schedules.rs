//! Schedules on Postgres (see [`crate::store::schedules`] for the invariants).
//!
//! Reconciles (the shared diff of `store::policy::schedules`) take
//! `SHARE ROW EXCLUSIVE` on the schedules table (it conflicts with itself),
//! so hosts starting together reconcile one after another. A fire's
//! `UPDATE … WHERE next_run_at = tick` waits on the row lock of a
//! concurrent fire and then re-checks its condition, finding the tick
//! already moved: one job per tick across the fleet.

use chrono::{DateTime, Utc};

use super::tx::PgTx;
use super::writes::insert_all;
use super::PostgresStore;
use crate::job::AddResult;
use crate::schedule::ScheduleRecord;
use crate::store::policy::schedules::{reconcile, ScheduleTx};
use crate::store::schedules::{
    DeclaredSchedule, FireSchedule, ReconcileReport, ReconcileSchedules,
};
use crate::store::sql::{schedule_from_row, SCHEDULE_COLS};
use crate::store::{StoreError, StoreEvent};

/// The schedules table of `schema`.
fn table(schema: &str) -> String {
    format!("{schema}.schedules")
}

impl PgTx<'_> {
    async fn write_def(
        &mut self,
        owner: &str,
        d: &DeclaredSchedule,
        create: bool,
    ) -> Result<(), StoreError> {
        let table = table(self.schema);
        let sql = if create {
            format!(
                "INSERT INTO {table} (job_type, payload, every_ms, cron, tz, immediately, \
                 start_at, end_at, next_run_at, owner, id) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
            )
        } else {
            format!(
                "UPDATE {table} SET job_type = $1, payload = $2, every_ms = $3, cron = $4, \
                 tz = $5, immediately = $6, start_at = $7, end_at = $8, next_run_at = $9, \
                 owner = $10, updated_at = now() WHERE id = $11"
            )
        };
        let def = &d.def;
        sqlx::query(&sql)
            .bind(&def.job_type)
            .bind(&def.payload)
            .bind(def.every_ms)
            .bind(&def.cron)
            .bind(&def.tz)
            .bind(def.immediately)
            .bind(def.start_at)
            .bind(def.end_at)
            .bind(d.first_run)
            .bind(owner)
            .bind(&def.id)
            .execute(&mut *self.conn)
            .await?;
        Ok(())
    }
}

impl ScheduleTx for PgTx<'_> {
    async fn stored(&mut self, ids: &[String]) -> Result<Vec<ScheduleRecord>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {SCHEDULE_COLS} FROM {} WHERE id = ANY($1)",
            table(self.schema)
        ))
        .bind(ids)
        .fetch_all(&mut *self.conn)
        .await?;
        rows.iter().map(schedule_from_row).collect()
    }

    async fn create(&mut self, owner: &str, d: &DeclaredSchedule) -> Result<(), StoreError> {
        self.write_def(owner, d, true).await
    }

    async fn redefine(&mut self, owner: &str, d: &DeclaredSchedule) -> Result<(), StoreError> {
        self.write_def(owner, d, false).await
    }

    async fn adopt(&mut self, owner: &str, id: &str) -> Result<(), StoreError> {
        sqlx::query(&format!(
            "UPDATE {} SET owner = $1, updated_at = now() WHERE id = $2",
            table(self.schema)
        ))
        .bind(owner)
        .bind(id)
        .execute(&mut *self.conn)
        .await?;
        Ok(())
    }

    async fn remove_undeclared(
        &mut self,
        owner: &str,
        keep: &[String],
    ) -> Result<Vec<String>, StoreError> {
        Ok(sqlx::query_scalar(&format!(
            "DELETE FROM {} WHERE owner = $1 AND NOT (id = ANY($2)) RETURNING id",
            table(self.schema)
        ))
        .bind(owner)
        .bind(keep)
        .fetch_all(&mut *self.conn)
        .await?)
    }
}

pub(super) async fn reconcile_schedules(
    store: &PostgresStore,
    p: ReconcileSchedules,
) -> Result<ReconcileReport, StoreError> {
    let mut tx = store.pool.begin().await?;
    sqlx::query(&format!(
        "LOCK TABLE {} IN SHARE ROW EXCLUSIVE MODE",
        table(&store.schema)
    ))
    .execute(&mut *tx)
    .await?;
    let report = reconcile(&mut PgTx::new(&mut tx, store).await?, &p).await?;
    tx.commit().await?;
    Ok(report)
}

pub(super) async fn list(store: &PostgresStore) -> Result<Vec<ScheduleRecord>, StoreError> {
    let rows = sqlx::query(&format!(
        "SELECT {SCHEDULE_COLS} FROM {} ORDER BY id",
        table(&store.schema)
    ))
    .fetch_all(&store.pool)
    .await?;
    rows.iter().map(schedule_from_row).collect()
}

pub(super) async fn due(
    store: &PostgresStore,
    now: DateTime<Utc>,
    limit: u32,
) -> Result<Vec<ScheduleRecord>, StoreError> {
    let rows = sqlx::query(&format!(
        "SELECT {SCHEDULE_COLS} FROM {} \
         WHERE next_run_at IS NOT NULL AND next_run_at <= $1 \
         ORDER BY next_run_at, id LIMIT $2",
        table(&store.schema)
    ))
    .bind(now)
    .bind(i64::from(limit))
    .fetch_all(&store.pool)
    .await?;
    rows.iter().map(schedule_from_row).collect()
}

pub(super) async fn fire(
    store: &PostgresStore,
    p: FireSchedule,
) -> Result<Option<AddResult>, StoreError> {
    let mut tx = store.pool.begin().await?;
    let moved = sqlx::query(&format!(
        "UPDATE {} SET next_run_at = $1, last_run_at = $2, updated_at = now() \
         WHERE id = $3 AND next_run_at = $2",
        table(&store.schema)
    ))
    .bind(p.next_run_at)
    .bind(p.tick)
    .bind(&p.schedule_id)
    .execute(&mut *tx)
    .await?;
    if moved.rows_affected() != 1 {
        tx.rollback().await?;
        return Ok(None);
    }
    let job_type = p.job.job_type.clone();
    let added = insert_all(&mut tx, &store.jobs, std::slice::from_ref(&p.job)).await?;
    tx.commit().await?;
    let _ = store.events.send(StoreEvent::Inserted(job_type));
    Ok(added.into_iter().next())
}
