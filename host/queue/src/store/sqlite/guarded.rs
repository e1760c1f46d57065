//! Guarded claims on SQLite (SPEC §5): inside one `BEGIN IMMEDIATE`
//! transaction, bump every guard row this claim needs (sorted keys), then
//! evaluate each candidate's predicate against live leases and claim it.
//!
//! Invariant: the predicate and the claim share the transaction, and
//! `BEGIN IMMEDIATE` holds the database write lock from the start, so no
//! other process can claim between the check and the write.

use chrono::Utc;
use sqlx::{Row, SqliteConnection};

use super::{dur_ms, from_ms, job_from_row, json_list, ms, SqliteStore, COLS, LIVE};
use crate::guards::{pool_full_reason, scope_key, ClaimGuards, PoolGuard, PoolStatus};
use crate::job::{Job, JobStatus};
use crate::store::{ClaimParams, ClaimResult, StoreError, StoreEvent, EXPIRED_CODE, EXPIRED_ERROR};

const WINDOW_MS: i64 = 60_000;

enum Verdict {
    Admit,
    /// Blocks this candidate only (another scope may pass).
    Skip(String),
    /// Blocks every candidate of the type.
    Stop(String),
}

/// Whether `sql` (binding `?1` = a JSON list, `?2` = now) returns a row.
async fn any_live(
    conn: &mut SqliteConnection,
    sql: &str,
    list: String,
    now: i64,
) -> Result<bool, StoreError> {
    let row = sqlx::query(sql)
        .bind(list)
        .bind(now)
        .fetch_optional(&mut *conn)
        .await?;
    Ok(row.is_some())
}

/// Summed slot cost of the pool's members holding live leases at `now`.
async fn occupancy(
    conn: &mut SqliteConnection,
    pool: &PoolGuard,
    now: i64,
) -> Result<i64, StoreError> {
    let members: Vec<&str> = pool.member_costs.iter().map(|(t, _)| t.as_str()).collect();
    let rows = sqlx::query(
        "SELECT job_type, COUNT(*) AS n FROM boxcar_jobs WHERE status = 'running' \
           AND lease_expires_at > ?1 AND job_type IN (SELECT value FROM json_each(?2)) GROUP BY job_type",
    )
    .bind(now)
    .bind(json_list(&members))
    .fetch_all(&mut *conn)
    .await?;
    let mut used: i64 = 0;
    for r in rows {
        let t: String = r.try_get("job_type")?;
        let n: i64 = r.try_get("n")?;
        let cost = pool
            .member_costs
            .iter()
            .find(|(m, _)| *m == t)
            .map_or(1, |(_, c)| *c);
        used += n * i64::from(cost);
    }
    Ok(used)
}

async fn verdict(
    conn: &mut SqliteConnection,
    cand: &Job,
    g: &ClaimGuards,
    now: i64,
) -> Result<Verdict, StoreError> {
    if g.serialize_by_scope {
        if let Some(s) = &cand.scope {
            let busy = sqlx::query(
                "SELECT 1 FROM boxcar_jobs WHERE scope_type = ?1 AND scope_id = ?2 \
                   AND status = 'running' AND lease_expires_at > ?3 LIMIT 1",
            )
            .bind(&s.scope_type)
            .bind(&s.scope_id)
            .bind(now)
            .fetch_optional(&mut *conn)
            .await?
            .is_some();
            if busy {
                return Ok(Verdict::Skip(format!("scope type `{}`", s.scope_type)));
            }
        }
    }
    if !g.not_while_running.is_empty() {
        let busy = any_live(
            conn,
            "SELECT 1 FROM boxcar_jobs WHERE job_type IN (SELECT value FROM json_each(?1)) \
               AND status = 'running' AND lease_expires_at > ?2 LIMIT 1",
            json_list(&g.not_while_running),
            now,
        )
        .await?;
        if busy {
            return Ok(Verdict::Stop(format!(
                "types {:?} (not_while_running)",
                g.not_while_running
            )));
        }
    }
    if !g.waits_for.is_empty() {
        let busy = any_live(
            conn,
            "SELECT 1 FROM boxcar_jobs WHERE job_type IN (SELECT value FROM json_each(?1)) \
               AND ((status = 'running' AND lease_expires_at > ?2) OR (status = 'pending' AND run_at <= ?2)) \
             LIMIT 1",
            json_list(&g.waits_for),
            now,
        )
        .await?;
        if busy {
            return Ok(Verdict::Stop(format!(
                "types {:?} (waits_for)",
                g.waits_for
            )));
        }
    }
    for pool in &g.pools {
        if let Some(limit) = pool.concurrency {
            let used = occupancy(conn, pool, now).await?;
            if used + i64::from(pool.cost) > i64::from(limit) {
                return Ok(Verdict::Stop(pool_full_reason(&pool.name)));
            }
        }
        if let Some(rate) = pool.rate_per_minute {
            let row =
                sqlx::query("SELECT window_start, spent FROM boxcar_job_guards WHERE key = ?")
                    .bind(format!("pool:{}", pool.name))
                    .fetch_optional(&mut *conn)
                    .await?;
            let (start, spent): (Option<i64>, i64) = match row {
                Some(r) => (r.try_get("window_start")?, r.try_get("spent")?),
                None => (None, 0),
            };
            let open = start.is_some_and(|s| now - s < WINDOW_MS);
            let spent = if open { spent } else { 0 };
            if spent + i64::from(pool.rate_cost) > i64::from(rate) {
                return Ok(Verdict::Stop(format!(
                    "pool `{}` (rate budget spent)",
                    pool.name
                )));
            }
        }
    }
    Ok(Verdict::Admit)
}

async fn spend(conn: &mut SqliteConnection, g: &ClaimGuards, now: i64) -> Result<(), StoreError> {
    for pool in g.pools.iter().filter(|p| p.rate_per_minute.is_some()) {
        sqlx::query(
            "UPDATE boxcar_job_guards SET \
               spent = CASE WHEN window_start IS NULL OR ?1 - window_start >= ?2 THEN ?3 ELSE spent + ?3 END, \
               window_start = CASE WHEN window_start IS NULL OR ?1 - window_start >= ?2 THEN ?1 ELSE window_start END \
             WHERE key = ?4",
        )
        .bind(now)
        .bind(WINDOW_MS)
        .bind(i64::from(pool.rate_cost))
        .bind(format!("pool:{}", pool.name))
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

pub(super) async fn claim(store: &SqliteStore, p: ClaimParams) -> Result<ClaimResult, StoreError> {
    let now = ms(Utc::now());
    let mut tx = store.pool.begin_with("BEGIN IMMEDIATE").await?;
    let window = i64::from(p.limit.saturating_mul(10).clamp(16, 1000));
    let rows = sqlx::query(&format!(
        "SELECT {COLS} FROM boxcar_jobs j WHERE status = 'pending' AND job_type = ?1 AND run_at <= ?2 \
           AND NOT EXISTS (SELECT 1 FROM boxcar_jobs c WHERE c.parent_id = j.id AND c.{LIVE}) \
         ORDER BY priority, run_at, id LIMIT ?3"
    ))
    .bind(&p.job_type)
    .bind(now)
    .bind(window)
    .fetch_all(&mut *tx)
    .await?;
    let cands = rows
        .iter()
        .map(job_from_row)
        .collect::<Result<Vec<_>, _>>()?;
    let mut keys = p.guards.keys(&p.job_type);
    if p.guards.serialize_by_scope {
        keys.extend(
            cands
                .iter()
                .filter_map(|c| c.scope.as_ref())
                .map(|s| scope_key(&s.scope_type)),
        );
    }
    keys.sort();
    keys.dedup();
    for key in &keys {
        sqlx::query("INSERT INTO boxcar_job_guards (key, seq) VALUES (?, 1) ON CONFLICT (key) DO UPDATE SET seq = seq + 1")
            .bind(key)
            .execute(&mut *tx)
            .await?;
    }
    let mut res = ClaimResult::default();
    for cand in cands {
        if res.claimed.len() >= p.limit as usize {
            break;
        }
        if cand.expires_at.is_some_and(|e| ms(e) <= now) {
            let row = sqlx::query(&format!(
                "UPDATE boxcar_jobs SET status = 'failed', last_error = ?1, error_code = ?4, finished_at = ?2, updated_at = ?2 \
                 WHERE id = ?3 AND status = 'pending' RETURNING {COLS}"
            ))
            .bind(EXPIRED_ERROR)
            .bind(now)
            .bind(&cand.id)
            .bind(EXPIRED_CODE)
            .fetch_optional(&mut *tx)
            .await?;
            if let Some(r) = row {
                res.expired.push(job_from_row(&r)?);
            }
            continue;
        }
        match verdict(&mut tx, &cand, &p.guards, now).await? {
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
            "UPDATE boxcar_jobs SET status = 'running', lease_owner = ?1, lease_expires_at = ?2, \
               started_at = ?3, attempts = attempts + 1, handler_version = ?4, updated_at = ?3 \
             WHERE id = ?5 AND status = 'pending' RETURNING {COLS}"
        ))
        .bind(&p.worker_id)
        .bind(now + dur_ms(p.lease))
        .bind(now)
        .bind(&p.handler_version)
        .bind(&cand.id)
        .fetch_optional(&mut *tx)
        .await?;
        if let Some(r) = row {
            spend(&mut tx, &p.guards, now).await?;
            res.claimed.push(job_from_row(&r)?);
        }
    }
    tx.commit().await?;
    for j in &res.expired {
        store.notify(StoreEvent::Finished(j.id.clone()));
    }
    debug_assert!(res.claimed.iter().all(|j| j.status == JobStatus::Running));
    Ok(res)
}

/// Occupancy and window spend of each pool (read-only, no guard lock).
pub(super) async fn pool_status(
    store: &SqliteStore,
    pools: &[PoolGuard],
) -> Result<Vec<PoolStatus>, StoreError> {
    let now = ms(Utc::now());
    let mut conn = store.pool.acquire().await?;
    let mut out = Vec::with_capacity(pools.len());
    for pool in pools {
        let occupied = u64::try_from(occupancy(&mut conn, pool, now).await?).unwrap_or(0);
        let row = sqlx::query("SELECT window_start, spent FROM boxcar_job_guards WHERE key = ?")
            .bind(format!("pool:{}", pool.name))
            .fetch_optional(&mut *conn)
            .await?;
        let open = match row {
            Some(r) => {
                let start: Option<i64> = r.try_get("window_start")?;
                let spent: i64 = r.try_get("spent")?;
                start.filter(|s| now - s < WINDOW_MS).map(|s| (s, spent))
            }
            None => None,
        };
        out.push(PoolStatus {
            name: pool.name.clone(),
            occupied,
            concurrency: pool.concurrency,
            spent: open.map_or(0, |(_, spent)| u64::try_from(spent).unwrap_or(0)),
            rate_per_minute: pool.rate_per_minute,
            window_resets_at: open.map(|(s, _)| from_ms(s + WINDOW_MS)),
        });
    }
    Ok(out)
}

/// The claim predicate for one job, read-only (see `JobStore::blocked_by`).
pub(super) async fn blocked_by(
    store: &SqliteStore,
    job: &Job,
    guards: &ClaimGuards,
) -> Result<Option<String>, StoreError> {
    let now = ms(Utc::now());
    let mut conn = store.pool.acquire().await?;
    Ok(match verdict(&mut conn, job, guards, now).await? {
        Verdict::Admit => None,
        Verdict::Skip(why) | Verdict::Stop(why) => Some(why),
    })
}
