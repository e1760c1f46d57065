//! Schedules on Postgres (see [`crate::store::schedules`] for the invariants).
//!
//! Reconciles take `SHARE ROW EXCLUSIVE` on the schedules table (it
//! conflicts with itself), so hosts starting together reconcile one after
//! another. A fire's `UPDATE … WHERE next_run_at = tick` waits on the row
//! lock of a concurrent fire and then re-checks its condition, finding the
//! tick already moved: one job per tick across the fleet.

use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, Row};

use super::{insert_all, PostgresStore};
use crate::job::AddResult;
use crate::schedule::{ScheduleDef, ScheduleRecord};
use crate::store::schedules::{
    DeclaredSchedule, FireSchedule, ReconcileReport, ReconcileSchedules,
};
use crate::store::{StoreError, StoreEvent};

const COLS: &str = "id, job_type, payload, every_ms, cron, tz, immediately, start_at, end_at, \
    next_run_at, last_run_at, owner, created_at, updated_at";

fn record_from_row(r: &PgRow) -> Result<ScheduleRecord, StoreError> {
    Ok(ScheduleRecord {
        def: ScheduleDef {
            id: r.try_get("id")?,
            job_type: r.try_get("job_type")?,
            payload: r.try_get("payload")?,
            every_ms: r.try_get("every_ms")?,
            cron: r.try_get("cron")?,
            tz: r.try_get("tz")?,
            immediately: r.try_get("immediately")?,
            start_at: r.try_get("start_at")?,
            end_at: r.try_get("end_at")?,
        },
        next_run_at: r.try_get("next_run_at")?,
        last_run_at: r.try_get("last_run_at")?,
        owner: r.try_get("owner")?,
        created_at: r.try_get("created_at")?,
        updated_at: r.try_get("updated_at")?,
    })
}

async fn write_def(
    conn: &mut PgConnection,
    table: &str,
    owner: &str,
    d: &DeclaredSchedule,
    create: bool,
) -> Result<(), StoreError> {
    let sql = if create {
        format!(
            "INSERT INTO {table} (job_type, payload, every_ms, cron, tz, immediately, start_at, \
             end_at, next_run_at, owner, id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
        )
    } else {
        format!(
            "UPDATE {table} SET job_type = $1, payload = $2, every_ms = $3, cron = $4, tz = $5, \
             immediately = $6, start_at = $7, end_at = $8, next_run_at = $9, owner = $10, \
             updated_at = now() WHERE id = $11"
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
        .execute(&mut *conn)
        .await?;
    Ok(())
}

impl PostgresStore {
    fn schedules_table(&self) -> String {
        format!("{}.schedules", self.schema)
    }

    pub(super) async fn reconcile_schedules_sql(
        &self,
        p: ReconcileSchedules,
    ) -> Result<ReconcileReport, StoreError> {
        let table = self.schedules_table();
        let mut tx = self.pool.begin().await?;
        sqlx::query(&format!("LOCK TABLE {table} IN SHARE ROW EXCLUSIVE MODE"))
            .execute(&mut *tx)
            .await?;
        let mut report = ReconcileReport::default();
        for d in &p.declared {
            let row = sqlx::query(&format!("SELECT {COLS} FROM {table} WHERE id = $1"))
                .bind(&d.def.id)
                .fetch_optional(&mut *tx)
                .await?;
            match row.as_ref().map(record_from_row).transpose()? {
                None => {
                    write_def(&mut tx, &table, &p.owner, d, true).await?;
                    report.created.push(d.def.id.clone());
                }
                Some(existing) if existing.def != d.def => {
                    write_def(&mut tx, &table, &p.owner, d, false).await?;
                    report.updated.push(d.def.id.clone());
                }
                Some(existing) if existing.owner.as_deref() != Some(p.owner.as_str()) => {
                    sqlx::query(&format!(
                        "UPDATE {table} SET owner = $1, updated_at = now() WHERE id = $2"
                    ))
                    .bind(&p.owner)
                    .bind(&d.def.id)
                    .execute(&mut *tx)
                    .await?;
                }
                Some(_) => {}
            }
        }
        let ids: Vec<String> = p.declared.iter().map(|d| d.def.id.clone()).collect();
        report.removed = sqlx::query_scalar(&format!(
            "DELETE FROM {table} WHERE owner = $1 AND NOT (id = ANY($2)) RETURNING id"
        ))
        .bind(&p.owner)
        .bind(&ids)
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        report.created.sort();
        report.updated.sort();
        report.removed.sort();
        Ok(report)
    }

    pub(super) async fn list_schedules_sql(&self) -> Result<Vec<ScheduleRecord>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLS} FROM {} ORDER BY id",
            self.schedules_table()
        ))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(record_from_row).collect()
    }

    pub(super) async fn due_schedules_sql(
        &self,
        now: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<ScheduleRecord>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLS} FROM {} \
             WHERE next_run_at IS NOT NULL AND next_run_at <= $1 \
             ORDER BY next_run_at, id LIMIT $2",
            self.schedules_table()
        ))
        .bind(now)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(record_from_row).collect()
    }

    pub(super) async fn fire_schedule_sql(
        &self,
        p: FireSchedule,
    ) -> Result<Option<AddResult>, StoreError> {
        let mut tx = self.pool.begin().await?;
        let moved = sqlx::query(&format!(
            "UPDATE {} SET next_run_at = $1, last_run_at = $2, updated_at = now() \
             WHERE id = $3 AND next_run_at = $2",
            self.schedules_table()
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
        let added = insert_all(&mut tx, &self.jobs, std::slice::from_ref(&p.job)).await?;
        tx.commit().await?;
        let _ = self.events.send(StoreEvent::Inserted(job_type));
        Ok(added.into_iter().next())
    }
}
