//! SQLite [`JobStore`]: one file, WAL, busy timeout, safe for several OS
//! processes on one machine.
//!
//! Invariants:
//! - Times are integer milliseconds (UTC) from the process clock.
//! - Every state change is a single conditional `UPDATE` (claims: one
//!   `UPDATE … WHERE id IN (SELECT … LIMIT n) RETURNING`; SQLite takes the
//!   write lock before the statement reads, so candidates cannot be claimed
//!   twice). Multi-statement writes and guarded claims run in
//!   `BEGIN IMMEDIATE` transactions, so a deferred reader never fails to
//!   upgrade.
//! - Id lists are bound as one JSON array and expanded with `json_each`.
//! - Migrations run inside one `BEGIN IMMEDIATE` transaction, so processes
//!   migrating one file at the same moment apply each version once; opening
//!   retries a set-up that SQLite refused with an immediate `SQLITE_BUSY`.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, TimeZone, Utc};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteRow, SqliteSynchronous,
};
use sqlx::{Row, SqliteConnection, SqlitePool};
use tokio::sync::broadcast;

use super::{
    CancelParams, CancelTarget, CancelledJob, ClaimParams, ClaimResult, CompleteParams, FailParams,
    InsertJob, JobStore, PruneParams, ReleaseParams, RenewParams, RescueParams, RetryParams,
    StoreError, StoreEvent, TxConn, EXPIRED_CODE, EXPIRED_ERROR, LEASE_EXPIRED_ERROR,
};
use crate::guards::{ClaimGuards, PoolGuard, PoolStatus};
use crate::handler::Scope;
use crate::job::{
    AddResult, HandlerEvent, HandlerEventKind, Job, JobFilter, JobStatus, StatusCounts,
};
use crate::schedule::ScheduleRecord;
use crate::store::schedules::{FireSchedule, ReconcileReport, ReconcileSchedules};

mod guarded;
mod schedules;

const COLS: &str =
    "id, job_type, payload, scope_type, scope_id, status, priority, run_at, attempts, \
    max_attempts, last_error, dedupe_key, lease_owner, lease_expires_at, started_at, finished_at, \
    result, progress, parent_id, schedule_id, expires_at, handler_version, created_at, updated_at, \
    error_code, error_details";

const LIVE: &str = "status IN ('pending', 'running')";

/// The busy timeout every connection waits for the write lock.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// A SQLite-backed store.
#[derive(Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
    events: broadcast::Sender<StoreEvent>,
    /// Serializes this process's writers, so they queue here instead of in
    /// SQLite's sleeping busy handler (which starves one writer under load).
    /// Other processes still wait through the busy timeout.
    write: Arc<tokio::sync::Mutex<()>>,
}

pub(crate) fn ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

fn from_ms(v: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(v).single().unwrap_or_default()
}

fn dur_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 4)
}

fn json_list<T: AsRef<str>>(items: &[T]) -> String {
    serde_json::Value::Array(
        items
            .iter()
            .map(|s| serde_json::Value::String(s.as_ref().to_string()))
            .collect(),
    )
    .to_string()
}

pub(crate) fn job_from_row(r: &SqliteRow) -> Result<Job, StoreError> {
    let status: String = r.try_get("status")?;
    let scope_type: Option<String> = r.try_get("scope_type")?;
    let scope_id: Option<String> = r.try_get("scope_id")?;
    let opt_time = |c: &str| -> Result<Option<DateTime<Utc>>, StoreError> {
        Ok(r.try_get::<Option<i64>, _>(c)?.map(from_ms))
    };
    Ok(Job {
        id: r.try_get("id")?,
        job_type: r.try_get("job_type")?,
        payload: r.try_get("payload")?,
        scope: match (scope_type, scope_id) {
            (Some(t), Some(i)) => Some(Scope::new(t, i)),
            _ => None,
        },
        status: JobStatus::from_str(&status).map_err(|e| StoreError::Corrupt(e.to_string()))?,
        priority: r.try_get("priority")?,
        run_at: from_ms(r.try_get("run_at")?),
        attempts: u32::try_from(r.try_get::<i64, _>("attempts")?).unwrap_or(0),
        max_attempts: u32::try_from(r.try_get::<i64, _>("max_attempts")?).unwrap_or(1),
        last_error: r.try_get("last_error")?,
        error_code: r.try_get("error_code")?,
        error_details: r.try_get("error_details")?,
        dedupe_key: r.try_get("dedupe_key")?,
        lease_owner: r.try_get("lease_owner")?,
        lease_expires_at: opt_time("lease_expires_at")?,
        started_at: opt_time("started_at")?,
        finished_at: opt_time("finished_at")?,
        result: r.try_get("result")?,
        progress: r.try_get("progress")?,
        parent_id: r.try_get("parent_id")?,
        schedule_id: r.try_get("schedule_id")?,
        expires_at: opt_time("expires_at")?,
        handler_version: r.try_get("handler_version")?,
        created_at: from_ms(r.try_get("created_at")?),
        updated_at: from_ms(r.try_get("updated_at")?),
    })
}

fn rows_to_jobs(rows: &[SqliteRow]) -> Result<Vec<Job>, StoreError> {
    rows.iter().map(job_from_row).collect()
}

/// Inserts jobs on `conn` (the caller owns the transaction).
async fn insert_all(
    conn: &mut SqliteConnection,
    jobs: &[InsertJob],
) -> Result<Vec<AddResult>, StoreError> {
    let now = Utc::now();
    let insert = "INSERT INTO boxcar_jobs (id, job_type, payload, scope_type, scope_id, status, \
         priority, run_at, attempts, max_attempts, dedupe_key, parent_id, schedule_id, expires_at, \
         created_at, updated_at) \
         VALUES (?, ?, ?, ?, ?, 'pending', ?, ?, 0, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING";
    let mut out = Vec::with_capacity(jobs.len());
    for j in jobs {
        if let Some(p) = &j.parent_id {
            let in_batch = jobs.iter().any(|o| &o.id == p);
            if !in_batch {
                let found = sqlx::query("SELECT 1 FROM boxcar_jobs WHERE id = ?")
                    .bind(p)
                    .fetch_optional(&mut *conn)
                    .await?;
                if found.is_none() {
                    return Err(StoreError::UnknownParent(p.clone()));
                }
            }
        }
        let run_at = ms(j.run_at.unwrap_or(now)) + dur_ms(j.delay);
        let expires = j
            .expires_at
            .map(ms)
            .or_else(|| j.ttl.map(|t| ms(now) + dur_ms(t)));
        let done = sqlx::query(insert)
            .bind(&j.id)
            .bind(&j.job_type)
            .bind(&j.payload)
            .bind(j.scope.as_ref().map(|s| s.scope_type.as_str()))
            .bind(j.scope.as_ref().map(|s| s.scope_id.as_str()))
            .bind(j.priority)
            .bind(run_at)
            .bind(i64::from(j.max_attempts))
            .bind(&j.dedupe_key)
            .bind(&j.parent_id)
            .bind(&j.schedule_id)
            .bind(expires)
            .bind(ms(now))
            .bind(ms(now))
            .execute(&mut *conn)
            .await?;
        if done.rows_affected() == 1 {
            out.push(AddResult {
                id: j.id.clone(),
                deduplicated: false,
            });
            continue;
        }
        let existing: Option<String> = sqlx::query_scalar(&format!(
            "SELECT id FROM boxcar_jobs WHERE dedupe_key = ? AND {LIVE}"
        ))
        .bind(&j.dedupe_key)
        .fetch_optional(&mut *conn)
        .await?;
        match existing {
            Some(id) => out.push(AddResult {
                id,
                deduplicated: true,
            }),
            None => {
                return Err(StoreError::Corrupt(format!(
                    "insert of job `{}` conflicted but no live duplicate exists",
                    j.id
                )))
            }
        }
    }
    Ok(out)
}

/// Whether SQLite answered `SQLITE_BUSY` (any extended variant).
fn is_busy(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(d) => d
            .code()
            .and_then(|c| c.parse::<i32>().ok())
            .is_some_and(|c| c & 0xff == 5),
        _ => false,
    }
}

/// Opens the pool. Each connection switches the file to WAL: on a file not
/// yet in WAL mode that reads the header, then upgrades to a write lock, and
/// SQLite refuses a read-to-write upgrade at once (`SQLITE_BUSY`, no busy
/// handler) while another process holds the write lock — as when hosts
/// start together on a new file. Such a failure is retried every 10 ms for
/// up to the busy timeout; once the file is in WAL mode the switch is a
/// no-op.
async fn connect_pool(opts: SqliteConnectOptions) -> Result<SqlitePool, sqlx::Error> {
    let deadline = tokio::time::Instant::now() + BUSY_TIMEOUT;
    loop {
        let res = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(opts.clone())
            .await;
        match res {
            Err(e) if is_busy(&e) && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            other => return other,
        }
    }
}

impl SqliteStore {
    /// Opens (creating if missing) the database at `path` — a file path or
    /// a `sqlite://` URL. Does not migrate.
    ///
    /// # Errors
    /// The file cannot be opened.
    pub async fn open(path: &str) -> Result<Self, StoreError> {
        let url = if path.starts_with("sqlite:") {
            path.to_string()
        } else {
            format!("sqlite://{path}")
        };
        let opts = SqliteConnectOptions::from_str(&url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(BUSY_TIMEOUT)
            .foreign_keys(false);
        let pool = connect_pool(opts).await?;
        Ok(Self {
            pool,
            events: broadcast::channel(1024).0,
            write: Arc::new(tokio::sync::Mutex::new(())),
        })
    }

    /// The connection pool (for transactional enqueue in the same database).
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    fn notify(&self, ev: StoreEvent) {
        let _ = self.events.send(ev);
    }

    fn filter_sql(f: &JobFilter, binds: &mut Vec<String>) -> String {
        let mut w = vec!["1 = 1".to_string()];
        if !f.types.is_empty() {
            w.push("job_type IN (SELECT value FROM json_each(?))".into());
            binds.push(json_list(&f.types));
        }
        if !f.statuses.is_empty() {
            w.push("status IN (SELECT value FROM json_each(?))".into());
            let s: Vec<&str> = f.statuses.iter().map(|s| s.as_str()).collect();
            binds.push(json_list(&s));
        }
        if let Some(s) = &f.scope {
            w.push("scope_type = ? AND scope_id = ?".into());
            binds.push(s.scope_type.clone());
            binds.push(s.scope_id.clone());
        }
        if let Some(p) = &f.parent_id {
            w.push("parent_id = ?".into());
            binds.push(p.clone());
        }
        w.join(" AND ")
    }
}

#[async_trait]
impl JobStore for SqliteStore {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        // SQLite has no advisory lock and sqlx's migrator takes none, so two
        // processes migrating a new file would both apply version 1 and one
        // would fail on `_sqlx_migrations`. The whole run happens inside one
        // `BEGIN IMMEDIATE` transaction instead (each migration becomes a
        // savepoint): the write lock is held from before the applied list is
        // read until the last migration commits, and a second process waits
        // through the busy timeout, then finds everything applied.
        let _w = self.write.lock().await;
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        sqlx::migrate!("../../migrations/sqlite")
            .run_direct(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn now(&self) -> Result<DateTime<Utc>, StoreError> {
        Ok(Utc::now())
    }

    async fn add_many(&self, jobs: Vec<InsertJob>) -> Result<Vec<AddResult>, StoreError> {
        let _w = self.write.lock().await;
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let out = insert_all(&mut tx, &jobs).await?;
        tx.commit().await?;
        let mut types: Vec<&str> = jobs.iter().map(|j| j.job_type.as_str()).collect();
        types.sort_unstable();
        types.dedup();
        for t in types {
            self.notify(StoreEvent::Inserted(t.to_string()));
        }
        Ok(out)
    }

    async fn add_in_tx(
        &self,
        conn: TxConn<'_>,
        jobs: Vec<InsertJob>,
    ) -> Result<Vec<AddResult>, StoreError> {
        match conn {
            TxConn::Sqlite(c) => insert_all(c, &jobs).await,
            TxConn::Postgres(_) => Err(StoreError::Unsupported(
                "this queue uses SQLite; enqueue through a SQLite transaction on the same file"
                    .into(),
            )),
        }
    }

    async fn claim_batch(&self, p: ClaimParams) -> Result<ClaimResult, StoreError> {
        let _w = self.write.lock().await;
        if !p.guards.is_empty() {
            return guarded::claim(self, p).await;
        }
        let now = ms(Utc::now());
        let sql = format!(
            "UPDATE boxcar_jobs SET \
               status = CASE WHEN expires_at <= ?1 THEN 'failed' ELSE 'running' END, \
               last_error = CASE WHEN expires_at <= ?1 THEN ?2 ELSE last_error END, \
               error_code = CASE WHEN expires_at <= ?1 THEN ?8 ELSE error_code END, \
               finished_at = CASE WHEN expires_at <= ?1 THEN ?1 ELSE NULL END, \
               lease_owner = CASE WHEN expires_at <= ?1 THEN NULL ELSE ?3 END, \
               lease_expires_at = CASE WHEN expires_at <= ?1 THEN NULL ELSE ?4 END, \
               started_at = CASE WHEN expires_at <= ?1 THEN started_at ELSE ?1 END, \
               attempts = CASE WHEN expires_at <= ?1 THEN attempts ELSE attempts + 1 END, \
               handler_version = CASE WHEN expires_at <= ?1 THEN handler_version ELSE ?5 END, \
               updated_at = ?1 \
             WHERE id IN (SELECT j.id FROM boxcar_jobs j \
                 WHERE j.status = 'pending' AND j.job_type = ?6 AND j.run_at <= ?1 \
                   AND NOT EXISTS (SELECT 1 FROM boxcar_jobs c WHERE c.parent_id = j.id AND c.{LIVE}) \
                 ORDER BY j.priority, j.run_at, j.id LIMIT ?7) \
             RETURNING {COLS}"
        );
        let rows = sqlx::query(&sql)
            .bind(now)
            .bind(EXPIRED_ERROR)
            .bind(&p.worker_id)
            .bind(now + dur_ms(p.lease))
            .bind(&p.handler_version)
            .bind(&p.job_type)
            .bind(i64::from(p.limit))
            .bind(EXPIRED_CODE)
            .fetch_all(&self.pool)
            .await?;
        let mut res = ClaimResult::default();
        for job in rows_to_jobs(&rows)? {
            if job.status == JobStatus::Failed {
                self.notify(StoreEvent::Finished(job.id.clone()));
                res.expired.push(job);
            } else {
                res.claimed.push(job);
            }
        }
        res.claimed
            .sort_by(|a, b| (a.priority, a.run_at, &a.id).cmp(&(b.priority, b.run_at, &b.id)));
        Ok(res)
    }

    async fn renew_leases(&self, p: RenewParams) -> Result<Vec<String>, StoreError> {
        let _w = self.write.lock().await;
        let now = ms(Utc::now());
        let ids: Vec<String> = sqlx::query_scalar(
            "UPDATE boxcar_jobs SET lease_expires_at = ?1, updated_at = ?2 \
             WHERE id IN (SELECT value FROM json_each(?3)) AND +status = 'running' \
               AND lease_owner = ?4 AND +lease_expires_at > ?2 RETURNING id",
        )
        .bind(now + dur_ms(p.lease))
        .bind(now)
        .bind(json_list(&p.ids))
        .bind(&p.worker_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(ids)
    }

    async fn complete(&self, p: CompleteParams) -> Result<Vec<String>, StoreError> {
        let _w = self.write.lock().await;
        let now = ms(Utc::now());
        let batch = serde_json::Value::Array(
            p.jobs
                .iter()
                .map(|c| serde_json::json!({ "id": c.id, "result": c.result }))
                .collect(),
        )
        .to_string();
        let done: Vec<String> = sqlx::query_scalar(
            "UPDATE boxcar_jobs SET status = 'succeeded', result = c.result, finished_at = ?1, \
               lease_owner = NULL, lease_expires_at = NULL, updated_at = ?1 \
             FROM (SELECT json_extract(value, '$.id') AS id, json_extract(value, '$.result') AS result \
                   FROM json_each(?2)) AS c \
             WHERE boxcar_jobs.id = c.id AND +boxcar_jobs.status = 'running' AND boxcar_jobs.lease_owner = ?3 \
             RETURNING boxcar_jobs.id",
        )
        .bind(now)
        .bind(batch)
        .bind(&p.worker_id)
        .fetch_all(&self.pool)
        .await?;
        for id in &done {
            self.notify(StoreEvent::Finished(id.clone()));
        }
        Ok(done)
    }

    async fn retry(&self, p: RetryParams) -> Result<bool, StoreError> {
        let _w = self.write.lock().await;
        let now = ms(Utc::now());
        let r = sqlx::query(
            "UPDATE boxcar_jobs SET status = 'pending', run_at = ?1, last_error = ?2, \
               attempts = CASE WHEN ?3 THEN attempts ELSE MAX(attempts - 1, 0) END, \
               lease_owner = NULL, lease_expires_at = NULL, updated_at = ?4 \
             WHERE id = ?5 AND status = 'running' AND lease_owner = ?6",
        )
        .bind(now + dur_ms(p.delay))
        .bind(&p.error)
        .bind(p.consumes_attempt)
        .bind(now)
        .bind(&p.id)
        .bind(&p.worker_id)
        .execute(&self.pool)
        .await?;
        Ok(r.rows_affected() == 1)
    }

    async fn fail(&self, p: FailParams) -> Result<bool, StoreError> {
        let _w = self.write.lock().await;
        let now = ms(Utc::now());
        let r = sqlx::query(
            "UPDATE boxcar_jobs SET status = 'failed', last_error = ?1, finished_at = ?2, \
               lease_owner = NULL, lease_expires_at = NULL, updated_at = ?2, \
               error_code = ?5, error_details = ?6 \
             WHERE id = ?3 AND status = 'running' AND lease_owner = ?4",
        )
        .bind(&p.error)
        .bind(now)
        .bind(&p.id)
        .bind(&p.worker_id)
        .bind(&p.code)
        .bind(&p.details)
        .execute(&self.pool)
        .await?;
        let ok = r.rows_affected() == 1;
        if ok {
            self.notify(StoreEvent::Finished(p.id));
        }
        Ok(ok)
    }

    async fn release(&self, p: ReleaseParams) -> Result<u64, StoreError> {
        let _w = self.write.lock().await;
        let now = ms(Utc::now());
        let r = sqlx::query(
            "UPDATE boxcar_jobs SET status = 'pending', run_at = ?1, attempts = MAX(attempts - 1, 0), \
               lease_owner = NULL, lease_expires_at = NULL, updated_at = ?1 \
             WHERE id IN (SELECT value FROM json_each(?2)) AND +status = 'running' AND lease_owner = ?3",
        )
        .bind(now)
        .bind(json_list(&p.ids))
        .bind(&p.worker_id)
        .execute(&self.pool)
        .await?;
        Ok(r.rows_affected())
    }

    async fn cancel(&self, p: CancelParams) -> Result<Vec<CancelledJob>, StoreError> {
        let _w = self.write.lock().await;
        let now = ms(Utc::now());
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let select =
            "SELECT id, job_type, scope_type, scope_id, status, attempts FROM boxcar_jobs WHERE ";
        let rows = match &p.target {
            CancelTarget::Ids(ids) => {
                sqlx::query(&format!("{select} id IN (SELECT value FROM json_each(?)) AND +{LIVE}"))
                    .bind(json_list(ids))
                    .fetch_all(&mut *tx)
                    .await?
            }
            CancelTarget::Scope {
                scope,
                include_running,
            } => {
                let st = if *include_running { LIVE } else { "status = 'pending'" };
                sqlx::query(&format!("{select} scope_type = ? AND scope_id = ? AND {st}"))
                    .bind(&scope.scope_type)
                    .bind(&scope.scope_id)
                    .fetch_all(&mut *tx)
                    .await?
            }
            CancelTarget::DedupeKeys { job_type, keys } => sqlx::query(&format!(
                "{select} job_type = ? AND dedupe_key IN (SELECT value FROM json_each(?)) AND {LIVE}"
            ))
            .bind(job_type)
            .bind(json_list(keys))
            .fetch_all(&mut *tx)
            .await?,
        };
        let mut out = Vec::new();
        let mut frontier: Vec<SqliteRow> = rows;
        while !frontier.is_empty() {
            let mut ids = Vec::new();
            for r in &frontier {
                let id: String = r.try_get("id")?;
                let status: String = r.try_get("status")?;
                let st: Option<String> = r.try_get("scope_type")?;
                let si: Option<String> = r.try_get("scope_id")?;
                out.push(CancelledJob {
                    id: id.clone(),
                    job_type: r.try_get("job_type")?,
                    scope: st.zip(si).map(|(t, i)| Scope::new(t, i)),
                    was_running: status == "running",
                    attempts: u32::try_from(r.try_get::<i64, _>("attempts")?).unwrap_or(0),
                });
                ids.push(id);
            }
            let list = json_list(&ids);
            sqlx::query(&format!(
                "UPDATE boxcar_jobs SET status = 'cancelled', last_error = ?1, finished_at = ?2, \
                   lease_owner = NULL, lease_expires_at = NULL, updated_at = ?2 \
                 WHERE id IN (SELECT value FROM json_each(?3)) AND +{LIVE}"
            ))
            .bind(&p.reason)
            .bind(now)
            .bind(&list)
            .execute(&mut *tx)
            .await?;
            frontier = sqlx::query(&format!(
                "{select} parent_id IN (SELECT value FROM json_each(?)) AND {LIVE}"
            ))
            .bind(&list)
            .fetch_all(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        for c in &out {
            self.notify(StoreEvent::Finished(c.id.clone()));
        }
        Ok(out)
    }

    async fn rescue(&self, p: RescueParams) -> Result<Vec<Job>, StoreError> {
        let _w = self.write.lock().await;
        let now = ms(Utc::now());
        let rows = sqlx::query(&format!(
            "UPDATE boxcar_jobs SET \
               status = CASE WHEN attempts >= max_attempts THEN 'failed' ELSE 'pending' END, \
               last_error = CASE WHEN attempts >= max_attempts THEN ?1 ELSE ?2 END, \
               finished_at = CASE WHEN attempts >= max_attempts THEN ?3 ELSE NULL END, \
               run_at = CASE WHEN attempts >= max_attempts THEN run_at ELSE ?3 END, \
               lease_owner = NULL, lease_expires_at = NULL, updated_at = ?3 \
             WHERE id IN (SELECT id FROM boxcar_jobs WHERE status = 'running' AND lease_expires_at <= ?3 LIMIT ?4) \
             RETURNING {COLS}"
        ))
        .bind(LEASE_EXPIRED_ERROR)
        .bind("lease expired; recovered for another attempt")
        .bind(now)
        .bind(i64::from(p.limit))
        .fetch_all(&self.pool)
        .await?;
        let jobs = rows_to_jobs(&rows)?;
        for j in &jobs {
            if j.status == JobStatus::Failed {
                self.notify(StoreEvent::Finished(j.id.clone()));
            } else {
                self.notify(StoreEvent::Inserted(j.job_type.clone()));
            }
        }
        Ok(jobs)
    }

    async fn still_owned(
        &self,
        worker_id: &str,
        ids: &[String],
    ) -> Result<Vec<String>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT id FROM boxcar_jobs WHERE id IN (SELECT value FROM json_each(?1)) \
               AND +status = 'running' AND lease_owner = ?2",
        )
        .bind(json_list(ids))
        .bind(worker_id)
        .fetch_all(&self.pool)
        .await?)
    }

    async fn set_progress(
        &self,
        worker_id: &str,
        id: &str,
        json: &str,
    ) -> Result<bool, StoreError> {
        let _w = self.write.lock().await;
        let r = sqlx::query(
            "UPDATE boxcar_jobs SET progress = ?1, updated_at = ?2 \
             WHERE id = ?3 AND status = 'running' AND lease_owner = ?4",
        )
        .bind(json)
        .bind(ms(Utc::now()))
        .bind(id)
        .bind(worker_id)
        .execute(&self.pool)
        .await?;
        Ok(r.rows_affected() == 1)
    }

    async fn get(&self, id: &str) -> Result<Option<Job>, StoreError> {
        let row = sqlx::query(&format!("SELECT {COLS} FROM boxcar_jobs WHERE id = ?"))
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(job_from_row).transpose()
    }

    async fn find(&self, f: &JobFilter) -> Result<Vec<Job>, StoreError> {
        let mut binds = Vec::new();
        let w = Self::filter_sql(f, &mut binds);
        let sql = format!(
            "SELECT {COLS} FROM boxcar_jobs WHERE {w} ORDER BY created_at, id LIMIT ? OFFSET ?"
        );
        let mut q = sqlx::query(&sql);
        for b in binds {
            q = q.bind(b);
        }
        let rows = q
            .bind(i64::from(f.limit.unwrap_or(JobFilter::DEFAULT_LIMIT)))
            .bind(i64::from(f.offset.unwrap_or(0)))
            .fetch_all(&self.pool)
            .await?;
        rows_to_jobs(&rows)
    }

    async fn count_by_status(&self) -> Result<StatusCounts, StoreError> {
        let rows = sqlx::query("SELECT status, COUNT(*) AS n FROM boxcar_jobs GROUP BY status")
            .fetch_all(&self.pool)
            .await?;
        let mut c = StatusCounts::default();
        for r in rows {
            let s: String = r.try_get("status")?;
            let n: i64 = r.try_get("n")?;
            let st = JobStatus::from_str(&s).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            c.add(st, u64::try_from(n).unwrap_or(0));
        }
        Ok(c)
    }

    async fn retry_failed(&self, f: &JobFilter) -> Result<u64, StoreError> {
        let _w = self.write.lock().await;
        let mut f = f.clone();
        f.statuses = vec![JobStatus::Failed];
        let mut binds = Vec::new();
        let w = Self::filter_sql(&f, &mut binds);
        let now = ms(Utc::now());
        let sql = format!(
            "UPDATE boxcar_jobs SET status = 'pending', attempts = 0, last_error = NULL, \
               error_code = NULL, error_details = NULL, \
               finished_at = NULL, run_at = ?, updated_at = ? \
             WHERE id IN (SELECT id FROM boxcar_jobs WHERE {w} ORDER BY created_at, id LIMIT ? OFFSET ?)"
        );
        let mut q = sqlx::query(&sql).bind(now).bind(now);
        for b in binds {
            q = q.bind(b);
        }
        let r = q
            .bind(f.limit.map_or(-1, i64::from))
            .bind(i64::from(f.offset.unwrap_or(0)))
            .execute(&self.pool)
            .await?;
        for t in &f.types {
            self.notify(StoreEvent::Inserted(t.clone()));
        }
        if f.types.is_empty() {
            self.notify(StoreEvent::Inserted(String::new()));
        }
        Ok(r.rows_affected())
    }

    async fn prune(&self, p: PruneParams) -> Result<u64, StoreError> {
        let _w = self.write.lock().await;
        let statuses: Vec<&str> = p
            .statuses
            .iter()
            .filter(|s| s.is_terminal())
            .map(|s| s.as_str())
            .collect();
        let r = sqlx::query(
            "DELETE FROM boxcar_jobs WHERE status IN (SELECT value FROM json_each(?1)) \
               AND finished_at < ?2",
        )
        .bind(json_list(&statuses))
        .bind(ms(p.older_than))
        .execute(&self.pool)
        .await?;
        Ok(r.rows_affected())
    }

    async fn record_handler_event(&self, e: HandlerEvent) -> Result<(), StoreError> {
        let _w = self.write.lock().await;
        sqlx::query(
            "INSERT INTO boxcar_handler_events (at, job_type, file, digest, kind, reason) \
             VALUES (?, ?, ?, ?, ?, ?)",
        )
        .bind(ms(Utc::now()))
        .bind(&e.job_type)
        .bind(&e.file)
        .bind(&e.digest)
        .bind(e.kind.as_str())
        .bind(&e.reason)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn handler_events(&self, limit: u32) -> Result<Vec<HandlerEvent>, StoreError> {
        let rows = sqlx::query(
            "SELECT at, job_type, file, digest, kind, reason FROM boxcar_handler_events \
             ORDER BY id DESC LIMIT ?",
        )
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                let kind: String = r.try_get("kind")?;
                Ok(HandlerEvent {
                    at: from_ms(r.try_get("at")?),
                    job_type: r.try_get("job_type")?,
                    file: r.try_get("file")?,
                    digest: r.try_get("digest")?,
                    kind: HandlerEventKind::parse(&kind).ok_or_else(|| {
                        StoreError::Corrupt(format!("handler event kind `{kind}`"))
                    })?,
                    reason: r.try_get("reason")?,
                })
            })
            .collect()
    }

    async fn pool_status(&self, pools: &[PoolGuard]) -> Result<Vec<PoolStatus>, StoreError> {
        guarded::pool_status(self, pools).await
    }

    async fn reconcile_schedules(
        &self,
        params: ReconcileSchedules,
    ) -> Result<ReconcileReport, StoreError> {
        self.reconcile_schedules_sql(params).await
    }

    async fn list_schedules(&self) -> Result<Vec<ScheduleRecord>, StoreError> {
        self.list_schedules_sql().await
    }

    async fn due_schedules(
        &self,
        now: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<ScheduleRecord>, StoreError> {
        self.due_schedules_sql(now, limit).await
    }

    async fn fire_schedule(&self, params: FireSchedule) -> Result<Option<AddResult>, StoreError> {
        self.fire_schedule_sql(params).await
    }

    async fn blocked_by(
        &self,
        job: &Job,
        guards: &ClaimGuards,
    ) -> Result<Option<String>, StoreError> {
        guarded::blocked_by(self, job, guards).await
    }

    fn subscribe(&self) -> broadcast::Receiver<StoreEvent> {
        self.events.subscribe()
    }
}
