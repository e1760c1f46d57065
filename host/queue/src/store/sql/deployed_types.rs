//! The deployed-types statements, written once for both SQL backends over a
//! [`Dialect`], the row mapping, and the subquery every insert uses to take
//! a type's default attempt budget (see `store::deployed_types` for the
//! rule). Each comment lists the parameters in order; on SQLite the
//! statement's now is bound after them (see [`Dialect::now`]).

use super::{Dialect, SqlRow};
use crate::store::deployed_types::{DeployedType, DeployedTypeRecord};
use crate::store::StoreError;

/// The `max_attempts` of the newest deploy of the job type `job_type` (an
/// SQL expression) in `table`; NULL when there is none or it sets none.
pub(in crate::store) fn type_max_attempts(table: &str, job_type: &str) -> String {
    format!(
        "(SELECT d.max_attempts FROM {table} d WHERE d.job_type = {job_type} \
           ORDER BY d.deployed_at DESC, d.host DESC LIMIT 1)"
    )
}

impl Dialect {
    /// Inserts or refreshes one row: `$1` job type, `$2` host, `$3`
    /// version, `$4` max attempts. `deployed_at` moves only when the
    /// version or the defaults changed.
    pub(in crate::store) fn deployed_type_upsert(&self) -> String {
        let now = self.now(5);
        format!(
            "INSERT INTO {t} AS d (job_type, host, version, max_attempts, deployed_at, seen_at) \
             VALUES ($1, $2, $3, $4, {now}, {now}) \
             ON CONFLICT (job_type, host) DO UPDATE SET \
               deployed_at = CASE WHEN d.version = excluded.version \
                   AND COALESCE(d.max_attempts, 0) = COALESCE(excluded.max_attempts, 0) \
                 THEN d.deployed_at ELSE excluded.deployed_at END, \
               version = excluded.version, \
               max_attempts = excluded.max_attempts, \
               seen_at = excluded.seen_at",
            t = self.deployed_types
        )
    }

    /// Deletes the rows of host `$1` whose type is not in the list `$2`.
    pub(in crate::store) fn deployed_types_drop_others(&self) -> String {
        format!(
            "DELETE FROM {} WHERE host = $1 AND NOT ({})",
            self.deployed_types,
            self.in_list("job_type", 2)
        )
    }

    /// Deletes the rows not seen for `$1` milliseconds.
    pub(in crate::store) fn deployed_types_forget(&self) -> String {
        format!(
            "DELETE FROM {} WHERE {} < {}",
            self.deployed_types,
            self.plus_ms("seen_at", "$1"),
            self.now(2)
        )
    }

    /// Every row, by job type then host.
    pub(in crate::store) fn deployed_types_all(&self) -> String {
        format!(
            "SELECT job_type, host, version, CAST(max_attempts AS BIGINT) AS max_attempts, \
               deployed_at, seen_at FROM {} ORDER BY job_type, host",
            self.deployed_types
        )
    }
}

/// A row of [`Dialect::deployed_types_all`].
pub(in crate::store) fn deployed_type_from_row(
    r: &impl SqlRow,
) -> Result<DeployedTypeRecord, StoreError> {
    let max_attempts = match r.opt_int8("max_attempts")? {
        None => None,
        Some(n) => Some(u32::try_from(n).map_err(|_| {
            StoreError::Corrupt(format!("deployed type max_attempts {n} is out of range"))
        })?),
    };
    Ok(DeployedTypeRecord {
        host: r.text("host")?,
        deployed: DeployedType {
            job_type: r.text("job_type")?,
            version: r.text("version")?,
            max_attempts,
        },
        deployed_at: r.time("deployed_at")?,
        seen_at: r.time("seen_at")?,
    })
}
