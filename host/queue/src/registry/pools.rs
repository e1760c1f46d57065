//! Pool declarations: a resource pool several job types share (slots
//! held while running, starts per one-minute window), and the checks a set
//! of declarations must pass before it replaces the one in force.
//!
//! Invariants: every pool bounds at least one dimension, every limit and
//! cost is positive, no member costs more slots than the pool holds (its
//! jobs could never start), and a type belongs to one pool at most.

use std::collections::{BTreeMap, HashMap};

use super::RegistryError;
use crate::guards::PoolGuard;

/// A resource pool shared by several types, from configuration
/// ([`PoolConfig::new`], then set the limits and costs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolConfig {
    /// Pool name.
    pub name: String,
    /// Slots held while running.
    pub concurrency: Option<u32>,
    /// Starts per fixed one-minute window.
    pub rate_per_minute: Option<u32>,
    /// Member types (including types handled elsewhere).
    pub types: Vec<String>,
    /// Slot cost per type (default 1).
    pub costs: BTreeMap<String, u32>,
    /// Rate cost per type (default 1).
    pub rate_costs: BTreeMap<String, u32>,
}

impl PoolConfig {
    /// Pool `name` over the member `types`, unbounded until its
    /// `concurrency` or `rate_per_minute` is set; every cost 1.
    pub fn new(
        name: impl Into<String>,
        types: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        Self {
            name: name.into(),
            types: types.into_iter().map(Into::into).collect(),
            ..Self::default()
        }
    }

    /// Every member type with its slot cost (default 1).
    pub fn member_costs(&self) -> Vec<(String, u32)> {
        self.types
            .iter()
            .map(|t| (t.clone(), self.costs.get(t).copied().unwrap_or(1)))
            .collect()
    }

    /// The pool as a guard not tied to a claiming type (for status reads).
    pub(crate) fn status_guard(&self) -> PoolGuard {
        PoolGuard {
            name: self.name.clone(),
            concurrency: self.concurrency,
            rate_per_minute: self.rate_per_minute,
            member_costs: self.member_costs(),
            cost: 0,
            rate_cost: 0,
        }
    }

    /// The pool as a guard on claims of `job_type` (a member), with that
    /// type's slot and rate costs (default 1 each).
    pub(super) fn guard_for(&self, job_type: &str) -> PoolGuard {
        PoolGuard {
            cost: self.costs.get(job_type).copied().unwrap_or(1),
            rate_cost: self.rate_costs.get(job_type).copied().unwrap_or(1),
            ..self.status_guard()
        }
    }
}

/// Checks a set of pool declarations (see the module invariants).
///
/// # Errors
/// The first pool that breaks a rule, and which rule.
pub(super) fn check_pools(pools: &[PoolConfig]) -> Result<(), RegistryError> {
    let mut seen: HashMap<&str, &str> = HashMap::new();
    for p in pools {
        let bad = |reason: String| RegistryError::BadPool {
            pool: p.name.clone(),
            reason,
        };
        if p.concurrency.is_none() && p.rate_per_minute.is_none() {
            return Err(bad("declare concurrency, rate_per_minute or both".into()));
        }
        if p.concurrency == Some(0) || p.rate_per_minute == Some(0) {
            return Err(bad(
                "concurrency and rate_per_minute must be positive".into()
            ));
        }
        if p.types.is_empty() {
            return Err(bad("list at least one member type".into()));
        }
        if p.costs
            .values()
            .chain(p.rate_costs.values())
            .any(|c| *c == 0)
        {
            return Err(bad("costs must be positive".into()));
        }
        if let Some(limit) = p.concurrency {
            if let Some((t, c)) = p.costs.iter().find(|(_, c)| **c > limit) {
                return Err(bad(format!(
                    "type `{t}` costs {c} slots but the pool holds {limit}: its jobs could never start"
                )));
            }
        }
        for t in &p.types {
            if let Some(other) = seen.insert(t, &p.name) {
                return Err(bad(format!("type `{t}` is also in pool `{other}`")));
            }
        }
    }
    Ok(())
}
