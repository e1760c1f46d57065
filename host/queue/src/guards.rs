//! Claim guards as data: what a type's claims must honour
//! ([`ClaimGuards`]), what stopped a claim ([`Blocker`]) and a pool's use
//! ([`PoolStatus`]). The decision itself is written once, in
//! `store::policy::guards`, and every store runs it inside its claiming
//! transaction.
//!
//! Invariants: a guard's predicate only looks at *live* leases (running and
//! `lease_expires_at > now`) and, for `waits_for`, due pending rows; guard
//! rows are locked in sorted key order ([`ClaimGuards::lock_keys`]) so claims
//! needing several guards cannot deadlock. An empty [`ClaimGuards`] is the
//! unguarded fast path. A [`PoolStatus`] is a read-only snapshot taken
//! without guard locks: it informs, it never admits.

use std::fmt;

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

/// A pool's use right now, as [`crate::JobStore::pool_status`]
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
#[non_exhaustive]
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

    /// Guard row keys a claim of `job_type` locks, sorted and deduplicated:
    /// one per `not_while_running` pair, `waits_for` edge and pool, plus —
    /// under `serialize_by_scope` — one per scope type among the claim's
    /// candidates (`scope_types`).
    pub fn lock_keys<'a>(
        &self,
        job_type: &str,
        scope_types: impl IntoIterator<Item = &'a str>,
    ) -> Vec<String> {
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
            keys.push(pool_key(&pool.name));
        }
        if self.serialize_by_scope {
            keys.extend(scope_types.into_iter().map(|t| format!("scope:{t}")));
        }
        keys.sort();
        keys.dedup();
        keys
    }
}

/// The guard row key of pool `name`; its row also stores the pool's rate
/// window.
pub(crate) fn pool_key(name: &str) -> String {
    format!("pool:{name}")
}

/// Why a claim admitted fewer jobs than it could: the guard that held a due
/// job back. `Display` words it for people (logs, `boxcar job`, the API's
/// `blocked_by`); code matches on the variants.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "guard", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Blocker {
    /// `serialize_by_scope`: a job of the candidate's scope holds a live
    /// lease. Blocks that scope only; other scopes may still be claimed.
    ScopeBusy {
        /// The scope's type (the id is not named).
        scope_type: String,
    },
    /// `not_while_running`: these types hold live leases.
    Running {
        /// The running types.
        types: Vec<String>,
    },
    /// `waits_for`: these types have due or running jobs.
    WaitsFor {
        /// The types with outstanding work.
        types: Vec<String>,
    },
    /// The pool's slots are taken: members holding live leases plus this
    /// type's cost would exceed its concurrency.
    PoolFull {
        /// The pool.
        pool: String,
    },
    /// The pool's rate budget for the current one-minute window is spent.
    RateSpent {
        /// The pool.
        pool: String,
    },
}

fn type_list(f: &mut fmt::Formatter<'_>, types: &[String]) -> fmt::Result {
    let noun = if types.len() == 1 { "type" } else { "types" };
    write!(f, "job {noun} ")?;
    for (i, t) in types.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write!(f, "`{t}`")?;
    }
    Ok(())
}

impl fmt::Display for Blocker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ScopeBusy { scope_type } => {
                write!(
                    f,
                    "scope type `{scope_type}` (a job of the same scope is running)"
                )
            }
            Self::Running { types } => {
                type_list(f, types)?;
                f.write_str(" running (not_while_running)")
            }
            Self::WaitsFor { types } => {
                type_list(f, types)?;
                f.write_str(" with due or running jobs (waits_for)")
            }
            Self::PoolFull { pool } => write!(f, "pool `{pool}` (concurrency full)"),
            Self::RateSpent { pool } => write!(f, "pool `{pool}` (rate budget spent)"),
        }
    }
}

/// A pool's fixed one-minute rate window, as its guard row stores it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RateWindow {
    /// When the last window opened (`None`: never).
    pub start: Option<DateTime<Utc>>,
    /// Budget spent in that window.
    pub spent: u64,
}

impl RateWindow {
    /// How long a window stays open.
    pub const LENGTH: chrono::Duration = chrono::Duration::minutes(1);

    /// The window's start, if it is still open at `now`.
    fn open_at(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.start.filter(|s| now - *s < Self::LENGTH)
    }

    /// Budget spent in the window open at `now` (0 when none is open).
    pub fn spent_at(&self, now: DateTime<Utc>) -> u64 {
        self.open_at(now).map_or(0, |_| self.spent)
    }

    /// When the window open at `now` resets, if one is open.
    pub fn resets_at(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.open_at(now).map(|s| s + Self::LENGTH)
    }

    /// The window after one start spending `cost` at `now`: the open window
    /// with `cost` added, or a new window opened at `now`.
    pub fn after_spend(&self, now: DateTime<Utc>, cost: u32) -> Self {
        match self.open_at(now) {
            Some(start) => Self {
                start: Some(start),
                spent: self.spent.saturating_add(u64::from(cost)),
            },
            None => Self {
                start: Some(now),
                spent: u64::from(cost),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_keys_are_sorted_and_deduplicated() {
        let guards = ClaimGuards {
            serialize_by_scope: true,
            not_while_running: vec!["a".into(), "z".into()],
            waits_for: vec!["b".into()],
            pools: vec![PoolGuard {
                name: "api".into(),
                ..PoolGuard::default()
            }],
        };
        assert_eq!(
            guards.lock_keys("m", ["acct", "doc", "acct"]),
            vec![
                "nwr:a|m",
                "nwr:m|z",
                "pool:api",
                "scope:acct",
                "scope:doc",
                "wait:m>b"
            ]
        );
        let unscoped = ClaimGuards::default().lock_keys("m", ["acct"]);
        assert!(
            unscoped.is_empty(),
            "scope keys only under serialize_by_scope"
        );
    }

    #[test]
    fn blockers_name_what_holds_the_job() {
        let scope = Blocker::ScopeBusy {
            scope_type: "account".into(),
        };
        assert!(scope.to_string().contains("scope type `account`"));
        let running = Blocker::Running {
            types: vec!["a".into(), "b".into()],
        };
        assert_eq!(
            running.to_string(),
            "job types `a`, `b` running (not_while_running)"
        );
        let full = Blocker::PoolFull { pool: "api".into() };
        assert_eq!(full.to_string(), "pool `api` (concurrency full)");
    }

    #[test]
    fn a_rate_window_resets_after_a_minute() {
        let t0 = Utc::now();
        let fresh = RateWindow::default().after_spend(t0, 2);
        assert_eq!(
            fresh,
            RateWindow {
                start: Some(t0),
                spent: 2
            }
        );
        let later = t0 + chrono::Duration::seconds(59);
        assert_eq!(fresh.spent_at(later), 2);
        assert_eq!(fresh.after_spend(later, 3).spent, 5);
        assert_eq!(fresh.resets_at(later), Some(t0 + RateWindow::LENGTH));
        let next = t0 + RateWindow::LENGTH;
        assert_eq!(fresh.spent_at(next), 0);
        assert_eq!(fresh.resets_at(next), None);
        assert_eq!(
            fresh.after_spend(next, 1),
            RateWindow {
                start: Some(next),
                spent: 1
            }
        );
    }
}
