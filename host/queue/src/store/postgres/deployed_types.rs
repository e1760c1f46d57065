//! Deployed types on Postgres (see [`crate::store::deployed_types`] for the
//! invariants). The statements are the shared ones
//! (`store::sql::deployed_types`); a record is one transaction on the
//! durable pool, on the database clock.

use super::PostgresStore;
use crate::store::deployed_types::{DeployedTypeRecord, RecordDeployedTypes};
use crate::store::sql::deployed_type_from_row;
use crate::store::StoreError;
use crate::time;

pub(super) async fn record(
    store: &PostgresStore,
    p: RecordDeployedTypes,
) -> Result<(), StoreError> {
    let mut tx = store.pool.begin().await?;
    let upsert = store.sql.deployed_type_upsert();
    for t in &p.types {
        sqlx::query(&upsert)
            .bind(&t.job_type)
            .bind(&p.host)
            .bind(&t.version)
            .bind(t.max_attempts.map(|n| i32::try_from(n).unwrap_or(i32::MAX)))
            .execute(&mut *tx)
            .await?;
    }
    let kept: Vec<&str> = p.types.iter().map(|t| t.job_type.as_str()).collect();
    sqlx::query(&store.sql.deployed_types_drop_others())
        .bind(&p.host)
        .bind(&kept)
        .execute(&mut *tx)
        .await?;
    sqlx::query(&store.sql.deployed_types_forget())
        .bind(time::millis(p.forget_after))
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}

pub(super) async fn list(store: &PostgresStore) -> Result<Vec<DeployedTypeRecord>, StoreError> {
    let rows = sqlx::query(&store.sql.deployed_types_all())
        .fetch_all(&store.pool)
        .await?;
    rows.iter().map(deployed_type_from_row).collect()
}
