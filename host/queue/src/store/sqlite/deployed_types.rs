//! Deployed types on SQLite (see [`crate::store::deployed_types`] for the
//! invariants). The statements are the shared ones
//! (`store::sql::deployed_types`); a record runs in one `BEGIN IMMEDIATE`
//! transaction behind this process's writer mutex, now bound last.

use chrono::Utc;

use super::rows::{json_list, ms};
use super::SqliteStore;
use crate::store::deployed_types::{DeployedTypeRecord, RecordDeployedTypes};
use crate::store::sql::deployed_type_from_row;
use crate::store::StoreError;
use crate::time;

pub(super) async fn record(store: &SqliteStore, p: RecordDeployedTypes) -> Result<(), StoreError> {
    let _w = store.write.lock().await;
    let mut tx = store.own.begin_with("BEGIN IMMEDIATE").await?;
    let now = ms(Utc::now());
    let upsert = store.sql.deployed_type_upsert();
    for t in &p.types {
        sqlx::query(&upsert)
            .bind(&t.job_type)
            .bind(&p.host)
            .bind(&t.version)
            .bind(t.max_attempts.map(i64::from))
            .bind(now)
            .execute(&mut *tx)
            .await?;
    }
    let kept: Vec<&str> = p.types.iter().map(|t| t.job_type.as_str()).collect();
    sqlx::query(&store.sql.deployed_types_drop_others())
        .bind(&p.host)
        .bind(json_list(&kept))
        .execute(&mut *tx)
        .await?;
    sqlx::query(&store.sql.deployed_types_forget())
        .bind(time::millis(p.forget_after))
        .bind(now)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}

pub(super) async fn list(store: &SqliteStore) -> Result<Vec<DeployedTypeRecord>, StoreError> {
    let rows = sqlx::query(&store.sql.deployed_types_all())
        .fetch_all(&store.own)
        .await?;
    rows.iter().map(deployed_type_from_row).collect()
}
