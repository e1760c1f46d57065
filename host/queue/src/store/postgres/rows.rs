//! Postgres row reading. The mapping to jobs and schedules is shared with
//! SQLite (`store::sql`); this module only adapts the column reads.

use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::Row;

use crate::store::sql::SqlRow;
use crate::store::StoreError;

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
