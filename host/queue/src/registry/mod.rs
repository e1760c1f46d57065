//! The dynamic handler registry the engine reads at every claim.
//!
//! Invariants:
//! - A deploy replaces one `Arc<HandlerEntry>` atomically; jobs already
//!   claimed keep the entry they were claimed with, so in-flight work
//!   finishes on the old version.
//! - A `waits_for` cycle among registered handlers is refused at
//!   [`Registry::register`]; a one-sided `not_while_running` is warned about.
//! - Known types are the registered ones, the ones declared as handled
//!   elsewhere, and the ones some live host serves per the store's deployed
//!   types (see `crate::deployed`; replaced wholesale on each refresh).
//! - The registry is one host's served set: [`Registry::host_id`] is the id
//!   its rows in the deployed-types table carry.
//!
//! One registration's settings and own checks live in `settings`, pool
//! declarations in `pools`, the checks across types in `cross_type`.

mod cross_type;
mod pools;
mod settings;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use parking_lot::RwLock;

use crate::guards::ClaimGuards;
use crate::handler::Handler;
use crate::store::deployed_types::DeployedType;
use cross_type::{one_sided, waits_for_cycle};
use pools::check_pools;
pub use pools::PoolConfig;
use settings::entry;
pub use settings::{HandlerEntry, HandlerSettings, PayloadValidator, SchemaFailure};

/// A registration or pool declaration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// A setting is out of range.
    #[error("handler `{job_type}`: {setting} {reason}")]
    BadSetting {
        /// The job type.
        job_type: String,
        /// The setting name.
        setting: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// `waits_for` forms a cycle.
    #[error("waits_for cycle refused: {0} — two types that wait for each other could never start")]
    WaitsForCycle(String),
    /// A pool declaration is invalid.
    #[error("pool `{pool}`: {reason}")]
    BadPool {
        /// Pool name.
        pool: String,
        /// What is wrong.
        reason: String,
    },
}

#[derive(Default)]
struct Inner {
    handlers: BTreeMap<String, Arc<HandlerEntry>>,
    elsewhere: HashSet<String>,
    /// Types some live host serves, from the store.
    deployed_elsewhere: HashSet<String>,
    validators: HashMap<String, Arc<dyn PayloadValidator>>,
    pools: Vec<PoolConfig>,
}

/// Job types → handler versions, swapped atomically on deploy.
pub struct Registry {
    inner: RwLock<Inner>,
    /// The id this host's deployed types are recorded under.
    host_id: RwLock<String>,
    /// One record of the served set at a time, so a heartbeat that read
    /// the set before a deploy cannot overwrite the deploy's record.
    recording: tokio::sync::Mutex<()>,
}

impl Default for Registry {
    fn default() -> Self {
        Self {
            inner: RwLock::default(),
            host_id: RwLock::new(uuid::Uuid::new_v4().to_string()),
            recording: tokio::sync::Mutex::new(()),
        }
    }
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Deploys (or replaces) the handler of `job_type`.
    ///
    /// # Errors
    /// A setting is out of range or the registration would close a
    /// `waits_for` cycle; the previous version keeps serving.
    pub fn register(
        &self,
        job_type: impl Into<String>,
        handler: Arc<dyn Handler>,
        settings: HandlerSettings,
    ) -> Result<(), RegistryError> {
        self.swap(vec![(job_type.into(), handler, settings)], &[])
    }

    /// Deploys (or replaces) every type of `register` and undeploys every
    /// type of `remove`, in one change: dispatch sees the registry before or
    /// after, never in between, and when any registration is refused
    /// nothing changes. A handler serving several types is deployed,
    /// replaced and undeployed this way, all its types or none.
    ///
    /// # Errors
    /// As [`Registry::register`], for the first refused type; the previous
    /// versions keep serving.
    pub fn swap(
        &self,
        register: Vec<(String, Arc<dyn Handler>, HandlerSettings)>,
        remove: &[String],
    ) -> Result<(), RegistryError> {
        let entries = register
            .into_iter()
            .map(|(job_type, handler, settings)| entry(job_type, handler, settings))
            .collect::<Result<Vec<_>, _>>()?;
        let mut inner = self.inner.write();
        let mut next = inner.handlers.clone();
        for job_type in remove {
            next.remove(job_type);
        }
        for entry in entries {
            next.insert(entry.job_type.clone(), entry);
        }
        if let Some(cycle) = waits_for_cycle(&next) {
            return Err(RegistryError::WaitsForCycle(cycle));
        }
        for w in one_sided(&next) {
            tracing::warn!("{w}");
        }
        inner.handlers = next;
        Ok(())
    }

    /// Undeploys a type: no new claims of it on this host.
    pub fn remove(&self, job_type: &str) -> bool {
        self.inner.write().handlers.remove(job_type).is_some()
    }

    /// Registered types, sorted.
    pub fn types(&self) -> Vec<String> {
        self.inner.read().handlers.keys().cloned().collect()
    }

    /// The current version serving `job_type`.
    pub fn get(&self, job_type: &str) -> Option<Arc<HandlerEntry>> {
        self.inner.read().handlers.get(job_type).cloned()
    }

    /// Declares types handled by other processes (known at enqueue).
    pub fn declare_elsewhere<I: IntoIterator<Item = String>>(&self, types: I) {
        self.inner.write().elsewhere.extend(types);
    }

    /// Sets a payload validator for a type handled elsewhere.
    pub fn set_validator(&self, job_type: impl Into<String>, v: Arc<dyn PayloadValidator>) {
        self.inner.write().validators.insert(job_type.into(), v);
    }

    /// Replaces the types known to be served by some live host (from the
    /// store's deployed types; see `Queue::refresh_known_types`).
    pub fn set_deployed_elsewhere<I: IntoIterator<Item = String>>(&self, types: I) {
        self.inner.write().deployed_elsewhere = types.into_iter().collect();
    }

    /// Whether enqueueing `job_type` is allowed.
    pub fn is_known(&self, job_type: &str) -> bool {
        let inner = self.inner.read();
        inner.handlers.contains_key(job_type)
            || inner.elsewhere.contains(job_type)
            || inner.deployed_elsewhere.contains(job_type)
    }

    /// The id this host's deployed types are recorded under (a random one
    /// until [`Registry::set_host_id`]; a host sets its worker id).
    pub fn host_id(&self) -> String {
        self.host_id.read().clone()
    }

    /// Sets the id this host's deployed types are recorded under.
    pub fn set_host_id(&self, id: impl Into<String>) {
        *self.host_id.write() = id.into();
    }

    /// What this host serves, with each manifest's job defaults.
    pub fn deployed_types(&self) -> Vec<DeployedType> {
        self.inner
            .read()
            .handlers
            .values()
            .map(|e| DeployedType {
                job_type: e.job_type.clone(),
                version: e.version.clone(),
                max_attempts: e.settings.max_attempts,
            })
            .collect()
    }

    /// Held while the served set is recorded.
    pub(crate) fn recording(&self) -> &tokio::sync::Mutex<()> {
        &self.recording
    }

    /// The payload validator for `job_type`, if any.
    pub fn validator(&self, job_type: &str) -> Option<Arc<dyn PayloadValidator>> {
        let inner = self.inner.read();
        inner
            .handlers
            .get(job_type)
            .and_then(|e| e.settings.payload_validator.clone())
            .or_else(|| inner.validators.get(job_type).cloned())
    }

    /// The default attempt budget of `job_type`.
    pub fn max_attempts(&self, job_type: &str) -> Option<u32> {
        self.inner
            .read()
            .handlers
            .get(job_type)
            .and_then(|e| e.settings.max_attempts)
    }

    /// Replaces the pool declarations.
    ///
    /// # Errors
    /// A pool has neither dimension, a non-positive number, no members, or a
    /// type is in two pools.
    pub fn set_pools(&self, pools: Vec<PoolConfig>) -> Result<(), RegistryError> {
        check_pools(&pools)?;
        self.inner.write().pools = pools;
        Ok(())
    }

    /// The pool declarations in force.
    pub fn pools(&self) -> Vec<PoolConfig> {
        self.inner.read().pools.clone()
    }

    /// The guards claims of `job_type` carry.
    pub fn guards_for(&self, job_type: &str) -> ClaimGuards {
        let inner = self.inner.read();
        let mut g = ClaimGuards::default();
        if let Some(e) = inner.handlers.get(job_type) {
            g.serialize_by_scope = e.settings.serialize_by_scope;
            g.not_while_running = e.settings.not_while_running.clone();
            g.waits_for = e.settings.waits_for.clone();
        }
        g.pools = inner
            .pools
            .iter()
            .filter(|p| p.types.iter().any(|t| t == job_type))
            .map(|p| p.guard_for(job_type))
            .collect();
        g
    }

    /// Warnings about one-sided `not_while_running` declarations.
    pub fn warnings(&self) -> Vec<String> {
        one_sided(&self.inner.read().handlers)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{HandlerSettings, Registry, RegistryError};
    use crate::{bench::NoopHandler, Handler};

    fn waits_for(types: &[&str]) -> HandlerSettings {
        HandlerSettings {
            waits_for: types.iter().map(ToString::to_string).collect(),
            ..HandlerSettings::default()
        }
    }

    #[test]
    fn a_swap_changes_every_type_or_none() {
        let registry = Registry::new();
        let handler: Arc<dyn Handler> = Arc::new(NoopHandler);
        registry
            .register("c", handler.clone(), waits_for(&["b"]))
            .unwrap();
        let v1 = vec![
            ("a".to_string(), handler.clone(), waits_for(&[])),
            ("b".to_string(), handler.clone(), waits_for(&[])),
        ];
        registry.swap(v1, &[]).unwrap();
        // The second type closes a cycle (b -> c -> b): neither changes.
        let v2 = vec![
            ("a".to_string(), handler.clone(), waits_for(&["c"])),
            ("b".to_string(), handler.clone(), waits_for(&["c"])),
        ];
        let refused = registry.swap(v2, &[]).unwrap_err();
        assert!(
            matches!(&refused, RegistryError::WaitsForCycle(c) if c.contains('b')),
            "{refused}"
        );
        for job_type in ["a", "b"] {
            let entry = registry.get(job_type).expect("still served");
            assert!(entry.settings.waits_for.is_empty(), "{job_type} changed");
        }
        // A refused setting on the second type leaves the set as it was.
        let bad = HandlerSettings {
            concurrency: 0,
            ..HandlerSettings::default()
        };
        let removed_too = vec![("d".to_string(), handler.clone(), bad)];
        assert!(registry.swap(removed_too, &["a".to_string()]).is_err());
        assert!(registry.get("a").is_some() && registry.get("d").is_none());
        // Replacing and removing in one swap.
        registry
            .swap(
                vec![("d".to_string(), handler, waits_for(&[]))],
                &["a".to_string(), "b".to_string()],
            )
            .unwrap();
        assert_eq!(registry.types(), ["c", "d"]);
    }
}
