//! Attempt rows and log lines on Postgres: the shared statements
//! (`store::sql::history`) and the reads. Recording runs on the caller's
//! connection, inside the transition's transaction, at the transaction's
//! `now()`.

use sqlx::PgConnection;

use super::PostgresStore;
use crate::attempt::{Attempt, LogLine, LogQuery, StoredLogLine};
use crate::store::sql::{
    attempt_from_row, endings_json, log_from_row, logs_json, Dialect, SqlEnding,
};
use crate::store::StoreError;

/// Records `endings` of jobs still running (under `worker`'s lease when
/// given), at the transaction's now.
pub(super) async fn record(
    conn: &mut PgConnection,
    sql: &Dialect,
    endings: &[SqlEnding<'_>],
    worker: Option<&str>,
) -> Result<(), StoreError> {
    if endings.is_empty() {
        return Ok(());
    }
    sqlx::query(&sql.record_attempts())
        .bind(endings_json(endings))
        .bind(worker)
        .execute(conn)
        .await?;
    Ok(())
}

/// Stores `lines` on `conn`.
pub(super) async fn store_logs(
    conn: &mut PgConnection,
    sql: &Dialect,
    lines: Vec<&LogLine>,
) -> Result<(), StoreError> {
    if lines.is_empty() {
        return Ok(());
    }
    sqlx::query(&sql.insert_logs())
        .bind(logs_json(lines.into_iter()))
        .execute(conn)
        .await?;
    Ok(())
}

pub(super) async fn attempts(
    store: &PostgresStore,
    job_id: &str,
) -> Result<Vec<Attempt>, StoreError> {
    let rows = sqlx::query(&store.sql.attempts_of())
        .bind(job_id)
        .fetch_all(&store.pool)
        .await?;
    rows.iter().map(attempt_from_row).collect()
}

pub(super) async fn append_logs(
    store: &PostgresStore,
    lines: Vec<LogLine>,
) -> Result<(), StoreError> {
    if lines.is_empty() {
        return Ok(());
    }
    let mut conn = store.fast.acquire().await?;
    store_logs(&mut conn, &store.sql, lines.iter().collect()).await
}

pub(super) async fn logs(
    store: &PostgresStore,
    q: &LogQuery,
) -> Result<Vec<StoredLogLine>, StoreError> {
    let rows = sqlx::query(&store.sql.logs_of())
        .bind(&q.job_id)
        .bind(q.attempt.and_then(|a| i32::try_from(a).ok()))
        .bind(q.after)
        .bind(i64::from(q.page()))
        .fetch_all(&store.pool)
        .await?;
    rows.iter().map(log_from_row).collect()
}
