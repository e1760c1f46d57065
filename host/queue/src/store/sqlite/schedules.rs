//! Schedules on SQLite (see [`crate::store::schedules`] for the invariants).
//! The statements are the shared ones (`store::sql::statements`).
//!
//! Reconcile (the shared diff of `store::policy::schedules`) and fire run
//! in `BEGIN IMMEDIATE` transactions behind this process's writer mutex, so
//! reconciles of several processes serialize and a fire's compare-and-set
//! and job insert commit together.

use chrono::{DateTime, Utc};

use super::insert::insert_all;
use super::rows::{json_list, ms};
use super::tx::SqliteTx;
use super::SqliteStore;
use crate::job::AddResult;
use crate::schedule::ScheduleRecord;
use crate::store::policy::schedules::{reconcile, ScheduleTx};
use crate::store::schedules::{
    DeclaredSchedule, FireSchedule, ReconcileReport, ReconcileSchedules,
};
use crate::store::sql::schedule_from_row;
use crate::store::{StoreError, StoreEvent};

impl SqliteTx<'_> {
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
            .bind(i64::from(def.immediately))
            .bind(def.start_at.map(ms))
            .bind(def.end_at.map(ms))
            .bind(d.first_run.map(ms))
            .bind(owner)
            .bind(&def.id)
            .bind(self.now)
            .execute(&mut *self.conn)
            .await?;
        Ok(())
    }
}

impl ScheduleTx for SqliteTx<'_> {
    async fn stored(&mut self, ids: &[String]) -> Result<Vec<ScheduleRecord>, StoreError> {
        let rows = sqlx::query(&self.sql.schedules_among())
            .bind(json_list(ids))
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
            .bind(self.now)
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
            .bind(json_list(keep))
            .fetch_all(&mut *self.conn)
            .await?)
    }
}

pub(super) async fn reconcile_schedules(
    store: &SqliteStore,
    p: ReconcileSchedules,
) -> Result<ReconcileReport, StoreError> {
    let _w = store.write.lock().await;
    let mut tx = store.own.begin_with("BEGIN IMMEDIATE").await?;
    let report = reconcile(&mut SqliteTx::new(&mut tx, store), &p).await?;
    tx.commit().await?;
    Ok(report)
}

pub(super) async fn list(store: &SqliteStore) -> Result<Vec<ScheduleRecord>, StoreError> {
    let rows = sqlx::query(&store.sql.schedules_all())
        .fetch_all(&store.own)
        .await?;
    rows.iter().map(schedule_from_row).collect()
}

pub(super) async fn due(
    store: &SqliteStore,
    now: DateTime<Utc>,
    limit: u32,
) -> Result<Vec<ScheduleRecord>, StoreError> {
    let rows = sqlx::query(&store.sql.schedules_due())
        .bind(ms(now))
        .bind(i64::from(limit))
        .fetch_all(&store.own)
        .await?;
    rows.iter().map(schedule_from_row).collect()
}

pub(super) async fn fire(
    store: &SqliteStore,
    p: FireSchedule,
) -> Result<Option<AddResult>, StoreError> {
    let _w = store.write.lock().await;
    let mut tx = store.own.begin_with("BEGIN IMMEDIATE").await?;
    let moved = sqlx::query(&store.sql.schedule_fire())
        .bind(p.next_run_at.map(ms))
        .bind(ms(p.tick))
        .bind(&p.schedule_id)
        .bind(ms(Utc::now()))
        .execute(&mut *tx)
        .await?;
    if moved.rows_affected() != 1 {
        tx.rollback().await?;
        return Ok(None);
    }
    let job_type = p.job.job_type.clone();
    let added = insert_all(&mut tx, std::slice::from_ref(&p.job)).await?;
    tx.commit().await?;
    store.notify(StoreEvent::Inserted(job_type));
    Ok(added.into_iter().next())
}
