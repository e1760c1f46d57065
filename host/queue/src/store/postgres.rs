//! Postgres [`JobStore`] for fleets of hosts.
//!
//! Invariants:
//! - All tables live in one schema (default `boxcar`); every statement names
//!   it explicitly, so a caller's transaction with any `search_path` can
//!   enqueue (`add_in_tx`), and several schemas can share a database.
//! - Lease and due-time comparisons use the database clock (`now()`).
//! - Batch claims select candidates `FOR UPDATE SKIP LOCKED` and claim them
//!   in the same statement; completions of many jobs are one statement.
//! - Inserts notify `<schema>_jobs_inserted` and terminal transitions notify
//!   `<schema>_jobs_finished` (triggers); a listener task relays both to
//!   [`JobStore::subscribe`].
//! - Migrations of one schema run behind a session advisory lock keyed on
//!   the schema, so processes starting together apply each version once.

mod guarded;
mod schedules;

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions, PgRow};
use sqlx::{PgConnection, PgPool, Row};
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

const COLS: [&str; 26] = [
    "id",
    "job_type",
    "payload",
    "scope_type",
    "scope_id",
    "status",
    "priority",
    "run_at",
    "attempts",
    "max_attempts",
    "last_error",
    "dedupe_key",
    "lease_owner",
    "lease_expires_at",
    "started_at",
    "finished_at",
    "result",
    "progress",
    "parent_id",
    "schedule_id",
    "expires_at",
    "handler_version",
    "created_at",
    "updated_at",
    "error_code",
    "error_details",
];

const LIVE: &str = "status IN ('pending', 'running')";

/// The default schema.
pub const DEFAULT_SCHEMA: &str = "boxcar";

fn cols(prefix: &str) -> String {
    COLS.iter()
        .map(|c| format!("{prefix}{c}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn dur_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 4)
}

/// Whether `s` is a safe unquoted schema name.
pub fn valid_schema(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

pub(crate) fn job_from_row(r: &PgRow) -> Result<Job, StoreError> {
    let status: String = r.try_get("status")?;
    let scope_type: Option<String> = r.try_get("scope_type")?;
    let scope_id: Option<String> = r.try_get("scope_id")?;
    Ok(Job {
        id: r.try_get("id")?,
        job_type: r.try_get("job_type")?,
        payload: r.try_get("payload")?,
        scope: scope_type.zip(scope_id).map(|(t, i)| Scope::new(t, i)),
        status: JobStatus::from_str(&status).map_err(|e| StoreError::Corrupt(e.to_string()))?,
        priority: r.try_get("priority")?,
        run_at: r.try_get("run_at")?,
        attempts: u32::try_from(r.try_get::<i32, _>("attempts")?).unwrap_or(0),
        max_attempts: u32::try_from(r.try_get::<i32, _>("max_attempts")?).unwrap_or(1),
        last_error: r.try_get("last_error")?,
        error_code: r.try_get("error_code")?,
        error_details: r.try_get("error_details")?,
        dedupe_key: r.try_get("dedupe_key")?,
        lease_owner: r.try_get("lease_owner")?,
        lease_expires_at: r.try_get("lease_expires_at")?,
        started_at: r.try_get("started_at")?,
        finished_at: r.try_get("finished_at")?,
        result: r.try_get("result")?,
        progress: r.try_get("progress")?,
        parent_id: r.try_get("parent_id")?,
        schedule_id: r.try_get("schedule_id")?,
        expires_at: r.try_get("expires_at")?,
        handler_version: r.try_get("handler_version")?,
        created_at: r.try_get("created_at")?,
        updated_at: r.try_get("updated_at")?,
    })
}

fn rows_to_jobs(rows: &[PgRow]) -> Result<Vec<Job>, StoreError> {
    rows.iter().map(job_from_row).collect()
}

/// A Postgres-backed store in one schema.
pub struct PostgresStore {
    pool: PgPool,
    /// Connections with `synchronous_commit = off`, used only for engine
    /// transitions (claim, renew, complete, retry, fail, release, rescue,
    /// progress). Losing the last of these on a database crash only makes
    /// a job run again, which at-least-once delivery already allows;
    /// enqueues and cancels stay on the durable `pool`.
    fast: PgPool,
    schema: String,
    jobs: String,
    events: broadcast::Sender<StoreEvent>,
    listener: tokio::task::JoinHandle<()>,
}

impl Drop for PostgresStore {
    fn drop(&mut self) {
        self.listener.abort();
    }
}

async fn insert_all(
    conn: &mut PgConnection,
    jobs_table: &str,
    jobs: &[InsertJob],
) -> Result<Vec<AddResult>, StoreError> {
    let parents: Vec<String> = jobs
        .iter()
        .filter_map(|j| j.parent_id.clone())
        .filter(|p| !jobs.iter().any(|o| &o.id == p))
        .collect();
    if !parents.is_empty() {
        let found: Vec<String> =
            sqlx::query_scalar(&format!("SELECT id FROM {jobs_table} WHERE id = ANY($1)"))
                .bind(&parents)
                .fetch_all(&mut *conn)
                .await?;
        if let Some(missing) = parents.into_iter().find(|p| !found.contains(p)) {
            return Err(StoreError::UnknownParent(missing));
        }
    }
    let mut pending: Vec<&InsertJob> = jobs.iter().collect();
    let mut results: std::collections::HashMap<String, AddResult> =
        std::collections::HashMap::new();
    for _round in 0..5 {
        if pending.is_empty() {
            break;
        }
        let sql = format!(
            "INSERT INTO {jobs_table} (id, job_type, payload, scope_type, scope_id, priority, run_at, \
               max_attempts, dedupe_key, parent_id, schedule_id, expires_at) \
             SELECT id, job_type, payload, scope_type, scope_id, priority, \
               COALESCE(run_at, now()) + delay_ms * interval '1 millisecond', max_attempts, dedupe_key, \
               parent_id, schedule_id, COALESCE(expires_at, now() + ttl_ms * interval '1 millisecond') \
             FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::int4[], \
               $7::timestamptz[], $8::int8[], $9::int4[], $10::text[], $11::text[], $12::text[], \
               $13::timestamptz[], $14::int8[]) \
               AS t(id, job_type, payload, scope_type, scope_id, priority, run_at, delay_ms, \
                    max_attempts, dedupe_key, parent_id, schedule_id, expires_at, ttl_ms) \
             ON CONFLICT DO NOTHING RETURNING id"
        );
        let inserted: Vec<String> = sqlx::query_scalar(&sql)
            .bind(pending.iter().map(|j| j.id.clone()).collect::<Vec<_>>())
            .bind(
                pending
                    .iter()
                    .map(|j| j.job_type.clone())
                    .collect::<Vec<_>>(),
            )
            .bind(
                pending
                    .iter()
                    .map(|j| j.payload.clone())
                    .collect::<Vec<_>>(),
            )
            .bind(
                pending
                    .iter()
                    .map(|j| j.scope.as_ref().map(|s| s.scope_type.clone()))
                    .collect::<Vec<_>>(),
            )
            .bind(
                pending
                    .iter()
                    .map(|j| j.scope.as_ref().map(|s| s.scope_id.clone()))
                    .collect::<Vec<_>>(),
            )
            .bind(pending.iter().map(|j| j.priority).collect::<Vec<_>>())
            .bind(pending.iter().map(|j| j.run_at).collect::<Vec<_>>())
            .bind(pending.iter().map(|j| dur_ms(j.delay)).collect::<Vec<_>>())
            .bind(
                pending
                    .iter()
                    .map(|j| i32::try_from(j.max_attempts).unwrap_or(i32::MAX))
                    .collect::<Vec<_>>(),
            )
            .bind(
                pending
                    .iter()
                    .map(|j| j.dedupe_key.clone())
                    .collect::<Vec<_>>(),
            )
            .bind(
                pending
                    .iter()
                    .map(|j| j.parent_id.clone())
                    .collect::<Vec<_>>(),
            )
            .bind(
                pending
                    .iter()
                    .map(|j| j.schedule_id.clone())
                    .collect::<Vec<_>>(),
            )
            .bind(pending.iter().map(|j| j.expires_at).collect::<Vec<_>>())
            .bind(
                pending
                    .iter()
                    .map(|j| j.ttl.map(dur_ms))
                    .collect::<Vec<_>>(),
            )
            .fetch_all(&mut *conn)
            .await?;
        for id in inserted {
            results.insert(
                id.clone(),
                AddResult {
                    id,
                    deduplicated: false,
                },
            );
        }
        pending.retain(|j| !results.contains_key(&j.id));
        let keys: Vec<String> = pending
            .iter()
            .filter_map(|j| j.dedupe_key.clone())
            .collect();
        if keys.is_empty() {
            break;
        }
        let rows = sqlx::query(&format!(
            "SELECT id, dedupe_key FROM {jobs_table} WHERE dedupe_key = ANY($1) AND {LIVE}"
        ))
        .bind(&keys)
        .fetch_all(&mut *conn)
        .await?;
        let mut live = std::collections::HashMap::new();
        for r in rows {
            live.insert(
                r.try_get::<String, _>("dedupe_key")?,
                r.try_get::<String, _>("id")?,
            );
        }
        pending.retain(|j| match j.dedupe_key.as_ref().and_then(|k| live.get(k)) {
            Some(existing) => {
                results.insert(
                    j.id.clone(),
                    AddResult {
                        id: existing.clone(),
                        deduplicated: true,
                    },
                );
                false
            }
            None => true,
        });
    }
    jobs.iter()
        .map(|j| {
            results.remove(&j.id).ok_or_else(|| {
                StoreError::Corrupt(format!(
                    "job `{}` was neither inserted nor deduplicated",
                    j.id
                ))
            })
        })
        .collect()
}

/// Applies the migrations to `schema` on `conn`, holding a session advisory
/// lock keyed on the schema name for the whole run.
async fn migrate_schema(conn: &mut PgConnection, schema: &str) -> Result<(), StoreError> {
    sqlx::query("SELECT pg_advisory_lock(hashtext('boxcar.migrate'), hashtext($1))")
        .bind(schema)
        .execute(&mut *conn)
        .await?;
    sqlx::query(&format!("CREATE SCHEMA IF NOT EXISTS {schema}"))
        .execute(&mut *conn)
        .await?;
    sqlx::query(&format!("SET search_path TO {schema}"))
        .execute(&mut *conn)
        .await?;
    sqlx::migrate!("../../migrations/postgres")
        .run_direct(&mut *conn)
        .await?;
    sqlx::query("RESET search_path").execute(&mut *conn).await?;
    sqlx::query("SELECT pg_advisory_unlock(hashtext('boxcar.migrate'), hashtext($1))")
        .bind(schema)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

impl PostgresStore {
    /// Connects to `url` using tables in `schema` (created by `migrate`).
    /// Starts the LISTEN task that relays wake-ups.
    ///
    /// # Errors
    /// The schema name is not a plain lowercase identifier, or the server
    /// cannot be reached.
    pub async fn connect(url: &str, schema: &str) -> Result<Self, StoreError> {
        if !valid_schema(schema) {
            return Err(StoreError::BadUrl {
                url: "postgres://…".into(),
                reason: format!(
                    "schema `{schema}` must be a lowercase identifier ([a-z_][a-z0-9_]*)"
                ),
            });
        }
        let opts = PgConnectOptions::from_str(url)?;
        let pool = PgPoolOptions::new()
            .max_connections(8)
            .connect_with(opts.clone())
            .await?;
        let fast = PgPoolOptions::new()
            .max_connections(4)
            .after_connect(|conn, _| {
                Box::pin(async move {
                    sqlx::query("SET synchronous_commit = off")
                        .execute(conn)
                        .await?;
                    Ok(())
                })
            })
            .connect_with(opts)
            .await?;
        let (events, _) = broadcast::channel(4096);
        let mut listener = PgListener::connect_with(&pool).await?;
        let inserted = format!("{schema}_jobs_inserted");
        let finished = format!("{schema}_jobs_finished");
        listener
            .listen_all([inserted.as_str(), finished.as_str()])
            .await?;
        let tx = events.clone();
        let listener = tokio::spawn(async move {
            loop {
                match listener.try_recv().await {
                    Ok(Some(n)) => {
                        let ev = if n.channel() == finished {
                            StoreEvent::Finished(n.payload().to_string())
                        } else {
                            StoreEvent::Inserted(String::new())
                        };
                        let _ = tx.send(ev);
                    }
                    Ok(None) => {
                        // Reconnected: notifications may have been missed.
                        let _ = tx.send(StoreEvent::Inserted(String::new()));
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "postgres listener failed; retrying in 1s");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            }
        });
        Ok(Self {
            pool,
            fast,
            jobs: format!("{schema}.jobs"),
            schema: schema.to_string(),
            events,
            listener,
        })
    }

    /// The connection pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The schema holding the tables.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// Drops the schema and everything in it (tests).
    ///
    /// # Errors
    /// The database refused.
    pub async fn drop_schema(&self) -> Result<(), StoreError> {
        sqlx::query(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema))
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    fn filter_sql(f: &JobFilter, n: &mut usize) -> String {
        let mut next = || {
            *n += 1;
            *n
        };
        let mut w = vec!["true".to_string()];
        if !f.types.is_empty() {
            w.push(format!("job_type = ANY(${})", next()));
        }
        if !f.statuses.is_empty() {
            w.push(format!("status = ANY(${})", next()));
        }
        if f.scope.is_some() {
            let a = next();
            let b = next();
            w.push(format!("scope_type = ${a} AND scope_id = ${b}"));
        }
        if f.parent_id.is_some() {
            w.push(format!("parent_id = ${}", next()));
        }
        w.join(" AND ")
    }

    fn bind_filter<'q>(
        mut q: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
        f: &JobFilter,
    ) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
        if !f.types.is_empty() {
            q = q.bind(f.types.clone());
        }
        if !f.statuses.is_empty() {
            q = q.bind(
                f.statuses
                    .iter()
                    .map(|s| s.as_str().to_string())
                    .collect::<Vec<_>>(),
            );
        }
        if let Some(s) = &f.scope {
            q = q.bind(s.scope_type.clone()).bind(s.scope_id.clone());
        }
        if let Some(p) = &f.parent_id {
            q = q.bind(p.clone());
        }
        q
    }
}

#[async_trait]
impl JobStore for PostgresStore {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        // sqlx's migrator takes an advisory lock per database, but only after
        // our `CREATE SCHEMA IF NOT EXISTS`, which is not safe against a
        // concurrent twin (it can fail on pg_namespace's unique index); and
        // it does not release its lock when a migration fails. So: one
        // session lock per schema around everything, and a connection that
        // saw an error is closed rather than returned (dropping any lock it
        // still holds).
        let mut conn = self.pool.acquire().await?;
        let res = migrate_schema(&mut conn, &self.schema).await;
        if res.is_err() {
            conn.close().await.ok();
        }
        res
    }

    async fn now(&self) -> Result<DateTime<Utc>, StoreError> {
        Ok(sqlx::query_scalar("SELECT now()")
            .fetch_one(&self.pool)
            .await?)
    }

    async fn add_many(&self, jobs: Vec<InsertJob>) -> Result<Vec<AddResult>, StoreError> {
        let mut conn = self.pool.acquire().await?;
        insert_all(&mut conn, &self.jobs, &jobs).await
    }

    async fn add_in_tx(
        &self,
        conn: TxConn<'_>,
        jobs: Vec<InsertJob>,
    ) -> Result<Vec<AddResult>, StoreError> {
        match conn {
            TxConn::Postgres(c) => insert_all(c, &self.jobs, &jobs).await,
            TxConn::Sqlite(_) => Err(StoreError::Unsupported(
                "this queue uses Postgres; enqueue through a Postgres transaction on the same database".into(),
            )),
        }
    }

    async fn claim_batch(&self, p: ClaimParams) -> Result<ClaimResult, StoreError> {
        if !p.guards.is_empty() {
            return guarded::claim(self, p).await;
        }
        let t = &self.jobs;
        let exp = "j.expires_at <= now()";
        let sql = format!(
            "WITH cand AS (SELECT id FROM {t} j \
                 WHERE status = 'pending' AND job_type = $1 AND run_at <= now() \
                   AND NOT EXISTS (SELECT 1 FROM {t} c WHERE c.parent_id = j.id AND c.{LIVE}) \
                 ORDER BY priority, run_at, id LIMIT $2 FOR UPDATE SKIP LOCKED) \
             UPDATE {t} j SET \
               status = CASE WHEN {exp} THEN 'failed' ELSE 'running' END, \
               last_error = CASE WHEN {exp} THEN $3 ELSE j.last_error END, \
               error_code = CASE WHEN {exp} THEN $7 ELSE j.error_code END, \
               finished_at = CASE WHEN {exp} THEN now() ELSE NULL END, \
               lease_owner = CASE WHEN {exp} THEN NULL ELSE $4 END, \
               lease_expires_at = CASE WHEN {exp} THEN NULL ELSE now() + $5 * interval '1 millisecond' END, \
               started_at = CASE WHEN {exp} THEN j.started_at ELSE now() END, \
               attempts = CASE WHEN {exp} THEN j.attempts ELSE j.attempts + 1 END, \
               handler_version = CASE WHEN {exp} THEN j.handler_version ELSE $6 END, \
               updated_at = now() \
             FROM cand WHERE j.id = cand.id RETURNING {}",
            cols("j.")
        );
        let rows = sqlx::query(&sql)
            .bind(&p.job_type)
            .bind(i64::from(p.limit))
            .bind(EXPIRED_ERROR)
            .bind(&p.worker_id)
            .bind(dur_ms(p.lease))
            .bind(&p.handler_version)
            .bind(EXPIRED_CODE)
            .fetch_all(&self.fast)
            .await?;
        let mut res = ClaimResult::default();
        for job in rows_to_jobs(&rows)? {
            if job.status == JobStatus::Failed {
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
        Ok(sqlx::query_scalar(&format!(
            "UPDATE {} SET lease_expires_at = now() + $1 * interval '1 millisecond', updated_at = now() \
             WHERE id = ANY($2) AND status = 'running' AND lease_owner = $3 AND lease_expires_at > now() \
             RETURNING id",
            self.jobs
        ))
        .bind(dur_ms(p.lease))
        .bind(&p.ids)
        .bind(&p.worker_id)
        .fetch_all(&self.fast)
        .await?)
    }

    async fn complete(&self, p: CompleteParams) -> Result<Vec<String>, StoreError> {
        let ids: Vec<String> = p.jobs.iter().map(|c| c.id.clone()).collect();
        let results: Vec<Option<String>> = p.jobs.iter().map(|c| c.result.clone()).collect();
        Ok(sqlx::query_scalar(&format!(
            "UPDATE {} j SET status = 'succeeded', result = c.result, finished_at = now(), \
               lease_owner = NULL, lease_expires_at = NULL, updated_at = now() \
             FROM unnest($1::text[], $2::text[]) AS c(id, result) \
             WHERE j.id = c.id AND j.status = 'running' AND j.lease_owner = $3 RETURNING j.id",
            self.jobs
        ))
        .bind(&ids)
        .bind(&results)
        .bind(&p.worker_id)
        .fetch_all(&self.fast)
        .await?)
    }

    async fn retry(&self, p: RetryParams) -> Result<bool, StoreError> {
        let r = sqlx::query(&format!(
            "UPDATE {} SET status = 'pending', run_at = now() + $1 * interval '1 millisecond', \
               last_error = $2, attempts = CASE WHEN $3 THEN attempts ELSE GREATEST(attempts - 1, 0) END, \
               lease_owner = NULL, lease_expires_at = NULL, updated_at = now() \
             WHERE id = $4 AND status = 'running' AND lease_owner = $5",
            self.jobs
        ))
        .bind(dur_ms(p.delay))
        .bind(&p.error)
        .bind(p.consumes_attempt)
        .bind(&p.id)
        .bind(&p.worker_id)
        .execute(&self.fast)
        .await?;
        Ok(r.rows_affected() == 1)
    }

    async fn fail(&self, p: FailParams) -> Result<bool, StoreError> {
        let r = sqlx::query(&format!(
            "UPDATE {} SET status = 'failed', last_error = $1, finished_at = now(), \
               lease_owner = NULL, lease_expires_at = NULL, updated_at = now(), \
               error_code = $4, error_details = $5 \
             WHERE id = $2 AND status = 'running' AND lease_owner = $3",
            self.jobs
        ))
        .bind(&p.error)
        .bind(&p.id)
        .bind(&p.worker_id)
        .bind(&p.code)
        .bind(&p.details)
        .execute(&self.fast)
        .await?;
        Ok(r.rows_affected() == 1)
    }

    async fn release(&self, p: ReleaseParams) -> Result<u64, StoreError> {
        let r = sqlx::query(&format!(
            "UPDATE {} SET status = 'pending', run_at = now(), attempts = GREATEST(attempts - 1, 0), \
               lease_owner = NULL, lease_expires_at = NULL, updated_at = now() \
             WHERE id = ANY($1) AND status = 'running' AND lease_owner = $2",
            self.jobs
        ))
        .bind(&p.ids)
        .bind(&p.worker_id)
        .execute(&self.fast)
        .await?;
        Ok(r.rows_affected())
    }

    async fn cancel(&self, p: CancelParams) -> Result<Vec<CancelledJob>, StoreError> {
        let t = &self.jobs;
        let (cond, a, b): (String, Vec<String>, Option<String>) = match &p.target {
            CancelTarget::Ids(ids) => (format!("id = ANY($2) AND {LIVE}"), ids.clone(), None),
            CancelTarget::Scope {
                scope,
                include_running,
            } => {
                let st = if *include_running {
                    LIVE
                } else {
                    "status = 'pending'"
                };
                (
                    format!("scope_type = $2[1] AND scope_id = $2[2] AND {st}"),
                    vec![scope.scope_type.clone(), scope.scope_id.clone()],
                    None,
                )
            }
            CancelTarget::DedupeKeys { job_type, keys } => (
                format!("job_type = $3 AND dedupe_key = ANY($2) AND {LIVE}"),
                keys.clone(),
                Some(job_type.clone()),
            ),
        };
        let sql = format!(
            "WITH RECURSIVE targets AS ( \
                 SELECT id FROM {t} WHERE {cond} \
                 UNION SELECT c.id FROM {t} c JOIN targets ON c.parent_id = targets.id WHERE c.{LIVE}), \
             locked AS (SELECT j.id, j.status AS old_status FROM {t} j JOIN targets USING (id) \
                 WHERE j.{LIVE} FOR UPDATE OF j) \
             UPDATE {t} j SET status = 'cancelled', last_error = $1, finished_at = now(), \
               lease_owner = NULL, lease_expires_at = NULL, updated_at = now() \
             FROM locked WHERE j.id = locked.id \
             RETURNING j.id, j.job_type, j.scope_type, j.scope_id, locked.old_status, j.attempts"
        );
        let rows = sqlx::query(&sql)
            .bind(&p.reason)
            .bind(&a)
            .bind(&b)
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|r| {
                let st: Option<String> = r.try_get("scope_type")?;
                let si: Option<String> = r.try_get("scope_id")?;
                let old: String = r.try_get("old_status")?;
                Ok(CancelledJob {
                    id: r.try_get("id")?,
                    job_type: r.try_get("job_type")?,
                    scope: st.zip(si).map(|(t, i)| Scope::new(t, i)),
                    was_running: old == "running",
                    attempts: u32::try_from(r.try_get::<i32, _>("attempts")?).unwrap_or(0),
                })
            })
            .collect()
    }

    async fn rescue(&self, p: RescueParams) -> Result<Vec<Job>, StoreError> {
        let t = &self.jobs;
        let ex = "j.attempts >= j.max_attempts";
        let rows = sqlx::query(&format!(
            "WITH r AS (SELECT id FROM {t} WHERE status = 'running' AND lease_expires_at <= now() \
                 ORDER BY lease_expires_at LIMIT $1 FOR UPDATE SKIP LOCKED) \
             UPDATE {t} j SET \
               status = CASE WHEN {ex} THEN 'failed' ELSE 'pending' END, \
               last_error = CASE WHEN {ex} THEN $2 ELSE $3 END, \
               finished_at = CASE WHEN {ex} THEN now() ELSE NULL END, \
               run_at = CASE WHEN {ex} THEN j.run_at ELSE now() END, \
               lease_owner = NULL, lease_expires_at = NULL, updated_at = now() \
             FROM r WHERE j.id = r.id RETURNING {}",
            cols("j.")
        ))
        .bind(i64::from(p.limit))
        .bind(LEASE_EXPIRED_ERROR)
        .bind("lease expired; recovered for another attempt")
        .fetch_all(&self.fast)
        .await?;
        rows_to_jobs(&rows)
    }

    async fn still_owned(
        &self,
        worker_id: &str,
        ids: &[String],
    ) -> Result<Vec<String>, StoreError> {
        Ok(sqlx::query_scalar(&format!(
            "SELECT id FROM {} WHERE id = ANY($1) AND status = 'running' AND lease_owner = $2",
            self.jobs
        ))
        .bind(ids)
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
        let r = sqlx::query(&format!(
            "UPDATE {} SET progress = $1, updated_at = now() \
             WHERE id = $2 AND status = 'running' AND lease_owner = $3",
            self.jobs
        ))
        .bind(json)
        .bind(id)
        .bind(worker_id)
        .execute(&self.fast)
        .await?;
        Ok(r.rows_affected() == 1)
    }

    async fn get(&self, id: &str) -> Result<Option<Job>, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {} FROM {} WHERE id = $1",
            cols(""),
            self.jobs
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(job_from_row).transpose()
    }

    async fn find(&self, f: &JobFilter) -> Result<Vec<Job>, StoreError> {
        let mut n = 0;
        let w = Self::filter_sql(f, &mut n);
        let sql = format!(
            "SELECT {} FROM {} WHERE {w} ORDER BY created_at, id LIMIT ${} OFFSET ${}",
            cols(""),
            self.jobs,
            n + 1,
            n + 2
        );
        let rows = Self::bind_filter(sqlx::query(&sql), f)
            .bind(i64::from(f.limit.unwrap_or(JobFilter::DEFAULT_LIMIT)))
            .bind(i64::from(f.offset.unwrap_or(0)))
            .fetch_all(&self.pool)
            .await?;
        rows_to_jobs(&rows)
    }

    async fn count_by_status(&self) -> Result<StatusCounts, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT status, COUNT(*) AS n FROM {} GROUP BY status",
            self.jobs
        ))
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
        let mut f = f.clone();
        f.statuses = vec![JobStatus::Failed];
        let mut n = 0;
        let w = Self::filter_sql(&f, &mut n);
        let sql = format!(
            "UPDATE {t} SET status = 'pending', attempts = 0, last_error = NULL, finished_at = NULL, \
               error_code = NULL, error_details = NULL, \
               run_at = now(), updated_at = now() \
             WHERE id IN (SELECT id FROM {t} WHERE {w} ORDER BY created_at, id LIMIT ${} OFFSET ${}) \
               AND status = 'failed'",
            n + 1,
            n + 2,
            t = self.jobs
        );
        let r = Self::bind_filter(sqlx::query(&sql), &f)
            .bind(f.limit.map(i64::from))
            .bind(i64::from(f.offset.unwrap_or(0)))
            .execute(&self.pool)
            .await?;
        let _ = self.events.send(StoreEvent::Inserted(String::new()));
        Ok(r.rows_affected())
    }

    async fn prune(&self, p: PruneParams) -> Result<u64, StoreError> {
        let statuses: Vec<String> = p
            .statuses
            .iter()
            .filter(|s| s.is_terminal())
            .map(|s| s.as_str().to_string())
            .collect();
        let r = sqlx::query(&format!(
            "DELETE FROM {} WHERE status = ANY($1) AND finished_at < $2",
            self.jobs
        ))
        .bind(&statuses)
        .bind(p.older_than)
        .execute(&self.pool)
        .await?;
        Ok(r.rows_affected())
    }

    async fn record_handler_event(&self, e: HandlerEvent) -> Result<(), StoreError> {
        sqlx::query(&format!(
            "INSERT INTO {}.handler_events (job_type, file, digest, kind, reason) VALUES ($1, $2, $3, $4, $5)",
            self.schema
        ))
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
        let rows = sqlx::query(&format!(
            "SELECT at, job_type, file, digest, kind, reason FROM {}.handler_events ORDER BY id DESC LIMIT $1",
            self.schema
        ))
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                let kind: String = r.try_get("kind")?;
                Ok(HandlerEvent {
                    at: r.try_get("at")?,
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
