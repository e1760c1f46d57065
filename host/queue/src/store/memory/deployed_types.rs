//! Deployed types in memory (see [`crate::store::deployed_types`] for the
//! invariants), under the state mutex like every other write, and the
//! lookup of a type's default attempt budget that inserts use.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{MemoryStore, State};
use crate::store::deployed_types::{DeployedTypeRecord, RecordDeployedTypes};
use crate::store::StoreError;

pub(super) async fn record(store: &MemoryStore, p: RecordDeployedTypes) -> Result<(), StoreError> {
    let now = store.clock.now();
    let mut st = store.state.lock().await;
    let rows = &mut st.deployed_types;
    rows.retain(|(job_type, host), _| {
        *host != p.host || p.types.iter().any(|t| t.job_type == *job_type)
    });
    for t in p.types {
        let key = (t.job_type.clone(), p.host.clone());
        let deployed_at = match rows.get(&key) {
            Some(old) if old.deployed == t => old.deployed_at,
            _ => now,
        };
        rows.insert(
            key,
            DeployedTypeRecord {
                host: p.host.clone(),
                deployed: t,
                deployed_at,
                seen_at: now,
            },
        );
    }
    rows.retain(|_, r| !forgotten(r.seen_at, p.forget_after, now));
    Ok(())
}

/// Not seen for `forget_after` at `now`.
fn forgotten(seen_at: DateTime<Utc>, forget_after: Duration, now: DateTime<Utc>) -> bool {
    crate::time::after(seen_at, forget_after) < now
}

pub(super) async fn list(store: &MemoryStore) -> Vec<DeployedTypeRecord> {
    let st = store.state.lock().await;
    st.deployed_types.values().cloned().collect()
}

/// The `max_attempts` of the newest deploy of `job_type` (latest
/// `deployed_at`, ties to the greater host), if it sets one.
pub(super) fn type_max_attempts(st: &State, job_type: &str) -> Option<u32> {
    st.deployed_types
        .values()
        .filter(|r| r.deployed.job_type == job_type)
        .max_by(|a, b| (a.deployed_at, &a.host).cmp(&(b.deployed_at, &b.host)))
        .and_then(|r| r.deployed.max_attempts)
}
