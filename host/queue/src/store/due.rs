//! The port's types for claims that do not grow with the number of
//! registered types: which types have pending work ([`DueTypes`]), and one
//! claim for many unguarded types at once ([`ClaimManyParams`]).
//!
//! Invariants: a multi-type claim never admits more jobs of a type than
//! that type's `limit` (its free slots on the claiming host) and is only
//! asked for types without guards (guarded types claim through
//! `JobStore::claim_batch`, which runs the guard policy).

use std::time::Duration;

use super::ClaimParams;
use crate::guards::ClaimGuards;

/// One unguarded type's share of a multi-type claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TypeClaim {
    /// Job type to claim.
    pub job_type: String,
    /// Most jobs of this type to claim.
    pub limit: u32,
    /// Lease length from the store's now.
    pub lease: Duration,
    /// Recorded as the job's `handler_version`.
    pub handler_version: Option<String>,
}

/// Claim due jobs of several unguarded types in one statement.
#[derive(Clone, Debug)]
pub struct ClaimManyParams {
    /// Lease owner.
    pub worker_id: String,
    /// The types and how many of each to claim; a type appears once.
    pub types: Vec<TypeClaim>,
}

impl ClaimManyParams {
    /// The claim as a single-type one when it asks for exactly one type
    /// (the common case: a pickup, or one busy type), else itself. The SQL
    /// stores answer that with the single-type statement (`job_type = $1 …
    /// LIMIT $2`), simpler than the multi-type one (arrays unnested and a
    /// `LATERAL` per type on Postgres, a JSON array of per-type leases on
    /// SQLite): Postgres pickup p50 0.424 → 0.412 ms in `cargo bench`.
    pub(crate) fn into_single(self) -> Result<ClaimParams, Self> {
        let Self { worker_id, types } = self;
        match <[TypeClaim; 1]>::try_from(types) {
            Ok([only]) => Ok(ClaimParams {
                worker_id,
                job_type: only.job_type,
                limit: only.limit,
                lease: only.lease,
                handler_version: only.handler_version,
                guards: ClaimGuards::default(),
            }),
            Err(types) => Err(Self { worker_id, types }),
        }
    }
}

/// Which of the asked types have pending jobs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DueTypes {
    /// Types with at least one pending job due now (claimable unless a
    /// guard or a live child holds it back).
    pub due: Vec<String>,
    /// How long until the earliest pending job of the other asked types
    /// becomes due; `None` when none of them has a pending job.
    pub next_due_in: Option<Duration>,
}

impl DueTypes {
    /// Builds the answer from `(job_type, milliseconds until its earliest
    /// pending job is due)` pairs; zero or less means due now.
    pub(crate) fn from_waits(waits: impl IntoIterator<Item = (String, i64)>) -> Self {
        let mut out = Self::default();
        for (job_type, wait_ms) in waits {
            if wait_ms <= 0 {
                out.due.push(job_type);
            } else {
                let wait = Duration::from_millis(wait_ms.unsigned_abs());
                out.next_due_in = Some(out.next_due_in.map_or(wait, |w| w.min(wait)));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_split_into_due_types_and_the_nearest_future_one() {
        let d = DueTypes::from_waits([
            ("a".to_string(), 0),
            ("b".to_string(), 250),
            ("c".to_string(), -5),
            ("d".to_string(), 90),
        ]);
        assert_eq!(d.due, vec!["a".to_string(), "c".to_string()]);
        assert_eq!(d.next_due_in, Some(Duration::from_millis(90)));
        assert_eq!(DueTypes::from_waits([]), DueTypes::default());
    }
}
