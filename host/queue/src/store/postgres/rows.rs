//! Postgres row reading and the time arithmetic of its statements. The
//! mapping to jobs and schedules is shared with SQLite (`store::sql`); this
//! module only adapts the column reads.

use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::Row;

use crate::store::sql::SqlRow;
use crate::store::StoreError;
use crate::time::FAR_FUTURE_SQL;

/// SQL for `base` plus `ms_param` milliseconds, saturating at the far
/// future (see `crate::time`); bind the milliseconds with
/// `crate::time::millis`, so the sum itself never leaves Postgres' range.
pub(super) fn plus_ms(base: &str, ms_param: &str) -> String {
    format!("LEAST({base} + {ms_param} * interval '1 millisecond', {FAR_FUTURE_SQL})")
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
