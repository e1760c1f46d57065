//! SQLite row reading: times are integer milliseconds (UTC), booleans are
//! integers, and id lists are bound as one JSON array (expanded with
//! `json_each`). The mapping to jobs and schedules is shared with Postgres
//! (`store::sql`); this module only adapts the column reads.

use chrono::{DateTime, TimeZone, Utc};
use sqlx::sqlite::SqliteRow;
use sqlx::Row;

use crate::store::sql::SqlRow;
use crate::store::{ClaimRef, StoreError};

/// An instant as stored: milliseconds since the Unix epoch.
pub(super) fn ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

/// A stored instant (the epoch for a value out of chrono's range).
pub(super) fn from_ms(v: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(v).single().unwrap_or_default()
}

/// Claims as the two JSON arrays `Dialect::in_claims` binds: ids, then
/// attempts.
pub(super) fn claim_lists(claims: &[ClaimRef]) -> (String, String) {
    let ids: Vec<&str> = claims.iter().map(|c| c.id.as_str()).collect();
    let attempts: Vec<u32> = claims.iter().map(|c| c.attempt).collect();
    (json_list(&ids), serde_json::json!(attempts).to_string())
}

/// `items` as a JSON array of strings, for `json_each(?)`.
pub(super) fn json_list<T: AsRef<str>>(items: &[T]) -> String {
    serde_json::Value::Array(
        items
            .iter()
            .map(|s| serde_json::Value::String(s.as_ref().to_string()))
            .collect(),
    )
    .to_string()
}

impl SqlRow for SqliteRow {
    fn text(&self, col: &str) -> Result<String, StoreError> {
        Ok(self.try_get(col)?)
    }

    fn opt_text(&self, col: &str) -> Result<Option<String>, StoreError> {
        Ok(self.try_get(col)?)
    }

    fn int4(&self, col: &str) -> Result<i32, StoreError> {
        let v: i64 = self.try_get(col)?;
        i32::try_from(v).map_err(|_| StoreError::Corrupt(format!("column `{col}` holds {v}")))
    }

    fn opt_int8(&self, col: &str) -> Result<Option<i64>, StoreError> {
        Ok(self.try_get(col)?)
    }

    fn opt_time(&self, col: &str) -> Result<Option<DateTime<Utc>>, StoreError> {
        Ok(self.try_get::<Option<i64>, _>(col)?.map(from_ms))
    }

    fn flag(&self, col: &str) -> Result<bool, StoreError> {
        Ok(self.try_get::<i64, _>(col)? != 0)
    }
}
