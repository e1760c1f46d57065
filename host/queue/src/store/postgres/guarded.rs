//! Guarded claims on Postgres (SPEC §5): in one transaction, lock one guard
//! row per guard in sorted key order (upsert = row lock), evaluate each
//! candidate's predicate against live leases (database clock), then claim it
//! with a compare-and-set.
//!
//! Invariant: competing guarded claimers queue on the guard row lock, and
//! under READ COMMITTED each statement after the lock sees every claim the
//! previous holder committed, so two workers cannot both pass a predicate.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use super::{cols, dur_ms, job_from_row, PostgresStore, LIVE};
use crate::guards::{pool_full_reason, scope_key, ClaimGuards, PoolGuard, PoolStatus};
use crate::job::Job;
use crate::store::{ClaimParams, ClaimResult, StoreError, EXPIRED_CODE, EXPIRED_ERROR};

enum Verdict {
    Admit,
    Skip(String),
    Stop(String),
}

/// Summed slot cost of the pool's members holding live leases, on the
/// database clock. `jobs` is the schema-qualified jobs table.
async fn occupancy(
    conn: &mut PgConnection,
    jobs: &str,
    pool: &PoolGuard,
) -> Result<i64, StoreError> {
    let types: Vec<String> = pool.member_costs.iter().map(|(t, _)| t.clone()).collect();
    let costs: Vec<i64> = pool
        .member_costs
        .iter()
        .map(|(_, c)| i64::from(*c))
        .collect();
    Ok(sqlx::query_scalar(&format!(
        "SELECT COALESCE(SUM(m.cost), 0)::int8 FROM {jobs} j \
         JOIN unnest($1::text[], $2::int8[]) AS m(job_type, cost) ON m.job_type = j.job_type \
         WHERE j.status = 'running' AND j.lease_expires_at > now()"
    ))
    .bind(&types)
    .bind(&costs)
    .fetch_one(&mut *conn)
    .await?)
}

async fn verdict(
    conn: &mut PgConnection,
    t: &str,
    schema: &str,
    cand: &Job,
    g: &ClaimGuards,
) -> Result<Verdict, StoreError> {
    if g.serialize_by_scope {
        if let Some(s) = &cand.scope {
            let busy = sqlx::query(&format!(
                "SELECT 1 FROM {t} WHERE scope_type = $1 AND scope_id = $2 \
                   AND status = 'running' AND lease_expires_at > now() LIMIT 1"
            ))
            .bind(&s.scope_type)
            .bind(&s.scope_id)
            .fetch_optional(&mut *conn)
            .await?;
            if busy.is_some() {
                return Ok(Verdict::Skip(format!("scope type `{}`", s.scope_type)));
            }
        }
    }
    if !g.not_while_running.is_empty() {
        let busy = sqlx::query(&format!(
            "SELECT 1 FROM {t} WHERE job_type = ANY($1) AND status = 'running' AND lease_expires_at > now() LIMIT 1"
        ))
        .bind(&g.not_while_running)
        .fetch_optional(&mut *conn)
        .await?;
        if busy.is_some() {
            return Ok(Verdict::Stop(format!(
                "types {:?} (not_while_running)",
                g.not_while_running
            )));
        }
    }
    if !g.waits_for.is_empty() {
        let busy = sqlx::query(&format!(
            "SELECT 1 FROM {t} WHERE job_type = ANY($1) AND \
               ((status = 'running' AND lease_expires_at > now()) OR (status = 'pending' AND run_at <= now())) LIMIT 1"
        ))
        .bind(&g.waits_for)
        .fetch_optional(&mut *conn)
        .await?;
        if busy.is_some() {
            return Ok(Verdict::Stop(format!(
                "types {:?} (waits_for)",
                g.waits_for
            )));
        }
    }
    for pool in &g.pools {
        if let Some(limit) = pool.concurrency {
            let used = occupancy(conn, t, pool).await?;
            if used + i64::from(pool.cost) > i64::from(limit) {
                return Ok(Verdict::Stop(pool_full_reason(&pool.name)));
            }
        }
        if let Some(rate) = pool.rate_per_minute {
            let spent: Option<i64> = sqlx::query_scalar(&format!(
                "SELECT CASE WHEN window_start IS NULL OR now() - window_start >= interval '1 minute' \
                   THEN 0 ELSE spent END FROM {schema}.job_guards WHERE key = $1"
            ))
            .bind(format!("pool:{}", pool.name))
            .fetch_optional(&mut *conn)
            .await?;
            if spent.unwrap_or(0) + i64::from(pool.rate_cost) > i64::from(rate) {
                return Ok(Verdict::Stop(format!(
                    "pool `{}` (rate budget spent)",
                    pool.name
                )));
            }
        }
    }
    Ok(Verdict::Admit)
}

async fn spend(conn: &mut PgConnection, schema: &str, g: &ClaimGuards) -> Result<(), StoreError> {
    for pool in g.pools.iter().filter(|p| p.rate_per_minute.is_some()) {
        sqlx::query(&format!(
            "UPDATE {schema}.job_guards SET \
               spent = CASE WHEN window_start IS NULL OR now() - window_start >= interval '1 minute' \
                 THEN $1 ELSE spent + $1 END, \
               window_start = CASE WHEN window_start IS NULL OR now() - window_start >= interval '1 minute' \
                 THEN now() ELSE window_start END \
             WHERE key = $2"
        ))
        .bind(i64::from(pool.rate_cost))
        .bind(format!("pool:{}", pool.name))
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

pub(super) async fn claim(
    store: &PostgresStore,
    p: ClaimParams,
) -> Result<ClaimResult, StoreError> {
    let t = store.jobs.as_str();
    let schema = store.schema.as_str();
    let mut tx = store.fast.begin().await?;
    let window = i64::from(p.limit.saturating_mul(10).clamp(16, 1000));
    let scope_types: Vec<String> = if p.guards.serialize_by_scope {
        sqlx::query_scalar(&format!(
            "SELECT DISTINCT scope_type FROM (SELECT scope_type FROM {t} \
               WHERE status = 'pending' AND job_type = $1 AND run_at <= now() AND scope_type IS NOT NULL \
               ORDER BY priority, run_at, id LIMIT $2) s"
        ))
        .bind(&p.job_type)
        .bind(window)
        .fetch_all(&mut *tx)
        .await?
    } else {
        Vec::new()
    };
    let mut keys = p.guards.keys(&p.job_type);
    keys.extend(scope_types.iter().map(|s| scope_key(s)));
    keys.sort();
    keys.dedup();
    for key in &keys {
        sqlx::query(&format!(
            "INSERT INTO {schema}.job_guards (key, seq) VALUES ($1, 1) \
             ON CONFLICT (key) DO UPDATE SET seq = job_guards.seq + 1"
        ))
        .bind(key)
        .execute(&mut *tx)
        .await?;
    }
    let rows = sqlx::query(&format!(
        "SELECT {} FROM {t} j WHERE status = 'pending' AND job_type = $1 AND run_at <= now() \
           AND NOT EXISTS (SELECT 1 FROM {t} c WHERE c.parent_id = j.id AND c.{LIVE}) \
         ORDER BY priority, run_at, id LIMIT $2 FOR UPDATE SKIP LOCKED",
        cols("")
    ))
    .bind(&p.job_type)
    .bind(window)
    .fetch_all(&mut *tx)
    .await?;
    let cands = rows
        .iter()
        .map(job_from_row)
        .collect::<Result<Vec<_>, _>>()?;
    let now: chrono::DateTime<chrono::Utc> = sqlx::query_scalar("SELECT now()")
        .fetch_one(&mut *tx)
        .await?;
    let mut res = ClaimResult::default();
    for cand in cands {
        if res.claimed.len() >= p.limit as usize {
            break;
        }
        if cand.expires_at.is_some_and(|e| e <= now) {
            let row = sqlx::query(&format!(
                "UPDATE {t} SET status = 'failed', last_error = $1, error_code = $3, finished_at = now(), updated_at = now() \
                 WHERE id = $2 AND status = 'pending' RETURNING {}",
                cols("")
            ))
            .bind(EXPIRED_ERROR)
            .bind(&cand.id)
            .bind(EXPIRED_CODE)
            .fetch_optional(&mut *tx)
            .await?;
            if let Some(r) = row {
                res.expired.push(job_from_row(&r)?);
            }
            continue;
        }
        match verdict(&mut tx, t, schema, &cand, &p.guards).await? {
            Verdict::Admit => {}
            Verdict::Skip(why) => {
                res.blocked_by = Some(why);
                continue;
            }
            Verdict::Stop(why) => {
                res.blocked_by = Some(why);
                break;
            }
        }
        let row = sqlx::query(&format!(
            "UPDATE {t} SET status = 'running', lease_owner = $1, \
               lease_expires_at = now() + $2 * interval '1 millisecond', started_at = now(), \
               attempts = attempts + 1, handler_version = $3, updated_at = now() \
             WHERE id = $4 AND status = 'pending' RETURNING {}",
            cols("")
        ))
        .bind(&p.worker_id)
        .bind(dur_ms(p.lease))
        .bind(&p.handler_version)
        .bind(&cand.id)
        .fetch_optional(&mut *tx)
        .await?;
        if let Some(r) = row {
            spend(&mut tx, schema, &p.guards).await?;
            res.claimed.push(job_from_row(&r)?);
        }
    }
    tx.commit().await?;
    Ok(res)
}

/// Occupancy and window spend of each pool (read-only, no guard lock),
/// on the database clock.
pub(super) async fn pool_status(
    store: &PostgresStore,
    pools: &[PoolGuard],
) -> Result<Vec<PoolStatus>, StoreError> {
    let (t, schema) = (&store.jobs, &store.schema);
    let mut conn = store.pool.acquire().await?;
    let mut out = Vec::with_capacity(pools.len());
    for pool in pools {
        let occupied = occupancy(&mut conn, t, pool).await?;
        let open: Option<(i64, DateTime<Utc>)> = sqlx::query_as(&format!(
            "SELECT spent, window_start + interval '1 minute' FROM {schema}.job_guards \
             WHERE key = $1 AND window_start IS NOT NULL AND now() - window_start < interval '1 minute'"
        ))
        .bind(format!("pool:{}", pool.name))
        .fetch_optional(&mut *conn)
        .await?;
        out.push(PoolStatus {
            name: pool.name.clone(),
            occupied: u64::try_from(occupied).unwrap_or(0),
            concurrency: pool.concurrency,
            spent: open.map_or(0, |(spent, _)| u64::try_from(spent).unwrap_or(0)),
            rate_per_minute: pool.rate_per_minute,
            window_resets_at: open.map(|(_, at)| at),
        });
    }
    Ok(out)
}

/// The claim predicate for one job, read-only (see `JobStore::blocked_by`).
pub(super) async fn blocked_by(
    store: &PostgresStore,
    job: &Job,
    guards: &ClaimGuards,
) -> Result<Option<String>, StoreError> {
    let mut conn = store.pool.acquire().await?;
    Ok(
        match verdict(&mut conn, &store.jobs, &store.schema, job, guards).await? {
            Verdict::Admit => None,
            Verdict::Skip(why) | Verdict::Stop(why) => Some(why),
        },
    )
}
