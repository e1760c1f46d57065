//! Schedules on Postgres (see [`crate::store::schedules`] for the
//! invariants). The statements are the shared ones
//! (`store::sql::statements`).
//!
//! Reconciles (the shared diff of `store::policy::schedules`) take
//! `SHARE ROW EXCLUSIVE` on the schedules table (it conflicts with itself),
//! so hosts starting together reconcile one after another. A fire's
//! `UPDATE … WHERE next_run_at = tick` waits on the row lock of a
//! concurrent fire and then re-checks its condition, finding the tick
//! already moved: one job per tick across the fleet.

use chrono::{DateTime, Utc};

use super::insert::insert_all;
use super::tx::PgTx;
use super::PostgresStore;
use crate::job::AddResult;
use crate::schedule::ScheduleRecord;
use crate::store::policy::schedules::{reconcile, ScheduleTx};
use crate::store::schedules::{
    DeclaredSchedule, FireSchedule, ReconcileReport, ReconcileSchedules,
};
use crate::store::sql::schedule_from_row;
use crate::store::{StoreError, StoreEvent};

impl PgTx<'_> {
    /// Runs `statement` with `d`'s definition, owner and first tick.
    async fn write_def(
        &mut self,
        statement: String,
        owner: &str,
        d: &DeclaredSchedule,
    ) -> Result<(), StoreError> {
        let def = &d.def;
        sqlx::query(&statement)
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
        let rows = sqlx::query(&self.sql.schedules_among())
            .bind(ids)
            .fetch_all(&mut *self.conn)
            .await?;
        rows.iter().map(schedule_from_row).collect()
    }

    async fn create(&mut self, owner: &str, d: &DeclaredSchedule) -> Result<(), StoreError> {
        self.write_def(self.sql.schedule_create(), owner, d).await
    }

    async fn redefine(&mut self, owner: &str, d: &DeclaredSchedule) -> Result<(), StoreError> {
        self.write_def(self.sql.schedule_redefine(), owner, d).await
    }

    async fn adopt(&mut self, owner: &str, id: &str) -> Result<(), StoreError> {
        sqlx::query(&self.sql.schedule_adopt())
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
        Ok(sqlx::query_scalar(&self.sql.schedules_remove_undeclared())
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
        store.sql.schedules
    ))
    .execute(&mut *tx)
    .await?;
    let report = reconcile(&mut PgTx::new(&mut tx, store).await?, &p).await?;
    tx.commit().await?;
    Ok(report)
}

pub(super) async fn list(store: &PostgresStore) -> Result<Vec<ScheduleRecord>, StoreError> {
    let rows = sqlx::query(&store.sql.schedules_all())
        .fetch_all(&store.pool)
        .await?;
    rows.iter().map(schedule_from_row).collect()
}

pub(super) async fn due(
    store: &PostgresStore,
    now: DateTime<Utc>,
    limit: u32,
) -> Result<Vec<ScheduleRecord>, StoreError> {
    let rows = sqlx::query(&store.sql.schedules_due())
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
    let moved = sqlx::query(&store.sql.schedule_fire())
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
    let added = insert_all(
        &mut tx,
        &store.insert_target(),
        std::slice::from_ref(&p.job),
    )
    .await?;
    tx.commit().await?;
    store.events.send(StoreEvent::Inserted(job_type));
    Ok(added.into_iter().next())
}
