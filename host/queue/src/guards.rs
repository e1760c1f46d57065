//! Claim guards (SPEC §5) as data the stores evaluate inside the claiming
//! transaction.
//!
//! Invariants: a guard's predicate only looks at *live* leases (running and
//! `lease_expires_at > now`) and, for `waits_for`, due pending rows; guard
//! rows are locked in sorted key order ([`ClaimGuards::keys`]) so claims
//! needing several guards cannot deadlock. An empty [`ClaimGuards`] is the
//! unguarded fast path. A [`PoolStatus`] is a read-only snapshot taken
//! without guard locks: it informs, it never admits.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// A shared resource pool as seen by one claiming type.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolGuard {
    /// Pool name (guard key `pool:<name>`).
    pub name: String,
    /// Slots shared by all members; `None` = unbounded.
    pub concurrency: Option<u32>,
    /// Starts per fixed one-minute window; `None` = unbounded.
    pub rate_per_minute: Option<u32>,
    /// Every member type with its slot cost.
    pub member_costs: Vec<(String, u32)>,
    /// Slots the claiming type holds while running.
    pub cost: u32,
    /// Budget one start of the claiming type spends.
    pub rate_cost: u32,
}

/// A pool's use right now (SPEC §5 visibility), as [`crate::JobStore::pool_status`]
/// reads it: occupancy derived from live leases, spend from the pool's
/// guard row in its fixed one-minute window.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolStatus {
    /// Pool name.
    pub name: String,
    /// Summed cost of member jobs holding live leases.
    pub occupied: u64,
    /// Declared slots; `None` = unbounded.
    pub concurrency: Option<u32>,
    /// Budget spent in the open window (0 when no window is open).
    pub spent: u64,
    /// Declared starts per window; `None` = unbounded.
    pub rate_per_minute: Option<u32>,
    /// When the open window resets; `None` when no window is open.
    pub window_resets_at: Option<DateTime<Utc>>,
}

impl PoolStatus {
    /// Budget left in the window, `None` for a pool without a rate.
    pub fn budget_left(&self) -> Option<u64> {
        self.rate_per_minute
            .map(|r| u64::from(r).saturating_sub(self.spent))
    }

    /// The status as JSON, with `budget_left` added.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "name": self.name,
            "occupied": self.occupied,
            "concurrency": self.concurrency,
            "spent": self.spent,
            "rate_per_minute": self.rate_per_minute,
            "budget_left": self.budget_left(),
            "window_resets_at": self.window_resets_at,
        })
    }
}

/// The guards one job type's claims carry.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimGuards {
    /// Not claimed while a job of the same scope holds a live lease.
    pub serialize_by_scope: bool,
    /// Not claimed while one of these types holds a live lease.
    pub not_while_running: Vec<String>,
    /// Not claimed while one of these types has a due or live job.
    pub waits_for: Vec<String>,
    /// Pools the type belongs to.
    pub pools: Vec<PoolGuard>,
}

impl ClaimGuards {
    /// No guard at all: the batch fast path applies.
    pub fn is_empty(&self) -> bool {
        !self.serialize_by_scope
            && self.not_while_running.is_empty()
            && self.waits_for.is_empty()
            && self.pools.is_empty()
    }

    /// Guard row keys this claim locks, sorted and deduplicated. Scope
    /// guards are per scope type and added by the store per candidate.
    pub fn keys(&self, job_type: &str) -> Vec<String> {
        let mut keys: Vec<String> = Vec::new();
        for other in &self.not_while_running {
            let (a, b) = if job_type <= other.as_str() {
                (job_type, other.as_str())
            } else {
                (other.as_str(), job_type)
            };
            keys.push(format!("nwr:{a}|{b}"));
        }
        for other in &self.waits_for {
            keys.push(format!("wait:{job_type}>{other}"));
        }
        for pool in &self.pools {
            keys.push(format!("pool:{}", pool.name));
        }
        keys.sort();
        keys.dedup();
        keys
    }
}

/// Guard key for scope serialization of one scope type.
pub fn scope_key(scope_type: &str) -> String {
    format!("scope:{scope_type}")
}

/// The `blocked_by` text of a claim stopped because pool `name` is full.
/// [`full_pool`] reads it back; the two must stay in step.
pub fn pool_full_reason(name: &str) -> String {
    format!("pool `{name}` (concurrency full)")
}

/// The pool named by a [`pool_full_reason`] text, if `blocked_by` is one.
pub fn full_pool(blocked_by: &str) -> Option<&str> {
    blocked_by
        .strip_prefix("pool `")?
        .strip_suffix("` (concurrency full)")
}

#[cfg(test)]
mod tests {
    use super::{full_pool, pool_full_reason};

    #[test]
    fn a_full_pool_reason_reads_back_its_pool() {
        assert_eq!(full_pool(&pool_full_reason("api")), Some("api"));
        assert_eq!(full_pool("pool `api` (rate budget spent)"), None);
        assert_eq!(full_pool("scope type `account`"), None);
    }
}
