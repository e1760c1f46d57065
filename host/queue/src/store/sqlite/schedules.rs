//! Schedules on SQLite (see [`crate::store::schedules`] for the invariants).
//!
//! Reconcile and fire run in `BEGIN IMMEDIATE` transactions behind this
//! process's writer mutex, so reconciles of several processes serialize and
//! a fire's compare-and-set and job insert commit together.

use chrono::{DateTime, Utc};
use sqlx::sqlite::SqliteRow;
use sqlx::{Row, SqliteConnection};

use super::{from_ms, insert_all, json_list, ms, SqliteStore};
use crate::job::AddResult;
use crate::schedule::{ScheduleDef, ScheduleRecord};
use crate::store::schedules::{
    DeclaredSchedule, FireSchedule, ReconcileReport, ReconcileSchedules,
};
use crate::store::{StoreError, StoreEvent};

const COLS: &str = "id, job_type, payload, every_ms, cron, tz, immediately, start_at, end_at, \
    next_run_at, last_run_at, owner, created_at, updated_at";

fn record_from_row(r: &SqliteRow) -> Result<ScheduleRecord, StoreError> {
    let opt_time =
        |c: &str| -> Result<_, StoreError> { Ok(r.try_get::<Option<i64>, _>(c)?.map(from_ms)) };
    Ok(ScheduleRecord {
        def: ScheduleDef {
            id: r.try_get("id")?,
            job_type: r.try_get("job_type")?,
            payload: r.try_get("payload")?,
            every_ms: r.try_get("every_ms")?,
            cron: r.try_get("cron")?,
            tz: r.try_get("tz")?,
            immediately: r.try_get::<i64, _>("immediately")? != 0,
            start_at: opt_time("start_at")?,
            end_at: opt_time("end_at")?,
        },
        next_run_at: opt_time("next_run_at")?,
        last_run_at: opt_time("last_run_at")?,
        owner: r.try_get("owner")?,
        created_at: from_ms(r.try_get("created_at")?),
        updated_at: from_ms(r.try_get("updated_at")?),
    })
}

async fn write_def(
    conn: &mut SqliteConnection,
    owner: &str,
    d: &DeclaredSchedule,
    create: bool,
) -> Result<(), StoreError> {
    let sql = if create {
        "INSERT INTO boxcar_schedules (job_type, payload, every_ms, cron, tz, immediately, \
         start_at, end_at, next_run_at, owner, updated_at, id, created_at) \
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    } else {
        "UPDATE boxcar_schedules SET job_type = ?, payload = ?, every_ms = ?, cron = ?, tz = ?, \
         immediately = ?, start_at = ?, end_at = ?, next_run_at = ?, owner = ?, updated_at = ? \
         WHERE id = ?"
    };
    let now = ms(Utc::now());
    let def = &d.def;
    let mut q = sqlx::query(sql)
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
        .bind(now)
        .bind(&def.id);
    if create {
        q = q.bind(now);
    }
    q.execute(&mut *conn).await?;
    Ok(())
}

impl SqliteStore {
    pub(super) async fn reconcile_schedules_sql(
        &self,
        p: ReconcileSchedules,
    ) -> Result<ReconcileReport, StoreError> {
        let _w = self.write.lock().await;
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let mut report = ReconcileReport::default();
        for d in &p.declared {
            let row = sqlx::query(&format!("SELECT {COLS} FROM boxcar_schedules WHERE id = ?"))
                .bind(&d.def.id)
                .fetch_optional(&mut *tx)
                .await?;
            match row.as_ref().map(record_from_row).transpose()? {
                None => {
                    write_def(&mut tx, &p.owner, d, true).await?;
                    report.created.push(d.def.id.clone());
                }
                Some(existing) if existing.def != d.def => {
                    write_def(&mut tx, &p.owner, d, false).await?;
                    report.updated.push(d.def.id.clone());
                }
                Some(existing) if existing.owner.as_deref() != Some(p.owner.as_str()) => {
                    sqlx::query(
                        "UPDATE boxcar_schedules SET owner = ?, updated_at = ? WHERE id = ?",
                    )
                    .bind(&p.owner)
                    .bind(ms(Utc::now()))
                    .bind(&d.def.id)
                    .execute(&mut *tx)
                    .await?;
                }
                Some(_) => {}
            }
        }
        let ids: Vec<&str> = p.declared.iter().map(|d| d.def.id.as_str()).collect();
        report.removed = sqlx::query_scalar(
            "DELETE FROM boxcar_schedules WHERE owner = ? \
             AND id NOT IN (SELECT value FROM json_each(?)) RETURNING id",
        )
        .bind(&p.owner)
        .bind(json_list(&ids))
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        report.created.sort();
        report.updated.sort();
        report.removed.sort();
        Ok(report)
    }

    pub(super) async fn list_schedules_sql(&self) -> Result<Vec<ScheduleRecord>, StoreError> {
        let rows = sqlx::query(&format!("SELECT {COLS} FROM boxcar_schedules ORDER BY id"))
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
            "SELECT {COLS} FROM boxcar_schedules \
             WHERE next_run_at IS NOT NULL AND next_run_at <= ? \
             ORDER BY next_run_at, id LIMIT ?"
        ))
        .bind(ms(now))
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(record_from_row).collect()
    }

    pub(super) async fn fire_schedule_sql(
        &self,
        p: FireSchedule,
    ) -> Result<Option<AddResult>, StoreError> {
        let _w = self.write.lock().await;
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let moved = sqlx::query(
            "UPDATE boxcar_schedules SET next_run_at = ?, last_run_at = ?, updated_at = ? \
             WHERE id = ? AND next_run_at = ?",
        )
        .bind(p.next_run_at.map(ms))
        .bind(ms(p.tick))
        .bind(ms(Utc::now()))
        .bind(&p.schedule_id)
        .bind(ms(p.tick))
        .execute(&mut *tx)
        .await?;
        if moved.rows_affected() != 1 {
            tx.rollback().await?;
            return Ok(None);
        }
        let job_type = p.job.job_type.clone();
        let added = insert_all(&mut tx, std::slice::from_ref(&p.job)).await?;
        tx.commit().await?;
        self.notify(StoreEvent::Inserted(job_type));
        Ok(added.into_iter().next())
    }
}
