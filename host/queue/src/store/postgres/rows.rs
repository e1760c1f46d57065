//! Postgres row reading. The mapping to jobs and schedules is shared with
//! SQLite (`store::sql`); this module only adapts the column reads.

use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::Row;

use crate::store::sql::SqlRow;
use crate::store::{ClaimRef, StoreError};

/// Claims as the two arrays `Dialect::in_claims` binds: ids (`text[]`),
/// then attempts (`int4[]`).
pub(super) fn claim_arrays(claims: &[ClaimRef]) -> (Vec<String>, Vec<i32>) {
    claims
        .iter()
        .map(|c| (c.id.clone(), attempt(c.attempt)))
        .unzip()
}

/// An attempt as the `int4` column holds it, saturating at `i32::MAX`.
pub(super) fn attempt(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

impl SqlRow for PgRow {
    fn text(&self, col: &str) -> Result<String, StoreError> {
        Ok(self.try_get(col)?)
    }

    fn opt_text(&self, col: &str) -> Result<Option<String>, StoreError> {
        Ok(self.try_get(col)?)
    }

    fn int4(&self, col: &str) -> Result<i32, StoreError> {
        Ok(self.try_get(col)?)
    }

    fn opt_int8(&self, col: &str) -> Result<Option<i64>, StoreError> {
        Ok(self.try_get(col)?)
    }

    fn opt_time(&self, col: &str) -> Result<Option<DateTime<Utc>>, StoreError> {
        Ok(self.try_get(col)?)
    }

    fn flag(&self, col: &str) -> Result<bool, StoreError> {
        Ok(self.try_get(col)?)
    }
}
