//! Attempt rows and log lines on SQLite: the shared statements
//! (`store::sql::history`) bound with SQLite's times, and the reads.
//! Recording runs on the caller's connection, inside the transition's
//! `BEGIN IMMEDIATE` transaction.

use sqlx::SqliteConnection;

use super::SqliteStore;
use crate::attempt::{Attempt, LogLine, LogQuery, StoredLogLine};
use crate::store::sql::{
    attempt_from_row, endings_json, log_from_row, logs_json, Dialect, SqlEnding,
};
use crate::store::StoreError;

/// Records `endings` of jobs still running (under `worker`'s lease when
/// given), at `now`.
pub(super) async fn record(
    conn: &mut SqliteConnection,
    sql: &Dialect,
    endings: &[SqlEnding<'_>],
    worker: Option<&str>,
    now: i64,
) -> Result<(), StoreError> {
    if endings.is_empty() {
        return Ok(());
    }
    sqlx::query(&sql.record_attempts())
        .bind(endings_json(endings))
        .bind(worker)
        .bind(now)
        .execute(conn)
        .await?;
    Ok(())
}

/// Stores `lines` on `conn`.
pub(super) async fn store_logs(
    conn: &mut SqliteConnection,
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
    store: &SqliteStore,
    job_id: &str,
) -> Result<Vec<Attempt>, StoreError> {
    let rows = sqlx::query(&store.sql.attempts_of())
        .bind(job_id)
        .fetch_all(&store.own)
        .await?;
    rows.iter().map(attempt_from_row).collect()
}

pub(super) async fn append_logs(
    store: &SqliteStore,
    lines: Vec<LogLine>,
) -> Result<(), StoreError> {
    if lines.is_empty() {
        return Ok(());
    }
    let _w = store.write.lock().await;
    let mut conn = store.own.acquire().await?;
    store_logs(&mut conn, &store.sql, lines.iter().collect()).await
}

pub(super) async fn logs(
    store: &SqliteStore,
    q: &LogQuery,
) -> Result<Vec<StoredLogLine>, StoreError> {
    let rows = sqlx::query(&store.sql.logs_of())
        .bind(&q.job_id)
        .bind(q.attempt.map(i64::from))
        .bind(q.after)
        .bind(i64::from(q.page()))
        .fetch_all(&store.own)
        .await?;
    rows.iter().map(log_from_row).collect()
}
