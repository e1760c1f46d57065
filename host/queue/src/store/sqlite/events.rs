//! Handler deploy events on SQLite (an append-only table, newest first).

use chrono::Utc;

use super::rows::ms;
use super::SqliteStore;
use crate::job::HandlerEvent;
use crate::store::sql::{event_from_row, EVENT_COLS};
use crate::store::StoreError;

pub(super) async fn record(store: &SqliteStore, e: HandlerEvent) -> Result<(), StoreError> {
    let _w = store.write.lock().await;
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
    .execute(&store.pool)
    .await?;
    Ok(())
}

pub(super) async fn recent(
    store: &SqliteStore,
    limit: u32,
) -> Result<Vec<HandlerEvent>, StoreError> {
    let rows = sqlx::query(&format!(
        "SELECT {EVENT_COLS} FROM boxcar_handler_events ORDER BY id DESC LIMIT ?"
    ))
    .bind(i64::from(limit))
    .fetch_all(&store.pool)
    .await?;
    rows.iter().map(event_from_row).collect()
}
