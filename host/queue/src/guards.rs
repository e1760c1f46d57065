//! Claim guards (SPEC §5) as data the stores evaluate inside the claiming
//! transaction.
//!
//! Invariants: a guard's predicate only looks at *live* leases (running and
//! `lease_expires_at > now`) and, for `waits_for`, due pending rows; guard
//! rows are locked in sorted key order ([`ClaimGuards::keys`]) so claims
//! needing several guards cannot deadlock. An empty [`ClaimGuards`] is the
//! unguarded fast path.

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
