//! Handler deploy events on SQLite (an append-only table, newest first).

use chrono::Utc;

use super::rows::ms;
use super::SqliteStore;
use crate::job::HandlerEvent;
use crate::store::sql::event_from_row;
use crate::store::StoreError;

pub(super) async fn record(store: &SqliteStore, e: HandlerEvent) -> Result<(), StoreError> {
    let _w = store.write.lock().await;
    sqlx::query(&store.sql.record_event())
        .bind(&e.job_type)
        .bind(&e.file)
        .bind(&e.digest)
        .bind(e.kind.as_str())
        .bind(&e.reason)
        .bind(ms(Utc::now()))
        .execute(&store.own)
        .await?;
    Ok(())
}

pub(super) async fn recent(
    store: &SqliteStore,
    limit: u32,
) -> Result<Vec<HandlerEvent>, StoreError> {
    let rows = sqlx::query(&store.sql.recent_events())
        .bind(i64::from(limit))
        .fetch_all(&store.own)
        .await?;
    rows.iter().map(event_from_row).collect()
}
