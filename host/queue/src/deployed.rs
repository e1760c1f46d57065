//! Known job types from store state. Each host records the types its
//! [`Registry`] serves, with their manifests' job defaults, in the store's
//! deployed-types table (see [`crate::store::deployed_types`]): on every
//! deploy and undeploy, and every [`HEARTBEAT_INTERVAL`] as its heartbeat.
//! A type is known (enqueue accepts it) while some host recorded it within
//! [`LIVE_WITHIN`], or when configuration declares it handled elsewhere —
//! however long ago it was deployed and whatever else happened since.
//!
//! Rules:
//! - An undeploy deletes the host's row of the type at once. A host that
//!   stops or dies leaves its rows: they stop counting as live after
//!   [`LIVE_WITHIN`] (so a restart or a short database outage does not make
//!   producers refuse the type meanwhile) and are deleted after
//!   [`FORGET_AFTER`] (until then their defaults still apply to new jobs).
//! - Liveness is judged on the store's clock, the clock that wrote
//!   `seen_at` (the database's on Postgres).
//! - A host's records are serialized (see [`Registry`]), so a heartbeat
//!   never undoes a concurrent deploy's record.

use std::time::Duration;

use crate::queue::Queue;
use crate::registry::Registry;
use crate::store::deployed_types::RecordDeployedTypes;
use crate::store::StoreError;

/// How often a host refreshes its record (and its view of other hosts').
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(5);

/// A type counts as served while some host recorded it this recently.
pub const LIVE_WITHIN: Duration = Duration::from_secs(120);

/// Rows of a host not seen for this long are deleted.
pub const FORGET_AFTER: Duration = Duration::from_secs(7 * 24 * 60 * 60);

impl Queue {
    /// Records what `registry` serves as the deployed types of its host
    /// ([`Registry::host_id`]): a deploy, an undeploy or a heartbeat.
    ///
    /// # Errors
    /// The store failed; the previous record stands.
    pub async fn record_deployed_types(&self, registry: &Registry) -> Result<(), StoreError> {
        let _one_at_a_time = registry.recording().lock().await;
        self.store()
            .record_deployed_types(RecordDeployedTypes {
                host: registry.host_id(),
                types: registry.deployed_types(),
                forget_after: FORGET_AFTER,
            })
            .await
    }

    /// The types some host recorded within [`LIVE_WITHIN`], sorted.
    ///
    /// # Errors
    /// The store failed.
    pub async fn live_deployed_types(&self) -> Result<Vec<String>, StoreError> {
        let since = crate::time::before(self.store().now().await?, LIVE_WITHIN);
        let mut types: Vec<String> = self
            .store()
            .deployed_types()
            .await?
            .into_iter()
            .filter(|r| r.seen_at >= since)
            .map(|r| r.deployed.job_type)
            .collect();
        types.sort();
        types.dedup();
        Ok(types)
    }

    /// Makes `registry` know exactly the types some live host serves (for
    /// its enqueue checks), besides its own and configured ones.
    ///
    /// # Errors
    /// The store failed; the registry is unchanged.
    pub async fn refresh_known_types(&self, registry: &Registry) -> Result<(), StoreError> {
        registry.set_deployed_elsewhere(self.live_deployed_types().await?);
        Ok(())
    }
}
